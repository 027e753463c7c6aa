"""`sovia report`: plans every experiment, runs the jobs in interleaved
rounds with a progress display, and writes REPORT.md, the plots and
results.json into the output directory."""
import argparse
import os
import shutil
import sys
import tempfile
import time

from . import (exp_anatomy, exp_approaches, exp_bandwidth, exp_conns, exp_ftp, exp_issues, exp_latency, exp_load,
               exp_model, exp_netpipe, exp_overhead, exp_peers, exp_rpc, exp_waitmodes, exp_wakeup, paper,
               plots, sysinfo, writer)
from .jobs import Store
from .modes import MODES
from .progress import Progress
from .runner import Context, JobError, run_job

EXPERIMENTS = [exp_latency, exp_wakeup, exp_bandwidth, exp_waitmodes, exp_netpipe,
               exp_overhead, exp_anatomy, exp_approaches, exp_model, exp_peers, exp_ftp, exp_rpc, exp_issues,
               exp_load, exp_conns]

USAGE = """sovia report [--quick | --smoke] [--out DIR] [--only NAME,...] [--rounds N]

Runs the papers' experiments on this machine and writes DIR/REPORT.md (each
table with the papers' published figures beside ours and the ratios that
should carry over), PNG plots, DIR/results.json (every figure) and
DIR/commands.log (every command run). The full report takes under 30
minutes on a 2-core machine, --quick under 5, --smoke a few seconds.
Run it on a quiet machine: other load moves every number."""


def parse(argv):
    ap = argparse.ArgumentParser(prog="sovia report", usage=USAGE,
                                 description="Experiments: " + ", ".join(
                                     e.NAME for e in EXPERIMENTS))
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_const", dest="mode", const="quick",
                   help="fewer sizes, shorter runs, smaller files (< 5 minutes)")
    g.add_argument("--smoke", action="store_const", dest="mode", const="smoke",
                   help="a few tiny runs: checks the report machinery, not the numbers")
    ap.add_argument("--out", default="sovia-report", help="output directory (created)")
    ap.add_argument("--only", default=None,
                    help="comma-separated experiments to run (default: all)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default "
                    "3; --smoke 1)")
    ap.add_argument("--list", action="store_true", help="list the experiments and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress display")
    ap.add_argument("--sovia", default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    ns.mode = ns.mode or "full"
    return ns


def select(only):
    if not only:
        return EXPERIMENTS
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = {e.NAME: e for e in EXPERIMENTS}
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit(f"sovia report: unknown experiment {', '.join(bad)} "
                         f"(known: {', '.join(known)})")
    return [known[n] for n in names]


def schedule(jobs, rounds):
    """Round 1 runs every job; later rounds repeat all but the once-only."""
    unique, seen = [], set()
    for j in jobs:
        if j.key not in seen:
            seen.add(j.key)
            unique.append(j)
    return [(r, j) for r in range(rounds) for j in unique if r == 0 or not j.once]


def find_sovia(ns):
    for cand in (ns.sovia, os.environ.get("SOVIA_REPORT_SOVIA"), shutil.which("sovia")):
        if cand and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    raise SystemExit("sovia report: cannot find the sovia command")


def find_source():
    """The source tree (for the application scripts): the environment, or
    the tree this package sits in (src/tools/report)."""
    cand = os.environ.get("SOVIA_SOURCE_DIR")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    for d in (cand, here):
        if d and os.path.isdir(os.path.join(d, "src", "tools", "report")):
            return d
    return cand if cand and os.path.isdir(cand) else None


def main(argv=None):
    ns = parse(sys.argv[1:] if argv is None else argv)
    exps = select(ns.only)
    if ns.list:
        for e in EXPERIMENTS:
            print(f"{e.NAME:10s} {e.TITLE}")
        return 0
    mode = MODES[ns.mode]
    rounds = ns.rounds or mode.rounds
    sovia = find_sovia(ns)
    os.makedirs(ns.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="report-")
    t0 = time.monotonic()
    try:
        with open(os.path.join(ns.out, "commands.log"), "w") as log:
            ctx = Context(sovia, mode, tmp, find_source(), log)
            meta = sysinfo.collect(sovia, ctx.source_dir)
            jobs = [j for e in exps for j in e.plan(mode, ctx)]
            plan = schedule(jobs, rounds)
            store = run_all(plan, ctx, ns.quiet)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - t0
    meta.update(mode=ns.mode, rounds=rounds, wall_seconds=round(wall, 1),
                load_average_end=round(os.getloadavg()[0], 2),
                experiments=[e.NAME for e in exps], stripped_env=ctx.stripped,
                command="sovia report " + " ".join(sys.argv[1:] if argv is None else argv))
    plots.available()
    sections = [e.report(mode, store, ns.out) for e in exps]
    writer.write(ns.out, meta, sections, store, paper.all_figures(), plots.why_not())
    if not ns.quiet:
        print(f"sovia report: wrote {os.path.join(ns.out, 'REPORT.md')} "
              f"({wall / 60:.1f} minutes)", file=sys.stderr)
    return 0


def run_all(plan, ctx, quiet):
    store = Store()
    prog = Progress([j.est for _, j in plan], quiet=quiet)
    for rnd, job in plan:
        prog.start(f"round {rnd + 1}: {job.label}", job.est)
        t0 = time.monotonic()
        try:
            res = run_job(job, ctx)
            store.add(job.key, rnd, res, time.monotonic() - t0)
        except (JobError, OSError, ValueError) as e:
            store.add(job.key, rnd, None)
            store.error(job.label, str(e))
            prog.message(f"  failed: {job.label}: {e}")
        except Exception as e:  # a bug in one runner must not lose the report
            store.add(job.key, rnd, None)
            store.error(job.label, f"{type(e).__name__}: {e}")
            prog.message(f"  failed: {job.label}: {type(e).__name__}: {e}")
    prog.finish()
    return store
