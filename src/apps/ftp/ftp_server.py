#!/usr/bin/env python3
"""A private instance of Debian's FTP server (`in.ftpd`, linux-ftpd 0.17
as packaged in ftpd-ssl), unmodified, for src/apps/ftp/ftp_run.py and
tests/apps/test_ftp.py.

The server runs on its own port in one of three modes, each with or
without `sovia run`:

  standalone  `in.ftpd -D`: it detaches and forks one child per client;
  inetd       `inetd -i -E CONF` starts `in.ftpd` per connection (fork,
              exec; -E keeps LD_PRELOAD in the environment);
  inetd-run   plain inetd whose CONF line runs `sovia run -- in.ftpd`:
              the control connection is kernel TCP (inetd accepted it
              outside sovia), the data connections can be carried.

Nothing global is changed: the server runs in a private mount namespace
(unshare -m) in which these files are replaced by private copies, gone
when the namespace's last process ends:

  /etc/services  "ftp" is our port (ftpd -D has no port option)
  /etc/shadow    root's password is a random one of this instance
  /etc/ftpusers  empty (Debian's lists root)
  /var/log/wtmp  a private log (ftpd records each login there)
  /run           an empty tmpfs (inetd writes /run/inetd.pid; pam_systemd
                 finds no logind)

Logging in as root keeps every process at one effective uid: sovia's
listeners are per user (docs/ARCHITECTURE.md), and ftpd keeps the logged-in
user's uid for the data connections. Hence root and CAP_SYS_ADMIN are
needed; `Unavailable` says why not.
"""
import os
import re
import secrets
import shutil
import random
import signal
import socket
import subprocess
import time

FTPD = "/usr/sbin/in.ftpd"
INETD = "/usr/sbin/inetd"
FTP = "ftp"
USER = "root"
# Replaced by private copies inside the server's mount namespace.
PRIVATE_FILES = ("/etc/services", "/etc/shadow", "/etc/ftpusers", "/var/log/wtmp")


class Unavailable(Exception):
    """This machine cannot run the experiment (not root, no namespaces,
    a package missing); the message says what is missing."""


def sovia_run(sovia, profile, argv):
    """argv under `sovia run [--profile P]`, or as is without sovia."""
    if not sovia:
        return list(argv)
    return [sovia, "run", *(["--profile", profile] if profile else []), "--", *argv]


def check_available():
    if os.geteuid() != 0:
        raise Unavailable("needs root (ftpd logs users in; private mount namespace)")
    for prog in (FTPD, INETD, shutil.which(FTP) or FTP, shutil.which("unshare") or "unshare"):
        if not (os.path.isabs(prog) and os.access(prog, os.X_OK)):
            raise Unavailable(f"not installed: {prog} (Debian packages ftpd, ftp, "
                              "openbsd-inetd, util-linux)")
    p = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if p.returncode != 0:
        raise Unavailable(f"no private mount namespace (unshare --mount): {p.stderr.strip()}")


def free_port():
    """A TCP port nobody uses now, whose predecessor is free too: active mode
    ftpd sends from the control port minus one (ftp-data). Taken below the
    ephemeral range and checked on the wildcard without SO_REUSEADDR: with
    thousands of connections in TIME_WAIT (a host that just ran benchmarks),
    bind(0)'s port, or the one below it, is often still held."""
    lo = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = min(int(f.read().split()[0]), 65536)
    except (OSError, ValueError, IndexError):
        hi = 32768
    if hi - lo < 1000:
        lo = 1025
    for _ in range(200):
        port = random.randrange(lo + 1, hi)
        try:
            for p in (port - 1, port):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of ports")


