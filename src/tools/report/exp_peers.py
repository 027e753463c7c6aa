"""Today's peers on the same machine: UCX's stream API (`ucx_perftest`
stream_lat / stream_bw through `sovia bench --transport ucx`) and
libfabric's `fi_pingpong` over its shm provider (RDM endpoints), where
installed. The papers had no such peers; these place sovia among the
user-level libraries a reader would otherwise use. fi_pingpong reports
usec/xfer, its one-way time; both programs pin nothing themselves, so the
report pins fi_pingpong's two processes to different cores (the bench
does so for ucx)."""
import subprocess
import time

from . import benchjobs as bj
from . import plots
from .jobs import Job
from .md import Section, checks_table, num, prose, table
from .modes import parse_size, size_text
from .runner import JobError, free_port, have, tail

NAME = "peers"
TITLE = "Peers: UCX stream and libfabric fi_pingpong (shm)"
F = "one_way_p50_us"
FI_US = 10.0  # rough one-way us of fi_pingpong shm, for its iteration count


def _fi_size(text):
    """fi_pingpong's size column: 4, 1k, 32k, 1m."""
    try:
        return parse_size(text)
    except ValueError:
        return None


def _fi_runner(size, iters):
    def run(job, ctx):
        port = free_port()
        common = ["fi_pingpong", "-p", "shm", "-e", "rdm", "-I", str(iters), "-S", str(size)]
        srv_cmd = ["taskset", "-c", "1", *common, "-B", str(port)]
        cli_cmd = ["taskset", "-c", "0", *common, "-P", str(port), "127.0.0.1"]
        srv = subprocess.Popen(srv_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
        try:
            time.sleep(0.3)  # the server must be listening
            cli = subprocess.run(cli_cmd, capture_output=True, text=True, timeout=60)
        finally:
            try:
                srv.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.communicate()
        ctx.note(cli_cmd, cli.stderr)
        for line in cli.stdout.splitlines():
            f = line.split()
            if len(f) >= 8 and _fi_size(f[0]) == size:
                return {"one_way_p50_us": float(f[6]), "mb_per_s": float(f[5]),
                        "note": "fi_pingpong usec/xfer (a mean)"}
        raise JobError(f"fi_pingpong exit {cli.returncode}: {tail(cli.stdout + cli.stderr)}")
    return run


def plan(mode, ctx):
    jobs = []
    for s in mode.peer_sizes:
        jobs += [bj.lat(mode, "vi", s), bj.lat(mode, "sovia", s), bj.lat(mode, "ucx", s)]
        if have("fi_pingpong"):
            iters = int(min(20000, max(200, mode.lat_target_s / (2 * FI_US * 1e-6))))
            jobs.append(Job(key=("fi_pingpong", s), label=f"fi_pingpong shm {size_text(s)}",
                            est=0.5 + iters * 2 * FI_US * 1e-6, run=_fi_runner(s, iters)))
    for s in (32768, 65536):
        jobs += [bj.bw(mode, t, s) for t in ("sovia", "ucx", "vi-copy")]
    return jobs


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__))
    if not have("ucx_perftest"):
        sec.add("ucx_perftest is not installed (Debian ucx-utils): no UCX rows.")
    if not have("fi_pingpong"):
        sec.add("fi_pingpong is not installed (Debian libfabric-bin): no libfabric rows.")
    lat = {}
    rows = []
    for s in mode.peer_sizes:
        lat[s] = {t: store.median(bj.key_lat(t, s), F) for t in ("vi", "sovia", "ucx")}
        lat[s]["fi_pingpong"] = store.median(("fi_pingpong", s), F)
        rows.append([size_text(s), lat[s]["vi"], lat[s]["sovia"], lat[s]["ucx"],
                     lat[s]["fi_pingpong"],
                     store.ratio(bj.key_lat("sovia", s), F, bj.key_lat("ucx", s))])
    sec.add("One-way latency, microseconds.",
            table(["size", "vi", "sovia", "ucx stream", "fi_pingpong shm", "sovia / ucx"], rows))
    bw, brow = {}, []
    for s in (32768, 65536):
        bw[s] = {t: store.median(bj.key_bw(t, s), "gbps") for t in ("sovia", "ucx", "vi-copy")}
        brow.append([size_text(s), bw[s]["sovia"], bw[s]["ucx"], bw[s]["vi-copy"],
                     store.ratio(bj.key_bw("sovia", s), "gbps", bj.key_bw("ucx", s))])
    sec.add("Streaming bandwidth, Gb/s.",
            table(["size", "sovia", "ucx stream", "vi-copy", "sovia / ucx"], brow))
    s0 = mode.peer_sizes[0]
    r = store.ratio(bj.key_lat("sovia", s0), F, bj.key_lat("ucx", s0))
    rb = store.ratio(bj.key_bw("sovia", 65536), "gbps", bj.key_bw("ucx", 65536))
    checks = [(f"sovia latency at or below UCX stream's at {size_text(s0)} B", "—", r,
               None if r is None else r <= 1),
              ("sovia bandwidth >= 0.9 x UCX stream's at 64K", "—", rb,
               None if rb is None else rb >= 0.9)]
    sec.add(checks_table(checks))
    sec.data = {"latency_us": {str(k): v for k, v in lat.items()},
                "gbps": {str(k): v for k, v in bw.items()}, "checks": [list(c) for c in checks]}
    if r is not None:
        sec.headline.append(f"peers: sovia / UCX stream latency at {size_text(s0)} B {num(r)} x, "
                            f"bandwidth at 64K {num(rb)} x; fi_pingpong shm "
                            f"{num(lat[s0]['fi_pingpong'])} us")
    sec.plot(plots.table_lines(out, "peers.png", "one-way latency: sovia and its peers",
                               "microseconds",
                               {t: {s: lat[s][t] for s in mode.peer_sizes}
                                for t in ("vi", "sovia", "ucx", "fi_pingpong")}))
    return sec
