"""Programs the LANE tests run inside a namespace (`ip netns exec NS python3
lane_helpers.py ...`): a TCP sink and source that hash what they carry, and
an ICMP echo client (no ping binary is needed)."""
import hashlib
import os
import socket
import struct
import sys
import time


def sink(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.listen(1)
    print("listening", flush=True)
    s.settimeout(20)
    c, _ = s.accept()
    c.settimeout(20)
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(b"k")
    print(n, h.hexdigest(), flush=True)


def source(addr, port, nbytes, seed):
    data = hashlib.shake_256(seed.encode()).digest(int(nbytes))
    s = socket.create_connection((addr, int(port)), timeout=20)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    assert s.recv(1) == b"k"
    print(len(data), hashlib.sha256(data).hexdigest(), flush=True)


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ping(addr, *sizes):
    """One echo per size; prints 'size ok' when the reply carries the payload."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(3)
    ident = os.getpid() & 0xFFFF
    for seq, size in enumerate(int(x) for x in sizes):
        payload = hashlib.shake_256(b"%d" % size).digest(size) if size else b""
        hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, csum(hdr + payload), ident, seq) + payload
        s.sendto(pkt, (addr, 0))
        deadline = time.time() + 3
        while time.time() < deadline:
            r = s.recv(70000)
            ihl = (r[0] & 15) * 4
            t, _, _, rid, rseq = struct.unpack("!BBHHH", r[ihl:ihl + 8])
            if t == 0 and rid == ident and rseq == seq:
                print(size, "ok" if r[ihl + 8:] == payload else "corrupt", flush=True)
                break
        else:
            print(size, "lost", flush=True)


if __name__ == "__main__":
    {"sink": sink, "source": source, "ping": ping}[sys.argv[1]](*sys.argv[2:])
