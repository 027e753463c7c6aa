#!/usr/bin/env python3
"""`sovia doctor`: one line per check and a summary first; --json gives the
same checks as one object; the exit status is the worst check (0 ok, 1 a
warning, 2 a failure). Checks made to fail: RLIMIT_NOFILE lowered (a
warning), a variable sovia does not read and a value it ignores (warnings),
a provider that does not exist (a failure), a directory of a killed report
run in /dev/shm (a warning), a bad argument (usage, 2).

usage: test_doctor.py /path/to/sovia
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import unittest

SOVIA = None  # set from argv in main
STATUS = {"ok", "off", "warn", "fail"}


def doctor(*args, env=None, nofile=None):
    base = {k: v for k, v in os.environ.items() if not k.startswith("SOVIA_")}
    base.update(env or {})

    def lower():
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return subprocess.run([SOVIA, "doctor", *args], env=base, capture_output=True, text=True,
                          timeout=60, preexec_fn=lower)


def checks(args=(), **kw):
    r = doctor("--json", *args, **kw)
    got = json.loads(r.stdout)
    return r.returncode, got, {c["name"]: c for c in got["checks"]}


class DoctorTest(unittest.TestCase):
    def test_json_shape_and_status(self):
        rc, got, by_name = checks()
        self.assertEqual(set(got), {"status", "summary", "checks"})
        self.assertEqual(got["status"], rc)
        for c in got["checks"]:
            self.assertEqual(set(c), {"name", "status", "value", "reason"})
            self.assertIn(c["status"], STATUS)
            self.assertTrue(c["reason"])
        worst = max(({"ok": 0, "off": 0, "warn": 1, "fail": 2}[c["status"]]
                     for c in got["checks"]), default=0)
        self.assertEqual(rc, worst)
        for name in ("memfd_seals", "pidfd", "scm_rights", "ptrace_scope", "tun", "ksock",
                     "nofile", "max_map_count", "memlock", "cores", "shm", "fabric",
                     "preload", "config", "environment", "cluster_key", "leftovers"):
            self.assertIn(name, by_name)
        # This build's own machine carries: the kernel features and shm work.
        for name in ("memfd_seals", "pidfd", "scm_rights", "shm", "preload", "config"):
            self.assertEqual(by_name[name]["status"], "ok", by_name[name])
        self.assertLess(rc, 2)

    def test_text_has_summary_first_and_every_check(self):
        r = doctor()
        rc, got, _ = checks()
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "sovia doctor: " + got["summary"])
        names = [l.split()[1] for l in lines[1:] if l[:1] != " "]
        self.assertEqual(names, [c["name"] for c in got["checks"]])
        self.assertEqual(r.returncode, rc)

    def test_low_nofile_warns(self):
        rc, got, by_name = checks(nofile=64)
        self.assertEqual(by_name["nofile"]["status"], "warn")
        self.assertIn("64 soft", by_name["nofile"]["value"])
        self.assertGreaterEqual(rc, 1)
        r = doctor(nofile=64)
        self.assertGreaterEqual(r.returncode, 1)
        self.assertRegex(r.stdout, r"\nwarn  nofile ")

    def test_unknown_and_ignored_variables_warn(self):
        rc, got, by_name = checks(env={"SOVIA_WINDWO": "8", "SOVIA_WINDOW": "many"})
        self.assertEqual(by_name["variable"]["value"], "SOVIA_WINDWO")
        self.assertEqual(by_name["SOVIA_WINDOW"]["status"], "warn")
        self.assertIn("32", by_name["SOVIA_WINDOW"]["reason"])
        self.assertGreaterEqual(rc, 1)
        rc, got, by_name = checks(env={"SOVIA_WINDOW": "64"})
        self.assertIn("window 64,", by_name["config"]["value"])
        self.assertNotIn("SOVIA_WINDOW", by_name)

    def test_missing_provider_will_not_carry(self):
        rc, got, by_name = checks(env={"SOVIA_PROVIDER": "nosuch"})
        self.assertEqual(rc, 2)
        self.assertEqual(by_name["config"]["status"], "fail")

    def test_key_file_others_can_read_warns(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "key")
            with open(path, "wb") as f:
                f.write(b"k" * 32)
            os.chmod(path, 0o644)  # xauth.c's loader refuses a key others can read
            rc, got, by_name = checks(env={"SOVIA_CLUSTER_KEY_FILE": path})
            self.assertEqual(by_name["cluster_key"]["status"], "warn")
            self.assertIn("chmod 600", by_name["cluster_key"]["reason"])
            os.chmod(path, 0o600)
            rc, got, by_name = checks(env={"SOVIA_CLUSTER_KEY_FILE": path})
            self.assertEqual(by_name["cluster_key"]["status"], "ok")

    def test_leftover_of_a_killed_run(self):
        dead = subprocess.Popen(["true"])
        dead.wait()  # its pid no longer runs
        gone = "/dev/shm/ftprun-%d-doctortest" % dead.pid
        live = "/dev/shm/ftprun-%d-doctortest" % os.getpid()
        try:
            os.mkdir(gone, 0o700)
            os.mkdir(live, 0o700)
            rc, got, by_name = checks()
            self.assertEqual(by_name["leftovers"]["status"], "warn")
            self.assertIn(gone, by_name["leftovers"]["value"])
            self.assertNotIn(live, by_name["leftovers"]["value"])  # in use
            self.assertGreaterEqual(rc, 1)
        finally:
            os.rmdir(gone)
            os.rmdir(live)
        rc, got, by_name = checks()
        self.assertNotIn(gone, by_name["leftovers"]["value"])

    def test_bad_argument(self):
        r = doctor("--nosuch")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown argument", r.stderr)
        self.assertEqual(r.stdout, "")


def main():
    global SOVIA
    SOVIA = sys.argv.pop(1)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
