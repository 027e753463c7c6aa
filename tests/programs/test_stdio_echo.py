#!/usr/bin/env python3
"""stdio_echo (fdopen + fprintf + fgets on a socket, seed paper Fig. 3
style) under `sovia run`: 2000 lines of up to 3 KB echoed one at a time,
checked line for line by the client; both under sovia (with each
profile), then only one side.

usage: test_stdio_echo.py --sovia /path/to/sovia --bindir DIR
    (DIR holds the stdio_echo program)
"""
import os

import progtest as pt

LINES = 2000


class StdioEcho(pt.ProgramCase):
    def scenario(self, scenario, profile=None):
        prog = os.path.join(pt.BINDIR, "stdio_echo")
        port = pt.free_port()
        s_under, c_under = pt.under(scenario)
        server = self.start_server("stdio_echo-server", [prog, "server", str(port)], s_under,
                                   port, profile)
        client = self.start("stdio_echo-client", [prog, "client", str(port), str(LINES)],
                            c_under, profile)
        self.assert_exit(client, 40)
        self.assert_exit(server, 15)
        self.assertEqual(client.out().strip(), f"client: {LINES} lines ok", self.context())
        self.assertEqual(server.out().strip(), f"server: {LINES} lines", self.context())
        self.check_records(scenario, server, client)
        r = self.record_of(client)
        if r:
            pt.report(f"stdio_echo {scenario}: client record {r}")

    def test_both_under_sovia(self):
        self.scenario(pt.BOTH)

    def test_client_only_under_sovia(self):
        self.scenario(pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.scenario(pt.SERVER_ONLY)

    def test_both_under_sovia_latency_profile(self):
        self.scenario(pt.BOTH, "latency")

    def test_both_under_sovia_throughput_profile(self):
        self.scenario(pt.BOTH, "throughput")


if __name__ == "__main__":
    pt.main()