def _tcp_sockets(pid=None):
    """(local port, state, inode) of every TCP socket, v4 and v6, of our
    network namespace or of process `pid`'s."""
    base = f"/proc/{pid}/net" if pid else "/proc/net"
    for name in (f"{base}/tcp", f"{base}/tcp6"):
        try:
            with open(name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fl = row.split()
            yield int(fl[1].rsplit(":", 1)[1], 16), fl[3], fl[9]


def listening_inode(port, pid=None):
    """The inode of the socket listening on `port` (state 0A), or None; in
    process `pid`'s network namespace when given."""
    return next((ino for p, st, ino in _tcp_sockets(pid) if p == port and st == "0A"), None)


def _procs():
    """{pid: (ppid, sid, start time)} of every live process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            fields = st[st.rindex(")") + 2:].split()
            if fields[0] != "Z":  # a zombie is gone already
                out[int(d)] = (int(fields[1]), int(fields[3]), int(fields[19]))
    return out


def _owner_of_socket(inode):
    """Pids holding the socket with this inode."""
    pids, target = [], f"socket:[{inode}]"
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{d}/fd"):
                if os.readlink(f"/proc/{d}/fd/{fd}") == target:
                    pids.append(int(d))
                    break
        except OSError:
            continue
    return pids


def _password_hash(password):
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import crypt  # deprecated in 3.11, gone in 3.13: openssl then
        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_SHA512))
    except ImportError:
        return subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password,
                              capture_output=True, text=True, check=True).stdout.strip()


MODES = ("standalone", "inetd", "inetd-run")


class Server:
    """A private ftpd instance on its own port in one of MODES (see the top
    of this file). With `sovia` (the command's path) the server runs under
    `sovia run`; `env` is added to its environment (e.g. SOVIA_STAT_LOG)."""

    def __init__(self, workdir, mode="standalone", sovia=None, env=None, port=None,
                 start_timeout=15, profile=None, netns=None, addr="127.0.0.1"):
        if mode not in MODES:
            raise ValueError(f"mode: {mode}")
        check_available()
        self.workdir, self.mode, self.sovia, self.profile = workdir, mode, sovia, profile
        # netns: a network namespace (`ip netns` name) to run in, listening
        # on addr there (the report's LANE row: docs/LANE.md)
        self.netns, self.addr = netns, addr
        self.port = port or free_port()
        self.password = secrets.token_hex(12)
        self.env = env or {}
        self.start_timeout = start_timeout
        self.conf = os.path.join(workdir, f"ftpd-{mode}-{self.port}")
        self.proc = None
        self.daemon_pid = None
        self.sids, self.known, self.stopped = set(), {}, False

    # ---- private configuration ----------------------------------------------

    def _write_conf(self):
        os.makedirs(self.conf, mode=0o700)
        files = {}
        with open("/etc/services") as f:
            services = [l for l in f if not re.match(r"ftp\s", l)]
        files["/etc/services"] = "".join(services) + f"ftp\t\t{self.port}/tcp\n"
        h = _password_hash(self.password)
        with open("/etc/shadow") as f:
            lines = f.read().splitlines()
        files["/etc/shadow"] = "".join(
            (f"{USER}:{h}:" + l.split(":", 2)[2] if l.startswith(USER + ":") else l) + "\n"
            for l in lines)
        files["/etc/ftpusers"] = "# private: nobody refused\n"
        files["/var/log/wtmp"] = ""
        for target, text in files.items():
            path = os.path.join(self.conf, os.path.basename(target))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        inetd_conf = os.path.join(self.conf, "inetd.conf")
        ftpd = f"{FTPD} in.ftpd"
        if self.mode == "inetd-run" and self.sovia:
            ftpd = self.sovia + " " + " ".join(["sovia", *sovia_run(self.sovia, self.profile,
                                                                    [FTPD])[1:]])
        with open(inetd_conf, "w") as f:
            f.write(f"{self.addr}:{self.port} stream tcp4 nowait {USER} {ftpd} -4 -z nossl\n")
        return inetd_conf

    def command(self):
        """The argv that starts the server: a shell in a fresh mount
        namespace that mounts the private files, then execs the server."""
        inetd_conf = self._write_conf()
        prog = [FTPD, "-D", "-4", "-z", "nossl"] if self.mode == "standalone" else \
            [INETD, "-i", "-E", inetd_conf]
        if self.mode != "inetd-run":
            prog = sovia_run(self.sovia, self.profile, prog)
        mounts = " && ".join(
            f'{{ [ ! -e {t} ] || mount --bind "$0"/{os.path.basename(t)} {t}; }}'
            for t in PRIVATE_FILES)
        script = f"{mounts} && mount -t tmpfs -o size=1m,mode=755 none /run && exec \"$@\""
        netns = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*netns, "unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                self.conf, *prog]

    # ---- life cycle -----------------------------------------------------------

    def start(self):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update(self.env)
        self.log = os.path.join(self.conf + ".log")
        self.argv = self.command()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while True:
            inode = listening_inode(self.port, self.proc.pid if self.netns else None)
            if inode:
                owners = _owner_of_socket(inode)
                if owners:
                    self.daemon_pid = min(owners)
                    self.pids()  # learn the sessions while their leaders live
                    break
            if self.mode != "standalone" and self.proc.poll() is not None:
                raise RuntimeError(f"inetd exited ({self.proc.returncode}): {self.log_text()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ftpd ({self.mode}) not listening on {self.port} after "
                                   f"{self.start_timeout} s: {self.log_text()}")
            time.sleep(0.02)
        return self

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def pids(self):
        """Every live process of this instance: the sessions of the launcher
        and of the listener (ftpd -D detaches with setsid; its children
        stay in its session), their descendants, and every process found
        so far (an orphan leaves the tree). A pid is known with its start
        time, so a reused pid is never taken for ours."""
        procs = _procs()
        roots = {p for p in (self.proc.pid if self.proc else None, self.daemon_pid) if p}
        for p in roots & procs.keys():
            self.sids.add(procs[p][1])
        found = {p for p, (_, sid, _) in procs.items() if sid in self.sids} | \
                (roots & procs.keys())
        grew = True
        while grew:
            more = {p for p, (pp, _, _) in procs.items() if pp in found} - found
            found |= more
            grew = bool(more)
        for p in found:
            self.known.setdefault(p, procs[p][2])
        return {p for p, t in self.known.items() if p in procs and procs[p][2] == t}

    def stop(self):
        """SIGTERM, then SIGKILL after 3 s, to every process of the
        instance, by pid; the private files are removed. Once only."""
        if self.stopped:
            return
        self.stopped = True
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for p in self.pids():
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                if self.proc:
                    self.proc.poll()
                time.sleep(0.05)
        if self.proc:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.conf, ignore_errors=True)
        try:
            os.unlink(self.log)
        except (OSError, AttributeError):
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
