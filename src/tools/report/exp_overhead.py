"""seed 003 Table 3 on today's stack: where the microseconds of a small
message go, as differences of 4-byte one-way latencies measured in the same
round:

- socket implementation: sovia - vi (both polling, two cores), and the
  paper's own pairing, sovia-block - vi-block (both blocking);
- kernel services (sleeping and being woken): vi-block - vi;
- kernel sockets layer: uds - sovia-block (an in-kernel sockets layer with
  no protocol, against the user-level one, both blocking);
- TCP/IP processing: tcp - uds (both kernel sockets, blocking).

Beside these, Table 3 exactly as the paper computed it, now that the two
mechanisms it needs run here: socket implementation SOVIA - VIPL,
kernel services VIPL - VIPL_POLL, kernel-level implementation KSOVIA - SOVIA
(ksovia: the BPF sockhash path, `sovia ksock`), TCP/IP processing
LANEVI - KSOVIA (lane: kernel TCP over TUN devices whose frames cross vipl,
docs/LANE.md). Each difference is taken within a round (both runs of the
same round) and the median over rounds is shown with its spread.

The blocking runs use SOVIA_VIPL_SPIN_US=0 (vipl sleeps at once instead of
spinning 20 us first), so they measure the kernel as the paper's blocking
VIPL did. Where the two processes run changes the kernel's share: "one
core" pins both to CPU 0 (taskset -c 0, like each of the paper's
uniprocessor nodes: a wake-up is a context switch); "default" leaves
blocking transports where `sovia bench` puts them (vi-block pinned to two
cores, a cross-core wake-up; sovia-block, uds and tcp unpinned)."""
import statistics

from . import benchjobs as bj
from . import exp_approaches
from . import paper
from .jobs import spread
from .md import Section, checks_table, num, prose, table

NAME = "overhead"
TITLE = "Overhead decomposition (seed 003 Table 3)"
F = "one_way_p50_us"
ONE, DEFAULT = "nospin-1core", "nospin"
BLOCKING = ("vi-block", "sovia-block", "uds", "tcp")
# Table 3's rows: (results.json key, overhead, the paper's formula, a, b,
# the paper's us): the overhead is a's latency minus b's, in each placement.
TABLE3 = (
    ("socket_implementation_us", "Socket implementation", "SOVIA - VIPL",
     "sovia-block", "vi-block", 1.3),
    ("kernel_services_us", "Use of kernel services", "VIPL - VIPL_POLL", "vi-block", "vi", 9.6),
    ("kernel_level_implementation_us", "Kernel-level implementation", "KSOVIA - SOVIA",
     "ksovia", "sovia-block", 1.7),
    ("tcpip_processing_us", "TCP/IP protocol processing", "LANEVI - KSOVIA", "lane", "ksovia",
     5.5),
)


# Why a Table 3 difference can come out negative here, by its key.
WHY_NEGATIVE = {
    "socket_implementation_us": exp_approaches.PLACEMENT,
    "kernel_level_implementation_us": exp_approaches.WHY[("lat", "SOVIA", "KSOVIA")],
}


def _variant(t, placement):
    """The key variant of a blocking run: spinning is only a vipl matter."""
    if t in ("vi-block", "sovia-block"):
        return placement
    return "1core" if placement == ONE else ""


def plan(mode, ctx):
    jobs = [bj.lat(mode, "vi", 4), bj.lat(mode, "sovia", 4)]
    kernel_level = ("ksovia", "lane") if ctx.bench_has("lane") else ("ksovia",)
    for placement in (ONE, DEFAULT):
        for t in BLOCKING + kernel_level:
            env = bj.NO_SPIN if t in ("vi-block", "sovia-block") else None
            jobs.append(bj.lat(mode, t, 4, env=env, cpus="0" if placement == ONE else None,
                               variant=_variant(t, placement)))
    return jobs


def _k(t, placement=None):
    if t == "vi":  # polling: the same run in both placements
        placement = None
    return bj.key_lat(t, 4, variant=_variant(t, placement) if placement else "")


def table3(store, placement):
    """{key: {"us", "spread", "rounds"}} of Table 3's differences in one placement."""
    out = {}
    for key, _, _, a, b, _ in TABLE3:
        vals = store.diffs(_k(a, placement), F, _k(b, placement))
        out[key] = {"us": statistics.median(vals) if vals else None,
                    "spread": spread(vals), "rounds": len(vals)}
    return out


