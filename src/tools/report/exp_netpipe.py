"""seed 001: NetPIPE sweeps. Ping-pong at sizes c - 3, c, c + 3 for c = 1, 2,
4, ... bytes; throughput = size / one-way time. Seed 001 compares polling
and blocking VI with TCP this way (its Table 1 and Fig. 2-5).

Measured: `sovia bench sweep` (each size calibrated to about 75 ms, the
median one-way time; in the full report every round sweeps and each size
takes the median over rounds) for `vi`, `vi-block`, `sovia` and `tcp`; and NetPIPE's
own NPtcp, unmodified, over kernel TCP and with both ends under `sovia run
--profile latency` (SOVIA_STAT_LOG confirms sovia carried the connection).
Latency is the smallest size's one-way time; n1/2 is the smallest size
reaching half the peak throughput.

NetPIPE-VIA's own scheme (seed 001 §3.1) runs too: a fixed ring of 32
pre-posted receive descriptors with a buffer each, messages cut to the
descriptor size, and the receiver's "continue" once the whole ring is
reposted (`sovia bench sweep --transport vi --ring 32 --frag F`). With
32 KiB descriptors it is the tool's shape for polling and blocking VI;
with 1,500-byte pieces (what M-VIA did per Ethernet frame over its GigE
NICs) each large message costs a descriptor and a doorbell per frame and
a stop for "continue" every 32 frames, the MTU effect of the paper's
M-VIA curves against cLAN's (whose NIC took whole messages)."""
import statistics

from . import benchjobs as bj
from . import nptcp, paper, plots
from .jobs import Job
from .md import Section, checks_table, num, prose, table
from .runner import have

NAME = "netpipe"
TITLE = "NetPIPE sweeps: vi, vi-block, sovia, tcp, and NPtcp under sovia run (seed 001)"
SWEEPS = ("vi", "vi-block", "sovia", "tcp")
# NetPIPE-VIA's ring: (label, transport, variant, `bench sweep` arguments).
RING_ARGS = ("--ring", "32", "--frag", "32K")
RINGS = (("vi ring 32x32K", "vi", "ring", RING_ARGS),
         ("vi-block ring 32x32K", "vi-block", "ring", RING_ARGS),
         ("vi ring 32x1500 (MTU)", "vi", "ring-mtu", ("--ring", "32", "--frag", "1500")))
NP_KERNEL, NP_SOVIA = "NPtcp kernel", "NPtcp sovia run"


