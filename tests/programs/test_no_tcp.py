#!/usr/bin/env python3
"""Programs without TCP under `sovia run`: `true` and
`tar cf /dev/null /usr/include` succeed and leave no SOVIA_STAT_LOG record
(only processes that made or accepted TCP connections write one).

usage: test_no_tcp.py --sovia /path/to/sovia
"""
import os

import progtest as pt


class NoTcp(pt.ProgramCase):
    def run_plain(self, name, argv, timeout):
        p = self.start(name, argv, True)
        self.assert_exit(p, timeout)
        self.assertFalse(os.path.exists(self.statlog),
                         f"{name} wrote a record without TCP: {self.stat_text()}")
        return p

    def test_true(self):
        self.run_plain("true", ["true"], 20)

    def test_tar(self):
        if not os.path.isdir("/usr/include"):
            self.skipTest("no /usr/include")
        p = self.run_plain("tar", ["tar", "cf", "/dev/null", "/usr/include"], 60)
        self.assertNotIn("tar:", p.err().replace("tar: Removing leading `/' from member names",
                                                 ""), p.err())

    def test_sh_pipeline(self):
        """A shell with children (fork + exec under the preload)."""
        p = self.run_plain("sh", ["sh", "-c", "echo hi | cat | wc -c"], 20)
        self.assertEqual(p.out().strip(), "3")


if __name__ == "__main__":
    pt.main(["tar"])
