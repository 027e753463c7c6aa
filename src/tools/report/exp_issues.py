"""The acceptance figures of the vipl and sockets-layer issues (2 and 3),
which scripts/figures.py printed before this report existed: each with the
issue's target, from the same interleaved rounds as everything else.

Measured: `sovia bench lat` at 4 bytes (ucx: 8, its smallest stream
message), `bw` at 32K and 64K, SOVIA_COMBINE's 64-byte streaming against
tcp's, and `idle` for the blocking transports; vi-block also without its
spin (SOVIA_VIPL_SPIN_US=0)."""
from . import benchjobs as bj
from .md import Section, checks_table, num, prose

NAME = "issues"
TITLE = "The issues' acceptance figures (issues 2 and 3; was scripts/figures.py)"
LAT4 = ("limit", "limit-shared", "vi", "vi-block", "tcp", "sovia", "sovia-adaptive", "sovia-block")
BW = ("vi", "vi-copy", "ucx", "sovia", "tcp")
IDLE = ("vi-block", "sovia-adaptive", "sovia-block")
L, G = "one_way_p50_us", "gbps"


def plan(mode, ctx):
    jobs = [bj.lat(mode, t, 4) for t in LAT4] + [bj.lat(mode, "ucx", 8)]
    jobs.append(bj.lat(mode, "vi-block", 4, env=bj.NO_SPIN, variant="nospin"))
    jobs += [bj.bw(mode, t, s) for t in BW for s in (32768, 65536)]
    jobs += [bj.bw(mode, "sovia", 64, config="SOVIA_COMBINE"), bj.bw(mode, "tcp", 64)]
    jobs += [bj.idle(mode, t) for t in IDLE]
    return jobs


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__))
    lat = {t: bj.key_lat(t, 4) for t in LAT4}
    lat["ucx"] = bj.key_lat("ucx", 8)

    def r_lat(a, b):
        return store.ratio(lat[a], L, lat[b])

    def r_bw(a, b, s):
        return store.ratio(bj.key_bw(a, s), G, bj.key_bw(b, s))

    def pair(f, *args):
        v = [f(*args, s) for s in (32768, 65536)]
        return v, None if None in v else min(v)

    def two(v):
        return f"{num(v[0])} / {num(v[1])}"
    sv, sv_min = pair(r_bw, "sovia", "vi")
    sc, sc_min = pair(r_bw, "sovia", "vi-copy")
    su, su_min = pair(r_bw, "sovia", "ucx")
    st, _ = pair(r_bw, "sovia", "tcp")
    vu, vu_min = pair(r_bw, "vi", "ucx")
    comb = store.ratio(bj.key_bw("sovia", 64, "SOVIA_COMBINE"), G, bj.key_bw("tcp", 64))
    idle = {t: store.median(bj.key_idle(t), "cpu_percent") for t in IDLE}

    def le(v, x):
        return None if v is None else v <= x

    def ge(v, x):
        return None if v is None else v >= x
    rows = [
        ("issue 2: vi / limit latency", "<= 2", r_lat("vi", "limit"), le(r_lat("vi", "limit"), 2)),
        ("issue 2: vi / limit-shared latency (one line both ways: no queue pair's floor)", "—",
         r_lat("vi", "limit-shared"), None),
        ("issue 2: vi 4 B vs ucx 8 B latency (us)", "vi below",
         f"{num(store.median(lat['vi'], L))} vs {num(store.median(lat['ucx'], L))}",
         le(r_lat("vi", "ucx"), 1)),
        ("issue 2: vi-block / tcp latency", "<= 0.35", r_lat("vi-block", "tcp"),
         le(r_lat("vi-block", "tcp"), 0.35)),
        ("issue 2: vi-block without spin (us)", "—",
         store.median(bj.key_lat("vi-block", 4, variant="nospin"), L), None),
        ("issue 2: vi / ucx bandwidth 32K / 64K", ">= 1", two(vu), ge(vu_min, 1)),
        ("issue 2: vi-block idle CPU %", "< 2", idle["vi-block"], le(idle["vi-block"], 2)),
        ("issue 3: sovia / vi latency", "<= 1.25", r_lat("sovia", "vi"),
         le(r_lat("sovia", "vi"), 1.25)),
        ("issue 3: sovia / vi bandwidth 32K / 64K", ">= 0.95", two(sv), ge(sv_min, 0.95)),
        ("issue 3: sovia / vi-copy bandwidth (the fair ceiling)", ">= 0.95 (proposed)", two(sc),
         ge(sc_min, 0.95)),
        ("issue 3: sovia / ucx bandwidth", ">= 0.9 (proposed)", two(su), ge(su_min, 0.9)),
        ("issue 3: sovia / tcp bandwidth", ">= 5", two(st), ge(st[1], 5) if st[1] else None),
        ("issue 3: SOVIA_COMBINE 64 B / tcp 64 B bandwidth", ">= 1", comb, ge(comb, 1)),
        ("issue 3: sovia-adaptive / sovia latency", "<= 1.5", r_lat("sovia-adaptive", "sovia"),
         le(r_lat("sovia-adaptive", "sovia"), 1.5)),
        ("issue 3: sovia-adaptive idle CPU %", "< 2", idle["sovia-adaptive"],
         le(idle["sovia-adaptive"], 2)),
    ]
    sec.add(checks_table(rows, what="figure", ref="target"))
    sec.data = {"checks": [list(r) for r in rows],
                "latency_us": {t: store.median(k, L) for t, k in lat.items()},
                "gbps": {t: {str(s): store.median(bj.key_bw(t, s), G) for s in (32768, 65536)}
                         for t in BW},
                "idle_cpu_percent": idle}
    return sec
