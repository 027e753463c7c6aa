# cmake -DIN=file -DOUT=file.c -P embed.cmake: the BPF object as a C array
# (ksock_bpf_obj, ksock_bpf_obj_len), so the library needs no file at run time.
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
file(WRITE ${OUT} "/* Generated from ksock.bpf.o by embed.cmake. */\n#include <stddef.h>\n"
  "const unsigned char ksock_bpf_obj[] __attribute__((aligned(8))) = {\n${body}\n};\n"
  "const size_t ksock_bpf_obj_len = ${len};\n")
