#!/usr/bin/env python3
"""Debian's FTP client (`ftp`, tnftp), unmodified, on a command script
against a ftp_server.Server; its transfer reports parsed, and the
SOVIA_STAT_LOG exit records (src/preload/exitlog.c) read back.
"""
import json
import os
import re
import signal
import subprocess
import time

from ftp_server import FTP, USER, sovia_run

# tnftp's summary of one transfer, e.g.
# "1048576 bytes received in 00:00 (23.12 MiB/s)"
TRANSFER = re.compile(r"^(\d+) bytes? (received|sent) in [\d:]+ \(([\d.]+) ([KMGTP]?)i?B/s\)")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


class ClientResult:
    def __init__(self, argv, pid, rc, out, err, wall):
        # pid: `sovia run` execs the program, so its exit record has this pid
        self.argv, self.pid, self.rc, self.out, self.err, self.wall = argv, pid, rc, out, err, wall
        # [(bytes, "received"|"sent", seconds)], in order
        self.transfers = []
        for line in out.splitlines():
            m = TRANSFER.match(line.strip())
            if m:
                n, rate = int(m.group(1)), float(m.group(3)) * UNITS[m.group(4)]
                self.transfers.append((n, m.group(2), n / rate if rate else 0.0))

    def replies(self, code):
        """Lines of the client's output with this reply code."""
        return [l for l in self.out.splitlines() if l.startswith(f"{code} ")]

    def listing(self):
        """{name: size} of the `dir` output (ls -l lines after the 150
        reply that names /bin/ls, up to the 226)."""
        files, inside = {}, False
        for line in self.out.splitlines():
            if line.startswith("150 ") and "/bin/ls" in line:
                inside = True
            elif inside and line[:3].isdigit() and line[3:4] == " ":
                break
            elif inside:
                f = line.split()
                if len(f) >= 9 and f[0][0] == "-":
                    files[" ".join(f[8:])] = int(f[4])
        return files

    def describe(self):
        return (f"$ {' '.join(self.argv)}\n(rc {self.rc}, {self.wall:.2f} s)\n"
                f"--- stdout:\n{self.out}\n--- stderr:\n{self.err}")


def script(server, commands, passive=True, remote_dir=None, local_dir=None):
    """An ftp command script: log in, binary, the mode, the directories,
    the commands, quit."""
    lines = [f"user {USER} {server.password}", "binary",
             f"passive {'on' if passive else 'off'}"]
    if remote_dir:
        lines.append(f"cd {remote_dir}")
    if local_dir:
        lines.append(f"lcd {local_dir}")
    return "\n".join([*lines, *commands, "quit", ""])


def run_client(server, commands, cwd, sovia=None, passive=True, remote_dir=None, env=None,
               timeout=60, on_timeout=None, profile=None, netns=None):
    """Runs `ftp -n -v ADDR PORT` (the server's; under `sovia run` with
    `sovia`; in network namespace `netns` when given) on a command script,
    in `cwd`; ClientResult (rc None: killed at timeout, after
    on_timeout(client pid) looked at the stuck processes)."""
    argv = sovia_run(sovia, profile, [FTP, "-n", "-v", server.addr, str(server.port)])
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    text = script(server, commands, passive, remote_dir)
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=cwd, env=e, start_new_session=True)
    try:
        out, err = p.communicate(text.encode(), timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        if on_timeout:
            on_timeout(p.pid)
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    return ClientResult(argv, p.pid, rc, out.decode(errors="replace"),
                        err.decode(errors="replace"), time.monotonic() - t0)


def run_abort(server, remote_file, cwd, sovia=None, passive=True, remote_dir=None, env=None,
              after_s=0.5, timeout=20):
    """`get remote_file /dev/null`, interrupted (SIGINT, as Ctrl-C) after
    after_s seconds: ftp sends ABOR with TCP urgent data (Telnet IP, then
    the data mark urgent), ftpd takes SIGURG and answers 426 and 226; then
    `pwd` and `quit` on the same control connection. ClientResult (rc None:
    killed at timeout)."""
    argv = sovia_run(sovia, None, [FTP, "-n", "-v", "127.0.0.1", str(server.port)])
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    text = script(server, [f"get {remote_file} /dev/null"], passive, remote_dir)
    text = text[:text.rindex("quit\n")]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=cwd, env=e, start_new_session=True)
    try:
        p.stdin.write(text.encode())
        p.stdin.flush()
        time.sleep(after_s)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(b"pwd\nquit\n", timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        rc = None
    return ClientResult(argv, p.pid, rc, out.decode(errors="replace"),
                        err.decode(errors="replace"), time.monotonic() - t0)


def exit_record(log, pid):
    """The SOVIA_STAT_LOG record (src/preload/exitlog.c) of pid, or None."""
    try:
        with open(log) as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return None
    return next((r for r in recs if r["pid"] == pid), None)
