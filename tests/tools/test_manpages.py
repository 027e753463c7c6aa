#!/usr/bin/env python3
"""The manual pages: every command `sovia --help` lists has a page
(sovia-CMD.1), as do sovia(1), sovia-config(5), sovia(3) and vipl(3); each
renders with `man -l` and no warning from groff; each page names every
--option its command's --help names (bench: its modes and transports too),
so a new option without its documentation fails here.

usage: test_manpages.py /path/to/sovia MANDIR
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helptext  # noqa: E402

SOVIA = MANDIR = None  # set from argv in main


def page(name, section):
    return os.path.join(MANDIR, "man%s" % section, "%s.%s" % (name, section))


def render(path):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    r = subprocess.run(["man", "--nh", "--nj", "--warnings", "-l", path], capture_output=True, text=True,
                       timeout=30, env=env)
    return r.returncode, r.stdout, r.stderr


def plain(text):
    """man's output without overstrike; a line that ends in a hyphen is
    joined to the next (not hyphenated, --nh: a break after a word's own
    hyphen, as in sovia-doctor)."""
    return re.sub(r"-\n\s+", "-", re.sub(r".\x08", "", text))


class ManPagesTest(unittest.TestCase):
    def all_pages(self):
        pages = [page("sovia", 1), page("sovia-config", 5), page("sovia", 3), page("vipl", 3)]
        pages += [page("sovia-" + c, 1) for c in helptext.commands(SOVIA)]
        return pages

    def test_every_command_has_a_page(self):
        cmds = helptext.commands(SOVIA)
        self.assertIn("doctor", cmds)
        for p in self.all_pages():
            self.assertTrue(os.path.isfile(p), p)
        _, out, _ = render(page("sovia", 1))
        for c in cmds:
            self.assertIn("sovia-%s(1)" % c, plain(out), c)

    def test_pages_render_without_warnings(self):
        for p in self.all_pages():
            rc, out, err = render(p)
            self.assertEqual(rc, 0, p)
            self.assertEqual(err, "", p)
            self.assertIn("NAME", out, p)

    def test_pages_name_every_option(self):
        for c in helptext.commands(SOVIA):
            _, out, _ = render(page("sovia-" + c, 1))
            text = plain(out)
            for opt in helptext.options(SOVIA, c):
                self.assertIn(opt, text, "sovia-%s(1) lacks %s" % (c, opt))
        _, out, _ = render(page("sovia-bench", 1))
        text = plain(out)
        help_ = helptext.help_text(SOVIA, "bench")
        for word in helptext.section(help_, "modes:") + helptext.section(help_, "transports:"):
            self.assertRegex(text, r"\b%s\b" % re.escape(word), "sovia-bench(1) lacks " + word)


def main():
    global SOVIA, MANDIR
    MANDIR = sys.argv.pop(2)
    SOVIA = sys.argv.pop(1)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
