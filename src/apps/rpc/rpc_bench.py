#!/usr/bin/env python3
"""The RPC experiment of seed 000 (section 5.4, Fig. 10): the average time
of one remote call against the argument's size, over kernel TCP and over
sovia (server and client both under `sovia run`), with the unmodified
rpc_server and rpc_client of this folder.

Each round measures each transport in turn (the order alternates between
rounds, so drifting load hits both alike): a server (plain, or under
sovia) with a fresh program number, then one client that makes CALLS
timed calls per size on one connection after a tenth as many warm-up
calls (50 ms of them at least), then the server is stopped, so nothing else of ours runs while
the other transport is measured. Size 0 calls the void-argument
procedure (Fig. 10's x = 0, the "null RPC"). The sovia figures are only
printed if the SOVIA_STAT_LOG records show that sovia carried every sovia
client's connection.

--tcp-cpu CPU runs the kernel TCP pair on one CPU. On a virtual machine
whose idle vCPUs wake slowly, a TCP ping-pong between two CPUs pays that
wake-up on every call when the machine is otherwise idle (measured here:
45-75 us per null call across CPUs, 6.7 us on one CPU, 7 us across CPUs
while other work keeps them awake); one CPU gives kernel TCP its best
case. sovia's pair spins (latency profile, or balanced up to its spin
budget), so it is not pinned: two spinners on one CPU would take turns.

Prints one JSON line per size and transport:
  {"arg_bytes": 0, "transport": "tcp", "mean_us": 7.1, "median_round_us": 7.0,
   "calls": 60000, "profile": "balanced", "tcp_cpu": null}
mean_us is over all rounds' timed calls (every round makes the same
number); median_round_us, the median of the rounds' means, is what to look
at on a machine other programs load (a spinning waiter whose peer has no
core to run on costs tens of microseconds a call). Exit 1 if anything
failed (the reason on stderr). Needs rpcbind (started with `rpcbind -f`
for the run if none is running, which needs root).

usage: rpc_bench.py (--build DIR | --sovia PATH --bindir DIR)
                    [--sizes 0,64,256,1024,4096] [--calls 20000] [--rounds 3]
                    [--profile latency|throughput|balanced] [--tcp-cpu CPU]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rpcenv  # noqa: E402

TRANSPORTS = ("tcp", "sovia")


class Bench:
    def __init__(self, args):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="rpcbench-", dir="/tmp")
        self.statlog = os.path.join(self.tmp, "stat.jsonl")
        self.servers = []
        self.rpcbind = rpcenv.Rpcbind()

    def env(self):
        e = dict(os.environ)
        e.pop("LD_PRELOAD", None)
        e["SOVIA_STAT_LOG"] = self.statlog
        return e

    def command(self, transport, argv):
        if transport == "tcp":
            if self.args.tcp_cpu is not None:
                return ["taskset", "-c", str(self.args.tcp_cpu), *argv]
            return argv
        profile = ["--profile", self.args.profile] if self.args.profile else []
        return [self.args.sovia, "run", *profile, "--", *argv]

    def start_server(self, transport):
        prog = rpcenv.program_number()
        out = os.path.join(self.tmp, f"server-{transport}.out")
        with open(out, "wb") as f:
            p = subprocess.Popen(self.command(transport, [os.path.join(self.args.bindir,
                                 "rpc_server"), "-P", hex(prog)]),
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 env=self.env(), start_new_session=True)
        self.servers.append(p)
        if rpcenv.wait_ready(out, lambda: p.poll() is None) is None:
            with open(out, errors="replace") as f:
                raise RuntimeError(f"{transport} rpc_server did not start: {f.read()}")
        return prog, p

    def stop_server(self, p):
        """SIGINT: the server unregisters and exits (and writes its exit
        record); killed if it will not."""
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    def run_client(self, transport, prog):
        """One client run: ({size: mean microseconds}, its pid)."""
        argv = [os.path.join(self.args.bindir, "rpc_client"), "-P", hex(prog), "localhost",
                "bench", str(self.args.calls), *map(str, self.args.sizes)]
        p = subprocess.Popen(self.command(transport, argv), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env(), start_new_session=True)
        try:
            out, err = p.communicate(timeout=60 + self.args.calls * len(self.args.sizes) * 0.01)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise RuntimeError(f"{transport} rpc_client timed out")
        if p.returncode != 0:
            raise RuntimeError(f"{transport} rpc_client failed ({p.returncode}): {err}")
        means = {int(s): float(t) for s, t in (l.split() for l in out.splitlines())}
        if sorted(means) != sorted(self.args.sizes):
            raise RuntimeError(f"{transport} rpc_client: unexpected output {out!r}")
        return means, p.pid

    def check_carried(self, pids):
        """Every sovia client's connection to its server went over sovia."""
        recs = {}
        if os.path.exists(self.statlog):
            with open(self.statlog) as f:
                for line in f:
                    r = json.loads(line)
                    recs[r["pid"]] = r
        for pid in pids:
            r = recs.get(pid)
            if not r or r["carried"] < 1 or r["bytes_received"] == 0:
                raise RuntimeError(f"sovia did not carry rpc_client pid {pid}: {r}")

    def run(self):
        a = self.args
        self.rpcbind.start()
        rounds = {(s, t): [] for s in a.sizes for t in TRANSPORTS}  # per-round means
        sovia_pids = []
        for rnd in range(a.rounds):
            order = TRANSPORTS if rnd % 2 == 0 else TRANSPORTS[::-1]
            for t in order:
                # Only the measured pair runs: an idle server under sovia
                # may spin (--profile latency) on a core the other needs.
                prog, server = self.start_server(t)
                means, pid = self.run_client(t, prog)
                self.stop_server(server)
                for s, us in means.items():
                    rounds[(s, t)].append(us)
                if t == "sovia":
                    sovia_pids.append(pid)
                print(f"round {rnd + 1}/{a.rounds} {t}: " +
                      " ".join(f"{s}B={us:.2f}us" for s, us in means.items()),
                      file=sys.stderr, flush=True)
        self.check_carried(sovia_pids)
        for s in a.sizes:
            for t in TRANSPORTS:
                r = rounds[(s, t)]
                print(json.dumps({"arg_bytes": s, "transport": t,
                                  "mean_us": round(statistics.fmean(r), 3),
                                  "median_round_us": round(statistics.median(r), 3),
                                  "calls": a.calls * a.rounds,
                                  "profile": a.profile or "balanced",
                                  "tcp_cpu": a.tcp_cpu}), flush=True)

    def close(self):
        """Stops any server left running, then rpcbind if it was started
        here; removes the temporary directory."""
        for p in self.servers:
            self.stop_server(p)
        self.rpcbind.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="sovia's build directory (gives --sovia and --bindir)")
    ap.add_argument("--sovia", help="the sovia command")
    ap.add_argument("--bindir", help="where rpc_server and rpc_client were built")
    ap.add_argument("--sizes", default="0,64,256,1024,4096",
                    help="argument sizes in bytes, 0..4096 (default %(default)s)")
    ap.add_argument("--calls", type=int, default=20000, help="timed calls per size and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", choices=("latency", "throughput", "balanced"),
                    help="sovia run --profile (default: sovia run's own, balanced)")
    ap.add_argument("--tcp-cpu", type=int, metavar="CPU",
                    help="run the tcp server and client both on this CPU (taskset)")
    a = ap.parse_args()
    if a.build:
        a.sovia = a.sovia or os.path.join(a.build, "src", "tools", "sovia", "sovia")
        a.bindir = a.bindir or os.path.join(a.build, "src", "apps", "rpc")
    if not a.sovia or not a.bindir:
        ap.error("give --build, or --sovia and --bindir")
    a.sovia, a.bindir = os.path.abspath(a.sovia), os.path.abspath(a.bindir)
    try:
        a.sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        ap.error(f"bad --sizes {a.sizes!r}")
    if len(set(a.sizes)) != len(a.sizes):
        ap.error("a size given twice in --sizes")
    if any(not 0 <= s <= 4096 for s in a.sizes) or a.calls < 1 or a.rounds < 1:
        ap.error("sizes must be 0..4096, calls and rounds at least 1")
    if a.tcp_cpu is not None and not shutil.which("taskset"):
        ap.error("--tcp-cpu needs taskset (util-linux)")
    for path in (a.sovia, os.path.join(a.bindir, "rpc_server"),
                 os.path.join(a.bindir, "rpc_client")):
        if not os.access(path, os.X_OK):
            ap.error(f"not found: {path}")
    return a


def main():
    bench = Bench(parse_args())
    try:
        bench.run()
    except (RuntimeError, rpcenv.NoRpcbind, OSError, ValueError) as e:
        print(f"rpc_bench: {e}", file=sys.stderr)
        return 1
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