def plan(mode, ctx):
    jobs = [bj.sweep(mode, t) for t in SWEEPS]
    jobs += [bj.sweep(mode, t, variant=v, extra=a) for _, t, v, a in RINGS]
    if have("NPtcp"):
        est = sum(3 * max(1, (u // max(l, 1)).bit_length()) * 0.05 + r * u * 2 / 1e9 + 1
                  for l, u, r in mode.nptcp)
        jobs += [Job(key=("nptcp", "kernel"), label="NPtcp over kernel TCP", est=est,
                     run=nptcp.run(False), once=True),
                 Job(key=("nptcp", "sovia"), label="NPtcp under sovia run", est=est,
                     run=nptcp.run(True), once=True)]
    return jobs


def _curves(store):
    """Per sweep, each size's median over the rounds that ran it."""
    out = {}
    for t, var in [(t, "") for t in SWEEPS] + [(t, v) for _, t, v, _ in RINGS]:
        by = {}
        for r in store.results(bj.key_sweep(t, var)):
            for x in r.get("rows", []):
                by.setdefault(x["size"], []).append(x["one_way_p50_us"])
        if by:
            name = next((lab for lab, rt, rv, _ in RINGS if (rt, rv) == (t, var)), t)
            out[name] = [{"size": s, "one_way_us": statistics.median(v),
                       "mbps": s * 8 / statistics.median(v), "rounds": len(v)}
                      for s, v in sorted(by.items())]
    for name, k in ((NP_KERNEL, ("nptcp", "kernel")), (NP_SOVIA, ("nptcp", "sovia"))):
        r = store.first(k)
        if r and r.get("rows"):
            out[name] = r["rows"]
    return out


def summary(rows):
    """Latency (smallest size), peak Mb/s, size at peak, n1/2."""
    if not rows:
        return None
    peak = max(rows, key=lambda r: r["mbps"])
    half = next((r["size"] for r in rows if r["mbps"] >= peak["mbps"] / 2), None)
    return {"latency_us": rows[0]["one_way_us"], "latency_size": rows[0]["size"],
            "peak_mbps": peak["mbps"], "peak_size": peak["size"], "n_half": half}


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    if not have("NPtcp"):
        sec.add("NPtcp is not installed (Debian netpipe-tcp): its rows are missing.")
    curves = _curves(store)
    sums = {k: summary(v) for k, v in curves.items()}
    rows = [[k, s["latency_size"], s["latency_us"], s["peak_mbps"], s["peak_size"], s["n_half"]]
            for k, s in sums.items() if s]
    for hw, label in (("clan", "cLAN, 1 CPU"), ("clan_dual", "cLAN, 2 CPUs")):
        p = paper.NETPIPE[hw]
        rows += [[f"paper {label}: VI poll", "", p["vi_poll_lat"], p["vi_poll_peak"], "", ""],
                 [f"paper {label}: VI block", "", p["vi_block_lat"], p["vi_block_peak"], "", ""],
                 [f"paper {label}: TCP", "", p["tcp_lat"], p["tcp_peak"], "", ""]]
    sec.add(f"Sweep summaries ({paper.NETPIPE_SRC}).",
            table(["sweep", "smallest size", "latency us", "peak Mb/s", "at size", "n1/2 bytes"],
                  rows))

    def r(a, b, f):
        return sums[a][f] / sums[b][f] if sums.get(a) and sums.get(b) and sums[b][f] else None
    p = paper.NETPIPE["clan"]
    pd = paper.NETPIPE["clan_dual"]
    lat_vt, peak_vt = r("vi", "tcp", "latency_us"), r("vi", "tcp", "peak_mbps")
    blk = r("vi-block", "vi", "latency_us")
    np_lat, np_peak = r(NP_SOVIA, NP_KERNEL, "latency_us"), r(NP_SOVIA, NP_KERNEL, "peak_mbps")
    ring_blk = r(RINGS[1][0], RINGS[0][0], "latency_us")
    ring_mtu = r(RINGS[2][0], RINGS[0][0], "peak_mbps")
    checks = [
        ("VI / TCP latency", p["vi_poll_lat"] / p["tcp_lat"], lat_vt,
         None if lat_vt is None else lat_vt < 0.5),
        ("VI / TCP peak throughput", p["vi_poll_peak"] / p["tcp_peak"], peak_vt,
         None if peak_vt is None else peak_vt > 1),
        ("VI blocking / polling latency (1 CPU; 2 CPUs)",
         f"{p['vi_block_lat'] / p['vi_poll_lat']:.2f}; "
         f"{pd['vi_block_lat'] / pd['vi_poll_lat']:.1f}", blk, None),
        ("NetPIPE-VIA ring: blocking / polling latency", "(as above)", ring_blk, None),
        ("NetPIPE-VIA ring: 1,500-byte pieces / 32 KiB pieces, peak throughput "
         "(paper: M-VIA over GNIC-II / cLAN, polling)",
         paper.NETPIPE["gnic2"]["vi_poll_peak"] / p["vi_poll_peak"], ring_mtu,
         None if ring_mtu is None else ring_mtu < 1),
        ("NPtcp: sovia run / kernel latency (unmodified program)", "—", np_lat,
         None if np_lat is None else np_lat < 1),
        ("NPtcp: sovia run / kernel peak throughput", "—", np_peak,
         None if np_peak is None else np_peak > 1),
    ]
    sec.add(checks_table(checks))
    sec.data = {"summary": sums, "curves": curves, "checks": [list(c) for c in checks],
                "nptcp_carried": (store.first(("nptcp", "sovia")) or {}).get("carried")}
    if np_lat is not None:
        sec.headline.append(f"NPtcp (unmodified) under sovia run: {num(np_lat)} x kernel "
                            f"latency, {num(np_peak)} x its peak throughput")
    ser = [{"label": k, "x": [x["size"] for x in v], "y": [x["mbps"] for x in v],
            "style": ".-"} for k, v in curves.items()]
    lat = [{"label": k, "x": [x["size"] for x in v], "y": [x["one_way_us"] for x in v],
            "style": ".-"} for k, v in curves.items()]
    sec.plot(plots.lines(out, "netpipe.png", "NetPIPE throughput", "message size (bytes)",
                         "Mb/s", ser, right=("NetPIPE one-way time", "microseconds", lat, True)))
    return sec
