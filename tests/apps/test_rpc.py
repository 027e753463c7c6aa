#!/usr/bin/env python3
"""The papers' RPC program (seed 000 section 5.4) under `sovia run`:
src/apps/rpc's rpc_server and rpc_client, built by rpcgen from strarg.x
over libtirpc, with rpcbind running. The client uses clnt_create(...,
"tcp"), so its connection to the server is the one sovia carries (the
lookup at rpcbind, which does not run under sovia, stays kernel TCP).

Each scenario has the client send strings of 0 to 4096 bytes (the XDR
padding and the copy/register threshold on both sides of each boundary)
and compares its output byte for byte with what this file computes: the
length the server counted (STRARG_LEN) and the FNV-1a checksum of the
bytes it received (STRARG_SUM). SOVIA_STAT_LOG shows which side carried
what (tests/programs/progtest.py). The server stays in the foreground,
single-process (a sovia connection cannot be shared across fork yet).

rpcbind: used if running, else started (`rpcbind -f`) and stopped at the
end, which needs root; not root and none running: skipped (77).

usage: test_rpc.py --sovia /path/to/sovia --bindir <build>/src/apps/rpc
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SRC, "tests", "programs"))
sys.path.insert(0, os.path.join(SRC, "src", "apps", "rpc"))
import progtest as pt  # noqa: E402
import rpcenv  # noqa: E402

# XDR pads strings to 4 bytes; sovia copies below 2048 bytes and registers
# above (SOVIA_COPY_THRESHOLD); 4096 is the .x file's maximum.
SIZES = (0, 1, 3, 4, 5, 63, 64, 65, 1000, 2047, 2048, 2049, 4095, 4096)
ROUNDS = 3  # rpc_client's CHECK_ROUNDS


def pattern(size, rnd):
    """strarg_pattern() of src/apps/rpc/strarg_data.c."""
    return bytes(33 + (31 * i + 7 * size + 13 * rnd) % 94 for i in range(size))


def fnv1a(data):
    """strarg_fnv1a() of src/apps/rpc/strarg_data.c."""
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def expected_output(sizes=SIZES):
    lines = ["null 0"]
    for size in sizes:
        for rnd in range(ROUNDS):
            lines.append(f"{size} {rnd} {size} {fnv1a(pattern(size, rnd))}")
    return "\n".join(lines) + "\n"


def binary(name):
    return os.path.join(pt.BINDIR, name)


def registered(prog):
    """Does rpcbind list `prog` (rpcinfo -p: program numbers in decimal)?"""
    dump = subprocess.run(["rpcinfo", "-p", "localhost"], capture_output=True, text=True,
                          timeout=30)
    if dump.returncode != 0 or "portmapper" not in dump.stdout:
        raise AssertionError(f"rpcinfo -p failed: {dump.stdout}{dump.stderr}")
    return str(prog) in (l.split()[0] for l in dump.stdout.splitlines()[1:] if l.strip())


class Rpc(pt.ProgramCase):
    rpcbind = None

    @classmethod
    def setUpClass(cls):
        cls.rpcbind = rpcenv.Rpcbind()
        cls.rpcbind.start()

    @classmethod
    def tearDownClass(cls):
        cls.rpcbind.stop()

    def start_rpc_server(self, under_sovia, profile=None):
        prog = rpcenv.program_number()
        server = self.start("rpc_server", [binary("rpc_server"), "-P", hex(prog)],
                            under_sovia, profile)
        port = rpcenv.wait_ready(server.out_path, server.alive)
        if port is None:
            server.wait(1)
            self.fail("rpc_server did not register with rpcbind" + self.context())
        self.assertTrue(registered(prog), f"program {prog} not listed by rpcbind")
        return server, prog

    def check_client(self, name, prog, under_sovia, profile=None):
        """Starts a client; returns it running (finish_client checks it)."""
        return self.start(name, [binary("rpc_client"), "-P", hex(prog), "localhost", "check",
                                 *map(str, SIZES)], under_sovia, profile)

    def finish_client(self, client, timeout=30):
        self.assert_exit(client, timeout)
        self.assertEqual(client.out(), expected_output(), f"{client.name}: results differ"
                         + self.context())

    def stop_server(self, server, prog):
        rc = server.stop()
        self.assertEqual(rc, 0, "rpc_server did not end cleanly on SIGINT" + self.context())
        self.assertFalse(registered(prog), f"program {prog} still registered with rpcbind")

    def scenario(self, scenario, profile=None):
        s_under, c_under = pt.under(scenario)
        server, prog = self.start_rpc_server(s_under, profile)
        client = self.check_client("rpc_client", prog, c_under, profile)
        self.finish_client(client)
        self.stop_server(server, prog)
        self.check_records(scenario, server, client)
        return server, client

    def test_both_under_sovia(self):
        server, client = self.scenario(pt.BOTH)
        # Every call and reply went over sovia: the client's connection to
        # rpcbind is the only kernel TCP one.
        rec = self.record_of(client)
        self.assertEqual((rec["carried"], rec["fell_back"], rec["kernel"]), (1, 0, 1),
                         json.dumps(rec))
        self.assertEqual(self.record_of(server)["carried"], 1)

    def test_both_under_sovia_latency_profile(self):
        self.scenario(pt.BOTH, "latency")

    def test_client_only_under_sovia(self):
        self.scenario(pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.scenario(pt.SERVER_ONLY)

    def test_two_clients_at_once(self):
        """The server polls two carried connections (and its listener)."""
        server, prog = self.start_rpc_server(True)
        clients = [self.check_client(f"rpc_client{i}", prog, True) for i in range(2)]
        for c in clients:
            self.finish_client(c)
        self.stop_server(server, prog)
        self.assertEqual(self.check_carried(server)["carried"], 2)
        for c in clients:
            self.check_carried(c)

    def bench(self, sovia, *extra):
        script = os.path.join(SRC, "src", "apps", "rpc", "rpc_bench.py")
        return subprocess.run([sys.executable, script, "--sovia", sovia, "--bindir", pt.BINDIR,
                               "--sizes", "0,64,4096", "--calls", "200", "--rounds", "1",
                               *extra], capture_output=True, text=True, timeout=60)

    def test_bench_script(self):
        """rpc_bench.py (what `sovia report` runs) gives one JSON line per
        size and transport (the tcp pair pinned to CPU 0 here)."""
        p = self.bench(pt.SOVIA, "--tcp-cpu", "0")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual(sorted((r["arg_bytes"], r["transport"]) for r in rows),
                         [(s, t) for s in (0, 64, 4096) for t in ("sovia", "tcp")], p.stdout)
        for r in rows:
            self.assertGreater(r["mean_us"], 0, r)
            self.assertEqual((r["calls"], r["tcp_cpu"]), (200, 0), r)
        pt.report("rpc_bench.py: " + " ".join(f"{r['transport']}/{r['arg_bytes']}="
                                              f"{r['mean_us']:.1f}us" for r in rows))

    def test_bench_script_refuses_uncarried(self):
        """A "sovia" figure measured without sovia is refused, not printed:
        here a stand-in for `sovia run` runs the programs plainly."""
        fake = os.path.join(self.tmp, "plain-run")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
        os.chmod(fake, 0o755)
        p = self.bench(fake)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertIn("sovia did not carry rpc_client", p.stderr)

if __name__ == "__main__":
    if not rpcenv.rpcbind_running() and os.geteuid() != 0:
        print("SKIP: rpcbind is not running and starting it needs root", file=sys.stderr)
        sys.exit(pt.SKIP)
    pt.main(["rpcinfo"])
