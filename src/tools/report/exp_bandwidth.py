"""seed 004 Fig. 8 / seed 000 Fig. 9(b): bandwidth per message size as the
papers' optimizations are added: SOVIA_BASE (one message in flight),
SOVIA_FLOWCNTL (window w = 32), SOVIA_DACKS (plus delayed, piggybacked
ACKs, t = 16) and SOVIA_COMBINE (plus combining small messages), against
native VI and kernel TCP.

Measured: `sovia bench bw`, the sender streams for a fixed time and the
receiver acknowledges the last message; payload Gb/s. `vi`'s receiver
never reads the data, so on shared memory it measures the sender's copy
into its own cache; `vi-copy` (the receiver copies each message out, as a
sockets receiver must) is the fair ceiling for a sockets layer. `tcp`
runs with TCP_NODELAY; the papers' TCP had Nagle's algorithm on (their
Fig. 7 shows it beating VI below 256 B): that is `tcp-nagle`, where `sovia
bench` has it."""
from . import benchjobs as bj
from . import paper, plots
from .md import Section, all_hold, checks_table, num, prose, table
from .modes import size_text

NAME = "bandwidth"
TITLE = "Bandwidth per optimization (seed 004 Fig. 8, seed 000 Fig. 9b)"
CONFIGS = ("SOVIA_BASE", "SOVIA_FLOWCNTL", "SOVIA_DACKS", "SOVIA_COMBINE")
BASELINES = ("vi", "vi-copy", "tcp")
F = "gbps"


def plan(mode, ctx):
    jobs = []
    base = BASELINES + (("tcp-nagle",) if ctx.bench_has("tcp-nagle") else ())
    for size in mode.bw_sizes:
        jobs += [bj.bw(mode, t, size) for t in base]
        jobs += [bj.bw(mode, "sovia", size, config=c) for c in CONFIGS]
    return jobs


def key(col, size):
    return bj.col_key("bw", col, size)


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    nagle = any(store.results(key("tcp-nagle", s)) for s in mode.bw_sizes)
    tcp = "tcp-nagle" if nagle else "tcp"  # what combining is measured against
    cols = (*BASELINES, *(("tcp-nagle",) if nagle else ()), *CONFIGS)
    ours = bj.medians(store, "bw", cols, mode.bw_sizes, F)
    rows = []
    for s in mode.bw_sizes:
        rows.append([size_text(s), *[ours[c][s] for c in cols],
                     store.ratio(key("SOVIA_DACKS", s), F, key("vi-copy", s)),
                     store.ratio(key("SOVIA_COMBINE", s), F, key(tcp, s))])
    p = paper.BW
    paper_row = {"vi": p["vi_peak"] / 1000, "tcp-nagle" if nagle else "tcp": p["tcp_32k"] / 1000,
                 "SOVIA_DACKS": p["sovia_peak_32k"] / 1000}
    rows.append(["32K (paper, cLAN)", *[paper_row.get(c) for c in cols], None, None])
    sec.add(f"Gb/s (paper: Mb/s / 1000; {paper.BW_SRC}).",
            table(["size", *[c.replace("SOVIA_", "") for c in cols], "DACKS/vi-copy",
                   f"COMBINE/{tcp}"], rows))
    big = 32768 if 32768 in mode.bw_sizes else mode.bw_sizes[-1]
    small = [s for s in mode.bw_sizes if s < 2048]
    r = {
        "dacks_base": store.ratio(key("SOVIA_DACKS", big), F, key("SOVIA_BASE", big)),
        "dacks_vi": store.ratio(key("SOVIA_DACKS", big), F, key("vi", big)),
        "dacks_vicopy": store.ratio(key("SOVIA_DACKS", big), F, key("vi-copy", big)),
        "tcp_vi": store.ratio(key("tcp", big), F, key("vi", big)),
        "dacks_tcp": store.ratio(key("SOVIA_DACKS", big), F, key("tcp", big)),
        "combine_dacks_small": store.ratio(key("SOVIA_COMBINE", small[0]), F,
                                           key("SOVIA_DACKS", small[0])) if small else None,
        "tcp_compared": tcp,
    }
    b = size_text(big)
    checks = [
        (f"DACKS / BASE at {b} (flow control and delayed ACKs pay off)", "> 1", r["dacks_base"],
         None if r["dacks_base"] is None else r["dacks_base"] > 1),
        (f"DACKS / native VI at {b}", p["sovia_peak_32k"] / p["vi_peak"], r["dacks_vi"],
         None if r["dacks_vi"] is None else r["dacks_vi"] >= 0.95),
        (f"DACKS / vi-copy at {b} (the fair ceiling here)", p["sovia_peak_32k"] / p["vi_peak"],
         r["dacks_vicopy"], None if r["dacks_vicopy"] is None else r["dacks_vicopy"] >= 0.9),
        (f"tcp / native VI at {b}", p["tcp_32k"] / p["vi_peak"], r["tcp_vi"],
         None if r["tcp_vi"] is None else r["tcp_vi"] < 1),
        (f"DACKS / tcp at {b}", p["sovia_peak_32k"] / p["tcp_32k"], r["dacks_tcp"],
         None if r["dacks_tcp"] is None else r["dacks_tcp"] > 1),
        (f"COMBINE / DACKS at {size_text(small[0]) if small else '-'} B (combining small "
         "messages)", "\"significant\"", r["combine_dacks_small"],
         None if r["combine_dacks_small"] is None else r["combine_dacks_small"] >= 2),
        (f"COMBINE >= {tcp} below 2 KB (the papers: matches Nagle's TCP)", "yes", "",
         all_hold(ours["SOVIA_COMBINE"][s] >= ours[tcp][s]
                  if ours["SOVIA_COMBINE"][s] and ours[tcp][s] else None for s in small)),
    ]
    sec.add(checks_table(checks))
    sec.data = {"gbps": {c: {str(s): ours[c][s] for s in mode.bw_sizes} for c in cols},
                "runs_gbps": {c: {str(s): store.runs(key(c, s), F) for s in mode.bw_sizes}
                              for c in cols},
                "ratios": r, "checks": [list(c) for c in checks]}
    sec.headline.append(f"bandwidth at {b}: DACKS {num(ours['SOVIA_DACKS'][big])} Gb/s = "
                        f"{num(r['dacks_vicopy'])} x vi-copy, {num(r['dacks_vi'])} x vi, "
                        f"{num(r['dacks_tcp'])} x tcp (paper: 1.0 x VI, 1.8 x TCP)")
    sec.plot(plots.table_lines(out, "bandwidth.png", "streaming bandwidth per optimization",
                               "Gb/s", ours))
    return sec
