#!/usr/bin/env python3
"""rsync (unmodified, Debian's) pulling a tree from an rsync daemon, under
`sovia run`. The tree: a few hundred files of up to 64 KiB in nested
directories, some empty, and one of 50 MiB; every file must arrive with
its content (SHA-256) and the client must exit 0.

Both under sovia: the client's connection is carried, and so is the one
the daemon's child (it forks per connection) served, with the 50 MiB in
its record. The client side forks too (generator and receiver share the
socket), and the daemon, which listens on 0.0.0.0 and :: at once, ends a
shared connection without a FIN: this pull reset ("a shared connection's
record is inconsistent", exit 10) in 4 runs of 10, and fell back to kernel
TCP in most of the others (docs/ARCHITECTURE.md, "Fork"). Only one side
under sovia: kernel TCP, the same files.

The daemon's modules run as root under root (`uid`, `gid`): as nobody,
the daemon's child could not append its record to the test's private log.
The client's receiver and the daemon's parent end by signals (SIGUSR2,
SIGTERM) and leave no record; the client's generator and the daemon's
child do.

usage: test_rsync.py --sovia /path/to/sovia
"""
import hashlib
import os
import random
import signal
import time

import progtest as pt

BIG = 50 << 20
NFILES = 300
RSYNC_SIGNAL_EXIT = 20  # rsync's exit code after SIGTERM (RERR_SIGNAL)


def make_tree(root):
    """The tree to pull; returns {relative path: sha256}."""
    rng = random.Random(20)
    sums = {}

    def put(rel, data):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        sums[rel] = hashlib.sha256(data).hexdigest()

    for i in range(NFILES):
        depth = rng.randrange(3)
        parts = [f"d{rng.randrange(6)}" for _ in range(depth)]
        size = 0 if i % 50 == 0 else rng.randrange(1, 64 << 10)
        put(os.path.join(*parts, f"f{i}.bin"), rng.randbytes(size))
    put("big/blob", os.urandom(BIG))
    return sums


def tree_sums(root):
    sums = {}
    for d, _, files in os.walk(root):
        for name in files:
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                sums[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return sums


def config(tmp, src):
    ids = "uid = root\ngid = root\n" if os.geteuid() == 0 else ""
    return f"""use chroot = false
{ids}pid file = {tmp}/rsyncd.pid
log file = {tmp}/rsyncd.log
[mod]
path = {src}
read only = true
"""


class Rsync(pt.ScenarioCase):
    def run_scenario(self, scenario):
        s_under, c_under = pt.under(scenario)
        src, dest = os.path.join(self.tmp, "src"), os.path.join(self.tmp, "dest")
        want = make_tree(src)
        conf = os.path.join(self.tmp, "rsyncd.conf")
        with open(conf, "w") as f:
            f.write(config(self.tmp, src))
        port = pt.free_port()
        daemon = self.start_server("rsyncd", ["rsync", "--daemon", "--no-detach", "--port",
                                              str(port), "--config", conf], s_under, port)
        t0 = time.monotonic()
        client = self.start("rsync", ["rsync", "-a", f"rsync://127.0.0.1:{port}/mod/",
                                      dest + "/"], c_under)
        self.assert_exit(client, 60)
        seconds = time.monotonic() - t0
        got = tree_sums(dest)
        self.assertEqual(sorted(got), sorted(want), "file list differs" + self.context())
        bad = [p for p in want if got[p] != want[p]]
        self.assertEqual(bad, [], "content differs" + self.context())
        self.assertIn(daemon.stop(signal.SIGTERM), (0, RSYNC_SIGNAL_EXIT, -signal.SIGTERM),
                      "the daemon did not stop on SIGTERM" + self.context())
        self.check_record(scenario, client, c_under)
        self.check_served(scenario, "rsync daemon's children",
                          self.served_records("rsync", daemon, client), 1, BIG, server=daemon)
        pt.report(f"rsync {scenario}: {len(want)} files ({BIG >> 20} MiB and "
                  f"{NFILES} small) in {seconds:.2f} s (process start included)")


if __name__ == "__main__":
    pt.main(["rsync"])
