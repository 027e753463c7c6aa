"""seed 002 on today's stack: where the time of one small (4-byte) message
goes, stage by stage, from the sender's call to the receiver's return
(`sovia bench anatomy`; the probe points: docs/ARCHITECTURE.md).

- vipl and sovia: probe points in the code (vipl_trace.h: one predicted
  branch each when tracing is off), rdtsc into rings the two processes
  share; each stage less one probe's measured cost, as seed 002 subtracted
  its 43 cycles.
- udp and tcp: kernel tracepoints on the x86-tsc trace clock (the TSC user
  code reads) over loopback, the receiver polling as seed 002's did, with
  rdtsc marks at the call and the return.

Each stage is the median over the messages of one run, then the median over
rounds (spread: (max - min) / median). Seed 002's hardware stages (DMA, the
wire, interrupts) have no counterpart on one host: shm's sender writes the
receiver's memory itself, and loopback's transmit is a function call that
raises a softirq. Table 3's categories put each of our stages where the
paper put its counterpart (below)."""
import statistics

from . import paper
from .jobs import Job, spread
from .md import Section, num, prose, table

NAME = "anatomy"
TITLE = "The anatomy of one message (seed 002 Tables 1-3)"
PATHS = (("vi", "vipl"), ("sovia", "sovia"), ("udp", "udp"), ("tcp", "tcp"))
# Round trips of each run (probes, kernel tracepoints), by mode.
ITERS = {"smoke": (2000, 300), "quick": (5000, 500), "full": (50000, 5000)}

# Table 3's category of each stage (by the start of its name).
CATEGORY = (
    ("user:", "user application"), ("returned to the caller", "user application"),
    ("post:", "user application"),  # VipPostSend (seed 002: t1, user application)
    ("system call entry", "OS overhead (send)"),
    ("softirq", "OS overhead (recv)"), ("system call return", "OS overhead (recv)"),
    ("completion written, peer detects", "DMA/transmit/receive"),
    ("loopback transmit", "DMA/transmit/receive"),
    ("provider:", "protocol processing (send)"), ("sovia: socket", "protocol processing (send)"),
    ("sovia: credit", "protocol processing (send)"),
    ("socket send", "protocol processing (send)"), ("socket, transport", "protocol processing (send)"),
    ("device queue", "protocol processing (send)"),
)
RECV = "protocol processing (recv)"

# What seed 002 separated that cannot be separated here, and why.
NOT_SEPARATED = [
    {"path": "udp/tcp", "stages": "NIC DMA/transmit, DMA receive, interrupt start and return "
     "(seed 002 t6-t9, t14)", "why": "loopback has no NIC and no interrupt: dev_queue_xmit "
     "calls loopback_xmit, which queues the skb on the CPU's backlog and raises NET_RX "
     "in the sender's context (the 'loopback transmit' and 'softirq' stages)"},
    {"path": "udp/tcp", "stages": "polling before getting the message (t15) apart from the "
     "copy to user (t16)", "why": "the recvfrom that found the message cannot be told from "
     "the tens of empty polls at its entry (a tracepoint filter sees only the entry's "
     "arguments), and skb_copy_datagram_iovec does not fire (UDP copies a linear skb with "
     "copy_to_iter): one stage from the queueing to sock_recv_length"},
    {"path": "udp/tcp", "stages": "IP receive apart from UDP/TCP receive (t12, t13)",
     "why": "no tracepoint between ip_rcv and the socket's queue on this kernel (kprobes and "
     "function tracing are not available here); netif_receive_skb to sk_data_ready is one "
     "stage"},
    {"path": "vipl/sovia", "stages": "doorbell, fast trap, interrupt (M-VIA t2, t7, t9)",
     "why": "shm has no NIC: the sender's VipPostSend reads the receiver's posted slot and "
     "writes the data and the completion itself, no system call on the path; the 'doorbell' "
     "mark is the hand-off from the vipl core to the provider"},
]


def _category(stage):
    for prefix, cat in CATEGORY:
        if stage.startswith(prefix):
            return cat
    return RECV


def plan(mode, ctx):
    if not ctx.bench_has("anatomy"):
        return []
    probes, kernel = ITERS.get(mode.name, ITERS["quick"])
    jobs = []
    for transport, path in PATHS:
        iters = kernel if transport in ("udp", "tcp") else probes
        jobs.append(Job(key=("anatomy", transport), label=f"anatomy {path}",
                        est=0.8 + iters * (60e-6 if transport in ("udp", "tcp") else 2e-6),
                        bench=["anatomy", "--transport", transport, "--size", "4",
                               "--iters", str(iters)]))
    return jobs


