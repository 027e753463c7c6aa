"""seed 004 Fig. 5 (seed 000 Fig. 9a): who handles incoming messages, and
what waking a blocked thread costs (the papers' Tsync).

Measured: `sovia bench lat` for native `vi`, kernel `tcp` and the `sovia`
transport with SOVIA_SINGLE (the application thread handles messages
inside its own calls), SOVIA_HANDLER (a handler thread over the CQ) and
SOVIA_NOTIFY (vipl notify callbacks). The three labels differ only in the
handling strategy (w = t = 1, data registered).

Tsync is estimated four ways, each the median of per-round differences at
4 bytes: HANDLER - SINGLE (the papers' own reading of Fig. 5); vi-notify -
vi-block (the same vipl exchange, plus the hand-off from the provider's
notify thread to the waiting application thread through a condition
variable: one thread wake-up per message); and vi-block without its 20 us
spin (SOVIA_VIPL_SPIN_US=0, a futex sleep per message) - vi, with the two
processes on different cores and (taskset -c 0) on one core. Where `sovia
bench` has the `wake` mode (two threads of one process passing a token
through a condition variable), it measures Tsync directly, as the papers
did, on two CPUs and on one."""
from . import benchjobs as bj
from . import paper, plots
from .jobs import Job
from .md import Section, all_hold, checks_table, num, prose, table
from .modes import size_text

NAME = "wakeup"
TITLE = "Message handling and the cost of a wake-up (seed 004 Fig. 5, seed 000 §5.2)"
STRATEGIES = ("SOVIA_SINGLE", "SOVIA_HANDLER", "SOVIA_NOTIFY")
F = "one_way_p50_us"
NOSPIN_APART, NOSPIN_ONE = "nospin", "nospin-1core"
WAKE_US = 50.0  # rough cross-CPU thread wake-up, for the iteration count


