#!/usr/bin/env python3
"""Checks tests/model/sovia.pml with spin for one configuration.

    check.py --model sovia.pml --name w4t2 --expect pass W0=4 T0=2

Generates the verifier (spin -a), compiles it with cc and runs it with a
bounded search depth and memory, exhaustively (safety: assertions and
invalid end states). --expect says what must come out:

  pass      no error, the search complete (not cut by depth or memory)
  assert    an assertion fails; --pattern names which (its text)
  deadlock  an invalid end state (a process stuck before its end)

A negative check (assert, deadlock) proves the property can fail: the
model with fewer buffers or an injected bug must be caught. On any error
the trail is replayed and its narration printed. Exit 0 when the outcome
is the expected one, 1 otherwise, 77 when spin is not installed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
DEPTH = 10000      # the model's runs are a few hundred steps deep
MEMLIM_MB = 1024   # pan stops (and the check fails) beyond this
RUN_TIMEOUT = 100  # seconds for one verifier run


def run(cmd, cwd, timeout=RUN_TIMEOUT):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout


def figure(out, regex, cast=int):
    m = re.search(regex, out)
    return cast(m.group(1)) if m else None


def replay(spin, defines, work):
    """The trail's narration (the model's MSC printfs) and final state."""
    _, out = run([spin, "-t"] + defines + ["model.pml"], work)
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    story = [l[len("MSC: "):] for l in lines if l.startswith("MSC: ")]
    tail = [l for l in lines if not l.startswith("MSC: ")]
    if len(story) > 60:
        story = ["... %d earlier steps ..." % (len(story) - 60)] + story[-60:]
    return story, tail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--expect", choices=["pass", "assert", "deadlock"], required=True)
    ap.add_argument("--pattern", default="", help="text of the assertion that must fail")
    ap.add_argument("--optimize", action="store_true",
                    help="compile pan with -O2 (for the big searches; -O0 compiles 5x faster)")
    ap.add_argument("defines", nargs="*", help="NAME=VALUE given to the model")
    a = ap.parse_args()

    spin = shutil.which("spin")
    # clang compiles the unoptimized verifier in half gcc's time (its pan
    # runs ~20 % slower, which only the BIG checks would notice).
    cc = os.environ.get("CC") or (not a.optimize and shutil.which("clang")) or \
        shutil.which("cc") or shutil.which("gcc")
    if not spin or not cc:
        print("SKIP: %s not installed (Debian package %s)" %
              ("spin" if not spin else "a C compiler", "spin" if not spin else "gcc"))
        return SKIP

    defines = ["-D" + d for d in a.defines]
    # The temporary names avoid the project's name: the cleanup test counts those.
    work = tempfile.mkdtemp(prefix="spinmodel-")
    try:
        shutil.copy(a.model, os.path.join(work, "model.pml"))
        rc, out = run([spin, "-a"] + defines + ["model.pml"], work)
        if rc != 0:
            print(out)
            print("FAIL: spin -a failed")
            return 1
        rc, out = run([cc, "-O2" if a.optimize else "-O0", "-w", "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=%d" % MEMLIM_MB,
                       "-o", "pan", "pan.c"], work, timeout=300)
        if rc != 0:
            print(out)
            print("FAIL: compiling pan failed")
            return 1
        t0 = time.monotonic()
        rc, out = run(["./pan", "-m%d" % DEPTH, "-w22", "-n"], work)
        wall = time.monotonic() - t0

        errors = figure(out, r"errors: (\d+)")
        states = figure(out, r"(\d+) states, stored")
        depth = figure(out, r"depth reached (\d+)")
        elapsed = figure(out, r"elapsed time ([\d.e+-]+) seconds", float)
        cut = "max search depth too small" in out or "out of memory" in out \
            or "memory limit" in out or errors is None
        failed_assert = re.search(r"assertion violated (.*) \(at depth", out)
        deadlock = "invalid end state (" in out

        print("model %s (%s): %s states, depth %s, %.2f s (pan %s s), errors %s" %
              (a.name, " ".join(a.defines) or "defaults", states, depth, wall,
               elapsed, errors))
        if errors:
            for l in out.splitlines():
                if l.startswith("pan:") and ("violated" in l or "invalid end" in l):
                    print("  " + l)
            story, tail = replay(spin, defines, work)
            print("  trail (MSC narration of the model; ends at the error):")
            for l in story:
                print("    " + l)
            print("  final state:")
            for l in tail[-48:]:
                print("    " + l)

        if cut:
            print(out)
            print("FAIL: the search did not complete (depth or memory bound)")
            return 1
        if a.expect == "pass":
            ok = errors == 0
        elif a.expect == "assert":
            ok = bool(errors) and failed_assert is not None and \
                a.pattern in failed_assert.group(1)
        else:
            ok = bool(errors) and deadlock
        what = {"pass": "no error",
                "assert": "assertion %r violated" % a.pattern,
                "deadlock": "an invalid end state"}[a.expect]
        print("%s: expected %s" % ("OK" if ok else "FAIL", what))
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
