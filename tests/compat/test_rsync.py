#!/usr/bin/env python3
"""An rsync daemon (unmodified rsync, its own config, a free port) with
rsync clients pulling a tree and pushing one back under `sovia run`:
both ends and one end only. The daemon forks a child per connection,
and each rsync end forks once more (generator and receiver share the
connection). Every file must arrive byte for byte (5 pulls of 20 files of
2 MiB and a few small ones, one push of as much) and each client exit 0. Records: both
ends carried, or kernel TCP. rsync's receiving processes leave with
_exit(), and the daemon too on SIGTERM: they write no record
(docs/TRANSPARENT.md, "Exit records"), so the records' bytes do not add
up and the daemon's side may have none with one end only.

(A pull of 40 MB with both ends under sovia used to end now and then
with "a shared connection's record is inconsistent; reset": a shared
connection whose VI failed is handed over now, src/vipl/holder.c.)

usage: test_rsync.py --sovia /path/to/sovia --bindir DIR [--broken]
"""
import grp
import os
import pwd
import shutil
import signal

import compat as c

FILES, FILE, PULLS = 20, 2 << 20, 5


def make_tree(root):
    """{relative path: (SHA-256, size)} of a tree of random files."""
    os.makedirs(os.path.join(root, "sub"))
    sizes = {**{f"f{k}": FILE for k in range(FILES)}, **{f"sub/small{k}": 100 * k for k in range(4)}}
    return {rel: (c.write_blob(os.path.join(root, rel), size), size) for rel, size in sizes.items()}


@c.scenarios()
class RsyncDaemon(c.CompatCase):
    def check_tree(self, root, tree):
        for rel, (sha, size) in tree.items():
            self.check_file(os.path.join(root, rel), sha, size)
        extra = {os.path.relpath(os.path.join(d, n), root)
                 for d, _, names in os.walk(root) for n in names} - set(tree)
        self.assertEqual(extra, set(), self.context())

    def run_scenario(self, scenario):
        s_under, c_under = c.under(scenario)
        module = os.path.join(self.tmp, "module")
        tree = make_tree(module)
        up = os.path.join(self.tmp, "up")
        up_tree = make_tree(up)
        port = c.free_port()
        conf = os.path.join(self.tmp, "rsyncd.conf")
        # the daemon's user and group stay ours: sovia carries connections
        # between processes of one user only
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(os.getegid()).gr_name
        with open(conf, "w") as f:
            f.write(f"pid file = {self.tmp}/rsyncd.pid\nuse chroot = no\n"
                    f"uid = {user}\ngid = {group}\n"
                    f"[m]\npath = {module}\nread only = no\n")
        server = self.start_server("rsyncd", [
            "rsync", "--daemon", "--no-detach", f"--config={conf}", f"--port={port}",
            "--address=127.0.0.1", f"--log-file={self.tmp}/rsyncd.log"], s_under, port)
        url = f"rsync://127.0.0.1:{port}/m"
        for k in range(PULLS):
            pulled = os.path.join(self.tmp, f"pulled{k}")
            self.assert_exit(self.start(f"rsync-pull{k}", ["rsync", "-a", f"{url}/", pulled + "/"],
                                        c_under), 30)
            self.check_tree(pulled, tree)
            shutil.rmtree(pulled)
        self.assert_exit(self.start("rsync-push", ["rsync", "-a", up + "/", f"{url}/up/"],
                                    c_under), 30)
        self.check_tree(os.path.join(module, "up"), up_tree)
        self.stop_server(server, codes=(0, 20, -signal.SIGTERM))
        with self.subTest(records="server"):
            self.check_side(scenario, "server", PULLS + 1,
                            carried=True if scenario == c.BOTH else None)
        with self.subTest(records="client"):
            self.check_side(scenario, "client", PULLS + 1)


if __name__ == "__main__":
    c.main(["rsync"])