def _table3_section(sec, store):
    """Table 3 as the paper computed it, in both placements; results.json's
    `overheads` is the one-core placement's (the paper's nodes were
    uniprocessors: every wake-up a context switch)."""
    per = {pl: table3(store, pl) for pl in (ONE, DEFAULT)}
    rows = []
    for key, what, formula, *_, pus in TABLE3:
        cells = []
        for pl in (ONE, DEFAULT):
            c = per[pl][key]
            sp = "" if c["spread"] is None else f" ({c['spread'] * 100:.0f} %)"
            cells.append(f"{num(c['us'])}{sp}")
        rows.append([what, formula, pus, *cells])
    sec.add("Table 3 as the paper computed it: medians over rounds of the per-round "
            "difference, us, in brackets the spread ((max - min) / median); ksovia or "
            "lane absent where this machine refuses them (the approaches section says why):",
            table(["overhead", "calculated from", "paper us", "one core", "default"], rows))
    whys = [(f, pl_name, WHY_NEGATIVE.get(k, "not explained by a measurement here"))
            for k, _, f, *_ in TABLE3 for pl, pl_name in ((ONE, "one core"), (DEFAULT, "default"))
            if per[pl][k]["us"] is not None and per[pl][k]["us"] <= 0]
    if whys:
        sec.add("Where a difference is not positive, and why:\n\n" +
                "\n".join(f"- {f} ({p}): {w}." for f, p, w in whys))
    one = per[ONE]
    ok = [one[k]["us"] is not None and one[k]["us"] > 0
          and one[k]["spread"] is not None and one[k]["spread"] < 0.25 for k, *_ in TABLE3]
    sec.extra["overheads"] = dict(
        {k: one[k]["us"] for k, *_ in TABLE3},
        spreads={k: one[k]["spread"] for k, *_ in TABLE3},
        rounds={k: one[k]["rounds"] for k, *_ in TABLE3},
        placement="one core", default_placement={k: per[DEFAULT][k]["us"] for k, *_ in TABLE3},
        calculated_from={k: f for k, _, f, *_ in TABLE3},
        all_positive_and_steady=all(ok))
    return one


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__))
    vi = store.median(_k("vi"), F)
    comps, data = [], []
    for pl in (ONE, DEFAULT):
        c = {
            "socket": store.diff(_k("sovia"), F, _k("vi")),
            "socket_blocking": store.diff(_k("sovia-block", pl), F, _k("vi-block", pl)),
            "kernel_services": store.diff(_k("vi-block", pl), F, _k("vi")),
            "kernel_sockets": store.diff(_k("uds", pl), F, _k("sovia-block", pl)),
            "tcpip": store.diff(_k("tcp", pl), F, _k("uds", pl)),
        }
        comps.append(c)
        data.append({"placement": "one core" if pl == ONE else "default", "components_us": c,
                     "latency_us": {t: store.median(_k(t, pl), F) for t in BLOCKING}})
    po = paper.OVERHEAD
    base = paper.OVERHEAD_LAT["VIPL_POLL"]
    names = [("socket", "socket implementation", "sovia - vi (polling)", None),
             ("socket_blocking", "socket implementation, blocking", "sovia-block - vi-block",
              "socket"),
             ("kernel_services", "kernel services", "vi-block - vi", "kernel_services"),
             ("kernel_sockets", "kernel sockets layer", "uds - sovia-block", "kernel_sockets"),
             ("tcpip", "TCP/IP processing", "tcp - uds", "tcpip")]
    rows = []
    for k, what, how, pk in names:
        rel = [None if c[k] is None or not vi else c[k] / vi for c in comps]
        rows.append([what, how, po.get(pk) if pk else None,
                     po[pk] / base if pk else None, comps[0][k], rel[0], comps[1][k], rel[1]])
    sec.add(f"Microseconds per one-way message, and as a multiple of polling VI's own "
            f"latency (paper: of VIPL_POLL, {base} us; ours: of vi, {num(vi)} us). "
            f"{paper.OVERHEAD_SRC}; the paper's socket row pairs blocking SOVIA and VIPL.",
            table(["overhead", "measured as", "paper us", "paper / VI", "one core us",
                   "one core / vi", "default us", "default / vi"], rows))
    lat_rows = [[t, store.median(_k(t, ONE), F), store.median(_k(t, DEFAULT), F)]
                for t in BLOCKING]
    lat_rows = [["vi (polling)", vi, vi], ["sovia (polling)", store.median(_k("sovia"), F),
                                          store.median(_k("sovia"), F)]] + lat_rows
    sec.add("The latencies behind it (us):",
            table(["transport", "one core", "default placement"], lat_rows))
    one = comps[0]

    def lt(a, b):
        return None if one[a] is None or one[b] is None else one[a] < one[b]
    checks = [
        ("socket implementation < kernel services (one core)",
         f"{po['socket']} < {po['kernel_services']}",
         f"{num(one['socket_blocking'])} < {num(one['kernel_services'])}",
         lt("socket_blocking", "kernel_services")),
        ("socket implementation < TCP/IP processing (one core)",
         f"{po['socket']} < {po['tcpip']}",
         f"{num(one['socket_blocking'])} < {num(one['tcpip'])}", lt("socket_blocking", "tcpip")),
        ("a kernel sockets layer costs more than a user-level one (> 0, one core)",
         po["kernel_sockets"], one["kernel_sockets"],
         None if one["kernel_sockets"] is None else one["kernel_sockets"] > 0),
    ]
    sec.add(checks_table(checks))
    t3 = _table3_section(sec, store)
    sec.data = {"placements": data, "vi_us": vi, "paper_us": po,
                "checks": [list(c) for c in checks]}
    sec.headline.append(f"overheads (one core, us): socket layer {num(one['socket_blocking'])}"
                        f" (polling {num(one['socket'])}), kernel services "
                        f"{num(one['kernel_services'])}, kernel sockets "
                        f"{num(one['kernel_sockets'])}, TCP/IP {num(one['tcpip'])} "
                        f"(paper: 1.3, 9.6, 1.7, 5.5)")
    sec.headline.append("Table 3 as the paper computed it (one core, us): " + ", ".join(
        f"{f} {num(t3[k]['us'])}" for k, _, f, *_ in TABLE3))
    return sec
