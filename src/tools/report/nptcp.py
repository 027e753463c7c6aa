"""NetPIPE's NPtcp (Debian netpipe-tcp, unmodified) as a report job: a
receiver and a transmitter on 127.0.0.1, both plain (kernel TCP) or both
under `sovia run` (carried by sovia, checked with SOVIA_STAT_LOG). Each of
the mode's segments is one NPtcp run with a fixed repeat count (-n), so the
run time is bounded; NPtcp's default perturbation (c - 3, c, c + 3) is
kept, as in seed 001. Under sovia run (polling) the two processes are pinned
to different cores; over kernel TCP (blocking) the scheduler places them."""
import json
import os
import subprocess
import time

from .runner import JobError, free_port, tail

SERVER_GRACE_S = 15  # Debian's receiver may linger (it ends with exit code 3)


def _start(ctx, argv, under, cpu, env, out):
    # Under sovia run NPtcp polls: pinned apart, like the bench's polling
    # transports. Over kernel TCP it blocks: left to the scheduler, like
    # the bench's tcp (pinned apart, each message would pay a cross-core
    # wake-up, tens of microseconds on some virtual machines).
    cmd = ["taskset", "-c", str(cpu), ctx.sovia, "run", "--profile", "latency", "--"] \
        if under else []
    cmd += argv
    ctx.note(cmd, "")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)


def _segment(ctx, under, lower, upper, repeats, statlog):
    port = free_port()
    common = ["-P", str(port), "-n", str(repeats), "-l", str(lower), "-u", str(upper)]
    outfile = os.path.join(ctx.tmp, f"np-{port}.out")
    env = ctx.env({"SOVIA_STAT_LOG": statlog} if under else None)
    budget = 120.0
    with open(os.path.join(ctx.tmp, f"np-{port}.log"), "w+") as log:
        server = _start(ctx, ["NPtcp", *common], under, 1, env, log)
        try:
            time.sleep(0.3)  # the receiver must listen first (NPtcp does not retry)
            client = _start(ctx, ["NPtcp", "-h", "127.0.0.1", *common, "-o", outfile],
                            under, 0, env, log)
            try:
                rc = client.wait(timeout=budget)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait()
                raise JobError(f"NPtcp timed out after {budget:.0f} s")
            try:
                server.wait(timeout=SERVER_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        log.seek(0)
        text = log.read()
    if rc != 0 or not os.path.exists(outfile):
        raise JobError(f"NPtcp exit {rc}: {tail(text)}")
    rows = []
    with open(outfile) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                rows.append({"size": int(parts[0]), "mbps": float(parts[1]),
                             "one_way_us": float(parts[2]) * 1e6})
    return rows


def _carried(statlog):
    """Connections sovia carried, summed over the exit records (None: no log)."""
    if not os.path.exists(statlog):
        return None
    n = 0
    with open(statlog) as f:
        for line in f:
            try:
                n += int(json.loads(line).get("carried", 0))
            except (ValueError, AttributeError):
                pass
    return n


def run(under):
    """The job runner for NPtcp plain (under=False) or under sovia run."""
    def runner(job, ctx):
        statlog = os.path.join(ctx.tmp, f"stat-{time.monotonic_ns()}.log")
        rows = {}
        for lower, upper, repeats in ctx.mode.nptcp:
            for r in _segment(ctx, under, lower, upper, repeats, statlog):
                rows[r["size"]] = r
        res = {"rows": [rows[s] for s in sorted(rows)]}
        if under:
            res["carried"] = _carried(statlog)
            if not res["carried"]:
                raise JobError("NPtcp ran under sovia run but sovia carried no connection")
        return res
    return runner
