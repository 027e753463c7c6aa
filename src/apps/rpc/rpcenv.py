"""What the RPC programs need around them, shared by the RPC benchmark
(rpc_bench.py) and its integration test (tests/apps/test_rpc.py): a
running rpcbind, a program number nobody else uses, and a server that
has registered.

rpcbind is machine-wide. If one is running (systemd's, say) it is used
as is; otherwise, as root, one is started in the foreground (`rpcbind -f`,
so no daemon is left behind: stop() ends it by its pid); not root and none
running is a NoRpcbind error, the caller's reason to skip.
"""
import os
import shutil
import signal
import socket
import subprocess
import time

RPCBIND_SOCKET = "/run/rpcbind.sock"  # rpcbind's local (AF_UNIX) transport


class NoRpcbind(Exception):
    """rpcbind is not running and cannot be started here."""


def rpcbind_running():
    """Does an rpcbind answer on its local socket?"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(RPCBIND_SOCKET)
            return True
        except OSError:
            return False


def rpcbind_path():
    for p in (shutil.which("rpcbind"), "/usr/sbin/rpcbind", "/sbin/rpcbind"):
        if p and os.access(p, os.X_OK):
            return p
    return None


class Rpcbind:
    """start() makes sure an rpcbind runs; stop() ends it only if start()
    started it."""

    def __init__(self):
        self.proc = None

    def start(self, timeout=10):
        if rpcbind_running():
            return
        path = rpcbind_path()
        if os.geteuid() != 0:
            raise NoRpcbind("rpcbind is not running and starting it needs root")
        if not path:
            raise NoRpcbind("rpcbind is not running and not installed (Debian: rpcbind)")
        self.proc = subprocess.Popen([path, "-f"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while not rpcbind_running():
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                self.proc = None
                raise NoRpcbind(f"rpcbind -f exited at once: {err.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise NoRpcbind(f"rpcbind not answering on {RPCBIND_SOCKET} after {timeout} s")
            time.sleep(0.02)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc.stderr.close()
        self.proc = None


_count = 0


def program_number():
    """A transient program number (0x40000000..0x5fffffff, RFC 5531's
    "transient" range) unique to this process and call, so concurrent runs
    sharing rpcbind do not take each other's registrations."""
    global _count
    _count += 1
    return 0x40000000 + ((os.getpid() * 64 + _count) % 0x20000000)


def wait_ready(out_path, alive, timeout=15):
    """Waits for the server's "ready prog 0x... port N" line in its output
    file (it prints it once registered with rpcbind); returns the port, or
    None when the server died (alive() false) or the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(out_path) as f:
                for line in f:
                    if line.startswith("ready ") and line.endswith("\n"):
                        return int(line.split()[-1])
        except FileNotFoundError:
            pass
        if not alive():
            return None
        time.sleep(0.02)
    return None
