#!/usr/bin/env python3
"""`sovia run` across hosts against kernel TCP, on two hosts of
scripts/cluster.sh (issue 17 item 4): a measurement, not a test.

usage: scripts/cluster.sh run 2 scripts/xhost_times.py SOVIA [ROUNDS]

Rounds interleave the sovia and kernel variants (A B A B ...); each line
gives the median of the rounds' figures and their range.

  iperf3    iperf3 -l 64K -t 3 from host 2 to host 1: both ends under
            `sovia run` (SOVIA_PROVIDER=fabric:tcp, one cluster key), or
            neither (kernel TCP over the same veth); `two NICs`: under
            `sovia run` with the key only (shm beside fabric, the default).
  no_sovia  host 1 runs a plain echo server (no sovia): a client on host 2
            opens 200 connections, each connect() + 16 bytes there and back
            + close, timed one by one (median per round); `first` is its
            first connection (first contact: the refused fabric connect).
            Under `sovia run` with the key, or not at all.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SOVIA = None
NS = os.environ.get("SOVIA_CLUSTER")
ADDRS = os.environ.get("SOVIA_CLUSTER_ADDRS", "").split()

ECHO_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(512)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    b = c.recv(16)
    c.sendall(b)
    c.close()
"""

CLIENT = r"""
import socket, sys, time, statistics
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times = []
for i in range(n):
    t0 = time.perf_counter_ns()
    c = socket.create_connection((host, port))
    c.sendall(b"x" * 16)
    got = b""
    while len(got) < 16:
        b = c.recv(16 - len(got))
        if not b:
            raise SystemExit("short echo")
        got += b
    c.close()
    times.append(time.perf_counter_ns() - t0)
print(times[0], statistics.median(times[1:]), flush=True)
"""


def in_host(h, argv, under, env):
    if under == "nokey":
        env = {k: v for k, v in env.items() if k != "SOVIA_CLUSTER_KEY_FILE"}
    cmd = ["ip", "netns", "exec", f"{NS}-{h}", *(([SOVIA, "run", "--"] if under else []) + argv)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)


def line(name, a, b, unit, c=None, c_name="sovia without key"):
    def f(v):
        return f"{statistics.median(v):.1f} [{min(v):.1f}-{max(v):.1f}]"
    extra = f"   {c_name} {f(c)} {unit}" if c else ""
    print(f"{name:22s} sovia {f(a)} {unit}   kernel {f(b)} {unit}   ratio "
          f"{statistics.median(a) / statistics.median(b):.2f}{extra}", flush=True)


def listening_ports(h):
    out = subprocess.run(["ip", "netns", "exec", f"{NS}-{h}", "ss", "-Hltn"], capture_output=True,
                         text=True, timeout=30).stdout
    return {ln.split()[3].rsplit(":", 1)[1] for ln in out.splitlines() if ln.strip()}


def open_far_side(port):
    """Host 1's listener at `port` opens its far side: a client from host 2
    without sovia connects once; then its fabric port listens."""
    before = listening_ports(1)
    subprocess.run(["ip", "netns", "exec", f"{NS}-2", sys.executable, "-c",
                    "import socket,sys; socket.create_connection((sys.argv[1], "
                    "int(sys.argv[2])), timeout=20).close()", ADDRS[0], str(port)],
                   check=True, timeout=60)
    end = time.monotonic() + 30
    while not listening_ports(1) - before and time.monotonic() < end:
        time.sleep(0.05)


def main():
    global SOVIA
    SOVIA = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not NS or len(ADDRS) < 2:
        sys.exit("run under scripts/cluster.sh run 2")
    d = tempfile.mkdtemp(prefix="sovia-xtimes-")

    def stop(*_):  # cluster.sh's time limit: the key goes with us
        shutil.rmtree(d, ignore_errors=True)
        os._exit(143)
    signal.signal(signal.SIGTERM, stop)
    try:
        measure(d, rounds)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def measure(d, rounds):
    key = os.path.join(d, "key")
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, os.urandom(32))
    os.close(fd)
    env = dict(os.environ, SOVIA_PROVIDER="fabric:tcp", SOVIA_CLUSTER_KEY_FILE=key)
    print(f"load {os.getloadavg()[0]:.1f} (1 min) at start; {rounds} rounds each", flush=True)

    # iperf3
    bw = {True: [], False: [], "two": []}
    # The key alone: shm for this host, fabric for the other (far.c).
    two_env = {k: v for k, v in env.items() if k != "SOVIA_PROVIDER"}
    port = 5201
    for r in range(rounds):
        for under in (True, False, "two"):
            port += 1
            e = two_env if under == "two" else env
            # Two NICs: the listener's far side starts when a first client
            # from another host comes (a bare connect here, which iperf3
            # shrugs off unless -1), and listens ~0.4 s later.
            one = [] if under == "two" else ["-1"]
            srv = in_host(1, ["iperf3", "-s", *one, "-p", str(port)], bool(under), e)
            time.sleep(0.5)
            if under == "two":
                open_far_side(port)
            cli = in_host(2, ["iperf3", "-c", ADDRS[0], "-p", str(port), "-t", "3", "-l", "64K",
                              "-J"], bool(under), e)
            out, _ = cli.communicate(timeout=60)
            if under == "two":
                srv.kill()
            srv.wait(timeout=30)
            bw[under].append(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9)
    line("iperf3 -l 64K", bw[True], bw[False], "Gbit/s", bw["two"], "sovia two NICs")

    # connect + first exchange to a host without sovia
    srv = in_host(1, [sys.executable, "-c", ECHO_SERVER, "6000"], False, env)
    srv.stdout.readline()
    first = {True: [], False: [], "nokey": []}
    med = {True: [], False: [], "nokey": []}
    for r in range(rounds):
        for under in (True, False, "nokey"):
            cli = in_host(2, [sys.executable, "-c", CLIENT, ADDRS[0], "6000", "201"], under, env)
            out, _ = cli.communicate(timeout=60)
            f, m = out.split()
            first[under].append(int(f) / 1000)
            med[under].append(float(m) / 1000)
    srv.kill()
    line("no_sovia first", first[True], first[False], "us", first["nokey"])
    line("no_sovia after", med[True], med[False], "us", med["nokey"])
    print(f"load {os.getloadavg()[0]:.1f} (1 min) at end", flush=True)


if __name__ == "__main__":
    main()
