"""seed 004 §4.3 and Fig. 10: polling, blocking and adaptive (spin, then
block) waiting: latency, bandwidth, and the CPU the sender and the
receiver use, split into user and kernel mode.

Measured: `sovia bench lat` (4 B) and `bw` for the transports `sovia`
(SOV_WAIT_POLL, pinned to two cores), `sovia-block` (SOV_WAIT_BLOCK) and
`sovia-adaptive` (the default configuration; the bandwidth runs with
SOVIA_COMBINE, as the paper's Fig. 10). The
CPU split is sampled by the report from /proc/PID/stat of the bench's
driver (the sender) and its peer (the receiver) over the middle 70 % of
each streaming run (1/100 s ticks). `sovia bench idle` gives the CPU a
receiver uses while its peer is silent. The paper's CPU figures are for
blocking calls on cLAN, where a DMA engine moves the data; on shared
memory the sender's and receiver's copies are the transfer itself."""
import statistics

from . import benchjobs as bj
from . import paper, plots
from .md import Section, checks_table, num, pct, prose, table
from .modes import size_text

NAME = "waitmodes"
TITLE = "Polling, blocking and adaptive waiting, with CPU use (seed 004 §4.3, Fig. 10)"
MODES_T = ("sovia", "sovia-block", "sovia-adaptive")
CFG = "SOVIA_COMBINE"
LAT, BW = "one_way_p50_us", "gbps"


def plan(mode, ctx):
    jobs = [bj.lat(mode, t, 4) for t in MODES_T]
    for s in mode.wait_bw_sizes:
        jobs += [bj.bw(mode, t, s, config=CFG, seconds=mode.cpu_seconds, cpu_split=True,
                       variant="cpu", once=not mode.cpu_every_round) for t in MODES_T]
    jobs += [bj.idle(mode, t) for t in MODES_T]
    return jobs


def _kbw(t, s):
    return bj.key_bw(t, s, CFG, "cpu")


def _cpu(store, t, s, side, part):
    vals = [r["cpu"][side][part] for r in store.results(_kbw(t, s))
            if isinstance(r, dict) and "cpu" in r]
    return statistics.median(vals) if vals else None


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    big = mode.wait_bw_sizes[-1]
    lat = {t: store.median(bj.key_lat(t, 4), LAT) for t in MODES_T}
    bw = {t: store.median(_kbw(t, big), BW) for t in MODES_T}
    idle = {t: store.median(bj.key_idle(t), "cpu_percent") for t in MODES_T}
    rel_lat = {t: store.ratio(bj.key_lat(t, 4), LAT, bj.key_lat("sovia", 4))
               for t in MODES_T}
    rel_bw = {t: store.ratio(_kbw(t, big), BW, _kbw("sovia", big)) for t in MODES_T}
    p = paper.WAIT
    rows = [[t, lat[t], rel_lat[t], bw[t], rel_bw[t], idle[t]] for t in MODES_T]
    rows += [["paper: polling (cLAN)", p["lat_poll"], 1.0, p["bw_poll"] / 1000, 1.0, None],
             ["paper: blocking (cLAN)", p["lat_block"], p["lat_block"] / p["lat_poll"],
              p["bw_block"] / 1000, p["bw_block"] / p["bw_poll"], None]]
    sec.add(f"4-byte one-way latency (us), bandwidth at {size_text(big)} (Gb/s) and the CPU "
            f"a receiver uses while waiting for a silent peer ({paper.WAIT_SRC}).",
            table(["wait mode", "latency", "/ polling", f"Gb/s {size_text(big)}",
                   "/ polling", "idle CPU %"], rows))
    cpu_rows, bars, cpu_data = [], [], []
    for s in mode.wait_bw_sizes:
        for t in MODES_T:
            v = {f"{side}_{part}": _cpu(store, t, s, side, part)
                 for side in ("sender", "receiver") for part in ("user", "kernel")}
            cpu_rows.append([size_text(s), t, store.median(_kbw(t, s), BW),
                             *[pct(v[k]) for k in ("sender_user", "sender_kernel",
                                                   "receiver_user", "receiver_kernel")]])
            cpu_data.append({"size": s, "mode": t, "gbps": store.median(_kbw(t, s), BW), **v})
            short = t.replace("sovia-", "").replace("sovia", "poll")
            bars.append((f"{short} {size_text(s)} snd", v["sender_user"], v["sender_kernel"]))
            bars.append((f"{short} {size_text(s)} rcv", v["receiver_user"],
                         v["receiver_kernel"]))
    cpu_rows.append(["32K (paper, blocking)", "cLAN", p["bw_block"] / 1000,
                     pct(p["sender_user_32k"]), pct(p["sender_kernel_32k"]), "",
                     f"< {p['receiver_kernel_max']:.0f}"])
    sec.add("CPU while streaming, % of one core (median over rounds).",
            table(["size", "mode", "Gb/s", "sender user", "sender kernel", "receiver user",
                   "receiver kernel"], cpu_rows))
    snd = [_cpu(store, "sovia-block", big, "sender", x) for x in ("user", "kernel")]
    snd_total = None if None in snd else sum(snd)
    checks = [
        ("blocking costs latency (block / poll > 1)", p["lat_block"] / p["lat_poll"],
         rel_lat["sovia-block"], None if rel_lat["sovia-block"] is None
         else rel_lat["sovia-block"] > 1),
        ("adaptive keeps polling latency (adaptive / poll <= 1.5)", "—",
         rel_lat["sovia-adaptive"], None if rel_lat["sovia-adaptive"] is None
         else rel_lat["sovia-adaptive"] <= 1.5),
        (f"blocking keeps bandwidth (block / poll at {size_text(big)} >= 0.8)",
         p["bw_block"] / p["bw_poll"], rel_bw["sovia-block"],
         None if rel_bw["sovia-block"] is None else rel_bw["sovia-block"] >= 0.8),
        (f"a blocking sender mostly idles while streaming {size_text(big)} (CPU < 50 %)",
         p["sender_kernel_32k"] + p["sender_user_32k"], snd_total,
         None if snd_total is None else snd_total < 50),
        ("a blocked receiver uses no CPU while idle (< 2 % of a core)", "0 (blocking)",
         idle["sovia-block"], None if idle["sovia-block"] is None else idle["sovia-block"] < 2),
    ]
    sec.add(checks_table(checks))
    sec.data = {"latency_us": lat, "gbps": bw, "size": big, "idle_cpu_percent": idle,
                "ratio_to_polling": {"latency": rel_lat, "gbps": rel_bw}, "cpu": cpu_data,
                "checks": [list(c) for c in checks]}
    sec.headline.append(f"waiting: block / poll latency {num(rel_lat['sovia-block'])} x, "
                        f"adaptive / poll {num(rel_lat['sovia-adaptive'])} x (paper: block "
                        f"1.85 x); idle CPU blocking {num(idle['sovia-block'])} %, adaptive "
                        f"{num(idle['sovia-adaptive'])} %")
    sec.plot(plots.cpu_bars(out, "waitmodes_cpu.png",
                            "CPU while streaming: sender (snd) and receiver (rcv)", bars))
    return sec
