#!/usr/bin/env python3
"""A Go echo server and client (progs/goecho, standard library only,
built with `go build` at test time) under `sovia run`. Go's runtime makes
its system calls itself, so the preload loaded into it sees none of its
socket calls: its connections must stay correct on kernel TCP, with Go on
both ends, on one end, and against a libc program under sovia on the
other end (progs/uring_echo.c in its libc mode), which must find no sovia
peer and use kernel TCP. 4 connections of 8 MB echoed and checked (2 of
4 MB against the libc program).

usage: test_go.py --sovia /path/to/sovia --bindir DIR
"""
import compat as c

NCONN, SIZE = 4, 8 << 20


@c.scenarios()
class Go(c.CompatCase):
    def go(self, role, port, nconn, *size):
        return [c.go_program(self), role, str(port), str(nconn), *map(str, size)]

    def libc(self, role, port, nconn, *size):
        return [c.uring_echo(self), role, str(port), str(nconn), *map(str, size), "libc"]

    def echo(self, scenario, server, client, nconn, size):
        """server, client: one of self.go, self.libc."""
        self.echo_pair(scenario, lambda port: server("server", port, nconn),
                       lambda port: client("client", port, nconn, size), nconn, size)
        server_recs, client_recs = self.check_sides(scenario, nconn, carried=None)
        for rec in server_recs + client_recs:
            self.assertEqual(rec["carried"], 0, f"carried: {rec}" + self.context())
        return server_recs, client_recs

    def run_scenario(self, scenario):
        server_recs, client_recs = self.echo(scenario, self.go, self.go, NCONN, SIZE)
        # no libc socket call, no record
        self.assertEqual(server_recs + client_recs, [], self.context())

    def test_go_server_libc_client(self):
        _, client_recs = self.echo(c.BOTH, self.go, self.libc, 2, 4 << 20)
        self.assertEqual(sum(r["kernel"] + r["fell_back"] for r in client_recs), 2,
                         self.context())

    def test_libc_server_go_client(self):
        server_recs, _ = self.echo(c.BOTH, self.libc, self.go, 2, 4 << 20)
        self.assertEqual(sum(r["kernel"] + r["fell_back"] for r in server_recs), 2,
                         self.context())


if __name__ == "__main__":
    c.main(["go"])
