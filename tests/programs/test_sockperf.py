#!/usr/bin/env python3
"""sockperf (unmodified) under `sovia run`: a 2 s TCP ping-pong of 16-byte
messages and a 2 s throughput test of 1400-byte messages, with both sides
under sovia and with only one.

The ping-pong runs with epoll on both sides: sockperf waits in epoll only
with a feed file (-f, "T:ip:port") and -F epoll; given one address (-i/-p)
it blocks in recvfrom instead, which is what the throughput test uses.

sockperf sizes its table of sent messages for --mps messages a second
(600000 when not given) and stops with "_seqN > m_maxSequenceNo" when a
transport beats that; sovia does, so the ping-pong gives --mps 1000000
(which also paces the sender at one message per microsecond at most).

usage: test_sockperf.py --sovia /path/to/sovia
"""
import os
import re

import progtest as pt

SECONDS = "2"


class Sockperf(pt.ProgramCase):
    def server(self, scenario, port, epoll):
        s_under, _ = pt.under(scenario)
        if epoll:
            feed = os.path.join(self.tmp, "feed.txt")
            with open(feed, "w") as f:
                f.write(f"T:127.0.0.1:{port}\n")
            args = ["-f", feed, "-F", "epoll"]
        else:
            args = ["--tcp", "-i", "127.0.0.1", "-p", str(port)]
        return self.start_server("sockperf-server", ["sockperf", "server", *args], s_under, port)

    def client_done(self, client):
        self.assert_exit(client, 30)
        self.assertIn("Test ended", client.out(), self.context())

    def server_done(self, server):
        """The server is still serving, and ends on SIGINT (exit code 0)."""
        if not server.alive():
            server.wait(5)
            self.fail(f"sockperf server died (exit code {server.rc})" + self.context())
        self.assertEqual(server.stop(), 0, "sockperf server did not end on SIGINT"
                         + self.context())

    def pingpong(self, scenario):
        port = pt.free_port()
        _, c_under = pt.under(scenario)
        server = self.server(scenario, port, epoll=True)
        client = self.start("sockperf-pingpong",
                            ["sockperf", "ping-pong", "-f", os.path.join(self.tmp, "feed.txt"),
                             "-F", "epoll", "-m", "16", "-t", SECONDS, "--mps", "1000000"],
                            c_under)
        self.client_done(client)
        out = client.out()
        self.assertIn("using epoll()", out)
        m = re.search(r"Summary: Latency is ([0-9.]+) usec", out)
        self.assertIsNotNone(m, "no latency summary" + self.context())
        avg = float(m.group(1))
        m = re.search(r"\[Valid Duration\].*SentMessages=(\d+); ReceivedMessages=(\d+)", out)
        self.assertIsNotNone(m, "no message counts" + self.context())
        sent, received = int(m.group(1)), int(m.group(2))
        self.assertGreater(received, 0)
        self.assertIn("# dropped messages = 0; # duplicated messages = 0; "
                      "# out-of-order messages = 0", out)
        pt.report(f"sockperf ping-pong (epoll) {scenario}: avg latency {avg} us, "
                  f"{received} round trips in the valid {SECONDS} s window")
        # Not a performance check: kernel TCP does tens of thousands here even
        # on a loaded machine; a handful means messages wait for a timer.
        with self.subTest(check="messages not held back", scenario=scenario):
            self.assertGreater(received, 1000, f"only {received} round trips, average "
                               f"latency {avg} us")
        self.server_done(server)
        self.check_records(scenario, server, client)

    def throughput(self, scenario):
        port = pt.free_port()
        _, c_under = pt.under(scenario)
        server = self.server(scenario, port, epoll=False)
        client = self.start("sockperf-throughput",
                            ["sockperf", "throughput", "--tcp", "-i", "127.0.0.1", "-p", str(port),
                             "-m", "1400", "-t", SECONDS], c_under)
        self.client_done(client)
        self.server_done(server)
        out = client.out()
        m = re.search(r"Summary: Message Rate is (\d+) \[msg/sec\]", out)
        self.assertIsNotNone(m, "no message rate summary" + self.context())
        rate = int(m.group(1))
        self.assertGreater(rate, 0)
        bw = re.search(r"Summary: BandWidth is ([0-9.]+) MBps", out)
        pt.report(f"sockperf throughput {scenario}: {rate} msg/s"
                  + (f", {float(bw.group(1)) * 8 / 1000:.2f} Gb/s" if bw else ""))
        # The throughput client only sends; the server only receives.
        self.check_records(scenario, server, client, sent=(True, False),
                           received=(False, True))

    def test_pingpong_epoll_both_under_sovia(self):
        self.pingpong(pt.BOTH)

    def test_pingpong_epoll_client_only_under_sovia(self):
        self.pingpong(pt.CLIENT_ONLY)

    def test_pingpong_epoll_server_only_under_sovia(self):
        self.pingpong(pt.SERVER_ONLY)

    def test_throughput_both_under_sovia(self):
        self.throughput(pt.BOTH)

    def test_throughput_client_only_under_sovia(self):
        self.throughput(pt.CLIENT_ONLY)

    def test_throughput_server_only_under_sovia(self):
        self.throughput(pt.SERVER_ONLY)


if __name__ == "__main__":
    pt.main(["sockperf"])
