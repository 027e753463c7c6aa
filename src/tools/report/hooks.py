"""Hooks to the applications' own benchmark scripts (FTP, Sun RPC), which
live with the applications in src/apps:

    python3 src/apps/ftp/ftp_run.py bench --sovia SOVIA --sizes N,N,...
    python3 src/apps/rpc/rpc_bench.py --build BUILD --sovia SOVIA --sizes N,...

Standard output holds the results as JSON, one object per line (a list, or
an object with the list under "ftp" / "rpc", is accepted too); other lines
are ignored. The FTP rows carry size_bytes, transport ("tcp", "sovia" or
"cp"), seconds and mbps; the RPC rows arg_bytes, transport ("tcp" or
"sovia") and mean_us. Other fields are kept.

A script that is not there is skipped with a note in REPORT.md."""
import json
import os
import subprocess
import sys

from .runner import JobError, tail


def find(ctx, rel):
    """rel: path under src/apps (e.g. ftp/ftp_run.py), looked up in
    $SOVIA_APPS_DIR when set, else in the source tree; None if not there."""
    base = os.environ.get("SOVIA_APPS_DIR") or (
        ctx.source_dir and os.path.join(ctx.source_dir, "src", "apps"))
    path = base and os.path.join(base, rel)
    return path if path and os.path.isfile(path) else None


def build_dir(sovia):
    """<build> when sovia is <build>/bin/sovia."""
    d = os.path.dirname(os.path.dirname(sovia))
    return d if os.path.isfile(os.path.join(d, "CMakeCache.txt")) else None


def parse(text, section):
    text = text.strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        doc = doc.get(section)
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)]
    rows = []
    for line in text.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict):
            rows.append(r)
    return rows


def run(ctx, script, args, section, required, timeout):
    """Runs the script; returns its rows that have every required field."""
    argv = [sys.executable, script, *args, "--sovia", ctx.sovia]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                           env=ctx.env())
    except subprocess.TimeoutExpired:
        raise JobError(f"{os.path.basename(script)} timed out after {timeout:.0f} s")
    ctx.note(argv, p.stderr)
    rows = [r for r in parse(p.stdout, section) if all(k in r for k in required)]
    if p.returncode != 0 or not rows:
        raise JobError(f"{os.path.basename(script)} exit {p.returncode}, {len(rows)} result "
                       f"rows: {tail(p.stderr or p.stdout)}")
    return {"rows": rows}
