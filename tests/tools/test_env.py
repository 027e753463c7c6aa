#!/usr/bin/env python3
"""`sovia env`: the shell settings that put every program started from the
shell under sovia, with no launcher. Evaluated by sh, they preload the
library `sovia run` uses and set the profile's variables; a variable the
user set already wins; bad arguments are usage errors (exit 2).

usage: test_env.py /path/to/sovia
"""
import os
import subprocess
import sys
import unittest

SOVIA = None  # set from argv in main


def shell_env(args, extra=None):
    """Runs `eval "$(sovia env ARGS)"` in sh and returns the resulting environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SOVIA_") and k != "LD_PRELOAD"}
    env.update(extra or {})
    script = 'eval "$("$SOVIA_BIN" env %s)" && env' % " ".join(args)
    env["SOVIA_BIN"] = SOVIA
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


class EnvTest(unittest.TestCase):
    def test_balanced_preloads_only(self):
        got = shell_env([])
        self.assertIn("libsovia-preload.so", got.get("LD_PRELOAD", ""))
        self.assertTrue(os.path.exists(got["LD_PRELOAD"].split(":")[-1]))
        self.assertNotIn("SOVIA_WAIT", got)

    def test_latency_profile(self):
        got = shell_env(["--profile", "latency"])
        self.assertEqual(got.get("SOVIA_WAIT"), "poll")

    def test_user_setting_wins(self):
        got = shell_env(["--profile=latency"], {"SOVIA_WAIT": "block"})
        self.assertEqual(got.get("SOVIA_WAIT"), "block")

    def test_existing_preload_kept(self):
        probe = subprocess.run([SOVIA, "env"], env={**os.environ, "LD_PRELOAD": "libm.so.6"},
                               capture_output=True, text=True, timeout=30)
        if probe.returncode != 0 and ("Sanitizer" in probe.stderr or "ASan" in probe.stderr):
            self.skipTest("a sanitizer build's tool cannot start under another LD_PRELOAD")
        got = shell_env([], {"LD_PRELOAD": "libm.so.6"})
        self.assertTrue(got["LD_PRELOAD"].endswith(":libm.so.6"), got["LD_PRELOAD"])

    def test_program_runs_carried_library(self):
        env = shell_env([])
        out = subprocess.run(["cat", "/proc/self/maps"], env=env, capture_output=True,
                             text=True, timeout=30, check=True).stdout
        self.assertIn("libsovia-preload.so", out)

    def test_usage_errors(self):
        for args in (["--profile", "fast"], ["--bogus"], ["extra"], ["--profile"]):
            r = subprocess.run([SOVIA, "env"] + args, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(r.stdout, "", args)


if __name__ == "__main__":
    SOVIA = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
