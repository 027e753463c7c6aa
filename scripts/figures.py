#!/usr/bin/env python3
"""The acceptance figures of the vipl and sockets-layer issues, measured as
interleaved rounds of `sovia bench ... --json` (medians of the per-run
values), with the ratios the issues ask for. Usage: scripts/figures.py
[ROUNDS] (default 3); SOVIA_BUILD selects the build directory. Takes about
two minutes a round on a 2-core machine."""
import json
import os
import statistics
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(os.environ.get("SOVIA_BUILD", os.path.join(TOP, "build")),
                 "src/tools/sovia/sovia")
def run(*a):
    out = subprocess.run([S, "bench", *a, "--json"], capture_output=True, text=True, timeout=300).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]
R = int(sys.argv[1]) if len(sys.argv) > 1 else 3
res = {}
def add(k, v): res.setdefault(k, []).append(v)
for r in range(R):
    for t, sz in [("limit","4"),("vi","4"),("ucx","8"),("vi-block","4"),("tcp","4"),("sovia","4"),("sovia-adaptive","4"),("sovia-block","4")]:
        d = run("lat", "--transport", t, "--size", sz, "--iters", "100000" if t not in ("tcp","sovia-block") else "20000")
        add(f"lat {t} {sz}", d["one_way_p50_us"])
    for t in ["vi","vi-copy","ucx","sovia","tcp"]:
        for sz in ["32K","64K"]:
            d = run("bw", "--transport", t, "--size", sz, "--seconds", "1")
            add(f"bw {t} {sz}", d["gbps"])
    add("bw sovia-COMBINE 64", run("bw","--transport","sovia","--config","SOVIA_COMBINE","--size","64","--seconds","1")["gbps"])
    add("bw tcp 64", run("bw","--transport","tcp","--size","64","--seconds","1")["gbps"])
    for t in ["vi-block","sovia-adaptive","sovia-block"]:
        add(f"idle {t}", run("idle","--transport",t,"--seconds","1")["cpu_percent"])
env0 = dict(os.environ, SOVIA_VIPL_SPIN_US="0")
for r in range(R):
    out = subprocess.run([S, "bench", "lat", "--transport", "vi-block", "--size", "4", "--iters", "20000", "--json"], capture_output=True, text=True, env=env0).stdout
    add("lat vi-block(spin 0) 4", json.loads(out.splitlines()[-1])["one_way_p50_us"])
med = {k: statistics.median(v) for k, v in res.items()}
for k, v in res.items():
    print(f"{k:28s} median {med[k]:10.4f}   runs {['%.4g' % x for x in v]}")
def ratio(a, b): return med[a] / med[b]
print()
print("issue 2: vi/limit            %.2f (<= 2.0)" % ratio("lat vi 4","lat limit 4"))
print("issue 2: vi vs ucx lat       %.3f vs %.3f us" % (med["lat vi 4"], med["lat ucx 8"]))
print("issue 2: vi-block/tcp        %.4f (<= 0.35)" % ratio("lat vi-block 4","lat tcp 4"))
print("issue 2: vi/ucx bw 32K,64K   %.2f %.2f (>= 1)" % (ratio("bw vi 32K","bw ucx 32K"), ratio("bw vi 64K","bw ucx 64K")))
print("issue 3: sovia/vi lat        %.2f (<= 1.25)" % ratio("lat sovia 4","lat vi 4"))
print("issue 3: sovia/vi bw 32K,64K %.2f %.2f (>= 0.95)" % (ratio("bw sovia 32K","bw vi 32K"), ratio("bw sovia 64K","bw vi 64K")))
print("issue 3: sovia/vi-copy bw    %.2f %.2f (the fair baseline)" % (ratio("bw sovia 32K","bw vi-copy 32K"), ratio("bw sovia 64K","bw vi-copy 64K")))
print("issue 3: sovia/ucx bw        %.2f %.2f" % (ratio("bw sovia 32K","bw ucx 32K"), ratio("bw sovia 64K","bw ucx 64K")))
print("issue 3: sovia/tcp bw        %.2f %.2f (>= 5)" % (ratio("bw sovia 32K","bw tcp 32K"), ratio("bw sovia 64K","bw tcp 64K")))
print("issue 3: COMBINE 64 / tcp 64 %.2f (>= 1)" % ratio("bw sovia-COMBINE 64","bw tcp 64"))
print("issue 3: adaptive/sovia lat  %.2f (<= 1.5)" % ratio("lat sovia-adaptive 4","lat sovia 4"))
