#!/usr/bin/env python3
"""git daemon with git clone and git push (unmodified git) under `sovia
run`: both ends and one end only. git daemon forks a child per
connection, which runs upload-pack or receive-pack (and pack-objects)
on the connection it inherited. The clone must have the repository's
head and every file byte for byte (4 commits of 1 MiB files); a commit
pushed back from the clone must arrive. Records: both ends carried (the
daemon's processes' bytes add up to the clients'), or kernel TCP.

usage: test_git.py --sovia /path/to/sovia --bindir DIR
"""
import os
import signal
import subprocess

import compat as c

COMMITS, FILE = 4, 1 << 20
GIT_ID = ["-c", "user.name=compat", "-c", "user.email=compat@localhost",
          "-c", "init.defaultBranch=main"]


@c.scenarios()
class GitDaemon(c.CompatCase):
    def git(self, *args, cwd=None):
        """A git command outside sovia (setting up, checking)."""
        p = subprocess.run(["git", *GIT_ID, *args], capture_output=True, text=True,
                                cwd=cwd or self.tmp, timeout=60)
        self.assertEqual(p.returncode, 0, f"git {' '.join(args)}: {p.stderr}")
        return p.stdout.strip()

    def make_repo(self):
        """work/ with COMMITS commits, and its bare copy served as repo.git."""
        work = os.path.join(self.tmp, "work")
        self.git("init", "-q", work)
        self.files = {}
        for k in range(COMMITS):
            name = f"file{k}"
            self.files[name] = c.write_blob(os.path.join(work, name), FILE)
            self.git("add", name, cwd=work)
            self.git("commit", "-q", "-m", f"commit {k}", cwd=work)
        self.git("clone", "-q", "--bare", work, os.path.join(self.tmp, "repo.git"))
        return self.git("rev-parse", "HEAD", cwd=work)

    def run_scenario(self, scenario):
        s_under, c_under = c.under(scenario)
        head = self.make_repo()
        port = c.free_port()
        server = self.start_server("git-daemon", [
            "git", "daemon", "--reuseaddr", f"--base-path={self.tmp}", "--export-all",
            "--enable=receive-pack", "--informative-errors", "--listen=127.0.0.1",
            f"--port={port}"], s_under, port)
        url = f"git://127.0.0.1:{port}/repo.git"
        clone = os.path.join(self.tmp, "clone")
        self.assert_exit(self.start("git-clone", ["git", *GIT_ID, "clone", "-q", url, clone],
                                    c_under), 30)
        self.assertEqual(self.git("rev-parse", "HEAD", cwd=clone), head, self.context())
        for name, sha in self.files.items():
            self.check_file(os.path.join(clone, name), sha, FILE)
        c.write_blob(os.path.join(clone, "pushed"), FILE)
        self.git("add", "pushed", cwd=clone)
        self.git("commit", "-q", "-m", "pushed", cwd=clone)
        pushed = self.git("rev-parse", "HEAD", cwd=clone)
        self.assert_exit(self.start("git-push", ["git", *GIT_ID, "-C", clone, "push", "-q",
                                                 "origin", "HEAD:refs/heads/pushed"],
                                    c_under), 30)
        self.assertEqual(self.git("--git-dir", os.path.join(self.tmp, "repo.git"), "rev-parse",
                                  "refs/heads/pushed"), pushed, self.context())
        self.stop_server(server, codes=(0, -signal.SIGTERM))
        self.check_sides(scenario, connections=2, client_sent=FILE, server_sent=COMMITS * FILE)


if __name__ == "__main__":
    c.main(["git"])
