#!/usr/bin/env python3
"""`sovia lane`: kernel TCP and ICMP between two network namespaces over a
VI (docs/LANE.md). A TCP stream of a few MiB arrives whole (sha256), echoes
of sizes up to 60000 B come back intact (at MTU 65535 and, fragmented, at
1500), with --offload (IFF_VNET_HDR, TSO) TCP crosses in 64 KB segments, and `down`, SIGTERM and SIGKILL of `up` each leave no device,
process or /dev/shm file behind. Namespaces are the test's own, removed
however it exits. Skips (77) without root, /dev/net/tun or netns."""
import json
import os
import signal
import subprocess
import sys
import time

SOVIA = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
HELP = [sys.executable, os.path.join(HERE, "lane_helpers.py")]
TAG = "l22t%d" % os.getpid()
NS = (TAG + "a", TAG + "b")
# Private addresses unique per test run (pid), inside the test's namespaces.
NET = "10.%d.%d" % (200 + os.getpid() % 50, (os.getpid() >> 6) % 250)
ADDR = (NET + ".1", NET + ".2")
made = []


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


def sh(*cmd, check=True, **kw):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=60, **kw)


def cleanup(*_):
    for ns in made:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    made.clear()


def in_ns(ns, *args):
    return ["ip", "netns", "exec", ns] + list(args)


def devices(ns):
    return sh("ip", "-n", ns, "-br", "link").stdout


def shm_files():
    return set(os.listdir("/dev/shm"))


def up(*extra):
    p = subprocess.Popen([SOVIA, "lane", "up", "--ns", NS[0], "--ns", NS[1], "--addr",
                          "%s/30,%s/30" % ADDR, "--dev", "lanet0"] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("lane up"), (line, p.stderr.read() if p.poll() is not None else "")
    for ns, a in zip(NS, ADDR):
        out = sh("ip", "-n", ns, "-4", "addr", "show", "lanet0").stdout
        assert a + "/30" in out, out
    return p


def gone(p, how):
    """After `how` stopped it: up has exited, no forwarder, no device."""
    rc = p.wait(timeout=10)
    # After SIGKILL the forwarders end on their own (PR_SET_PDEATHSIG), a
    # little later: give them a few seconds (sanitizer builds are slow).
    deadline = time.time() + 5
    while True:
        left = sh("pgrep", "-f", "lane up --ns " + NS[0], check=False).stdout.split()
        if not left or time.time() > deadline:
            break
        time.sleep(0.05)
    assert not left, (how, "forwarders left", left)
    for ns in NS:
        assert "lanet0" not in devices(ns), (how, devices(ns))
    return rc


def stream(nbytes):
    port = "5%03d" % (os.getpid() % 1000)
    sink = subprocess.Popen(in_ns(NS[1], *HELP, "sink", ADDR[1], port),
                            stdout=subprocess.PIPE, text=True)
    assert sink.stdout.readline().strip() == "listening"
    src = sh(*in_ns(NS[0], *HELP, "source", ADDR[1], port, str(nbytes), TAG))
    got = sink.communicate(timeout=30)[0].split()
    sent = src.stdout.split()
    assert got == sent and int(got[0]) == nbytes, (sent, got)


def ping(sizes):
    out = sh(*in_ns(NS[0], *HELP, "ping", ADDR[1], *map(str, sizes))).stdout.split("\n")
    assert out[:len(sizes)] == ["%d ok" % s for s in sizes], out


def main():
    if os.geteuid() != 0:
        skip("needs root (TUN devices, network namespaces)")
    if not os.path.exists("/dev/net/tun"):
        skip("no /dev/net/tun")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *a: (cleanup(), sys.exit(1)))
    for ns in NS:
        r = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
        if r.returncode != 0:
            skip("cannot make a network namespace: " + r.stderr.strip())
        made.append(ns)
    shm0 = shm_files()

    # 1. MTU 65535: one frame per 64 KB TCP segment; `down` stops it.
    p = up()
    stream(6 << 20)
    ping([0, 56, 1400, 9000, 60000])
    assert sh(SOVIA, "lane", "down", "--ns", NS[0], "--ns", NS[1], "--dev", "lanet0").returncode == 0
    assert gone(p, "down") == 0
    # 2. MTU 1500: bigger echoes cross as IP fragments; SIGTERM stops it.
    p = up("--mtu", "1500")
    ping([56, 1472, 4000, 60000])
    stream(2 << 20)
    p.send_signal(signal.SIGTERM)
    assert gone(p, "SIGTERM") == 0
    # 3. --offload: MTU 1500, yet TCP crosses in TSO segments of tens of KB
    # (one VI message each, behind a virtio-net header).
    p = up("--offload")
    stream(4 << 20)
    ping([56, 4000])
    tx = sh("ip", "-n", NS[0], "-s", "-j", "link", "show", "lanet0").stdout
    st = json.loads(tx)[0]["stats64"]["tx"]
    assert st["bytes"] / st["packets"] > 8000, st
    p.send_signal(signal.SIGTERM)
    assert gone(p, "SIGTERM") == 0
    # 4. SIGKILL of `up`: its forwarders die with it (PR_SET_PDEATHSIG).
    p = up()
    p.kill()
    gone(p, "SIGKILL")
    assert shm_files() <= shm0, shm_files() - shm0
    # A second link on the same names after all that: nothing was left held.
    p = up()
    ping([56])
    p.send_signal(signal.SIGINT)
    assert gone(p, "SIGINT") == 0
    print("ok")


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