def plan(mode, ctx):
    jobs = []
    for size in mode.fig5_sizes:
        jobs += [bj.lat(mode, "vi", size), bj.lat(mode, "tcp", size)]
        jobs += [bj.lat(mode, "sovia", size, config=c) for c in STRATEGIES]
    s = mode.fig5_sizes[0]
    jobs += [bj.lat(mode, "vi-block", s), bj.lat(mode, "vi-notify", s),
             bj.lat(mode, "vi-block", s, env=bj.NO_SPIN, variant=NOSPIN_APART),
             bj.lat(mode, "vi-block", s, env=bj.NO_SPIN, cpus="0", variant=NOSPIN_ONE)]
    if ctx.bench_has("wake"):
        iters = int(max(200, mode.lat_target_s / (2 * WAKE_US * 1e-6)))
        for where, extra in (("apart", []), ("same", ["--same-cpu"])):
            jobs.append(Job(key=("wake", where), label=f"wake ({where} CPU)",
                            est=0.05 + iters * 2 * WAKE_US * 1e-6,
                            bench=["wake", "--iters", str(iters), *extra]))
    return jobs


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__, 1))
    cols = ("vi", "tcp", *STRATEGIES)
    ours = bj.medians(store, "lat", cols, mode.fig5_sizes, F)
    rows = [[size_text(s), *[ours[c][s] for c in cols]] for s in mode.fig5_sizes]
    for hw in ("clan", "mvia"):
        p = paper.FIG5[hw]
        rows.append([f"4 (paper, {'cLAN' if hw == 'clan' else 'M-VIA'})",
                     *[p.get(c) for c in cols]])
    sec.add(f"One-way latency, microseconds ({paper.FIG5_SRC}).",
            table(["size", "vi", "tcp", "SINGLE", "HANDLER", "NOTIFY"], rows))

    s = mode.fig5_sizes[0]

    def gap(a, b):
        """Median per-round difference of two columns' latencies at size s."""
        return store.diff(bj.col_key("lat", a, s), F, bj.col_key("lat", b, s))
    absent = "" if store.results(("wake", "apart")) else " (this sovia bench has no wake mode)"
    est = [
        ("thread wake-up, two CPUs", "`sovia bench wake`: condition variable, two threads"
         + absent, store.median(("wake", "apart"), F), paper.TSYNC["dual_2.4.8"]),
        ("thread wake-up, one CPU", "`sovia bench wake --same-cpu`" + absent,
         store.median(("wake", "same"), F), paper.TSYNC["uni_2.4.8"]),
        ("HANDLER - SINGLE", "the handler thread's wake-up, as the papers read Fig. 5",
         gap("SOVIA_HANDLER", "SOVIA_SINGLE"),
         paper.TSYNC["handler_minus_single"]),
        ("NOTIFY - SINGLE", "the notify thread's hand-off",
         gap("SOVIA_NOTIFY", "SOVIA_SINGLE"), None),
        ("vi-notify - vi-block", "provider thread to application thread, condition variable",
         gap("vi-notify", "vi-block"),
         paper.TSYNC["uni_2.4.8"]),
        ("vi-block (no spin) - vi, two cores", "a futex sleep and a cross-core wake-up",
         store.diff(bj.key_lat("vi-block", s, variant=NOSPIN_APART), F, bj.key_lat("vi", s)),
         paper.TSYNC["dual_2.4.8"]),
        ("vi-block (no spin) - vi, one core", "a futex sleep and a same-core switch",
         store.diff(bj.key_lat("vi-block", s, variant=NOSPIN_ONE), F, bj.key_lat("vi", s)),
         paper.TSYNC["uni_2.4.8"]),
    ]
    sec.add(f"Tsync estimates at {size_text(s)} B, microseconds per message; paper: Tsync "
            f"measured directly ({paper.TSYNC_SRC}: 17.0 us uniprocessor, 31.0 dual, "
            f"Linux 2.2; 17.4 / 29.3 on 2.4.8).",
            table(["estimate", "what it is", "ours", "paper"], est))
    hs = est[2][2]
    # The direct probe when the bench has it, else the vipl notify hand-off.
    direct = est[0][2] if est[0][2] is not None else est[4][2]
    direct_how = "wake" if est[0][2] is not None else "vi-notify - vi-block"
    tcp_vi = store.ratio(bj.key_lat("tcp", s), F, bj.key_lat("vi", s))
    single_vi = store.ratio(bj.key_lat("sovia", s, "SOVIA_SINGLE"), F, bj.key_lat("vi", s))
    p = paper.FIG5["clan"]
    checks = [
        ("SINGLE faster than HANDLER (at every size)", "yes", "",
         all_hold(ours["SOVIA_SINGLE"][z] < ours["SOVIA_HANDLER"][z]
                  if ours["SOVIA_SINGLE"][z] and ours["SOVIA_HANDLER"][z] else None
                  for z in mode.fig5_sizes)),
        (f"HANDLER - SINGLE is one wake-up: 0.5 to 2 x ({direct_how})",
         f"{paper.TSYNC['handler_minus_single']} vs 17.0", f"{num(hs)} vs {num(direct)}",
         None if not hs or not direct else 0.5 <= hs / direct <= 2),
        (f"tcp / vi at {size_text(s)} B (native VI far ahead of TCP)",
         p["tcp"] / p["vi"], tcp_vi, None if tcp_vi is None else tcp_vi > 2),
        (f"SINGLE / vi at {size_text(s)} B", p["SOVIA_SINGLE"] / p["vi"], single_vi,
         None if single_vi is None else single_vi <= 1.5),
    ]
    sec.add(checks_table(checks))
    sec.data = {"latency_us": {c: {str(z): ours[c][z] for z in mode.fig5_sizes} for c in cols},
                "tsync_us": [{"estimate": e[0], "what": e[1], "ours": e[2], "paper": e[3]}
                             for e in est],
                "checks": [list(c) for c in checks]}
    sec.headline.append(f"wake-up cost (Tsync): HANDLER - SINGLE {num(hs)} us, thread "
                        f"wake-up ({direct_how}) {num(direct)} us, cross-core futex wake of "
                        f"a process {num(est[5][2])} us (paper: 16 us gap, Tsync 17.0 us)")
    sec.plot(plots.table_lines(out, "wakeup.png", "message handling: one-way latency",
                               "microseconds", ours))
    return sec
