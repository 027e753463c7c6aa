"""seed 000 §5.4 and Fig. 10: the average time of a Sun RPC call whose
procedure takes a string of 0 to 4096 bytes and returns an int, over kernel
TCP and over sovia (client and server unmodified, under `sovia run`).

Measured by the RPC application's own script (`src/apps/rpc/rpc_bench.py`,
see hooks.py): rpcbind, the rpcgen server and a client timing a series of
calls per size, over kernel TCP (both ends pinned to one CPU, its best case)
and under `sovia run --profile latency` (polling, two cores), in
alternating rounds; mean_us is the mean over its rounds."""
from . import hooks, paper, plots
from .jobs import Job
from .md import Section, checks_table, num, prose, table
from .modes import size_text

NAME = "rpc"
TITLE = "Sun RPC call time against argument size (seed 000 Fig. 10)"
SCRIPT = "rpc/rpc_bench.py"
REQUIRED = ("arg_bytes", "transport", "mean_us")


def plan(mode, ctx):
    script = hooks.find(ctx, SCRIPT)
    if not script:
        return []
    calls = {"smoke": 200, "quick": 2000}.get(mode.name, 20000)
    rounds = 1 if mode.name == "smoke" else 3
    # Each transport at its best: sovia polling on two cores (the latency
    # profile; balanced spins against a peer that has no core on a busy
    # 2-core machine), kernel TCP with both ends on one CPU (an idle
    # vCPU's wake-up otherwise costs it 40-70 us per call).
    args = ["--sizes", ",".join(str(s) for s in mode.rpc_sizes), "--calls", str(calls),
            "--rounds", str(rounds), "--profile", "latency", "--tcp-cpu", "0"]
    build = hooks.build_dir(ctx.sovia)
    if build:
        args += ["--build", build]
    # Two transports, ~50 us per kernel TCP call, plus start-up.
    est = 3 + 2 * rounds * len(mode.rpc_sizes) * calls * 50e-6
    return [Job(key=("rpc",), label="Sun RPC (rpc_bench.py)", est=est,
                run=lambda j, ctx: hooks.run(ctx, script, args, "rpc", REQUIRED, 60 + 10 * est),
                once=True)]


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    rows = [dict(r, arg_bytes=int(r["arg_bytes"]), mean_us=float(r["mean_us"]))
            for r in (store.first(("rpc",)) or {}).get("rows", [])]
    sec.data = rows
    if not rows:
        why = ("the RPC script failed (see the failed runs below)" if ("rpc",) in store.rounds
               else f"src/apps/{SCRIPT} is not there")
        sec.add(f"**Skipped:** {why}; no RPC figures in this report.")
        return sec
    by = {}
    for r in rows:
        by.setdefault(r["arg_bytes"], {})[r["transport"]] = r["mean_us"]
    sizes = sorted(by)
    trows = [[size_text(s), by[s].get("tcp"), by[s].get("sovia"),
              by[s]["sovia"] / by[s]["tcp"] if by[s].get("sovia") and by[s].get("tcp") else None]
             for s in sizes]
    p = paper.RPC
    trows.append(["0 (paper, cLAN)", p["tcp"], p["sovia"], p["sovia"] / p["tcp"]])
    sec.add(f"Average call time, microseconds ({paper.RPC_SRC}; its TCP is the kernel's over "
            "cLAN's LAN emulation).",
            table(["argument bytes", "kernel TCP", "sovia", "sovia / tcp"], trows))
    null = by.get(0, {})
    r0 = null["sovia"] / null["tcp"] if null.get("sovia") and null.get("tcp") else None
    checks = [("null RPC: sovia / kernel TCP <= 1/4", p["sovia"] / p["tcp"], r0,
               None if r0 is None else r0 <= 0.25)]
    sec.add(checks_table(checks))
    if r0 is not None:
        sec.headline.append(f"null RPC: sovia {num(null['sovia'])} us, kernel TCP "
                            f"{num(null['tcp'])} us ({num(r0)} x; paper 35 vs 149 us, 0.23 x)")
    x = [s for s in sizes]
    sec.plot(plots.lines(out, "rpc.png", "Sun RPC: average call time", "argument bytes",
                         "microseconds",
                         [{"label": t, "x": x, "y": [by[s].get(t) for s in x]}
                          for t in ("tcp", "sovia")], logx=False, logy=False))
    return sec
