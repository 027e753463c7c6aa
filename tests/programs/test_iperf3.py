#!/usr/bin/env python3
"""iperf3 (unmodified) under `sovia run`: a 2 s TCP test with 64 KiB writes,
server and client both under sovia (control and data connections carried;
also reversed, -R), then with only one side under sovia (kernel TCP both
ways); and a client interrupted (SIGINT) in the middle of a test.

usage: test_iperf3.py --sovia /path/to/sovia
"""
import json
import signal
import time

import progtest as pt


class Iperf3(pt.ProgramCase):
    def run_iperf(self, scenario, reverse=False):
        port = pt.free_port()
        s_under, c_under = pt.under(scenario)
        server = self.start_server("iperf3-server", ["iperf3", "-s", "-1", "-p", str(port)],
                                   s_under, port)
        client = self.start("iperf3-client",
                            ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "2", "-l", "64K",
                             "-J", *(["-R"] if reverse else [])], c_under)
        self.assert_exit(client, 30)
        self.assert_exit(server, 15)
        try:
            res = json.loads(client.out())
        except ValueError as e:
            self.fail(f"iperf3 -J output is not JSON: {e}" + self.context())
        self.assertNotIn("error", res, res.get("error"))
        bps = res["end"]["sum_received"]["bits_per_second"]
        self.assertGreater(bps, 0, self.context())
        self.assertGreater(res["end"]["sum_sent"]["bytes"], 0)
        pt.report(f"iperf3 {scenario}{' -R' if reverse else ''}: {bps / 1e9:.2f} Gb/s received")
        # The client always sends the parameters and receives the results on
        # the control connection; the data goes one way or the other.
        self.check_records(scenario, server, client)
        return bps

    def test_both_under_sovia(self):
        self.run_iperf(pt.BOTH)

    def test_both_under_sovia_reverse(self):
        self.run_iperf(pt.BOTH, reverse=True)

    def test_both_under_sovia_client_interrupted(self):
        """Ctrl-C in the middle of a test: iperf3's SIGINT handler longjmps
        out of whatever call it interrupted (a write, under sovia) and exits.
        Over kernel TCP the client ends at once with exit code 1 and the
        server ends the test with 0."""
        port = pt.free_port()
        server = self.start_server("iperf3-server", ["iperf3", "-s", "-1", "-p", str(port)],
                                   True, port)
        client = self.start("iperf3-client",
                            ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "10", "-l",
                             "64K", "-J"], True)
        time.sleep(1.5)
        self.assertTrue(client.alive(), "iperf3 ended before the interrupt" + self.context())
        self.assertEqual(client.stop(signal.SIGINT, timeout=5), 1,
                         "iperf3 client did not end on SIGINT" + self.context())
        self.assertIn("interrupt - the client has terminated", client.out())
        self.assert_exit(server, 10)

    def test_client_only_under_sovia(self):
        self.run_iperf(pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.run_iperf(pt.SERVER_ONLY)


if __name__ == "__main__":
    pt.main(["iperf3"])
