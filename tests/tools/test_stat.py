#!/usr/bin/env python3
"""Integration test of `sovia stat`: two Python programs under `sovia run`
hold a connection (the client sent 1000 bytes); `sovia stat` lists both
ends with the bytes in the right direction, and nothing once they exit.
Another user (created here when running as root) sees none of it, and the
stat server sends it nothing.

usage: test_stat.py /path/to/sovia
"""
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import unittest

SOVIA = None  # set from argv in main
TIMEOUT = 60

SERVER = r"""
import socket, sys
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
n = 0
while n < 1000:
    d = c.recv(4096)
    if not d:
        break
    n += len(d)
print("got", n, flush=True)
sys.stdin.read()  # hold the connection until the test closes stdin
"""

CLIENT = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.sendall(b"x" * 1000)
print("sent", flush=True)
sys.stdin.read()
"""

HEADER = ["PID", "COMMAND", "FD", "LOCAL", "PEER", "STATE", "TX-BYTES", "RX-BYTES", "TX-PKTS",
          "RX-PKTS", "WINDOW", "WAIT", "PROVIDER"]
KEYS = {"pid", "command", "fd", "local", "peer", "state", "tx_bytes", "rx_bytes", "tx_packets",
        "rx_packets", "window", "credits", "wait", "handling", "transparent",
        "provider"}


def run(*args, **kw):
    """Run sovia; returns (exit code, stdout, stderr)."""
    p = subprocess.run([SOVIA, *args], capture_output=True, text=True, timeout=TIMEOUT, **kw)
    return p.returncode, p.stdout, p.stderr


def stat_json(**kw):
    rc, out, err = run("stat", "--json", **kw)
    if rc != 0:
        raise AssertionError(f"sovia stat --json: exit {rc}: {err}")
    return json.loads(out)


def comm(pid):
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


class Pair:
    """A server and a client under `sovia run`, connected, 1000 bytes sent."""

    def __init__(self):
        self.procs = []
        try:
            self.server = self._start(SERVER)
            self.port = int(self._line(self.server))
            self.client = self._start(CLIENT, str(self.port))
            if self._line(self.client) != "sent":
                raise AssertionError("client did not send")
            if self._line(self.server) != "got 1000":
                raise AssertionError("server did not receive 1000 bytes")
        except BaseException:
            self.close()
            raise

    def _start(self, script, *args):
        p = subprocess.Popen([SOVIA, "run", "--", sys.executable, "-c", script, *args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    @staticmethod
    def _line(p):
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"pid {p.pid} exited early (status {p.wait()})")
        return line.strip()

    def pids(self):
        return {p.pid for p in self.procs}

    def close(self):
        for p in self.procs:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()


def entries_of(pids, **kw):
    return [e for e in stat_json(**kw) if e["pid"] in pids]


def wait_for_entries(pair, want):
    """Polls until both ends are listed with their bytes counted."""
    deadline = time.monotonic() + 10
    while True:
        got = entries_of(pair.pids())
        if len(got) >= want and all(e["tx_bytes"] + e["rx_bytes"] == 1000 for e in got):
            return got
        if time.monotonic() > deadline:
            return got
        time.sleep(0.1)


class Help(unittest.TestCase):
    def test_help(self):
        rc, out, _ = run("stat", "--help")
        self.assertEqual(rc, 0)
        self.assertIn("usage: sovia stat", out)
        self.assertIn("--json", out)

    def test_listed_in_top_help(self):
        rc, out, _ = run("--help")
        self.assertEqual(rc, 0)
        self.assertIn("stat", out)

    def test_usage_errors(self):
        for args in (["--bogus"], ["extra"]):
            with self.subTest(args=args):
                rc, out, err = run("stat", *args)
                self.assertEqual(rc, 2)
                self.assertEqual(out, "")
                self.assertIn("sovia stat", err)

    def test_header(self):
        rc, out, _ = run("stat")
        self.assertEqual(rc, 0)
        self.assertEqual(out.splitlines()[0].split(), HEADER)


class Stat(unittest.TestCase):
    def test_answers_with_no_socket_left(self):
        # A program that closed every socket it had still answers, with
        # nothing (its stat server runs on; UBSan: qsort was given NULL).
        pair = Pair()
        try:
            closer = pair._start(SERVER.replace(
                "sys.stdin.read()", "c.close(); l.close(); print('closed', flush=True)\n"
                "sys.stdin.read()"))
            port = int(pair._line(closer))
            cli = pair._start(CLIENT, str(port))
            self.assertEqual(pair._line(cli), "sent")
            self.assertEqual(pair._line(closer), "got 1000")
            self.assertEqual(pair._line(closer), "closed")
            self.assertEqual(entries_of({closer.pid}), [])
            self.assertIsNone(closer.poll(), "the program died answering")
        finally:
            pair.close()
        self.assertEqual(closer.returncode, 0)

    def test_lists_both_ends_then_nothing(self):
        pair = Pair()
        try:
            got = wait_for_entries(pair, 2)
            self.assertEqual(len(got), 2, got)
            by_pid = {e["pid"]: e for e in got}
            srv, cli = by_pid[pair.server.pid], by_pid[pair.client.pid]
            for e in (srv, cli):
                self.assertEqual(set(e), KEYS)
                self.assertEqual(e["state"], "established")
                self.assertEqual(e["command"], comm(e["pid"]))
                self.assertTrue(e["transparent"])
                self.assertIsInstance(e["fd"], int)
                self.assertGreater(e["window"], 0)
                self.assertLessEqual(e["credits"], e["window"])
                self.assertIn(e["wait"], ("adaptive", "poll", "block"))
                self.assertIn(e["handling"], ("single", "handler", "notify"))
                self.assertEqual(e["provider"], "shm")  # the provider that carries it
            self.assertEqual((cli["tx_bytes"], cli["rx_bytes"]), (1000, 0))
            self.assertEqual((srv["tx_bytes"], srv["rx_bytes"]), (0, 1000))
            self.assertGreaterEqual(cli["tx_packets"], 1)
            self.assertEqual(cli["rx_packets"], 0)
            self.assertGreaterEqual(srv["rx_packets"], 1)
            self.assertEqual(srv["tx_packets"], 0)
            self.assertEqual(srv["local"], f"127.0.0.1:{pair.port}")
            self.assertEqual(cli["peer"], f"127.0.0.1:{pair.port}")
            self.assertEqual(srv["peer"], cli["local"])

            # The table shows the same connections.
            rc, out, _ = run("stat")
            self.assertEqual(rc, 0)
            lines = out.splitlines()
            self.assertEqual(lines[0].split(), HEADER)
            rows = {int(l.split()[0]): l.split() for l in lines[1:]}
            for e in (srv, cli):
                row = rows[e["pid"]]
                self.assertEqual(row[1], e["command"])
                self.assertEqual(row[3:5], [e["local"], e["peer"]])
                self.assertEqual(row[5], "established")
                self.assertEqual(row[6:8], [str(e["tx_bytes"]), str(e["rx_bytes"])])
                self.assertEqual(row[-2:], [e["wait"], "shm"])
        finally:
            pair.close()
        self.assertEqual(entries_of(pair.pids()), [])
        rc, out, _ = run("stat")
        self.assertEqual(rc, 0)
        self.assertFalse([l for l in out.splitlines()[1:] if int(l.split()[0]) in pair.pids()])


class OtherUser(unittest.TestCase):
    """Another user sees none of our connections."""

    user = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root to create a second user")
        if not shutil.which("useradd") or not shutil.which("userdel"):
            raise unittest.SkipTest("useradd/userdel not found")
        name = f"sovstat{os.getpid()}"
        p = subprocess.run(["useradd", "-M", "-N", "-s", "/bin/false", name],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise unittest.SkipTest(f"useradd failed: {p.stderr.strip()}")
        cls.user = pwd.getpwnam(name)
        try:
            cls.find_programs()
        except BaseException:
            cls.tearDownClass()  # not called when setUpClass fails
            raise

    @classmethod
    def runs_as_user(cls, *argv):
        try:
            return subprocess.run(argv, capture_output=True, timeout=TIMEOUT,
                                  **cls.as_user()).returncode == 0
        except OSError:
            return False

    @classmethod
    def find_programs(cls):
        if not cls.runs_as_user(SOVIA, "--version"):
            raise unittest.SkipTest(f"the other user cannot run {SOVIA}")
        # A Python the other user can run, for probing the server directly.
        cls.python = None
        for py in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
            if py and cls.runs_as_user(py, "-c", "pass"):
                cls.python = py
                break

    @classmethod
    def tearDownClass(cls):
        if cls.user:
            subprocess.run(["userdel", cls.user.pw_name], capture_output=True)
            cls.user = None

    @classmethod
    def as_user(cls):
        return {"user": cls.user.pw_uid, "group": cls.user.pw_gid, "extra_groups": [],
                "cwd": "/"}

    def test_other_user_sees_nothing(self):
        pair = Pair()
        try:
            self.assertEqual(len(wait_for_entries(pair, 2)), 2)  # we see them
            others = stat_json(**self.as_user())
            self.assertEqual([e for e in others if e["pid"] in pair.pids()], [])
            rc, out, _ = run("stat", **self.as_user())
            self.assertEqual(rc, 0)
            self.assertEqual(out.splitlines()[0].split(), HEADER)
            self.assertFalse([l for l in out.splitlines()[1:]
                              if int(l.split()[0]) in pair.pids()])
            # Asking our server directly gets not a byte.
            probe = ("import socket, sys\n"
                     "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                     "s.settimeout(10)\n"
                     "s.connect(\"\\0\" + sys.argv[1])\n"
                     "n = 0\n"
                     "try:\n"
                     "    while True:\n"
                     "        d = s.recv(65536)\n"
                     "        if not d: break\n"
                     "        n += len(d)\n"
                     "except ConnectionResetError:\n"
                     "    pass\n"
                     "print(n)\n")
            if not self.python:
                self.skipTest("no Python the other user can run")
            name = f"sovia-stat.{os.geteuid()}.{pair.server.pid}"
            p = subprocess.run([self.python, "-c", probe, name], capture_output=True,
                               text=True, timeout=TIMEOUT, **self.as_user())
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), "0")
        finally:
            pair.close()


def main():
    global SOVIA
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    SOVIA = os.path.abspath(sys.argv.pop(1))
    prog = unittest.main(exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
