#!/usr/bin/env python3
"""Debian's FTP server (`in.ftpd`, linux-ftpd 0.17 as packaged in ftpd-ssl)
and client (`ftp`, tnftp), unmodified, on a private instance: the papers'
FTP experiment (seed 000 section 5.3, seed 003 section 4.5).

ftp_server.py runs the server (modes standalone, inetd, inetd-run; private
port, password and files; see there), ftp_client.py the client. As modules
(tests/apps/test_ftp.py):

    with ftp_server.Server(workdir, "standalone", sovia="/path/to/sovia") as srv:
        res = ftp_client.run_client(srv, ["get a.bin b.bin"], cwd, sovia=...)

From the shell:

    ftp_run.py bench --sizes 13374187,168919040,1G [--transports tcp,sovia,ksovia,lane,cp]
                     [--sovia PATH] [--mode MODE] [--active] [--repeat N]
                     [--profile latency|throughput|balanced] [--quickack]
        one JSON line per (size, transport): {"size_bytes", "transport",
        "seconds", "mbps", "runs", "carried", and for ftp "mode", "passive",
        "profile"}; seconds as the ftp client reports them (as in the
        papers), the median of --repeat runs; mbps = 10^6 bit/s; carried
        (sovia: every run's file went over sovia; ksovia, the tcp runs made
        under `sovia ksock`: the BPF path redirected the files). A transport that
        fails gives no row (its error on stderr); exit status 1 only when
        nothing was measured. Default mode inetd-run (its data connections
        are the ones sovia can carry today), passive. --quickack: tcp and
        sovia run in a namespace of the script's own whose loopback routes
        acknowledge at once (class QuickAck says why); their rows say
        "quickack": true.
    ftp_run.py check [--sovia PATH] [--server-sovia] [--client-sovia]
                     [--mode MODE] [--active] [--size 1M]
        one session (get, put, dir), sha256 compared, the client's output
        and SOVIA_STAT_LOG records printed: the command to reproduce a
        failure by hand.
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from ftp_client import exit_record, run_client
from ftp_server import MODES, Server, Unavailable


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def make_file(path, size):
    """`size` random bytes (random, so nothing on the way can compress)."""
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 22)
            f.write(os.urandom(n))
            left -= n


# ---- command line -------------------------------------------------------------

def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"size: {s}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def tmpfs_dir(base):
    """A private directory in tmpfs (srv/, cli/). Its name carries our pid:
    those of runs that were SIGKILLed (no finally ran) are removed first."""
    for name in os.listdir(base):
        m = re.fullmatch(r"ftprun-(\d+)-\w+", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    d = tempfile.mkdtemp(prefix=f"ftprun-{os.getpid()}-", dir=base)
    for sub in ("srv", "cli"):
        os.mkdir(os.path.join(d, sub))
    return d


def one_get(srv, d, size, sovia, passive, timeout, profile=None, netns=None):
    """(seconds the client reports, carried) for one get of srv/f (deleted
    after); carried: the client's exit record shows sovia moved the file."""
    dst, log = os.path.join(d, "cli", "f"), os.path.join(d, "stat.jsonl")
    res = run_client(srv, ["get f"], os.path.join(d, "cli"), sovia, passive,
                     os.path.join(d, "srv"), {"SOVIA_STAT_LOG": log}, timeout,
                     profile=profile, netns=netns)
    try:
        got = [t for t in res.transfers if t[1] == "received"]
        if res.rc != 0 or not got or got[0][0] != size or os.path.getsize(dst) != size:
            last = (res.out.strip().splitlines() or ["(no output)"])[-1]
            how = "killed at the timeout" if res.rc is None else f"exit {res.rc}"
            raise RuntimeError(f"get of {size} bytes failed ({how}; last line: {last})\n"
                               f"{res.describe()}")
        rec = exit_record(log, res.pid)
        return got[0][2], bool(rec and rec["carried"] >= 1 and rec["bytes_received"] >= size)
    finally:
        for p in (dst, log):
            if os.path.exists(p):
                os.unlink(p)


def one_cp(d):
    dst = os.path.join(d, "cli", "f")
    t0 = time.monotonic()
    subprocess.run(["cp", os.path.join(d, "srv", "f"), dst], check=True)
    dt = time.monotonic() - t0
    os.unlink(dst)
    return dt


KSOCK_STATS = re.compile(r"sovia ksock: \d+ sockets collected .*?(\d+) sends redirected "
                         r"\((\d+) bytes\)")


