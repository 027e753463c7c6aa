#!/usr/bin/env python3
"""Integration test of `sovia bench conns`, `connrate` and `epoll`: help
and usage errors; a small run of each transport checking the JSON fields
and what they must say (tcp: one descriptor and no shared memory per
connection; every exchange answered); that `preload` really carried every
connection over sovia and `tcp` did not (the workers' SOVIA_STAT_LOG exit
records). Behaviour only: no timing thresholds.

usage: test_bench_conns.py /path/to/sovia
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOVIA = None
TIMEOUT = 120
SIDE_KEYS = {"fds", "maps", "shm_mapped_kib", "shm_resident_kib", "rss_kib", "fds_per_conn",
             "maps_per_conn", "shm_mapped_kib_per_conn", "shm_resident_kib_per_conn",
             "rss_kib_per_conn"}
CONNS_KEYS = {"mode", "transport", "count", "setup_s", "connect_us_per_conn", "connect_p50_us",
              "connect_p99_us", "ping_us_per_conn", "close_us_per_conn", "client", "server"}
EPOLL_KEYS = {"mode", "transport", "count", "active", "size", "seconds", "warmup", "cpus",
              "load_1m", "tx", "tps", "p50_us", "p99_us", "p999_us", "max_us", "unanswered",
              "server_cpu_us_per_tx", "client_cpu_us_per_tx"}
RATE_KEYS = {"mode", "transport", "clients", "seconds", "warmup", "cpus", "load_1m", "conns",
             "conns_per_s", "p50_us", "p99_us", "max_us", "cpu_us_per_conn"}


def run(*args, env=None):
    p = subprocess.run([SOVIA, *args], capture_output=True, text=True, timeout=TIMEOUT,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def bench(*args, log=None, extra=None):
    env = dict(os.environ, SOVIA_STAT_LOG=log, **(extra or {})) if log else None
    rc, out, err = run("bench", *args, "--json", env=env)
    if rc != 0:
        raise AssertionError(f"{args}: exit {rc}: {err}")
    lines = [l for l in out.splitlines() if l.strip()]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def records(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [json.loads(l) for l in f if l.strip()]


class Usage(unittest.TestCase):
    def test_help(self):
        rc, out, _ = run("bench", "--help")
        self.assertEqual(rc, 0)
        self.assertIn("  conns ", out)
        self.assertIn("  connrate ", out)
        self.assertIn("  epoll ", out)
        for mode in ("conns", "connrate", "epoll"):
            rc, out, _ = run("bench", mode, "--help")
            self.assertEqual(rc, 0)
            self.assertIn("--transport T", out)

    def test_errors(self):
        for args in (["conns", "--transport", "tcp"], ["conns", "--count", "3"],
                     ["conns", "--transport", "tcp", "--count", "0"],
                     ["connrate", "--transport", "tcp", "--clients", "65"],
                     ["epoll", "--transport", "tcp"],
                     ["epoll", "--transport", "tcp", "--count", "5", "--active", "6"],
                     ["epoll", "--transport", "tcp", "--count", "5", "--active", "0"]):
            rc, _, err = run("bench", *args)
            self.assertEqual(rc, 2, args)
            self.assertIn("sovia bench", err)
        rc, _, err = run("bench", "conns", "--transport", "uds", "--count", "3")
        self.assertEqual(rc, 2)
        self.assertIn("unknown transport 'uds'", err)


class Conns(unittest.TestCase):
    def run_conns(self, transport, count):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "stat.json")
            r = bench("conns", "--transport", transport, "--count", str(count), log=log)
            recs = records(log)
        self.assertEqual(set(r), CONNS_KEYS)
        self.assertEqual((r["mode"], r["transport"], r["count"]), ("conns", transport, count))
        for side in ("client", "server"):
            self.assertEqual(set(r[side]), SIDE_KEYS)
            self.assertGreaterEqual(r[side]["fds"], count)
        self.assertLessEqual(r["connect_p50_us"], r["connect_p99_us"] * 1.02)
        return r, recs

    def test_tcp(self):
        r, recs = self.run_conns("tcp", 40)
        self.assertEqual(recs, [], "tcp ran under the preload library")
        for side in ("client", "server"):
            # One per connection, and the server's epoll instance.
            self.assertLessEqual(abs(r[side]["fds_per_conn"] * 40 - 40), 1, r)
            self.assertEqual(r[side]["shm_mapped_kib_per_conn"], 0, r)

    def test_preload_carries_every_connection(self):
        r, recs = self.run_conns("preload", 40)
        self.assertEqual(len(recs), 2, recs)
        for rec in recs:
            self.assertEqual((rec["carried"], rec["fell_back"], rec["kernel"]), (40, 0, 0), rec)
            self.assertEqual(rec["bytes_sent"], 40 * 16, rec)
        self.assertGreater(r["client"]["shm_mapped_kib_per_conn"], 0, r)


    def test_preload_says_what_it_carried(self):
        # Without a SOVIA_STAT_LOG of the caller's, the bench reads the
        # workers' own records (and leaves nothing behind).
        env = {k: v for k, v in os.environ.items() if k != "SOVIA_STAT_LOG"}
        env["SOVIA_SHORT_CONNS"] = "0"  # every connection carried (connrate's are short)
        with tempfile.TemporaryDirectory() as d:
            env["TMPDIR"] = d
            rc, out, err = run("bench", "conns", "--transport", "preload", "--count", "30",
                               "--json", env=env)
            self.assertEqual(rc, 0, err)
            r = json.loads(out)
            self.assertEqual(r["carried"], {"client": 30, "server": 30, "client_kernel": 0,
                                            "server_kernel": 0})
            rc, out, err = run("bench", "connrate", "--transport", "preload", "--seconds",
                               "0.2", "--warmup", "0.1", "--json", env=env)
            self.assertEqual(rc, 0, err)
            r = json.loads(out)
            self.assertGreaterEqual(r["carried"], r["conns"])
            self.assertEqual(r["kernel"], 0)
            self.assertEqual(os.listdir(d), [])


class ConnRate(unittest.TestCase):
    def check(self, r, transport, clients):
        self.assertEqual(set(r), RATE_KEYS)
        self.assertEqual((r["mode"], r["transport"], r["clients"]),
                         ("connrate", transport, clients))
        self.assertGreater(r["conns"], 0)
        self.assertAlmostEqual(r["conns_per_s"], r["conns"] / r["seconds"], delta=1)
        self.assertLessEqual(r["p50_us"], r["p99_us"] * 1.02)

    def test_tcp_and_preload(self):
        for transport in ("tcp", "preload"):
            for clients in (1, 3):
                with self.subTest(transport=transport, clients=clients), \
                        tempfile.TemporaryDirectory() as d:
                    log = os.path.join(d, "stat.json")
                    # Every connection carried (the default leaves short
                    # ones to kernel TCP: test_short_steps_aside).
                    r = bench("connrate", "--transport", transport, "--clients", str(clients),
                              "--seconds", "0.3", "--warmup", "0.1", log=log,
                              extra={"SOVIA_SHORT_CONNS": "0"})
                    self.check(r, transport, clients)
                    recs = records(log)
                    if transport == "tcp":
                        self.assertEqual(recs, [])
                        continue
                    # Every connection of every client carried, none fell back.
                    self.assertEqual(len(recs), clients + 1, recs)
                    made = sum(x["carried"] for x in recs if x["bytes_sent"] and
                               x["carried"] and x["exe"].endswith("sovia-rr"))
                    self.assertTrue(all(x["fell_back"] == 0 and x["kernel"] == 0
                                        for x in recs), recs)
                    self.assertGreaterEqual(made, 2 * r["conns"])

    def test_short_steps_aside(self):
        # The default: a client's connections of one exchange each are too
        # short to repay carrying; after the first few (carried: they
        # teach it) the client leaves them to kernel TCP at once, carrying
        # one in 256 to learn again; none falls back, the server carries
        # exactly those the client did.
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "stat.json")
            env = {k: v for k, v in os.environ.items() if k != "SOVIA_SHORT_CONNS"}
            rc, out, err = run("bench", "connrate", "--transport", "preload", "--clients", "1",
                               "--seconds", "0.5", "--warmup", "0.1", "--json",
                               env=dict(env, SOVIA_STAT_LOG=log))
            self.assertEqual(rc, 0, err)
            r = json.loads(out)
            recs = [x for x in records(log) if x["exe"].endswith("sovia-rr")]
            self.assertEqual(len(recs), 2, recs)
            client = max(recs, key=lambda x: x["short"])
            server = min(recs, key=lambda x: x["short"])
            total = client["carried"] + client["kernel"]
            self.assertGreater(total, 300, recs)
            self.assertEqual(client["fell_back"] + server["fell_back"], 0, recs)
            self.assertEqual(client["kernel"], client["short"], recs)
            self.assertGreaterEqual(client["carried"], 4, recs)
            self.assertLessEqual(client["carried"], 4 + total // 256 + 1, recs)
            self.assertEqual((server["carried"], server["kernel"], server["short"]),
                             (client["carried"], client["kernel"], 0), recs)
            self.assertGreater(r["conns"], 0)


class Epoll(unittest.TestCase):
    def test_tcp_and_preload(self):
        count, active = 60, 3
        for transport in ("tcp", "preload"):
            with self.subTest(transport=transport), tempfile.TemporaryDirectory() as d:
                log = os.path.join(d, "stat.json")
                r = bench("epoll", "--transport", transport, "--count", str(count), "--active",
                          str(active), "--seconds", "0.3", "--warmup", "0.1", log=log)
                recs = records(log)
                self.assertEqual(set(r), EPOLL_KEYS)
                self.assertEqual((r["mode"], r["transport"], r["count"], r["active"], r["size"]),
                                 ("epoll", transport, count, active, 64))
                self.assertGreater(r["tx"], 0)
                self.assertAlmostEqual(r["tps"], r["tx"] / r["seconds"], delta=1)
                self.assertEqual(r["unanswered"], 0)
                self.assertLessEqual(r["p50_us"], r["p99_us"] * 1.02)
                if transport == "tcp":
                    self.assertEqual(recs, [])
                    continue
                # Every connection carried both ways; the first exchange on
                # each and every counted transaction went over sovia.
                self.assertEqual(len(recs), 2, recs)
                for rec in recs:
                    self.assertEqual((rec["carried"], rec["fell_back"], rec["kernel"]),
                                     (count, 0, 0), rec)
                    self.assertGreaterEqual(rec["bytes_sent"], 64 * (count + r["tx"]), rec)


if __name__ == "__main__":
    SOVIA = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
