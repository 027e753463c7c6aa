#!/usr/bin/env python3
"""Integration test of `sovia bench`: help texts, usage errors, and a tiny
run of every transport checking the JSON it prints. It checks behaviour,
never performance: no timing thresholds.

usage: test_bench_cli.py /path/to/sovia
"""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

SOVIA = None  # set from argv in main
TIMEOUT = 60

SOVIA_TRANSPORTS = ["sovia", "sovia-block", "sovia-adaptive"]
LOCAL_TRANSPORTS = ["limit", "limit-shared", "tcp", "tcp-poll", "uds", "vi", "vi-copy", "vi-user",
                    "vi-block", "vi-notify",
                    *SOVIA_TRANSPORTS]
SOVIA_LABELS = ["SOVIA_NOTIFY", "SOVIA_HANDLER", "SOVIA_SINGLE", "SOVIA_REG", "SOVIA_COPY",
                "SOVIA_HYBRID", "SOVIA_BASE", "SOVIA_FLOWCNTL", "SOVIA_DACKS", "SOVIA_COMBINE"]
LAT_KEYS = {"transport", "size", "iters", "one_way_p50_us", "one_way_mean_us"}
BW_KEYS = {"transport", "size", "iters", "seconds", "gbps"}


def run(*args, env=None):
    """Run sovia; returns (exit code, stdout, stderr)."""
    p = subprocess.run([SOVIA, *args], capture_output=True, text=True, timeout=TIMEOUT,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def json_lines(out):
    lines = [l for l in out.splitlines() if l.strip()]
    return [json.loads(l) for l in lines]


def positive_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


class Help(unittest.TestCase):
    def test_top_help(self):
        rc, out, _ = run("--help")
        self.assertEqual(rc, 0)
        self.assertIn("bench", out)

    def test_bench_help_lists_modes_and_transports(self):
        rc, out, _ = run("bench", "--help")
        self.assertEqual(rc, 0)
        for word in ["lat", "bw", "sweep", "ucx", *LOCAL_TRANSPORTS]:
            self.assertIn(word, out)

    def test_bench_help_lists_config_labels(self):
        rc, out, _ = run("bench", "--help")
        self.assertEqual(rc, 0)
        self.assertIn("--config", out)
        for label in SOVIA_LABELS:
            self.assertIn(label, out)

    def test_mode_help(self):
        for mode, words in [("lat", ["--transport", "--size", "--iters", "--config", "--json"]),
                            ("bw", ["--transport", "--size", "--seconds", "--config",
                                    "--json"]),
                            ("sweep", ["--transport", "--max-size", "--config", "--json",
                                       "1 s"]),
                            ("idle", ["--transport", "--seconds", "--config", "--json",
                                      "cpu"])]:
            with self.subTest(mode=mode):
                rc, out, _ = run("bench", mode, "--help")
                self.assertEqual(rc, 0)
                for w in words:
                    self.assertIn(w, out)


class Usage(unittest.TestCase):
    BAD = [
        [],
        ["nosuchcommand"],
        ["--bogus"],
        ["bench"],
        ["bench", "nosuchmode"],
        ["bench", "lat", "--transport", "tcp"],               # no --size
        ["bench", "lat", "--size", "8"],                      # no --transport
        ["bench", "lat", "--transport", "tcp", "--size", "0"],
        ["bench", "lat", "--transport", "tcp", "--size", "12Q"],
        ["bench", "lat", "--transport", "tcp", "--size", "8", "--bogus"],
        ["bench", "lat", "--transport", "tcp", "--size", "8", "--iters", "-3"],
        ["bench", "lat", "--transport", "tcp", "--size", "8", "extra"],
        ["bench", "lat", "--transport", "nosuch", "--size", "8"],
        ["bench", "lat", "--transport", "tcp", "--size"],     # missing value
        ["bench", "bw", "--transport", "tcp", "--size", "8", "--iters", "5"],
        ["bench", "bw", "--transport", "tcp", "--size", "8", "--seconds", "0"],
        ["bench", "sweep", "--transport", "tcp", "--size", "8"],
        ["bench", "sweep", "--transport", "tcp", "--max-size", "x"],
        # --config: only the sovia transports take it, and only known labels
        ["bench", "lat", "--transport", "tcp", "--size", "8", "--config", "SOVIA_BASE"],
        ["bench", "bw", "--transport", "vi", "--size", "8", "--config", "SOVIA_COMBINE"],
        ["bench", "sweep", "--transport", "uds", "--config", "SOVIA_DACKS"],
        ["bench", "idle", "--transport", "tcp", "--config", "SOVIA_BASE"],
        ["bench", "lat", "--transport", "ucx", "--size", "8", "--config", "SOVIA_BASE"],
        ["bench", "lat", "--transport", "sovia", "--size", "8", "--config", "NOSUCH"],
        ["bench", "idle", "--transport", "sovia-block", "--config", "sovia_nosuch"],
        ["bench", "lat", "--transport", "sovia", "--size", "8", "--config", ""],
        ["bench", "lat", "--transport", "sovia", "--size", "8", "--config"],
        # --ring/--frag: the vi transports only, bounded, --frag only with --ring
        ["bench", "lat", "--transport", "tcp", "--size", "8", "--ring", "4"],
        ["bench", "sweep", "--transport", "sovia", "--ring", "4"],
        ["bench", "lat", "--transport", "vi", "--size", "8", "--frag", "64"],
        ["bench", "lat", "--transport", "vi", "--size", "8", "--ring", "0"],
        ["bench", "lat", "--transport", "vi", "--size", "8", "--ring", "1025"],
        ["bench", "lat", "--transport", "vi", "--size", "8", "--ring", "4", "--frag", "63"],
        ["bench", "lat", "--transport", "vi", "--size", "4M", "--ring", "1024"],
        ["bench", "idle", "--transport", "vi", "--ring", "4"],
    ]

    def test_bad_usage_exits_2(self):
        for args in self.BAD:
            with self.subTest(args=args):
                rc, out, err = run(*args)
                self.assertEqual(rc, 2)
                self.assertTrue(err.strip(), "a message on stderr")
                self.assertEqual(out, "", "nothing on stdout")

    def test_unknown_label_lists_labels(self):
        rc, out, err = run("bench", "bw", "--transport", "sovia-block", "--size", "64",
                           "--config", "SOVIA_NOSUCH")
        self.assertEqual(rc, 2)
        self.assertIn("SOVIA_NOSUCH", err)
        for label in SOVIA_LABELS:
            self.assertIn(label, err)

    def test_config_rejected_names_the_transport(self):
        rc, _, err = run("bench", "lat", "--transport", "tcp", "--size", "8", "--config",
                         "SOVIA_BASE")
        self.assertEqual(rc, 2)
        self.assertIn("tcp", err)
        self.assertIn("--config", err)


class Runs(unittest.TestCase):
    def check_config(self, rec, transport, config):
        # sovia runs say which configuration they measured; others do not.
        if transport in SOVIA_TRANSPORTS:
            self.assertEqual(rec.get("config"), config or "default", rec)
        else:
            self.assertNotIn("config", rec)

    def check_lat(self, rec, transport, size, iters=None, config=None):
        self.assertTrue(LAT_KEYS <= rec.keys(), rec)
        self.assertEqual(rec["transport"], transport)
        self.check_config(rec, transport, config)
        self.assertEqual(rec["size"], size)
        if iters is not None:
            self.assertEqual(rec["iters"], iters)
        for k in ["iters", "one_way_p50_us", "one_way_mean_us"]:
            self.assertTrue(positive_number(rec[k]), (k, rec))

    def check_bw(self, rec, transport, size, config=None):
        self.assertTrue(BW_KEYS <= rec.keys(), rec)
        self.assertEqual(rec["transport"], transport)
        self.check_config(rec, transport, config)
        self.assertEqual(rec["size"], size)
        for k in ["iters", "seconds", "gbps"]:
            self.assertTrue(positive_number(rec[k]), (k, rec))

    def test_lat_each_transport(self):
        for t in LOCAL_TRANSPORTS:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "lat", "--transport", t, "--size", "64",
                                   "--iters", "200", "--json")
                self.assertEqual(rc, 0, err)
                recs = json_lines(out)
                self.assertEqual(len(recs), 1, out)
                self.check_lat(recs[0], t, 64, 200)

    def test_bw_each_transport(self):
        for t in LOCAL_TRANSPORTS:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "bw", "--transport", t, "--size", "4K",
                                   "--seconds", "0.2", "--json")
                self.assertEqual(rc, 0, err)
                recs = json_lines(out)
                self.assertEqual(len(recs), 1, out)
                self.check_bw(recs[0], t, 4096)

    def test_idle_blocking_waiters_sleep(self):
        # Functional, not a performance bound: a blocked receiver must sleep
        # in the kernel rather than spin (a spinning one shows ~100).
        for t in ["vi-block", "vi-notify", "tcp", "sovia-block", "sovia-adaptive"]:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "idle", "--transport", t, "--seconds", "0.5",
                                   "--json")
                self.assertEqual(rc, 0, err)
                recs = json_lines(out)
                self.assertEqual(len(recs), 1, out)
                self.assertEqual(recs[0]["transport"], t)
                self.check_config(recs[0], t, None)
                self.assertGreaterEqual(recs[0]["seconds"], 0.5)
                self.assertLess(recs[0]["cpu_percent"], 50, recs[0])

    def test_idle_polling_sovia(self):
        # The polling wait mode spins (no bound checked: a loaded machine may
        # preempt it); the run and its JSON must work all the same.
        rc, out, err = run("bench", "idle", "--transport", "sovia", "--seconds", "0.3",
                           "--json")
        self.assertEqual(rc, 0, err)
        recs = json_lines(out)
        self.assertEqual(len(recs), 1, out)
        self.assertEqual(recs[0]["transport"], "sovia")
        self.check_config(recs[0], "sovia", None)
        self.assertGreaterEqual(recs[0]["seconds"], 0.3)
        self.assertGreaterEqual(recs[0]["cpu_percent"], 0)

    def test_sovia_config_labels(self):
        # --config is accepted by every mode of the sovia transports and shows
        # in the JSON. SOVIA_COMBINE streams small messages with combining on.
        runs = [
            (["lat", "--transport", "sovia", "--size", "64", "--iters", "200"],
             "SOVIA_BASE", self.check_lat, 64),
            (["lat", "--transport", "sovia-adaptive", "--size", "64", "--iters", "200"],
             "SOVIA_HANDLER", self.check_lat, 64),
            (["bw", "--transport", "sovia-block", "--size", "64", "--seconds", "0.2"],
             "SOVIA_COMBINE", self.check_bw, 64),
            (["bw", "--transport", "sovia", "--size", "64K", "--seconds", "0.2"],
             "SOVIA_DACKS", self.check_bw, 65536),
        ]
        for args, label, check, size in runs:
            with self.subTest(args=args, label=label):
                rc, out, err = run("bench", *args, "--config", label, "--json")
                self.assertEqual(rc, 0, err)
                recs = json_lines(out)
                self.assertEqual(len(recs), 1, out)
                check(recs[0], args[2], size, config=label)
        rc, out, err = run("bench", "sweep", "--transport", "sovia-block", "--max-size", "8",
                           "--config", "SOVIA_COPY", "--json")
        self.assertEqual(rc, 0, err)
        recs = json_lines(out)
        self.assertEqual([r["size"] for r in recs], [1, 2, 4, 5, 7, 8])
        for r in recs:
            self.check_lat(r, "sovia-block", r["size"], config="SOVIA_COPY")
        rc, out, err = run("bench", "idle", "--transport", "sovia-block", "--seconds", "0.2",
                           "--config", "SOVIA_NOTIFY", "--json")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json_lines(out)[0]["config"], "SOVIA_NOTIFY")

    def test_large_messages(self):
        # Multi-page messages: partial socket writes, arena slots, etc.
        for t in ["tcp", "uds", "vi", "vi-block", "sovia", "sovia-block"]:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "lat", "--transport", t, "--size", "1M",
                                   "--iters", "20", "--json")
                self.assertEqual(rc, 0, err)
                self.check_lat(json_lines(out)[0], t, 1 << 20, 20)

    def test_small_message_stream(self):
        # Many tiny messages: exercises vi's credit flow control hard.
        for t in ["vi", "vi-notify"]:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "bw", "--transport", t, "--size", "1",
                                   "--seconds", "0.2", "--json")
                self.assertEqual(rc, 0, err)
                self.check_bw(json_lines(out)[0], t, 1)

    def test_netpipe_ring(self):
        # NetPIPE-VIA's ring: 1000-byte messages go as 16 pieces of 64 bytes
        # through a ring of 2 receives, so every message needs "continue"s
        # mid-way; the receiver checks each piece's length, and bw's last
        # message is found by the marker in its first piece.
        for t in ["vi", "vi-copy", "vi-user", "vi-block", "vi-notify"]:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "lat", "--transport", t, "--size", "1000",
                                   "--iters", "200", "--ring", "2", "--frag", "64", "--json")
                self.assertEqual(rc, 0, err)
                self.check_lat(json_lines(out)[0], t, 1000, 200)
                rc, out, err = run("bench", "bw", "--transport", t, "--size", "1000",
                                   "--seconds", "0.2", "--ring", "2", "--frag", "64", "--json")
                self.assertEqual(rc, 0, err)
                self.check_bw(json_lines(out)[0], t, 1000)
        rc, out, err = run("bench", "sweep", "--transport", "vi", "--max-size", "256",
                           "--ring", "3", "--frag", "100", "--json")
        self.assertEqual(rc, 0, err)
        recs = json_lines(out)
        self.assertEqual(recs[-1]["size"], 256, out)
        for r in recs:
            self.check_lat(r, "vi", r["size"])

    def test_sweep_sizes(self):
        expect = [1, 2, 4, 5, 7, 8, 11, 13, 16, 19, 29, 32, 35, 61, 64]
        for t in ["limit", "vi"]:
            with self.subTest(transport=t):
                rc, out, err = run("bench", "sweep", "--transport", t, "--max-size", "64",
                                   "--json")
                self.assertEqual(rc, 0, err)
                recs = json_lines(out)
                self.assertEqual([r["size"] for r in recs], expect)
                for r in recs:
                    self.check_lat(r, t, r["size"])
                    self.assertTrue(positive_number(r["mbps"]), r)

    def test_table_output(self):
        rc, out, err = run("bench", "lat", "--transport", "uds", "--size", "1K",
                           "--iters", "100")
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        self.assertIn("transport", lines[0])
        self.assertEqual(lines[1].split()[:3], ["uds", "1024", "100"])
        self.assertNotIn("config", lines[0])

    def test_table_output_sovia_config_column(self):
        rc, out, err = run("bench", "lat", "--transport", "sovia-block", "--size", "1K",
                           "--iters", "100", "--config", "SOVIA_DACKS")
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        self.assertEqual(lines[0].split()[-1], "config")
        fields = lines[1].split()
        self.assertEqual(fields[:3], ["sovia-block", "1024", "100"])
        self.assertEqual(fields[-1], "SOVIA_DACKS")

    def test_ucx_unavailable(self):
        env = dict(os.environ, PATH="/nonexistent")
        rc, out, err = run("bench", "lat", "--transport", "ucx", "--size", "8", "--json",
                           env=env)
        self.assertEqual(rc, 3)
        self.assertEqual(json_lines(out), [{"transport": "ucx", "unavailable": True}])
        rc, out, err = run("bench", "lat", "--transport", "ucx", "--size", "8", env=env)
        self.assertEqual(rc, 3)
        self.assertIn("ucx: unavailable (install ucx-utils)", err)

    @unittest.skipUnless(shutil.which("ucx_perftest"), "ucx_perftest not installed")
    def test_ucx(self):
        rc, out, err = run("bench", "lat", "--transport", "ucx", "--size", "64", "--iters",
                           "1000", "--json")
        self.assertEqual(rc, 0, err)
        self.check_lat(json_lines(out)[0], "ucx", 64)
        rc, out, err = run("bench", "bw", "--transport", "ucx", "--size", "4K", "--seconds",
                           "0.2", "--json")
        self.assertEqual(rc, 0, err)
        self.check_bw(json_lines(out)[0], "ucx", 4096)


def leftover_processes():
    """Processes still running the sovia binary (children left behind)."""
    me = os.path.realpath(SOVIA)
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == me:
                found.append(int(pid))
        except OSError:
            pass
    return found


def main():
    global SOVIA
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    SOVIA = os.path.abspath(sys.argv[1])
    prog = unittest.main(argv=[sys.argv[0], "-v"], exit=False)
    # Every peer process must have been waited for: none may survive.
    deadline = time.time() + 3
    while leftover_processes() and time.time() < deadline:
        time.sleep(0.1)
    left = leftover_processes()
    if left:
        print(f"FAIL: sovia processes left behind: {left}", file=sys.stderr)
        return 1
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
