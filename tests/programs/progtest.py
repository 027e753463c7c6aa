"""Shared helpers of the program tests: unmodified programs run under
`sovia run`, with SOVIA_STAT_LOG proving which connections sovia carried.

Every test script is run as

    python3 test_X.py --sovia /path/to/sovia [--bindir DIR] [unittest args]

Each scenario starts a server and a client, both under `sovia run` or only
one of them, and checks the program's own success output and the exit
records (docs/ARCHITECTURE.md, Transparent mode). Everything a test creates
lives in one temporary directory under /tmp, removed at the end; every
process is bounded by a timeout and killed in a finally block.

Measured numbers are printed to stderr (`ctest -V` shows them); tests never
check performance.
"""
import argparse
import ctypes
import errno
import json
import os
import resource
import shutil
import signal
import random
import socket
import subprocess
import sys
import tempfile
import time
import unittest

SOVIA = None   # the sovia command (from --sovia)
BINDIR = None  # where the helper programs were built (from --bindir)
HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77      # CTest SKIP_RETURN_CODE: a program the test needs is missing

# Which side runs under sovia in each scenario.
BOTH, CLIENT_ONLY, SERVER_ONLY = "both", "client-only", "server-only"
SCENARIOS = (BOTH, CLIENT_ONLY, SERVER_ONLY)


def main(required_programs=()):
    """Parse our options, skip (77) when a needed program is missing, run
    the unittest cases of the calling module."""
    global SOVIA, BINDIR
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--sovia", required=True)
    ap.add_argument("--bindir", default=None)
    ns, rest = ap.parse_known_args()
    SOVIA = os.path.abspath(ns.sovia)
    BINDIR = os.path.abspath(ns.bindir) if ns.bindir else None
    if not os.access(SOVIA, os.X_OK):
        print(f"sovia command not found: {SOVIA}", file=sys.stderr)
        sys.exit(1)
    missing = [p for p in required_programs if not shutil.which(p)]
    if missing:
        print(f"SKIP: not installed: {' '.join(missing)}", file=sys.stderr)
        sys.exit(SKIP)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


def report(msg):
    """A measured number or a note, shown by `ctest -V`."""
    print(f"    [measure] {msg}", file=sys.stderr, flush=True)


def free_port():
    """A TCP port nobody uses now, below the ephemeral range: a port the
    kernel hands out for bind(0) can still be held by a connection in
    TIME_WAIT of an earlier case, and a server that binds it without
    SO_REUSEADDR (NPtcp) then fails with EADDRINUSE. Checked by binding
    the wildcard without SO_REUSEADDR, v4 and v6."""
    lo = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = min(int(f.read().split()[0]), 65536)
    except (OSError, ValueError, IndexError):
        hi = 32768
    if hi - lo < 1000:
        lo, hi = 1024, hi
    for _ in range(200):
        port = random.randrange(lo, hi)
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("0.0.0.0", port))
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s.bind(("::", port))
            return port
        except OSError as e:
            if e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue  # taken (no IPv6 here is fine: the v4 bind held)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port):
    """Is a TCP socket listening on `port` (any address, v4 or v6)? Reads
    /proc/net/tcp{,6}, so it opens no connection the server would count.
    Only their first lines: the kernel lists the listening sockets before
    the others, and with 100,000 sockets in TIME_WAIT (other work on the
    host) reading the whole file took 1-3 s per call at load 16, so a
    server that took a few seconds to start under load was seen too late
    (compat: 'not listening after 15 s' 4 times in 15 soak rounds, the
    servers in their event loops, a Go one among them)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if len(fields) <= 3 or fields[3] != "0A":
                        break
                    if int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


_LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent=os.getpid()):
    """In the child before exec: killed when the test process goes, however
    it goes (ctest's timeout kills it alone; busy loops and servers it left
    ran on and loaded the machine)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def busy_load(tc, n=None):
    """n busy processes (default: one per CPU) for the rest of the case, so
    that the programs run with more busy processes than CPUs (issue 16);
    killed with the case's other processes."""
    n = n or os.cpu_count() or 2
    for k in range(n):
        tc.start(f"busy{k}", [sys.executable, "-c", "while True: pass"], False)
    report(f"{n} busy processes beside the programs ({os.cpu_count()} CPUs)")


