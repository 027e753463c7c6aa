#!/usr/bin/env python3
"""fabric across two network namespaces joined by a veth pair (issue 17).

Makes two namespaces and a veth pair with private addresses of a random
/30 in 10.201.0.0/16 (one not already on this host), runs
test_vipl_fabric_netns as server in one and client in the other over
fabric:tcp, and removes both namespaces (and with them the veth pair)
however the test ends: normally, by exception, or by SIGTERM/SIGINT.
Needs root (CAP_NET_ADMIN); without it the test is skipped (exit 77).
Usage: test_fabric_netns.py PATH_TO_test_vipl_fabric_netns
"""
import os
import random
import signal
import subprocess
import sys

made = []
procs = []


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def cleanup(*_):
    while procs:  # a process inside would keep its namespace alive
        p = procs.pop()
        if p.poll() is None:
            p.kill()
            p.wait()
    while made:
        ip("netns", "del", made.pop(), check=False)


def on_signal(signum, frame):
    cleanup()
    sys.exit(128 + signum)


def free_subnet():
    used = ip("-o", "-4", "addr").stdout
    for _ in range(100):
        a, b = random.randrange(256), random.randrange(0, 256, 4)
        if f"10.201.{a}." not in used:
            return f"10.201.{a}.{b + 1}", f"10.201.{a}.{b + 2}"
    raise RuntimeError("no free 10.201.x.y/30")


def main():
    prog = sys.argv[1]
    if os.geteuid() != 0:
        print("fabric_netns: needs root for network namespaces; skipped")
        return 77
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    tag = f"{os.getpid()}"
    ns_a, ns_b = f"sovia-fa-{tag}", f"sovia-fb-{tag}"
    va, vb = f"sfa{tag}"[:15], f"sfb{tag}"[:15]
    addr_a, addr_b = free_subnet()
    try:
        for ns in (ns_a, ns_b):
            ip("netns", "add", ns)
            made.append(ns)
        ip("link", "add", va, "netns", ns_a, "type", "veth", "peer", "name", vb, "netns", ns_b)
        for ns, dev, addr in ((ns_a, va, addr_a), (ns_b, vb, addr_b)):
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        env = dict(os.environ, SOVIA_PROVIDER="fabric:tcp")
        disc = f"netns-{tag}"
        server = subprocess.Popen(["ip", "netns", "exec", ns_b, prog, "server", addr_b, disc],
                                  env=env)
        procs.append(server)
        client = subprocess.Popen(["ip", "netns", "exec", ns_a, prog, "client", addr_b, disc],
                                  env=env)
        procs.append(client)
        rc_client = client.wait(timeout=60)
        rc_server = server.wait(timeout=60)
        print(f"fabric_netns: {addr_a} ({ns_a}) -> {addr_b} ({ns_b}): client {rc_client},"
              f" server {rc_server}")
        return 0 if rc_client == 0 and rc_server == 0 else 1
    finally:
        cleanup()
        left = [n for n in (ns_a, ns_b) if n in ip("netns", "list").stdout]
        if left:
            print(f"fabric_netns: namespaces left behind: {left}")
            return 1


if __name__ == "__main__":
    sys.exit(main())
