#!/usr/bin/env python3
"""The Debian packages (cmake/package.cmake): `cpack -G DEB` from this build
writes sovia and libsovia-dev with the right contents and dependencies
(dpkg-deb -I, -c); unpacked into a scratch root (dpkg-deb -x: nothing on
this machine is touched), the packaged sovia runs from there: --version,
doctor finds the packaged preload, and `sovia run` carries a connection
between two programs (their exit records say carried 1, shm). lintian
finds no error in either package (plain builds only: a sanitizer build
packs the same files, and lintian takes ~15 s).

usage: test_deb.py BUILD_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

BUILD = None  # set from argv in main
SERVER = r"""
import hashlib, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while n < 1 << 20:
    b = c.recv(65536)
    if not b: break
    h.update(b); n += len(b)
c.sendall(h.hexdigest().encode()); c.close()
"""
CLIENT = r"""
import hashlib, socket, sys
data = bytes(range(256)) * 4096
c = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); c.sendall(data)
got = c.recv(64).decode()
sys.exit(0 if got == hashlib.sha256(data).hexdigest() else 1)
"""


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


class DebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        out = os.path.join(cls.tmp.name, "out")
        run(["cpack", "-G", "DEB", "--config", os.path.join(BUILD, "CPackConfig.cmake"),
             "-B", out], timeout=600)
        cls.deb = {re.sub(r"_.*", "", os.path.basename(p)): p
                   for p in glob.glob(os.path.join(out, "*.deb"))}
        cls.root = os.path.join(cls.tmp.name, "root")
        for p in cls.deb.values():
            run(["dpkg-deb", "-x", p, cls.root])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def field(self, pkg, name):
        return run(["dpkg-deb", "-f", self.deb[pkg], name]).strip()

    def files(self, pkg):
        out = run(["dpkg-deb", "-c", self.deb[pkg]])
        return {line.split()[5].lstrip(".") for line in out.splitlines()}

    def test_two_packages_and_their_dependencies(self):
        self.assertEqual(sorted(self.deb), ["libsovia-dev", "sovia"])
        depends = self.field("sovia", "Depends")
        self.assertRegex(depends, r"\blibc6\b")
        self.assertRegex(depends, r"\bpython3\b")
        self.assertIn("libfabric1", self.field("sovia", "Recommends"))
        version = self.field("sovia", "Version")
        self.assertEqual(self.field("libsovia-dev", "Depends"), "sovia (= %s)" % version)
        # shlibs for the two libraries with sonames (dpkg-gensymbols' input)
        ctrl = os.path.join(self.tmp.name, "ctrl")
        run(["dpkg-deb", "-e", self.deb["sovia"], ctrl])
        with open(os.path.join(ctrl, "shlibs")) as f:
            shlibs = f.read()
        self.assertRegex(shlibs, r"(?m)^libvipl 0 sovia")
        self.assertRegex(shlibs, r"(?m)^libsovia 0 sovia")

    def test_contents(self):
        rt, dev = self.files("sovia"), self.files("libsovia-dev")
        sovia = os.path.join(BUILD, "bin", "sovia")
        cmds = re.search(r"commands:\n((?:  .*\n)+)", run([sovia, "--help"])).group(1)
        pages = ["/share/man/man1/sovia-%s.1.gz" % l.split()[0] for l in cmds.splitlines()]
        pages += ["/share/man/man1/sovia.1.gz", "/share/man/man5/sovia-config.5.gz"]
        man3 = ["/share/man/man3/vipl.3.gz", "/share/man/man3/sovia.3.gz"]
        if not os.path.isdir(os.path.join(BUILD, "share", "man")):
            pages = man3 = []  # built without scdoc (docs/man/CMakeLists.txt)
        want_rt = ["/bin/sovia", "/libexec/sovia/sovia-rr", "/share/sovia/report/__main__.py",
                   "/share/bash-completion/completions/sovia", "/share/doc/sovia/copyright",
                   "/share/doc/sovia/changelog.gz"] + pages
        for w in want_rt:
            self.assertIn("/usr" + w, rt)
        libs = {os.path.basename(p) for p in rt if "/lib/" in p}
        self.assertTrue({"libvipl.so.0", "libsovia.so.0", "libsovia-preload.so"} <= libs, libs)
        self.assertFalse({"libvipl.so", "libsovia.so"} & libs)  # the links are -dev's
        for w in ["/include/vipl.h", "/include/vipl_ext.h", "/include/sovia.h"] + man3:
            self.assertIn("/usr" + w, dev)
        devlibs = {os.path.basename(p) for p in dev if "/lib/" in p}
        self.assertTrue({"libvipl.so", "libsovia.so", "vipl.pc", "sovia.pc"} <= devlibs)
        self.assertFalse(any(p.endswith(".h") for p in rt))

    def test_lintian_finds_no_error(self):
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            if re.search(r"(?m)^SOVIA_SANITIZE:STRING=.+$", f.read()):
                self.skipTest("sanitizer build: lintian runs in the plain one")
        r = subprocess.run(["lintian", "--fail-on", "error", *sorted(self.deb.values())],
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotRegex(r.stdout, r"(?m)^E: ")

    def unpacked_env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SOVIA_") and k != "LD_PRELOAD"}
        env.update(extra)
        return env

    def test_unpacked_sovia_runs(self):
        sovia = os.path.join(self.root, "usr", "bin", "sovia")
        self.assertRegex(run([sovia, "--version"], env=self.unpacked_env()), r"^sovia \d")
        r = subprocess.run([sovia, "doctor", "--json"], capture_output=True, text=True,
                           env=self.unpacked_env(), timeout=60)
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        self.assertEqual(checks["preload"]["status"], "ok")
        self.assertTrue(checks["preload"]["value"].startswith(self.root), checks["preload"])
        self.assertLess(r.returncode, 2, r.stdout)

    def test_unpacked_sovia_run_carries(self):
        sovia = os.path.join(self.root, "usr", "bin", "sovia")
        log = os.path.join(self.tmp.name, "exit.log")
        env = self.unpacked_env(SOVIA_STAT_LOG=log, SOVIA_SHORT_CONNS="0")
        server = subprocess.Popen([sovia, "run", "--", sys.executable, "-c", SERVER],
                                  stdout=subprocess.PIPE, text=True, env=env)
        try:
            port = server.stdout.readline().strip()
            client = subprocess.run([sovia, "run", "--", sys.executable, "-c", CLIENT, port],
                                    env=env, timeout=60)
            self.assertEqual(client.returncode, 0)
            self.assertEqual(server.wait(timeout=60), 0)
        finally:
            server.kill()
            server.wait()
            server.stdout.close()
        with open(log) as f:
            records = [json.loads(line) for line in f]
        self.assertEqual(len(records), 2, records)
        for rec in records:
            self.assertEqual((rec["carried"], rec["provider"]), (1, "shm"), rec)


def main():
    global BUILD
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
