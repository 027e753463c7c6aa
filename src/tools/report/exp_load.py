"""Under load, `sovia run` against kernel TCP (issue 16): N client and N
server processes, each client holding K connections in one epoll loop with
one 64-byte request outstanding on each, on a machine with fewer CPUs than
busy processes.

Measured: `sovia bench rr --pairs N --conns K` for the transports `tcp`
(kernel TCP) and `preload` (the very same program, both ends under the
preload library with the default profile, as `sovia run` runs them), and in
the full report `sovia-adaptive` (the sov_* API in its default wait mode).
Nothing is pinned. Transactions/s count the answers of the counted seconds;
latency is per request, from its send to its answer, over every client
(p99); CPU is user + system of every client and server process per
transaction. Values are medians over rounds; a ratio is the median of the
per-round ratios to kernel TCP. The figures to reach are issue 16's."""
from . import plots
from .jobs import Job
from .md import Section, all_hold, checks_table, num, prose, table

NAME = "load"
TITLE = "Many processes, many connections: request-response under load (issue 16)"
BASE = "tcp"
SETUP_S = 0.3  # start-up and connections of a run, roughly


def key(transport, pairs, conns):
    return ("rr", transport, pairs, conns)


def warmup(mode):
    return min(0.5, mode.rr_seconds / 2)


def plan(mode, ctx):
    if not ctx.bench_has("rr"):
        return []
    jobs = []
    for conns in mode.rr_conns:
        for pairs in mode.rr_pairs:
            for t in mode.rr_transports:
                est = mode.rr_seconds + warmup(mode) + SETUP_S + 0.002 * pairs * conns
                jobs.append(Job(key=key(t, pairs, conns),
                                label=f"rr {t} N={pairs} K={conns}", est=est,
                                bench=["rr", "--transport", t, "--pairs", str(pairs),
                                       "--conns", str(conns),
                                       "--seconds", f"{mode.rr_seconds:g}"]))
    return jobs


def _fig(store, t, pairs, conns, fld):
    return store.median(key(t, pairs, conns), fld)


def _ratio(store, t, pairs, conns, fld):
    return store.ratio(key(t, pairs, conns), fld, key(BASE, pairs, conns))


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    others = [t for t in mode.rr_transports if t != BASE]
    if not any(store.results(key(BASE, n, k)) for n in mode.rr_pairs for k in mode.rr_conns):
        sec.add("**Skipped:** this `sovia bench` has no `rr` mode, or every run failed "
                "(see the failed runs below).")
        return sec
    rows, data = [], []
    for conns in mode.rr_conns:
        for pairs in mode.rr_pairs:
            f = {t: {fld: _fig(store, t, pairs, conns, fld)
                     for fld in ("tps", "p99_us", "cpu_us_per_tx", "unanswered")}
                 for t in mode.rr_transports}
            r = {t: {fld: _ratio(store, t, pairs, conns, fld)
                     for fld in ("tps", "p99_us", "cpu_us_per_tx")} for t in others}
            first = store.first(key(BASE, pairs, conns)) or {}
            load = (f"{first['processes']} on {first['cpus']}"
                    if "processes" in first and "cpus" in first else "")
            row = [str(pairs), str(conns), load, f[BASE]["tps"]]
            for t in others:
                row += [f[t]["tps"], r[t]["tps"]]
            row.append(f[BASE]["p99_us"])
            for t in others:
                row += [f[t]["p99_us"], r[t]["p99_us"]]
            row.append(f[BASE]["cpu_us_per_tx"])
            for t in others:
                row += [f[t]["cpu_us_per_tx"], r[t]["cpu_us_per_tx"]]
            rows.append(row)
            data.append({"pairs": pairs, "conns": conns, "median": f, "ratio_to_tcp": r})
    heads = ["N", "K", "processes on CPUs", "tcp tx/s"]
    heads += [h for t in others for h in (f"{t} tx/s", "x tcp")]
    heads += ["tcp p99 us"] + [h for t in others for h in (f"{t} p99 us", "x tcp")]
    heads += ["tcp CPU us/tx"] + [h for t in others for h in (f"{t} CPU us/tx", "x tcp")]
    sec.add(f"64-byte request-response, {mode.rr_seconds:g} s counted after "
            f"{warmup(mode):g} s of warm-up; medians over rounds; x tcp: median of the "
            "per-round ratios.", table(heads, rows))
    sec.add(checks_table(_checks(mode, store), what="figure (issue 16)", ref="target"))
    sec.data = {"runs": data, "checks": [list(c) for c in _checks(mode, store)]}
    if "preload" in others:
        low = min((x for x in (_ratio(store, "preload", n, k, "tps") for n in mode.rr_pairs
                               for k in mode.rr_conns) if x is not None), default=None)
        one = _ratio(store, "preload", mode.rr_pairs[0], mode.rr_conns[0], "tps")
        sec.headline.append(f"under load (bench rr): preload / kernel TCP transactions/s "
                            f"{num(one)} x at N = {mode.rr_pairs[0]}, lowest {num(low)} x "
                            f"over N = {mode.rr_pairs[0]}..{mode.rr_pairs[-1]}, "
                            f"K = {', '.join(map(str, mode.rr_conns))}")
    sec.plot(_plot(mode, store, out))
    return sec


def _checks(mode, store):
    if "preload" not in mode.rr_transports:
        return []
    ns, ks = mode.rr_pairs, mode.rr_conns

    def each(fld, ok, pairs=ns):
        return all_hold(None if (v := _ratio(store, "preload", n, k, fld)) is None else ok(v)
                        for n in pairs for k in ks)

    def span(fld, pairs=ns):
        v = [x for x in (_ratio(store, "preload", n, k, fld) for n in pairs for k in ks)
             if x is not None]
        return f"{num(min(v))} to {num(max(v))}" if v else None
    one = [_ratio(store, "preload", 1, k, "tps") for k in ks] if 1 in ns else []
    multi = [n for n in ns if n >= 2]
    lost = [_fig(store, "preload", n, k, "unanswered") for n in ns for k in ks]
    return [
        ("preload / tcp transactions/s at every N and K", ">= 1", span("tps"),
         each("tps", lambda v: v >= 1)),
        ("preload / tcp transactions/s at N = 1", ">= 3",
         " / ".join(num(v) for v in one) if one else None,
         all_hold(None if v is None else v >= 3 for v in one)),
        ("preload / tcp p99 latency at every N and K", "<= 1", span("p99_us"),
         each("p99_us", lambda v: v <= 1)),
        ("preload / tcp CPU per transaction at N >= 2", "<= 1.2",
         span("cpu_us_per_tx", multi), each("cpu_us_per_tx", lambda v: v <= 1.2, multi)),
        ("preload: requests never answered", "0",
         None if None in lost else sum(lost), None if None in lost else sum(lost) == 0),
    ]


def _plot(mode, store, out):
    series, p99 = [], []
    for t in mode.rr_transports:
        for k in mode.rr_conns:
            style = "o-" if k == mode.rr_conns[0] else "s--"
            label = f"{t} K={k}"
            series.append({"label": label, "x": mode.rr_pairs, "style": style,
                           "y": [_fig(store, t, n, k, "tps") for n in mode.rr_pairs]})
            p99.append({"label": label, "x": mode.rr_pairs, "style": style,
                        "y": [_fig(store, t, n, k, "p99_us") for n in mode.rr_pairs]})
    return plots.lines(out, "load.png", "transactions/s against pairs N",
                       "pairs N (client + server processes: 2N)", "transactions/s", series,
                       right=("p99 latency against pairs N", "p99 latency (us)", p99, True))
