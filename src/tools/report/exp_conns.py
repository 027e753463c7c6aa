"""Many connections and short ones: what a connection costs to hold and to
make, `sovia run` against kernel TCP (issue 21).

Measured: `sovia bench conns --count N` (one client process opens N
connections to one server process and holds them, each verified by an
exchange; per connection on the client side: descriptors, mappings, shared
memory mapped and resident, and the time of one connect) and `sovia bench
connrate --clients C` (connect + 16 bytes each way + close, one after
another, from C client processes against one epoll server; the server
closes first), and `sovia bench epoll --count N --active N/100` (N
connections into one level-triggered epoll server, 1 % of them busy with
64-byte request-response at a time, the busy ones rotating). Transports
`tcp` (kernel TCP) and `preload` (the same
program, both ends under the preload library with the default profile).
Values are medians over rounds; a ratio is the median of the per-round
ratios to kernel TCP. The figures to reach are issue 21's."""
import statistics

from . import plots
from .jobs import Job
from .md import Section, all_hold, checks_table, num, prose, table

NAME = "conns"
TITLE = "Many connections and short ones: holding and making connections (issue 21)"
BASE = "tcp"
TRANSPORTS = ("tcp", "preload")
SIDE_FIELDS = ("fds_per_conn", "maps_per_conn", "shm_mapped_kib_per_conn",
               "shm_resident_kib_per_conn")


def conns_key(t, count):
    return ("conns", t, count)


def rate_key(t, clients):
    return ("connrate", t, clients)


def epoll_key(t, count):
    return ("epoll", t, count)


