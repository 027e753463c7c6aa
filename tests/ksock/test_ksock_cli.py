#!/usr/bin/env python3
"""`sovia ksock` and the ksovia bench transport end to end:
- a program under `sovia ksock --stats` sends 4 MiB each way over loopback TCP
  (a SHA-256 of each direction checked): both sockets collected, every byte
  redirected, none left to TCP; its exit status passed on; its cgroup gone;
- SIGTERM to sovia ksock reaches the program, and the cgroup goes;
- sovia ksock killed by SIGKILL: the cgroup goes once the program ends;
- as another user without CAP_BPF: --check exits 3 with the reason, and
  `sovia bench lat --transport ksovia --json` says unavailable (exit 3);
- `sovia bench lat/bw --transport ksovia`: results, nothing left behind.
Skips (77) where `sovia ksock --check` says KSOVIA cannot run here.

usage: test_ksock_cli.py /path/to/sovia
"""
import json
import os
import signal
import subprocess
import sys
import time
import unittest

SOVIA = None
TIMEOUT = 60

ECHO = r"""
import hashlib, os, socket, sys, threading
N = 4 << 20
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
def stream(seed):
    return bytes((i * 2654435761 >> 13 ^ seed) & 255 for i in range(N))
want = {c: stream(1), s: stream(2)}
def send(sock):
    data, off, step = want[sock], 0, 1
    while off < N:
        step = step * 3 % 65521 + 1
        sock.sendall(data[off:off + step]); off += step
def recv(sock, peer, out):
    h, n = hashlib.sha256(), 0
    while n < N:
        b = sock.recv(65536)
        if not b: break
        h.update(b); n += len(b)
    out.append(h.hexdigest() == hashlib.sha256(want[peer]).hexdigest())
res = []
ts = [threading.Thread(target=send, args=(c,)), threading.Thread(target=send, args=(s,)),
      threading.Thread(target=recv, args=(c, s, res)), threading.Thread(target=recv, args=(s, c, res))]
[t.start() for t in ts]; [t.join() for t in ts]
print("checksums", res)
sys.exit(0 if res == [True, True] else 1)
"""


def cg2_root():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            if post.split()[0] == "cgroup2":
                return pre.split()[4]
    return None


def our_cgroups(pid):
    """sovia-ksock.<pid>.* anywhere under the cgroup v2 mount."""
    found = []
    for d, subs, _ in os.walk(cg2_root()):
        found += [os.path.join(d, s) for s in subs if s.startswith(f"sovia-ksock.{pid}.")]
    return found


def wait_gone(pid, seconds=5):
    end = time.monotonic() + seconds
    while our_cgroups(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return our_cgroups(pid)


def nobody():
    """A setpriv prefix that runs as nobody, if the tool is reachable as nobody."""
    pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           "--inh-caps=-all", "--"]
    try:
        p = subprocess.run(pre + [SOVIA, "--version"], capture_output=True, timeout=TIMEOUT)
    except OSError:
        return None
    return pre if p.returncode == 0 else None


class Ksock(unittest.TestCase):
    def test_program_redirected(self):
        p = subprocess.Popen([SOVIA, "ksock", "--stats", "--", sys.executable, "-c", ECHO],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=TIMEOUT * 2)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("checksums [True, True]", out)
        self.assertIn("2 sockets collected (0 refused)", err)
        self.assertIn(f"({2 * (4 << 20)} bytes), 0 left to TCP", err)
        self.assertEqual(wait_gone(p.pid), [])

    def test_exit_status(self):
        p = subprocess.run([SOVIA, "ksock", "--", "sh", "-c", "exit 7"], timeout=TIMEOUT)
        self.assertEqual(p.returncode, 7)
        p = subprocess.run([SOVIA, "ksock", "--", "/nonexistent/program"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 127, p.stderr)

    def test_sigterm_reaches_program(self):
        p = subprocess.Popen([SOVIA, "ksock", "--", "sh", "-c",
                              "trap 'echo got-term; exit 3' TERM; echo up; "
                              "while :; do sleep 0.05; done"],
                             stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "up")
        self.assertTrue(our_cgroups(p.pid))
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=TIMEOUT)
        self.assertIn("got-term", out)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(wait_gone(p.pid), [])

    def test_sigkill_of_launcher(self):
        p = subprocess.Popen([SOVIA, "ksock", "--", "sh", "-c", "echo $$; exec sleep 30"],
                             stdout=subprocess.PIPE, text=True)
        child = int(p.stdout.readline())
        p.stdout.close()
        p.kill()
        p.wait(timeout=TIMEOUT)
        self.assertTrue(our_cgroups(p.pid), "removed while the program still runs in it")
        os.kill(child, signal.SIGKILL)
        self.assertEqual(wait_gone(p.pid), [])

    def test_refused_without_privilege(self):
        pre = nobody()
        if pre is None:
            self.skipTest("the tool cannot be run as nobody here")
        p = subprocess.run(pre + [SOVIA, "ksock", "--check"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("sovia ksock: unavailable: ", p.stderr)
        self.assertIn("CAP_BPF", p.stderr)
        p = subprocess.run(pre + [SOVIA, "bench", "lat", "--transport", "ksovia", "--size", "4",
                                  "--json"], capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertEqual(json.loads(p.stdout.splitlines()[-1]),
                         {"transport": "ksovia", "unavailable": True})
        self.assertIn("ksovia: unavailable (", p.stderr)

    def test_bench(self):
        for args in (["lat", "--size", "4", "--iters", "2000"],
                     ["bw", "--size", "64K", "--seconds", "0.2"]):
            p = subprocess.Popen([SOVIA, "bench", *args, "--transport", "ksovia", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = p.communicate(timeout=TIMEOUT)
            self.assertEqual(p.returncode, 0, err)
            r = json.loads(out.splitlines()[-1])
            self.assertEqual(r["transport"], "ksovia")
            self.assertGreater(r.get("one_way_p50_us", r.get("gbps", 0)), 0)
            self.assertNotIn("ksovia: note:", err)  # every send redirected
            self.assertEqual(wait_gone(p.pid), [])


if __name__ == "__main__":
    SOVIA = os.path.abspath(sys.argv.pop(1))
    chk = subprocess.run([SOVIA, "ksock", "--check"], capture_output=True, text=True,
                         timeout=TIMEOUT)
    if chk.returncode != 0:
        print(f"SKIP: {chk.stderr.strip() or chk.stdout.strip()}")
        sys.exit(77)
    unittest.main(verbosity=2)
