#!/usr/bin/env python3
"""NetPIPE's NPtcp (unmodified) under `sovia run`: a ping-pong sweep from
1 byte to 64 KiB, then the same sweep in integrity mode (-i: NetPIPE checks
every byte it receives), with both sides under sovia (with each profile) and with only one.

NPtcp's port option is -P (-p is the perturbation, set to 0 for a short
sweep); -n fixes the repeats per size so a sweep takes well under a second.
Debian's NPtcp receiver ends with "error writing or reading synchronization
string: Connection reset by peer" and exit code 3 over plain kernel TCP too:
the receiver's exit code is not checked, only that it ends.

usage: test_netpipe.py --sovia /path/to/sovia
"""
import os

import progtest as pt

UPPER = 65536
REPEATS = "50"


class NetPIPE(pt.ProgramCase):
    def sweep(self, scenario, integrity=False, profile=None):
        port = pt.free_port()
        s_under, c_under = pt.under(scenario)
        common = ["-P", str(port), "-p", "0", "-n", REPEATS, *(["-i"] if integrity else [])]
        server = self.start_server("NPtcp-receiver", ["NPtcp", *common], s_under, port,
                                   profile)
        outfile = os.path.join(self.tmp, "np.out")
        client = self.start("NPtcp-transmitter",
                            ["NPtcp", "-h", "127.0.0.1", *common, "-u", str(UPPER),
                             "-o", outfile], c_under, profile)
        self.assert_exit(client, 40)
        self.assert_exit(server, 15, codes=(0, 3))
        return server, client, outfile

    def check_scenario(self, scenario, profile=None):
        server, client, outfile = self.sweep(scenario, profile=profile)
        with open(outfile) as f:
            rows = [l.split() for l in f if l.strip()]
        self.assertGreater(len(rows), 10, "too few rows in NPtcp output" + self.context())
        sizes = [int(r[0]) for r in rows]
        self.assertEqual(sizes[0], 1)
        self.assertGreaterEqual(max(sizes), UPPER)
        for r in rows:
            self.assertEqual(len(r), 3, r)
            self.assertGreater(float(r[1]), 0, r)  # Mbps
            self.assertGreater(float(r[2]), 0, r)  # seconds, one way
        big = rows[sizes.index(UPPER)]
        label = f"{scenario}{' --profile ' + profile if profile else ''}"
        pt.report(f"NPtcp {label}: {float(rows[0][2]) * 1e6:.2f} us one way at 1 byte, "
                  f"{float(big[1]) / 1000:.2f} Gb/s at {UPPER} bytes")
        self.check_records(scenario, server, client)

        # Integrity mode: NetPIPE checks the contents (fresh connection).
        self.tearDown()
        self.setUp()
        server, client, _ = self.sweep(scenario, integrity=True, profile=profile)
        # NPtcp prints one line per size on stderr.
        lines = [l for l in client.err().splitlines() if "bytes" in l and "times" in l]
        self.assertGreater(len(lines), 10, self.context())
        for l in lines:
            self.assertIn("Integrity check passed", l, self.context())
        self.check_records(scenario, server, client)

    def test_both_under_sovia(self):
        self.check_scenario(pt.BOTH)

    def test_client_only_under_sovia(self):
        self.check_scenario(pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.check_scenario(pt.SERVER_ONLY)

    def test_both_under_sovia_latency_profile(self):
        self.check_scenario(pt.BOTH, "latency")

    def test_both_under_sovia_throughput_profile(self):
        self.check_scenario(pt.BOTH, "throughput")


if __name__ == "__main__":
    pt.main(["NPtcp"])