def nofile(want=4096):
    """Raises this process's soft RLIMIT_NOFILE to `want` (at most the hard
    limit), for the programs it starts; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want and (hard == resource.RLIM_INFINITY or soft < hard):
        soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


def carries_all(conns, limit):
    """Can sovia carry `conns` connections of a process with this soft
    RLIMIT_NOFILE? It keeps a quarter of the limit free and spends up to 10
    descriptors per connection (docs/SOCKETS.md); the program has its own."""
    return conns * 11 + 64 <= limit * 3 // 4


def stack_dump(pid):
    """Every thread's stack of a stuck process (for the failure message)."""
    if not shutil.which("gdb"):
        return "(gdb not installed: no stack)"
    try:
        p = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=30)
        return "\n".join(l for l in p.stdout.splitlines()
                         if l.startswith(("#", "Thread ")))
    except (subprocess.TimeoutExpired, OSError) as e:
        return f"(gdb failed: {e})"


class Proc:
    """One program, maybe under `sovia run`, output to files in the test's
    temporary directory. Under sovia run the program keeps the pid (the
    command execs it), so its exit record is found by pid."""

    def __init__(self, tc, name, argv, under_sovia, profile=None, env=None):
        self.tc, self.name, self.under = tc, name, under_sovia
        self.out_path = os.path.join(tc.tmp, f"{name}.out")
        self.err_path = os.path.join(tc.tmp, f"{name}.err")
        cmd = list(argv)
        if under_sovia:
            cmd = [SOVIA, "run", *(["--profile", profile] if profile else []), "--", *cmd]
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        e["SOVIA_STAT_LOG"] = tc.statlog
        e.update(env or {})
        self.cmd = cmd
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                      env=e, cwd=tc.tmp, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        self.pid = self.p.pid
        self.rc = None
        self.stack = None
        tc.procs.append(self)

    def wait(self, timeout):
        """Exit code, or None after `timeout` seconds (the stacks are kept
        for the failure message and the process is killed)."""
        try:
            self.rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stack = stack_dump(self.pid)
            self.kill()
            self.rc = None
        return self.rc

    def stop(self, sig=signal.SIGINT, timeout=10):
        """Ask a server to end (signal), wait, kill if it will not."""
        if self.p.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
        return self.wait(timeout)

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def alive(self):
        return self.p.poll() is None

    def out(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def err(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def describe(self):
        tail = lambda s: "\n".join(s.splitlines()[-25:])
        st = f"\n--- stacks at timeout:\n{self.stack}" if self.stack else ""
        return (f"\n=== {self.name} (pid {self.pid}, rc {self.rc}"
                f"{', under sovia' if self.under else ''}): {' '.join(self.cmd)}\n"
                f"--- stdout (tail):\n{tail(self.out())}\n--- stderr (tail):\n{tail(self.err())}"
                f"{st}")


class ProgramCase(unittest.TestCase):
    """A test case with a temporary directory, a stat log and processes
    that are always killed at the end."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="progtest-", dir="/tmp")
        self.statlog = os.path.join(self.tmp, "stat.jsonl")
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- processes ----------------------------------------------------------

    def start(self, name, argv, under_sovia, profile=None, env=None):
        return Proc(self, name, argv, under_sovia, profile, env)

    def start_server(self, name, argv, under_sovia, port, profile=None, env=None, timeout=15):
        """Start a server and wait until it listens on `port`."""
        p = self.start(name, argv, under_sovia, profile, env)
        deadline = time.monotonic() + timeout
        while not listening(port):
            if not p.alive():
                p.wait(1)
                self.fail(f"{name} exited before listening on {port}" + self.context())
            if time.monotonic() > deadline:
                p.stack = stack_dump(p.pid)
                self.fail(f"{name} not listening on {port} after {timeout} s" + self.context())
            time.sleep(0.02)
        return p

    def context(self):
        """Every process's command, exit code and output tail, and the log."""
        return "".join(p.describe() for p in self.procs) + \
            f"\n=== SOVIA_STAT_LOG:\n{self.stat_text()}"

    def assert_exit(self, proc, timeout, codes=(0,)):
        rc = proc.wait(timeout)
        if rc is None:
            self.fail(f"{proc.name} still running after {timeout} s (killed)" + self.context())
        self.assertIn(rc, codes, f"{proc.name} exit code {rc}" + self.context())
        return rc

    # ---- SOVIA_STAT_LOG -----------------------------------------------------

    def stat_text(self):
        try:
            with open(self.statlog) as f:
                return f.read()
        except FileNotFoundError:
            return "(no stat log written)"

    def records(self):
        """The exit records, by pid."""
        recs = {}
        if os.path.exists(self.statlog):
            with open(self.statlog) as f:
                for line in f:
                    if line.strip():
                        r = json.loads(line)
                        recs[r["pid"]] = r
        return recs

    def record_of(self, proc):
        return self.records().get(proc.pid)

    def check_carried(self, proc, sent=True, received=True):
        """proc ran under sovia and its traffic went over sovia."""
        r = self.record_of(proc)
        self.assertIsNotNone(r, f"{proc.name}: no SOVIA_STAT_LOG record for pid {proc.pid}"
                             + self.context())
        self.assertGreaterEqual(r["carried"], 1, f"{proc.name}: nothing carried: {r}"
                                + self.context())
        if sent:
            self.assertGreater(r["bytes_sent"], 0, f"{proc.name}: no bytes sent over sovia: {r}")
        if received:
            self.assertGreater(r["bytes_received"], 0,
                               f"{proc.name}: no bytes received over sovia: {r}")
        return r

    def check_all_carried(self, proc, conns, limit):
        """proc made or took `conns` connections, all carried where its soft
        RLIMIT_NOFILE `limit` has room for them, else some (the others on
        kernel TCP: sovia steps aside, docs/SOCKETS.md)."""
        r = self.check_carried(proc)
        self.assertEqual((r["carried"] + r["kernel"], r["fell_back"]), (conns, 0),
                         f"{proc.name}: {r}" + self.context())
        if carries_all(conns, limit):
            self.assertEqual(r["carried"], conns, f"{proc.name}: {r}" + self.context())
        else:
            report(f"{proc.name}: {r['carried']} of {conns} connections carried "
                   f"(RLIMIT_NOFILE {limit})")
        return r

    def check_kernel(self, proc):
        """proc ran under sovia, but its connections stayed kernel TCP."""
        r = self.record_of(proc)
        self.assertIsNotNone(r, f"{proc.name}: no SOVIA_STAT_LOG record for pid {proc.pid}"
                             + self.context())
        self.assertEqual(r["carried"], 0, f"{proc.name}: carried by sovia: {r}"
                         + self.context())
        self.assertGreaterEqual(r["kernel"] + r["fell_back"], 1,
                                f"{proc.name}: no kernel connection counted: {r}"
                                + self.context())
        return r

    def check_no_record(self, proc):
        """proc did not run under sovia: no record of it."""
        self.assertIsNone(self.record_of(proc), f"{proc.name} (not under sovia) has a record"
                          + self.context())

    def check_records(self, scenario, server, client, sent=(True, True), received=(True, True)):
        """The records each scenario must leave; sent/received: whether the
        (client, server) moved bytes that way. Each check is a subtest, so
        one failure does not hide the others."""
        self.check_record(scenario, client, scenario != SERVER_ONLY, sent[0], received[0])
        self.check_record(scenario, server, scenario != CLIENT_ONLY, sent[1], received[1])

    def check_record(self, scenario, proc, under, sent=True, received=True):
        """The record one process (under sovia or not) must leave."""
        with self.subTest(record=proc.name, scenario=scenario):
            if not under:
                self.check_no_record(proc)
            elif scenario == BOTH:
                self.check_carried(proc, sent, received)
            else:
                self.check_kernel(proc)

    def served_records(self, exe, *procs):
        """The records of the processes a server forked (workers, a child
        per connection): those of `exe` other than procs'."""
        known = {p.pid for p in procs}
        return [r for pid, r in self.records().items()
                if pid not in known and r["exe"].endswith(exe)]

    def check_served(self, scenario, name, served, conns, bytes_sent, server=None):
        """A server's forked processes (served_records) carried `conns`
        connections and sent at least `bytes_sent` in them, with both ends
        under sovia; with the server only, kept them on kernel TCP; with
        the client only, left no record. A kernel connection is counted by
        the process that accepted it: a child forked after the accept
        (`server` accepts) counts none of its own and may write no record."""
        with self.subTest(record=name, scenario=scenario):
            if scenario == CLIENT_ONLY:
                self.assertEqual(served, [], self.context())
            elif scenario == BOTH:
                self.assertEqual(sum(r["carried"] for r in served), conns,
                                 f"records of {name}: {served}" + self.context())
                self.assertGreaterEqual(sum(r["bytes_sent"] for r in served), bytes_sent, served)
            else:
                self.assertEqual(sum(r["carried"] for r in served), 0, f"{served}")
                counted = served + ([self.records().get(server.pid)] if server else [])
                counted = [r for r in counted if r]
                self.assertEqual(sum(r["carried"] for r in counted), 0, f"{counted}")
                # An accepting parent that leaves by _exit (rsync's daemon)
                # writes no record: then nobody counted the kernel ones.
                if counted or not server:
                    self.assertGreaterEqual(sum(r["kernel"] for r in counted), conns,
                                            f"records of {name}: {counted}" + self.context())


class ScenarioCase(ProgramCase):
    """A program test whose run_scenario(scenario) is one case in each
    scenario."""

    def run_scenario(self, scenario):
        raise NotImplementedError

    def test_both_under_sovia(self):
        self.run_scenario(BOTH)

    def test_client_only_under_sovia(self):
        self.run_scenario(CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.run_scenario(SERVER_ONLY)


def under(scenario):
    """(server under sovia, client under sovia) for a scenario."""
    return scenario != CLIENT_ONLY, scenario != SERVER_ONLY


def python_echo(tc, script, scenario, profile=None, nconn=3, size=1 << 20, rounds=20):
    """Runs one of the Python echo programs (server and client) in a
    scenario (and `sovia run --profile`) and checks their summaries and
    records; returns the client's summary line."""
    port = free_port()
    s_under, c_under = under(scenario)
    path = os.path.join(HERE, script)
    server = tc.start_server(f"{script}-server",
                             [sys.executable, path, "server", str(port), str(nconn)],
                             s_under, port, profile)
    client = tc.start(f"{script}-client",
                      [sys.executable, path, "client", str(port), str(nconn), str(size),
                       str(rounds)], c_under, profile)
    tc.assert_exit(client, 70)
    tc.assert_exit(server, 15)
    summary = client.out().strip()
    tc.assertTrue(summary.startswith(f"ok {nconn} connections, {nconn * size} bytes"),
                  summary + tc.context())
    served = f"served {nconn} connections, {nconn * size + rounds * 64} bytes"
    tc.assertEqual(server.out().strip(), served, tc.context())
    report(f"{script} {scenario}{' --profile ' + profile if profile else ''}: {summary}")
    tc.check_records(scenario, server, client)
    # A lone small write must go out at once, as over TCP (where Nagle holds
    # a segment only while an earlier one is unacknowledged): kernel TCP
    # does these round trips in milliseconds. The bound only catches writes
    # held back for a timer (tens of milliseconds each).
    seconds = float(summary.split(" round trips in ")[1].split()[0])
    with tc.subTest(check="small writes not held back", scenario=scenario):
        tc.assertLess(seconds, 0.05 * rounds,
                      f"{rounds} round trips of 64 bytes took {seconds} s "
                      f"({seconds / rounds * 1000:.1f} ms each)")
    return summary
