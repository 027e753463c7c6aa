#!/usr/bin/env python3
"""An echo server and client that move their bytes through io_uring
(progs/uring_echo.c, liburing) under `sovia run`. io_uring submissions
bypass libc, so sovia cannot carry them: whatever each end does, the
echo must come back byte for byte (2 connections of 4 MB, in 64 KiB
chunks, each checked), and what one end's record says went over sovia
the other end's must have read over sovia.

- ring on both ends (accept/connect through libc, data through the
  ring), and ring-all (accept/connect through the ring too): both ends,
  one end only;
- a ring server with a client that uses libc alone, and the reverse:
  both under sovia. A process that sets up a ring steps its carried
  connections aside to kernel TCP (src/preload/sandbox.c): the ring then
  reads the bytes the client sent over sovia (on the library before
  migration the ring server read an idle kernel socket and hung).

usage: test_io_uring.py --sovia /path/to/sovia --bindir DIR [--broken]
"""
import compat as c

NCONN, SIZE = 2, 4 << 20


@c.scenarios()
class IoUring(c.CompatCase):
    def echo(self, scenario, server_mode, client_mode):
        prog = c.uring_echo(self)
        self.echo_pair(scenario, lambda port: [prog, "server", str(port), str(NCONN), server_mode],
                       lambda port: [prog, "client", str(port), str(NCONN), str(SIZE),
                                     client_mode], NCONN, SIZE, timeout=15)
        # io_uring's bytes are the kernel's whatever pairing said: only
        # the balance of the records is checked with both ends under sovia
        self.check_sides(scenario, NCONN, carried=None)

    def run_scenario(self, scenario):
        self.echo(scenario, "ring", "ring")

    def test_ring_all_both_under_sovia(self):
        self.echo(c.BOTH, "ring-all", "ring-all")

    def test_ring_all_client_only_under_sovia(self):
        self.echo(c.CLIENT_ONLY, "ring-all", "ring-all")

    def test_ring_all_server_only_under_sovia(self):
        self.echo(c.SERVER_ONLY, "ring-all", "ring-all")

    def test_ring_server_libc_client(self):
        self.echo(c.BOTH, "ring", "libc")

    def test_libc_server_ring_client(self):
        self.echo(c.BOTH, "libc", "ring")

    def test_ring_all_server_libc_client(self):
        """accept() through the ring: the client's pairing times out."""
        self.echo(c.BOTH, "ring-all", "libc")

    def test_ring_client_libc_server_one_end(self):
        """The plain libc program on its own under sovia, against a ring peer."""
        self.echo(c.SERVER_ONLY, "libc", "ring")


if __name__ == "__main__":
    c.main()
