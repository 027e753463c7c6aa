#!/usr/bin/env python3
"""Install story: `cmake --install` into a scratch prefix yields headers, a
versioned library exporting only the VIPL API, the sovia command and a
pkg-config file that builds and runs a plain VIPL program."""
import os
import subprocess
import sys
import tempfile

build = sys.argv[1]

PROGRAM = r"""
#include <stdio.h>
#include <vipl.h>
int main(void)
{
    VIP_NIC_HANDLE nic;
    VIP_NIC_ATTRIBUTES a;
    if (VipOpenNic(NULL, &nic) != VIP_SUCCESS || VipQueryNic(nic, &a) != VIP_SUCCESS)
        return 1;
    printf("%s %lu\n", a.Name, a.MaxTransferSize);
    return VipCloseNic(nic) == VIP_SUCCESS ? 0 : 1;
}
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "prefix")
    run(["cmake", "--install", build, "--prefix", prefix])
    files = []
    for root, _, names in os.walk(prefix):
        files += [os.path.relpath(os.path.join(root, n), prefix) for n in names]
    pcs = [f for f in files if f.endswith("pkgconfig/vipl.pc")]
    sonames = [f for f in files if os.path.basename(f) == "libvipl.so.0"]
    assert "include/vipl.h" in files and "include/vipl_ext.h" in files, files
    assert "bin/sovia" in files, files
    assert len(pcs) == 1 and len(sonames) == 1, files
    lib = os.path.join(prefix, sonames[0])

    dyn = run(["readelf", "-d", lib])
    assert "Library soname: [libvipl.so.0]" in dyn, dyn
    exported = [line.split()[-1] for line in run(["nm", "-D", "--defined-only", lib]).splitlines()]
    stray = [s for s in exported if not s.startswith("Vip") and s != "VIPL_0"]
    assert not stray, f"symbols exported beyond the API: {stray}"
    assert "VipOpenNic@@VIPL_0" in exported, exported

    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(os.path.join(prefix, pcs[0])))
    for runtime in ("libasan", "libtsan"):
        if runtime in dyn:
            # A sanitizer build: the plain test program needs the runtime first.
            path = run(["cc", f"-print-file-name={runtime}.so"]).strip()
            env.update(LD_PRELOAD=path, ASAN_OPTIONS="detect_leaks=0")
    flags = run(["pkg-config", "--cflags", "--libs", "vipl"], env=env).split()
    src = os.path.join(tmp, "prog.c")
    exe = os.path.join(tmp, "prog")
    with open(src, "w") as f:
        f.write(PROGRAM)
    # The README's order: the flags before the source (the linker's
    # --as-needed, Debian's default, must not drop the library).
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror"] + flags + [src, "-o", exe], env=env)
    out = run([exe], env=dict(env, LD_LIBRARY_PATH=os.path.dirname(lib)))
    assert out.split() == ["shm0", str(4 << 20)], out

    # The sockets layer: header, library exporting only sov_*, sovia.pc.
    assert "include/sovia.h" in files, files
    slibs = [f for f in files if os.path.basename(f) == "libsovia.so.0"]
    assert len(slibs) == 1, files
    slib = os.path.join(prefix, slibs[0])
    sexported = [line.split()[-1] for line in
                 run(["nm", "-D", "--defined-only", slib]).splitlines()]
    sstray = [x for x in sexported if not x.startswith("sov_") and x != "SOVIA_0"]
    assert not sstray, f"libsovia exports beyond the API: {sstray}"
    app = os.path.join(tmp, "app.c")
    with open(app, "w") as f:
        f.write('#include <sovia.h>\n#include <stdio.h>\n'
                'int main(void) { struct sov_config c; sov_config_defaults(&c);'
                ' printf("%u\\n", c.window); return 0; }\n')
    sflags = run(["pkg-config", "--cflags", "--libs", "sovia"], env=env).split()
    run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror"] + sflags + [app, "-o", exe + "-sov"],
        env=env)
    out = run([exe + "-sov"], env=dict(env, LD_LIBRARY_PATH=os.path.dirname(lib)))
    assert out.split() == ["32"], out

    # No LD_LIBRARY_PATH: the installed tool finds its libraries (RPATH).
    help_text = run([os.path.join(prefix, "bin/sovia"), "--help"], env=env)
    assert "bench" in help_text, help_text
print("install: 1 passed, 0 failed")
