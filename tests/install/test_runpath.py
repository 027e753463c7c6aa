#!/usr/bin/env python3
"""No sovia binary searches the working directory for libraries: every
RUNPATH/RPATH entry, in the build tree and once installed, is an absolute
directory or $ORIGIN-relative. An empty entry (CMake pads build-tree paths
with ':' to rewrite them at install) means the current directory: `sovia
run` started in a directory holding a libc.so.6 would load it into the
program."""
import os
import re
import subprocess
import sys
import tempfile

build = sys.argv[1]
NAMES = ("sovia", "libsovia-preload.so", "libsovia.so", "libvipl.so")


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def products(root):
    for d, _, names in os.walk(root):
        if "CMakeFiles" in d:
            continue
        for n in names:
            p = os.path.join(d, n)
            ours = n == "sovia" or any(n.startswith(x) for x in NAMES[1:])
            if ours and os.path.isfile(p) and not os.path.islink(p) and is_elf(p):
                yield p  # not the bash completion, also named sovia


def search_paths(path):
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True,
                         text=True).stdout
    for m in re.finditer(r"\((RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out):
        yield m.group(1), m.group(2)


bad = []


def check(root):
    found = 0
    for p in products(root):
        found += 1
        for kind, value in search_paths(p):
            for entry in value.split(":"):
                if not (entry.startswith("/") or entry.startswith("$ORIGIN")):
                    bad.append(f"{p}: {kind} [{value}] has entry '{entry}'")
    assert found >= 3, f"no sovia binaries under {root}"


check(build)
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(["cmake", "--install", build, "--prefix", tmp], check=True,
                   capture_output=True)
    check(tmp)
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
