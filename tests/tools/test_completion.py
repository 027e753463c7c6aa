#!/usr/bin/env python3
"""bash completion (src/tools/sovia/sovia.bash): completing in a real bash
gives exactly what the help texts name: the commands of `sovia --help`,
each command's --options (each bench mode's), bench's modes and
transports, the profiles, and the papers' labels for --config.

usage: test_completion.py /path/to/sovia /path/to/sovia.bash
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helptext  # noqa: E402

SOVIA = SCRIPT = None  # set from argv in main


def complete(*words):
    """COMPREPLY for the command line `sovia WORDS`, the last word being completed."""
    line = [SOVIA, *words]
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
              'COMP_LINE="$*"; _sovia; printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", script, "bash", SCRIPT, *line], capture_output=True,
                       text=True, timeout=60, check=True)
    return sorted(w for w in r.stdout.splitlines() if w)


class CompletionTest(unittest.TestCase):
    def test_commands(self):
        self.assertEqual(complete(""), sorted(helptext.commands(SOVIA) + ["--help", "--version"]))
        self.assertEqual(complete("do"), ["doctor"])

    def test_each_commands_options(self):
        for c in helptext.commands(SOVIA):
            if c in ("bench", "lane"):
                continue
            want = sorted(set(helptext.options(SOVIA, c)) | {"--help"})
            self.assertEqual(complete(c, "--"), want, c)

    def test_bench(self):
        help_ = helptext.help_text(SOVIA, "bench")
        modes = helptext.section(help_, "modes:")
        self.assertEqual(complete("bench", ""), sorted(modes + ["--help"]))
        for m in modes:
            want = sorted(set(helptext.options(SOVIA, "bench", m)) | {"--help"})
            self.assertEqual(complete("bench", m, "--"), want, m)
        self.assertEqual(complete("bench", "lat", "--transport", ""),
                         sorted(helptext.section(help_, "transports:")))
        labels = sorted(set(re.findall(r"SOVIA_[A-Z]+", help_.split("Table 4")[1].split("\n\n")[0])))
        self.assertIn("SOVIA_DACKS", labels)
        self.assertEqual(complete("bench", "bw", "--config", ""), labels)

    def test_run_and_lane(self):
        self.assertEqual(complete("run", "--profile", ""), ["balanced", "latency", "throughput"])
        self.assertEqual(complete("lane", ""), ["--help", "down", "up"])
        self.assertEqual(complete("lane", "up", "--"),
                         sorted(set(helptext.options(SOVIA, "lane")) | {"--help"}))
        # after --, the program: commands of this shell
        self.assertIn("bash", complete("run", "--", "bas"))


def main():
    global SOVIA, SCRIPT
    SCRIPT = sys.argv.pop(2)
    SOVIA = sys.argv.pop(1)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
