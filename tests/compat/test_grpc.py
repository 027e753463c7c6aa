#!/usr/bin/env python3
"""gRPC unary calls (grpcio, Debian's python3-grpcio; progs/grpc_unary.py)
under `sovia run`, both ends and one end only: 150 calls of each of two
methods on one channel (HTTP/2 over one connection), the echo of 1..256
KiB and its SHA-256, every answer checked; the server, ended by SIGTERM,
counts the calls. gRPC's core drives its sockets from threads of its own
with epoll. Records: carried both ways, or kernel TCP.

usage: test_grpc.py --sovia /path/to/sovia --bindir DIR
"""
import os
import re

import compat as c

N, SIZE = 150, 256 << 10


@c.scenarios()
class Grpc(c.CompatCase):
    def run_scenario(self, scenario):
        s_under, c_under = c.under(scenario)
        port = c.free_port()
        prog = [c.DEBIAN_PYTHON, os.path.join(c.PROGS, "grpc_unary.py")]
        server = self.start_server("grpc-server", [*prog, "server", str(port)], s_under, port)
        client = self.start("grpc-client", [*prog, "client", str(port), str(N), str(SIZE)],
                            c_under)
        self.assert_exit(client, 40)
        self.assertRegex(client.out(), rf"^ok {2 * N} calls, \d+ bytes\n$", self.context())
        self.stop_server(server)
        self.assertEqual(server.out(), f"served {2 * N} calls\n", self.context())
        size = int(re.search(r", (\d+) bytes", client.out()).group(1))
        self.check_sides(scenario, client_sent=2 * size, server_sent=size)


if __name__ == "__main__":
    c.main(modules=["grpc"])
