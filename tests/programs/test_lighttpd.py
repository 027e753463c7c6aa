#!/usr/bin/env python3
"""lighttpd (unmodified, Debian's; an event-driven web server: one process,
one epoll loop) under load from ApacheBench (`ab -k`, keep-alive) and curl,
under `sovia run`, with more busy processes than CPUs (issue 16, item 4).

lighttpd serves a generated file set from the test's private directory on
a free port. Each scenario runs `ab -k` over 64 connections (and, both ends
under sovia, over 200) on a 4 KiB file: every request must complete with
a 200 and the file's length (ab: "Failed requests: 0", no "Non-2xx",
every request kept alive), and curl fetches a 4 MiB file whose SHA-256 must
match. Both ends under sovia: ab's connections are all carried and
lighttpd's record (it exits on SIGINT) carried them all, with curl's; one
side only: kernel TCP. Timing lives in the benchmark: ab's figures are
printed, not checked.

usage: test_lighttpd.py --sovia /path/to/sovia
"""
import hashlib
import os
import re
import signal

import progtest as pt

SMALL = 4096
LARGE = 4 << 20
REQUESTS = 10000
MAX_FDS = 4096  # lighttpd started as root sets its limit to it


def config(tmp, port):
    return f"""server.document-root = "{tmp}/www"
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = "{tmp}/error.log"
server.pid-file = "{tmp}/lighttpd.pid"
server.max-keep-alive-requests = {REQUESTS + 1}
server.max-keep-alive-idle = 30
server.max-connections = 1024
server.max-fds = {MAX_FDS}
"""


def ab_field(out, name):
    m = re.search(rf"^{re.escape(name)}:\s+(\S+)", out, re.M)
    return m.group(1) if m else None


class Lighttpd(pt.ProgramCase):
    def start_lighttpd(self, under):
        port = pt.free_port()
        www = os.path.join(self.tmp, "www")
        os.makedirs(www)
        self.small = os.urandom(SMALL)
        self.large = os.urandom(LARGE)
        for name, data in (("small", self.small), ("large", self.large)):
            with open(os.path.join(www, name), "wb") as f:
                f.write(data)
        conf = os.path.join(self.tmp, "lighttpd.conf")
        with open(conf, "w") as f:
            f.write(config(self.tmp, port))
        return self.start_server("lighttpd", ["lighttpd", "-D", "-f", conf], under, port), port

    def ab(self, port, conns, under):
        """`ab -k` over `conns` connections; checks every answer."""
        client = self.start(f"ab-c{conns}", ["ab", "-k", "-s", "30", "-c", str(conns), "-n",
                                             str(REQUESTS), f"http://127.0.0.1:{port}/small"],
                            under)
        self.assert_exit(client, 90)
        out = client.out()
        for name, want in (("Complete requests", str(REQUESTS)), ("Failed requests", "0"),
                           ("Keep-Alive requests", str(REQUESTS)),
                           ("Document Length", str(SMALL))):
            self.assertEqual(ab_field(out, name), want, f"ab: {name}" + self.context())
        self.assertNotIn("Non-2xx", out, self.context())
        pt.report(f"lighttpd, ab -k -c {conns} -n {REQUESTS}, {SMALL} B, "
                  f"{'sovia' if under else 'kernel'} client: "
                  f"{ab_field(out, 'Requests per second')} requests/s")
        return client

    def curl_large(self, port, under):
        out = os.path.join(self.tmp, "got")
        client = self.start("curl", ["curl", "-sS", "--fail", "-o", out,
                                     f"http://127.0.0.1:{port}/large"], under)
        self.assert_exit(client, 30)
        with open(out, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             hashlib.sha256(self.large).hexdigest(), self.context())
        return client

    def run_scenario(self, scenario, conns=(64,)):
        s_under, c_under = pt.under(scenario)
        self.limit = pt.nofile()
        pt.busy_load(self)
        server, port = self.start_lighttpd(s_under)
        abs_ = [self.ab(port, c, c_under) for c in conns]
        curl = self.curl_large(port, c_under)
        self.assertEqual(server.stop(signal.SIGINT, timeout=15), 0,
                         "lighttpd did not stop on SIGINT" + self.context())
        server_limit = MAX_FDS if os.geteuid() == 0 else self.limit
        for ab, c in zip(abs_, conns):
            with self.subTest(record=ab.name, scenario=scenario):
                if not c_under:
                    self.check_no_record(ab)
                elif scenario == pt.BOTH:  # where either end has no room
                    self.check_all_carried(ab, c, min(self.limit, server_limit))
                else:
                    self.check_kernel(ab)
        total = sum(conns) + 1
        with self.subTest(record="lighttpd", scenario=scenario):
            if not s_under:
                self.check_no_record(server)
            elif scenario == pt.BOTH:
                r = self.check_all_carried(server, total, min(self.limit, server_limit))
                if r["carried"] == total:
                    self.assertGreaterEqual(r["bytes_sent"],
                                            REQUESTS * len(conns) * SMALL + LARGE)
            else:
                r = self.check_kernel(server)
                self.assertEqual(r["kernel"], total, f"{r}" + self.context())
        with self.subTest(record="curl", scenario=scenario):
            if scenario == pt.BOTH:
                self.assertGreaterEqual(self.check_carried(curl)["bytes_received"], LARGE)

    def test_both_under_sovia(self):
        self.run_scenario(pt.BOTH, (64, 200))

    def test_client_only_under_sovia(self):
        self.run_scenario(pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        self.run_scenario(pt.SERVER_ONLY)


if __name__ == "__main__":
    pt.main(["lighttpd", "ab", "curl"])
