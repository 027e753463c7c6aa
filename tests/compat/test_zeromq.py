#!/usr/bin/env python3
"""ZeroMQ (libzmq through pyzmq, Debian's python3-zmq; progs/zmq_prog.py)
under `sovia run`, both ends and one end only: REQ/REP, 300 requests of
1..64 KiB each answered with its SHA-256 and checked; PUSH/PULL, 300
messages of 1..64 KiB whose SHA-256 in order both ends print. libzmq
moves the bytes in an I/O thread of its own, with epoll and eventfd
signalling between threads. Records: carried both ways, or kernel TCP.

usage: test_zeromq.py --sovia /path/to/sovia --bindir DIR
"""
import os
import re

import compat as c

N, SIZE = 300, 64 << 10


class ZmqCase(c.CompatCase):
    def pair(self, scenario, server_role, client_role):
        """The binding end's output, the connecting end's, and the bytes
        the connecting end says it sent."""
        s_under, c_under = c.under(scenario)
        port = c.free_port()
        prog = [c.DEBIAN_PYTHON, os.path.join(c.PROGS, "zmq_prog.py")]
        server = self.start_server(server_role, [*prog, server_role, str(port), str(N)],
                                   s_under, port)
        client = self.start(client_role, [*prog, client_role, str(port), str(N), str(SIZE)],
                            c_under)
        self.assert_exit(client, 40)
        self.assert_exit(server, 30)
        size = re.search(r", (\d+) bytes", client.out())
        self.assertIsNotNone(size, self.context())
        return server.out(), client.out(), int(size.group(1))


@c.scenarios()
class ReqRep(ZmqCase):
    def run_scenario(self, scenario):
        served, ok, size = self.pair(scenario, "rep", "req")
        self.assertEqual(served, f"served {N} requests\n", self.context())
        self.assertEqual(ok, f"ok {N} requests, {size} bytes\n", self.context())
        self.check_sides(scenario, client_sent=size, server_sent=N * 64)


@c.scenarios()
class PushPull(ZmqCase):
    def run_scenario(self, scenario):
        received, sent, size = self.pair(scenario, "pull", "push")
        self.assertRegex(sent, rf"^sent {N} messages, {size} bytes, sha [0-9a-f]{{64}}\n$")
        self.assertEqual(received, sent.replace("sent", "received", 1), self.context())
        self.check_sides(scenario, client_sent=size, server_sent=0)


if __name__ == "__main__":
    c.main(modules=["zmq"])