def _collect(store, transport):
    """(stage rows, summary) of a path: per-stage medians over rounds;
    None and the reason where it could not run."""
    runs = store.results(("anatomy", transport))
    if runs and all(r.get("unavailable") for r in runs):
        return None, runs[0].get("why") or "unavailable here"
    per, order, sums = {}, [], []
    for r in runs:
        if r.get("unavailable"):
            continue
        for o in r["rows"]:
            if o.get("summary"):
                sums.append(o)
            elif "stage" in o:
                if o["stage"] not in per:
                    order.append(o["stage"])
                per.setdefault(o["stage"], []).append(o["us"])
    if not order:
        return None, "no run completed (see the failed runs)"
    rows = [{"stage": s, "us": statistics.median(per[s]), "spread": spread(per[s]),
             "rounds": len(per[s]), "category": _category(s)} for s in order]

    def med(k):
        v = [s[k] for s in sums if k in s]
        return statistics.median(v) if v else None
    summary = {k: med(k) for k in ("stages_sum_us", "traced_one_way_us", "one_way_us",
                                   "mark_us", "ticks_per_us")}
    summary["complete_fraction"] = med("complete") / med("windows") if med("windows") else None
    summary["clock"] = sums[0].get("clock") if sums else None
    return rows, summary


def report(mode, store, out):
    sec = Section(NAME, TITLE, prose(__doc__))
    results, summaries, absent = [], {}, []
    for transport, path in PATHS:
        rows, summary = _collect(store, transport)
        if rows is None:
            absent.append({"path": path, "why": summary})
            continue
        summaries[path] = summary
        for r in rows:
            results.append(dict(path=path, **r))
        sec.add(f"**{path}** (4 bytes; us; in brackets the spread over rounds):",
                table(["stage", "us", "Table 3 category"],
                      [[r["stage"], f"{num(r['us'])}" + (
                          "" if r["spread"] is None else f" ({r['spread'] * 100:.0f} %)"),
                        r["category"]] for r in rows]))
    if summaries:
        sec.add("The stages against the latency they should add up to (us): the sum of the "
                "stages' medians; the ping-pong's one-way latency (median over batches) with "
                "tracing off and on; the share of messages that had every mark:",
                table(["path", "sum of stages", "one-way, tracing off", "one-way, tracing on",
                       "one probe", "messages complete"],
                      [[p, s["stages_sum_us"], s["one_way_us"], s["traced_one_way_us"],
                        s["mark_us"], None if s["complete_fraction"] is None
                        else f"{s['complete_fraction'] * 100:.0f} %"]
                       for p, s in summaries.items()]))
    cats = [c for c, *_ in paper.ANATOMY_CATEGORIES]
    ours = {p: {c: 0.0 for c in cats} for p in summaries}
    for r in results:
        ours[r["path"]][r["category"]] += r["us"]
        ours[r["path"]]["total"] += r["us"]
    paths = list(summaries)
    sec.add(f"Table 3's categories beside the paper's ({paper.ANATOMY_SRC}), us:",
            table(["category", "paper UDP", "paper M-VIA"] + paths,
                  [[c, u, v] + [ours[p][c] for p in paths]
                   for c, u, v in paper.ANATOMY_CATEGORIES]))
    sec.add("Seed 002's own stages, for reference (us): UDP " + "; ".join(
        f"{t} {what} {us}" for t, what, us in paper.ANATOMY_UDP) + ". M-VIA " + "; ".join(
        f"{t} {what} {us}" for t, what, us in paper.ANATOMY_MVIA) + ".")
    sec.add("Stages seed 002 separated that cannot be separated here, and why:\n\n" +
            "\n".join(f"- {n['path']}: {n['stages']}: {n['why']}." for n in NOT_SEPARATED) +
            "".join(f"\n- {a['path']}: not measured: {a['why']}." for a in absent))
    sec.data = [{"path": r["path"], "stage": r["stage"], "us": r["us"], "spread": r["spread"],
                 "rounds": r["rounds"], "category": r["category"]} for r in results]
    sec.extra = {"anatomy_summary": summaries, "anatomy_absent": absent,
                 "anatomy_not_separated": NOT_SEPARATED,
                 "anatomy_categories": {p: ours[p] for p in paths}}
    if summaries:
        sec.headline.append("anatomy of a 4-byte message (sum of stages / one-way, us): " +
                            ", ".join(f"{p} {num(s['stages_sum_us'])} / {num(s['one_way_us'])}"
                                      for p, s in summaries.items()) +
                            " (seed 002: UDP 36.0, M-VIA 23.1 over Fast Ethernet)")
    return sec
