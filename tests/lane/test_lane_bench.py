#!/usr/bin/env python3
"""`sovia bench --transport lane`: kernel TCP between two namespaces of the
run's own over a LANE link. A ping-pong and a bandwidth run complete with
plausible numbers and leave no device, namespace, forwarder or /dev/shm
file behind; where TUN or namespaces are refused the run says unavailable
(exit 3) and this test skips (77) with that reason."""
import json
import os
import subprocess
import sys

SOVIA = sys.argv[1]


def links():
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout


def main():
    before_shm, before_links = set(os.listdir("/dev/shm")), links()
    for mode, args in (("lat", ["--size", "4", "--iters", "300"]),
                       ("bw", ["--size", "65536", "--seconds", "0.3"])):
        r = subprocess.run([SOVIA, "bench", mode, "--transport", "lane", "--json"] + args,
                           capture_output=True, text=True, timeout=120)
        if r.returncode == 3:
            print("SKIP:", r.stderr.strip())
            sys.exit(77)
        assert r.returncode == 0, (mode, r.returncode, r.stderr)
        row = json.loads(r.stdout.strip().splitlines()[-1])
        assert row["transport"] == "lane", row
        if mode == "lat":
            assert 0 < row["one_way_p50_us"] < 100000, row
        else:
            assert row["gbps"] > 0.01, row
    leftover = set(os.listdir("/dev/shm")) - before_shm
    assert not leftover, leftover
    assert links() == before_links, (before_links, links())
    left = subprocess.run(["pgrep", "-f", "bench .* --transport lane"], capture_output=True,
                          text=True).stdout.split()
    assert not left, left
    print("ok")


if __name__ == "__main__":
    main()