def bench_ksovia(ns, size):
    """(runs, carried) over KSOVIA: the tcp transport's runs made by a copy of
    this script under `sovia ksock`, so the server and the client are both
    in its cgroup (seed 003 Table 4's KSOVIA row). carried: the BPF path
    redirected at least the file's bytes."""
    argv = [ns.sovia, "ksock", "--stats", "--", sys.executable, os.path.abspath(__file__),
            "bench", "--sizes", str(size), "--transports", "tcp", "--repeat", str(ns.repeat),
            "--mode", ns.mode, "--dir", ns.dir, "--timeout", str(ns.timeout)]
    if ns.active:
        argv.append("--active")
    p = subprocess.run(argv, capture_output=True, text=True,
                       timeout=ns.repeat * (ns.timeout + 10) + 30)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode == 3:
        raise RuntimeError("KSOVIA unavailable here: " + p.stderr.strip().splitlines()[-1])
    if p.returncode != 0 or not rows:
        raise RuntimeError(f"sovia ksock ... ftp_run.py exited {p.returncode}: "
                           f"{p.stderr.strip()[-300:]}")
    m = KSOCK_STATS.search(p.stderr)
    return rows[0]["runs"], bool(m and int(m.group(2)) >= size * ns.repeat)


def sweep_namespaces():
    """Removes this script's namespaces of runs whose process is gone
    (SIGKILLed: no handler ran)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (l.split()[0] for l in out.splitlines() if l.strip()):
        m = re.fullmatch(r"sovia-ftp-[abq]-(\d+)-[0-9a-f]{6}", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class QuickAck:
    """A network namespace of our own whose loopback routes carry
    `quickack 1`: kernel TCP acknowledges at once instead of delaying the
    ACK (Linux's delayed-ACK timer is at least 40 ms). ftpd writes its
    "150" and "226" replies on the control connection without TCP_NODELAY;
    the client has nothing to send after "150", so its ACK waits for the
    timer and Nagle holds "226" behind it: every get takes at least ~40 ms
    however small the file (measured: a 100 KB get 42-49 ms over both
    transports, 0.1-0.6 ms with quickack). --quickack measures the transfer
    instead of that timer; removed on exit however the block ends."""
    ROUTES = (["127.0.0.0/8"], ["127.0.0.1"])

    def __init__(self):
        self.ns = f"sovia-ftp-q-{os.getpid()}-{secrets.token_hex(3)}"
        self.made = False

    def __enter__(self):
        sweep_namespaces()
        try:
            for cmd in (["ip", "netns", "add", self.ns],
                        ["ip", "-n", self.ns, "link", "set", "lo", "up"],
                        *(["ip", "-n", self.ns, "route", "change", "local", *dst, "dev", "lo",
                           "table", "local", "proto", "kernel", "scope", "host", "src",
                           "127.0.0.1", "quickack", "1"] for dst in self.ROUTES)):
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError(f"--quickack: {' '.join(cmd)}: {r.stderr.strip()}")
                self.made = True
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.made:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class Lane:
    """Two network namespaces of our own joined by `sovia lane up` (LANE:
    kernel TCP/IP over TUN devices whose frames cross vipl, docs/LANE.md),
    private addresses; removed on exit however the block ends."""
    ADDRS = ("10.231.77.1", "10.231.77.2")

    def __init__(self, sovia):
        self.sovia = sovia
        tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.ns = (f"sovia-ftp-a-{tag}", f"sovia-ftp-b-{tag}")
        self.proc = None

    @staticmethod
    def _die_with_parent():
        # the lane's forwarders go (SIGTERM: they take their devices down)
        # when this script dies, however it dies
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    def __enter__(self):
        sweep_namespaces()
        try:
            for n in self.ns:
                subprocess.run(["ip", "netns", "add", n], check=True, capture_output=True)
            self.proc = subprocess.Popen(
                [self.sovia, "lane", "up", "--ns", self.ns[0], "--ns", self.ns[1],
                 "--addr", ",".join(f"{a}/30" for a in self.ADDRS)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=self._die_with_parent)
            line = self.proc.stdout.readline()
            if not line.startswith("lane up"):
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""
                raise RuntimeError(f"sovia lane up: {line.strip() or err.strip()}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for n in self.ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def bench_lane(ns, d, size):
    """(runs, None) over LANE: the server in one namespace, the client in
    the other, both plain (kernel TCP over the lane)."""
    with Lane(ns.sovia) as lane:
        with Server(d, ns.mode, None, netns=lane.ns[1], addr=lane.ADDRS[1]) as srv:
            got = [one_get(srv, d, size, None, not ns.active, ns.timeout, netns=lane.ns[0])
                   for _ in range(ns.repeat)]
    return [g[0] for g in got], None


def bench_one(ns, d, size, tr):
    """(runs in seconds, carried) of one size over one transport."""
    if tr == "cp":
        return [one_cp(d) for _ in range(ns.repeat)], None
    if tr == "ksovia":
        return bench_ksovia(ns, size)
    if tr == "lane":
        return bench_lane(ns, d, size)
    sovia = ns.sovia if tr == "sovia" else None
    with contextlib.ExitStack() as stack:
        net = stack.enter_context(QuickAck()).ns if ns.quickack else None
        srv = stack.enter_context(Server(d, ns.mode, sovia, profile=ns.profile, netns=net))
        got = [one_get(srv, d, size, sovia, not ns.active, ns.timeout, ns.profile, netns=net)
               for _ in range(ns.repeat)]
    carried = all(g[1] for g in got) if tr == "sovia" else None
    if carried is False:
        print(f"ftp_run: {size} bytes: not carried by sovia in every run "
              "(fell back to kernel TCP)", file=sys.stderr)
    return [g[0] for g in got], carried


def bench(ns):
    """JSON lines: each size, each transport, the median of ns.repeat runs.
    For "sovia", "carried" says whether every run's file went over sovia
    (a connection that fell back to kernel TCP measures TCP). A transport
    that fails gives no row: its error goes to stderr (as a JSON object
    too), and the exit status is 1 only when nothing was measured."""
    d = tmpfs_dir(ns.dir)
    measured = 0
    try:
        for size in ns.sizes:
            make_file(os.path.join(d, "srv", "f"), size)
            for tr in ns.transports:
                row = {"size_bytes": size, "transport": tr}
                if tr != "cp":
                    row.update(mode=ns.mode, passive=not ns.active,
                               profile=ns.profile if tr == "sovia" else None)
                if tr in ("tcp", "sovia") and ns.quickack:
                    row.update(quickack=True)
                try:
                    runs, carried = bench_one(ns, d, size, tr)
                except RuntimeError as e:
                    print(f"ftp_run: {tr}, {size} bytes: {e}", file=sys.stderr)
                    print(json.dumps(dict(row, error=str(e).splitlines()[0])), file=sys.stderr)
                    continue
                sec = statistics.median(runs)
                row.update(seconds=sec, mbps=size * 8 / sec / 1e6, runs=runs, carried=carried)
                print(json.dumps(row), flush=True)
                measured += 1
            os.unlink(os.path.join(d, "srv", "f"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0 if measured else 1


def check(ns):
    """One session: get, put and dir; exit status 0 when all is byte-exact."""
    d = tmpfs_dir(ns.dir)
    log = os.path.join(d, "stat.jsonl")
    env = {"SOVIA_STAT_LOG": log}
    try:
        src = os.path.join(d, "srv", "a.bin")
        make_file(src, ns.size)
        with Server(d, ns.mode, ns.sovia if ns.server_sovia else None, env,
                    profile=ns.profile) as srv:
            print(f"server: {' '.join(srv.argv)}", flush=True)
            res = run_client(srv, ["get a.bin b.bin", "put b.bin c.bin", "dir"],
                             os.path.join(d, "cli"), ns.sovia if ns.client_sovia else None,
                             not ns.active, os.path.join(d, "srv"), env, ns.timeout,
                             profile=ns.profile)
            print(res.describe())
            print(f"server log:\n{srv.log_text()}")
        want = sha256(src)
        ok = res.rc == 0
        for name in ("cli/b.bin", "srv/c.bin"):
            p = os.path.join(d, name)
            got = sha256(p) if os.path.exists(p) else "(missing)"
            print(f"{name}: {'ok' if got == want else 'DIFFERS ' + got}")
            ok = ok and got == want
        if os.path.exists(log):
            with open(log) as f:
                print(f"SOVIA_STAT_LOG:\n{f.read()}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("bench", "check"):
        p = sub.add_parser(name)
        p.add_argument("--sovia", default=shutil.which("sovia"), help="the sovia command")
        # bench: the mode whose data connections sovia carries today (the
        # standalone and inetd modes wait for issue 4's fork and exec work)
        p.add_argument("--mode", choices=MODES,
                       default="inetd-run" if name == "bench" else "standalone")
        p.add_argument("--active", action="store_true", help="active mode (PORT/EPRT)")
        p.add_argument("--dir", default="/dev/shm", help="tmpfs for the files")
        p.add_argument("--profile", choices=("latency", "throughput", "balanced"),
                       help="sovia run --profile (default: sovia's own)")
        p.add_argument("--timeout", type=float, default=120, help="per ftp session, s")
    b = sub.choices["bench"]
    b.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",")],
                   default=[13374187, 168919040, 1 << 30])
    b.add_argument("--transports", type=lambda s: s.split(","), default=["tcp", "sovia", "cp"])
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--quickack", action="store_true",
                   help="tcp and sovia in a network namespace whose loopback acknowledges "
                        "at once (no 40 ms delayed-ACK floor: see QuickAck)")
    c = sub.choices["check"]
    c.add_argument("--size", type=parse_size, default=1 << 20)
    c.add_argument("--server-sovia", action="store_true")
    c.add_argument("--client-sovia", action="store_true")
    ns = ap.parse_args()
    # SIGTERM (a report's timeout) unwinds: servers stop, namespaces go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if (ns.cmd == "bench" and {"sovia", "ksovia", "lane"} & set(ns.transports) or
            ns.cmd == "check" and (ns.server_sovia or ns.client_sovia)) and not ns.sovia:
        ap.error("sovia command not found: give --sovia")
    try:
        sys.exit(bench(ns) if ns.cmd == "bench" else check(ns))
    except Unavailable as e:
        print(f"ftp_run: {e}", file=sys.stderr)
        sys.exit(77)


if __name__ == "__main__":
    main()
