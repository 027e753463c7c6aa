#!/usr/bin/env python3
"""The acceptance figures of the vipl and sockets-layer issues, with their
ratios and targets: now the "issues" experiment of `sovia report`
(src/tools/report/exp_issues.py), measured as interleaved rounds of `sovia
bench ... --json` (medians of the per-run values). Usage:
scripts/figures.py [ROUNDS] (default 3); SOVIA_BUILD selects the build
directory. Prints the table; the report it comes from (REPORT.md,
results.json with every run) is kept if SOVIA_FIGURES_OUT names a directory."""
import os
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S = os.path.join(os.environ.get("SOVIA_BUILD", os.path.join(TOP, "build")),
                 "bin/sovia")
R = sys.argv[1] if len(sys.argv) > 1 else "3"
out = os.environ.get("SOVIA_FIGURES_OUT") or tempfile.mkdtemp(prefix="figures-")
try:
    subprocess.run([S, "report", "--only", "issues", "--rounds", R, "--out", out], check=True)
    with open(os.path.join(out, "REPORT.md")) as f:
        text = f.read()
    print(text[text.index("## The issues'"):])
finally:
    if not os.environ.get("SOVIA_FIGURES_OUT"):
        shutil.rmtree(out, ignore_errors=True)
