"""seed 004 Tables 2/3: one-way latency from 4 B to 32 KB for native VI and
the three ways of sending data (register every send, copy every send, copy
up to 2 KB and register above).

Measured: `sovia bench lat` ping-pong, one-way = half the round trip, the
median over batches (p50), then the median over rounds. Native VI is the
`vi` transport (polling, the receiver does not touch the data, as the
papers' VIPL test); `vi-copy` also copies each message out, as any sockets
receiver must. The SOVIA rows are the `sovia` transport (polling) with the
papers' labels, which set w = t = 1 as in the paper."""
from . import benchjobs as bj
from . import paper, plots
from .md import Section, all_hold, checks_table, num, prose, table
from .modes import size_text

NAME = "latency"
TITLE = "Latency per size: native VI and SOVIA_REG / COPY / HYBRID (seed 004 Tables 2/3)"
CONFIGS = ("SOVIA_REG", "SOVIA_COPY", "SOVIA_HYBRID")
FIELD = "one_way_p50_us"


def plan(mode, ctx):
    jobs = []
    for size in mode.lat_sizes:
        jobs.append(bj.lat(mode, "vi", size))
        jobs.append(bj.lat(mode, "vi-copy", size))
        for c in CONFIGS:
            jobs.append(bj.lat(mode, "sovia", size, config=c))
    return jobs


def _key(col, size):
    return bj.col_key("lat", col, size)


def _paper_ratio(size, col):
    row = paper.LAT_CLAN.get(size)
    return row[paper.LAT_COLUMNS.index(col)] / row[0] if row else None


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    rows, data = [], []
    ours = bj.medians(store, "lat", ("vi", "vi-copy", *CONFIGS), mode.lat_sizes, FIELD)
    ratios = {c: {} for c in CONFIGS}
    for size in mode.lat_sizes:
        p = paper.LAT_CLAN.get(size, (None,) * 4)
        for c in CONFIGS:
            ratios[c][size] = store.ratio(_key(c, size), FIELD, _key("vi", size))
        rows.append([size_text(size), p[0], ours["vi"][size], p[1], ours["SOVIA_REG"][size],
                     p[2], ours["SOVIA_COPY"][size], p[3], ours["SOVIA_HYBRID"][size],
                     _paper_ratio(size, "SOVIA_HYBRID"), ratios["SOVIA_HYBRID"][size],
                     ours["vi-copy"][size]])
        data.append({"size": size, "paper_clan_us": dict(zip(paper.LAT_COLUMNS, p)),
                     "ours_us": {c: ours[c][size] for c in ours},
                     "ours_ratio_to_vi": {c: ratios[c][size] for c in CONFIGS},
                     "runs_us": {c: store.runs(_key(c, size), FIELD) for c in ours}})
    sec.add(f"One-way latency, microseconds; paper = cLAN ({paper.LAT_SRC}).",
            table(["size", "VI paper", "vi ours", "REG paper", "REG ours", "COPY paper",
                   "COPY ours", "HYBRID paper", "HYBRID ours", "HYBRID/VI paper",
                   "HYBRID/VI ours", "vi-copy ours"], rows))
    checks = _checks(mode, ours, ratios)
    sec.add(checks_table(checks))
    sec.data = {"rows": data, "checks": [list(c) for c in checks]}
    small = mode.lat_sizes[0]
    h = ratios["SOVIA_HYBRID"].get(small)
    sec.headline.append(f"SOVIA_HYBRID {size_text(small)} B one-way "
                        f"{num(ours['SOVIA_HYBRID'].get(small))} us = {num(h)} x native vi "
                        f"(paper: {_paper_ratio(small, 'SOVIA_HYBRID') or 0:.2f} x)")
    x = list(mode.lat_sizes)
    left = [{"label": c, "x": x, "y": [ours[c][s] for s in x]} for c in ours]
    right = [{"label": f"{c} ours", "x": x, "y": [ratios[c][s] for s in x]} for c in CONFIGS]
    right += [{"label": f"{c} paper (cLAN)", "x": x, "y": [_paper_ratio(s, c) for s in x],
               "style": "x--"} for c in CONFIGS]
    sec.plot(plots.lines(out, "latency.png", "one-way latency (ours)", "message size (bytes)",
                         "microseconds", left,
                         right=("latency / native VI: ours and the paper's", "ratio", right,
                                False)))
    return sec


def _checks(mode, ours, ratios):
    """The paper's findings that do not depend on the hardware."""
    small = [s for s in mode.lat_sizes if s <= 512]
    large = [s for s in mode.lat_sizes if s >= 8192]
    rows = []
    s0 = mode.lat_sizes[0]
    h = ratios["SOVIA_HYBRID"].get(s0)
    rows.append((f"SOVIA_HYBRID within 1.3 x native VI at {size_text(s0)} B",
                 _paper_ratio(s0, "SOVIA_HYBRID"), h, None if h is None else h <= 1.3))

    def all_ok(sizes, f):
        return all_hold(f(s) for s in sizes)

    def lt(a, b, slack):
        return lambda s: None if ours[a][s] is None or ours[b][s] is None \
            else ours[a][s] <= ours[b][s] * slack
    if small:
        rows.append((f"copying beats registering up to 512 B (COPY <= 1.05 x REG, "
                     f"{len(small)} sizes)", "yes", "", all_ok(small, lt("SOVIA_COPY", "SOVIA_REG",
                                                                        1.05))))
    if large:
        rows.append(("registering beats copying from 8 KB (REG < COPY)", "yes", "",
                     all_ok(large, lt("SOVIA_REG", "SOVIA_COPY", 1.0))))

    def hybrid_min(s):
        vals = [ours[c][s] for c in CONFIGS]
        if any(v is None for v in vals):
            return None
        return vals[2] <= 1.1 * min(vals[0], vals[1])
    rows.append(("HYBRID follows min(REG, COPY) within 10 % at every size", "yes", "",
                 all_ok(mode.lat_sizes, hybrid_min)))
    return rows
