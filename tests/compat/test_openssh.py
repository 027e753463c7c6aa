#!/usr/bin/env python3
"""OpenSSH (unmodified sshd, ssh, scp and sftp) under `sovia run`: both
ends and one end only. A private sshd (its own config, host key and
authorized key in the test's directory, a free port, `-D -e`, key
authentication only, StrictModes and PAM off) serves, in turn:
- ssh running a command: its output (the SHA-256 of a file the server
  side reads) and its exit status (7) come back;
- scp of 100 MB to the server (scp speaks SFTP since OpenSSH 9.0): the
  copy hashes as the original;
- sftp in batch mode: a put and a get of 8 MB, both checked.
The machine's sshd and /etc/ssh are never touched (sshd only needs its
privilege-separation directory, /run/sshd, which is created if missing).
Records: one end only, kernel TCP. Both ends: each connection is
carried at first, then stepped aside to kernel TCP (migrated) when sshd's
pre-authentication child installs its seccomp sandbox (src/preload/
sandbox.c, docs/PROTOCOL.md "Migration"): the client's records say so;
sshd's per-connection processes leave by _exit() and write no record, so
the bytes do not balance. (On the library before migration the sandbox
killed the pre-authentication child and every login hung.)

usage: test_openssh.py --sovia /path/to/sovia --bindir DIR [--broken]
"""
import os
import pwd
import signal
import subprocess

import compat as c

SCP_SIZE, SFTP_SIZE = 100 << 20, 8 << 20
SSHD = "/usr/sbin/sshd"


@c.scenarios()
class OpenSSH(c.CompatCase):
    BLOB_SIZE = SCP_SIZE

    def setup_sshd(self):
        d = self.tmp
        for key in ("host_key", "user_key"):
            p = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                                os.path.join(d, key)], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
        os.rename(os.path.join(d, "user_key.pub"), os.path.join(d, "authorized_keys"))
        if not os.path.isdir("/run/sshd") and os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.port = c.free_port()
        self.config = os.path.join(d, "sshd_config")
        with open(self.config, "w") as f:
            f.write(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {d}/host_key
AuthorizedKeysFile {d}/authorized_keys
PidFile {d}/sshd.pid
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
""")
        self.user = pwd.getpwuid(os.geteuid()).pw_name
        opts = ["-F", "/dev/null", "-i", os.path.join(d, "user_key"), "-o", "IdentitiesOnly=yes",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
                "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]
        self.ssh = ["ssh", *opts, "-p", str(self.port)]
        self.scp = ["scp", *opts, "-P", str(self.port)]
        self.sftp = ["sftp", *opts, "-P", str(self.port)]

    def run_scenario(self, scenario):
        s_under, c_under = c.under(scenario)
        self.setup_sshd()
        host = f"{self.user}@127.0.0.1"
        server = self.start_server("sshd", [SSHD, "-D", "-e", "-f", self.config], s_under,
                                   self.port)
        # ssh: a command's output and exit status
        ssh = self.start("ssh", [*self.ssh, host, f"sha256sum {self.blob}; exit 7"], c_under)
        self.assert_exit(ssh, 20, codes=(7,))
        self.assertEqual(ssh.out(), f"{self.blob_sha}  {self.blob}\n", self.context())
        # scp of 100 MB to the server
        copy = os.path.join(self.tmp, "scp-copy")
        self.assert_exit(self.start("scp", [*self.scp, "-q", self.blob, f"{host}:{copy}"],
                                    c_under), 60)
        self.check_file(copy)
        # sftp: a put and a get
        small = os.path.join(self.tmp, "small")
        small_sha = c.write_blob(small, SFTP_SIZE)
        batch = os.path.join(self.tmp, "batch")
        with open(batch, "w") as f:
            f.write(f"put {small} {self.tmp}/put\nget {small} {self.tmp}/got\n")
        self.assert_exit(self.start("sftp", [*self.sftp, "-b", batch, host], c_under), 30)
        for name in ("put", "got"):
            self.check_file(os.path.join(self.tmp, name), small_sha, SFTP_SIZE)
        self.stop_server(server, codes=(0, 255, -signal.SIGTERM))
        if scenario != c.BOTH:
            self.check_sides(scenario, connections=3, client_sent=SCP_SIZE,
                             server_sent=SFTP_SIZE)
            return
        where = self.stat_text() + self.context()
        client = self.side_records("client")
        total = lambda recs, key: sum(r[key] for r in recs)
        self.assertGreaterEqual(total(client, "carried"), 3, where)
        self.assertGreaterEqual(total(client, "migrated"), 3, "stepped aside: " + where)
        self.assertEqual(total(client, "kernel") + total(client, "fell_back"), 0, where)
        self.assertGreaterEqual(total(self.side_records("server"), "carried"), 3, where)


if __name__ == "__main__":
    c.main([SSHD, "ssh", "scp", "sftp", "ssh-keygen"])
