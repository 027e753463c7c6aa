"""Running jobs: `sovia bench ... --json` (optionally under taskset and with
the CPU split sampled), or a job's own runner for external programs."""
import json
import os
import shutil
import socket
import subprocess

from . import cpusplit

# bench's exit code for a transport this machine cannot run (ucx missing).
EXIT_UNAVAILABLE = 3
# Variables of the caller that would change what is measured are not passed
# on; these few only say where things are.
KEEP_ENV = {"SOVIA_PRELOAD"}
OWN_ENV = {"SOVIA_PYTHON", "SOVIA_SOURCE_DIR", "SOVIA_APPS_DIR"}


class JobError(Exception):
    """A run failed; the message says why (the tail of its stderr)."""


class Context:
    """What every job needs: the sovia command, the mode, a scratch dir."""

    def __init__(self, sovia, mode, tmp, source_dir, log):
        self.sovia = sovia
        self.mode = mode
        self.tmp = tmp
        self.source_dir = source_dir
        self.log = log  # file: every command run and its stderr
        self._bench_words = None
        # Shown in REPORT.md: the caller's settings the runs did not get
        # (the report's own location variables are no settings).
        self.stripped = sorted(k for k in os.environ
                               if k.startswith("SOVIA_") and k not in KEEP_ENV | OWN_ENV
                               and not k.startswith("SOVIA_REPORT_"))

    def bench_has(self, word):
        """Whether `sovia bench --help` lists this mode or transport (so the
        report uses what a newer bench adds, and runs without it)."""
        if self._bench_words is None:
            try:
                p = subprocess.run([self.sovia, "bench", "--help"], capture_output=True,
                                   text=True, timeout=30)
                self._bench_words = {l.split()[0] for l in p.stdout.splitlines()
                                     if l.startswith("  ") and l.split()}
            except (OSError, subprocess.TimeoutExpired):
                self._bench_words = set()
        return word in self._bench_words

    def env(self, extra=None):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SOVIA_") or k in KEEP_ENV}
        env.update(extra or {})
        return env

    def note(self, argv, err):
        self.log.write("$ " + " ".join(argv) + "\n" + (err or ""))
        self.log.flush()


def tail(text, n=3):
    lines = [l for l in (text or "").strip().splitlines() if l.strip()]
    return " / ".join(lines[-n:]) if lines else "(no output)"


def have(prog):
    return shutil.which(prog) is not None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def json_objects(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_job(job, ctx):
    if job.run:
        return job.run(job, ctx)
    argv = [ctx.sovia, "bench", *job.bench, "--json"]
    if job.cpus:
        argv = ["taskset", "-c", job.cpus, *argv]
    timeout = max(60.0, job.est * 10)
    env = ctx.env(job.env)
    if job.cpu_split:
        rc, out, err, cpu = _run_sampled(argv, env, job, timeout)
    else:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        rc, out, err, cpu = p.returncode, p.stdout, p.stderr, None
    ctx.note(argv, err)
    objs = json_objects(out)
    if rc == EXIT_UNAVAILABLE or (objs and objs[-1].get("unavailable")):
        return {"unavailable": True, "why": tail(err, 1)}
    if rc != 0 or not objs:
        raise JobError(f"exit {rc}: {tail(err)}")
    if job.bench[0] in ("sweep", "anatomy"):
        return {"rows": objs}
    res = dict(objs[-1])
    if cpu:
        res["cpu"] = cpu
    return res


def _run_sampled(argv, env, job, timeout):
    """Runs a bw job and samples the driver (sender) and peer (receiver)
    CPU while they stream: from 15% to 85% of the streaming time, which
    starts a few milliseconds after the peer exists."""
    seconds = float(job.bench[job.bench.index("--seconds") + 1])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    cpu = None
    try:
        peer = cpusplit.wait_child(p.pid, 5.0)  # taskset execs: same pid
        if peer:
            got, wall = cpusplit.sample([p.pid, peer], 0.05 + 0.15 * seconds, 0.7 * seconds)
            if got[p.pid] and got[peer]:
                cpu = {"sender": got[p.pid], "receiver": got[peer], "window_s": wall}
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise JobError(f"timed out after {timeout:.0f} s: {tail(err)}")
    return p.returncode, out, err, cpu