def epoll_active(mode):
    return max(1, mode.epoll_count // 100)


def warmup(mode):
    return min(0.5, mode.rate_seconds / 2)


def plan(mode, ctx):
    if not ctx.bench_has("conns"):
        return []
    jobs = []
    for t in TRANSPORTS:
        jobs.append(Job(key=conns_key(t, mode.conns_count), label=f"conns {t} N={mode.conns_count}",
                        est=1.0 + 0.001 * mode.conns_count,
                        bench=["conns", "--transport", t, "--count", str(mode.conns_count)]))
        for c in mode.rate_clients:
            jobs.append(Job(key=rate_key(t, c), label=f"connrate {t} C={c}",
                            est=mode.rate_seconds + warmup(mode) + 0.3,
                            bench=["connrate", "--transport", t, "--clients", str(c),
                                   "--seconds", f"{mode.rate_seconds:g}"]))
        if ctx.bench_has("epoll"):
            n = mode.epoll_count
            jobs.append(Job(key=epoll_key(t, n), label=f"epoll {t} N={n}",
                            est=mode.rate_seconds + warmup(mode) + 1.0 + 0.0005 * n,
                            bench=["epoll", "--transport", t, "--count", str(n), "--active",
                                   str(epoll_active(mode)), "--seconds",
                                   f"{mode.rate_seconds:g}", "--warmup", f"{warmup(mode):g}"]))
    return jobs


def _side(store, t, count, fld, side="client"):
    v = [r[side][fld] for r in store.results(conns_key(t, count))
         if isinstance(r.get(side), dict) and fld in r[side]]
    return statistics.median(v) if v else None


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    n = mode.conns_count
    if not store.results(conns_key(BASE, n)) and not store.results(rate_key(BASE, 1)):
        sec.add("**Skipped:** this `sovia bench` has no `conns` mode, or every run failed "
                "(see the failed runs below).")
        return sec
    rows = []
    for t in TRANSPORTS:
        rows.append([t, *[_side(store, t, n, f) for f in SIDE_FIELDS],
                     store.median(conns_key(t, n), "connect_us_per_conn"),
                     store.median(conns_key(t, n), "close_us_per_conn")])
    sec.add(f"{n} connections held by one client process (its side; the server's is "
            "alike): per connection.",
            table(["transport", "descriptors", "mappings", "shared KiB mapped",
                   "shared KiB resident", "connect us", "close us"], rows))
    rrows = []
    for c in mode.rate_clients:
        row = [str(c), store.median(rate_key(BASE, c), "conns_per_s")]
        row += [store.median(rate_key("preload", c), "conns_per_s"),
                store.ratio(rate_key("preload", c), "conns_per_s", rate_key(BASE, c), None),
                store.median(rate_key(BASE, c), "p50_us"),
                store.median(rate_key("preload", c), "p50_us")]
        rrows.append(row)
    sec.add(f"connect + 16 bytes each way + close, {mode.rate_seconds:g} s counted after "
            f"{warmup(mode):g} s of warm-up.",
            table(["clients", "tcp conns/s", "preload conns/s", "x tcp", "tcp p50 us",
                   "preload p50 us"], rrows))
    ne = mode.epoll_count
    erows = [[t, store.median(epoll_key(t, ne), "tps"),
              store.ratio(epoll_key(t, ne), "tps", epoll_key(BASE, ne), None),
              store.median(epoll_key(t, ne), "p50_us"), store.median(epoll_key(t, ne), "p99_us"),
              store.median(epoll_key(t, ne), "server_cpu_us_per_tx")] for t in TRANSPORTS]
    sec.add(f"{ne} connections into one epoll server, {epoll_active(mode)} busy at a time "
            f"(64 bytes each way), {mode.rate_seconds:g} s counted.",
            table(["transport", "tx/s", "x tcp", "p50 us", "p99 us", "server CPU us/tx"],
                  erows))
    checks = _checks(mode, store)
    sec.add(checks_table(checks, what="figure (issue 21)", ref="target"))
    sec.data = {"conns": {t: {f: _side(store, t, n, f) for f in SIDE_FIELDS}
                          for t in TRANSPORTS},
                "connrate": rrows, "epoll": erows, "checks": [list(c) for c in checks]}
    ratio = [store.ratio(rate_key("preload", c), "conns_per_s", rate_key(BASE, c), None)
             for c in mode.rate_clients]
    extra = _extra_fds(store, n)
    sec.headline.append(f"connections (bench conns/connrate): preload / kernel TCP "
                        f"connections/s {' / '.join(num(r) for r in ratio)} x at "
                        f"{' / '.join(map(str, mode.rate_clients))} clients; sovia's own "
                        f"descriptors per held connection {num(extra)}")
    sec.plot(plots.lines(out, "conns.png", "connect + exchange + close per second",
                         "client processes", "connections/s",
                         [{"label": t, "x": mode.rate_clients, "style": "o-",
                           "y": [store.median(rate_key(t, c), "conns_per_s")
                                 for c in mode.rate_clients]} for t in TRANSPORTS],
                         logy=False))
    return sec


def _extra_fds(store, n):
    a, b = _side(store, "preload", n, "fds_per_conn"), _side(store, BASE, n, "fds_per_conn")
    return None if a is None or b is None else a - b


def _checks(mode, store):
    n = mode.conns_count
    ratios = [store.ratio(rate_key("preload", c), "conns_per_s", rate_key(BASE, c), None)
              for c in mode.rate_clients]
    extra = _extra_fds(store, n)
    resident = _side(store, "preload", n, "shm_resident_kib_per_conn")
    ne = mode.epoll_count
    etps = store.ratio(epoll_key("preload", ne), "tps", epoll_key(BASE, ne), None)
    ep99 = store.ratio(epoll_key("preload", ne), "p99_us", epoll_key(BASE, ne), None)
    return [
        (f"epoll server, {ne} connections, 1 % active: preload / tcp transactions/s", ">= 1.0",
         etps, None if etps is None else etps >= 1.0),
        (f"the same: preload / tcp p99 latency", "<= 1.0", ep99,
         None if ep99 is None else ep99 <= 1.0),
        ("preload / tcp connections/s, each client count", ">= 0.67",
         " / ".join(num(r) for r in ratios), all_hold(None if r is None else r >= 0.67
                                                      for r in ratios)),
        ("sovia's own descriptors per held connection", "0 (a constant per process)",
         extra, None if extra is None else extra < 0.05),
        ("idle connection: shared memory resident per end", "<= 16 KiB", resident,
         None if resident is None else resident <= 16),
    ]
