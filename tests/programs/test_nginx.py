#!/usr/bin/env python3
"""nginx (unmodified, Debian's nginx-light) with curl as its client, under
`sovia run`. nginx is a prefork server: its master process listens and its
worker processes accept, so every connection reaches sovia through a
claim and a REDIRECT (docs/ARCHITECTURE.md, "Transparent mode", step 6).
Two curl processes fetch a 2 MiB file twice and a small page over one
keep-alive connection each; the files must arrive byte for byte. Both
under sovia: curl's connections are carried and every one was redirected,
and the workers (stopped gracefully, SIGQUIT) carried them. Only one side
under sovia: kernel TCP. 500 small requests over one connection are timed
with and without sovia (printed, not checked).

nginx clears its workers' environment: the configuration passes
SOVIA_STAT_LOG on (`env`). sovia carries connections between processes of
one user only, and nginx started as root runs its workers as `nobody`:
under root the test keeps them root (`user root root;`).

usage: test_nginx.py --sovia /path/to/sovia
"""
import hashlib
import os
import signal
import time

import progtest as pt

BLOB = 2 << 20
SMALL_REQUESTS = 500


def config(tmp, port):
    user = "user root root;\n" if os.geteuid() == 0 else ""
    return f"""daemon off;
master_process on;
worker_processes 2;
{user}env SOVIA_STAT_LOG;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/tmp;
  proxy_temp_path {tmp}/tmp;
  fastcgi_temp_path {tmp}/tmp;
  uwsgi_temp_path {tmp}/tmp;
  scgi_temp_path {tmp}/tmp;
  keepalive_requests 100000;
  server {{ listen 127.0.0.1:{port}; root {tmp}/www; }}
}}
"""


class Nginx(pt.ScenarioCase):
    def start_nginx(self, under):
        port = pt.free_port()
        os.makedirs(os.path.join(self.tmp, "www"))
        os.makedirs(os.path.join(self.tmp, "tmp"))
        self.blob = os.urandom(BLOB)
        with open(os.path.join(self.tmp, "www", "blob"), "wb") as f:
            f.write(self.blob)
        with open(os.path.join(self.tmp, "www", "index.html"), "w") as f:
            f.write("hello from nginx\n")
        conf = os.path.join(self.tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(config(self.tmp, port))
        server = self.start_server("nginx", ["nginx", "-c", conf, "-p", self.tmp], under, port)
        return server, port

    def fetch(self, name, port, under):
        """One curl process, one keep-alive connection: blob, blob, page."""
        url = f"http://127.0.0.1:{port}"
        outs = [os.path.join(self.tmp, f"{name}-{k}") for k in range(3)]
        client = self.start(name, ["curl", "-sS", "--fail",
                                   "-o", outs[0], f"{url}/blob",
                                   "-o", outs[1], f"{url}/blob",
                                   "-o", outs[2], f"{url}/index.html"], under)
        self.assert_exit(client, 30)
        for k in (0, 1):
            with open(outs[k], "rb") as f:
                got = f.read()
            self.assertEqual(hashlib.sha256(got).hexdigest(),
                             hashlib.sha256(self.blob).hexdigest(),
                             f"{name}: blob {k} differs ({len(got)} bytes)" + self.context())
        with open(outs[2]) as f:
            self.assertEqual(f.read(), "hello from nginx\n", self.context())
        return client

    def time_small(self, port, under):
        """SMALL_REQUESTS requests of the page over one connection (s)."""
        cfg = os.path.join(self.tmp, f"small-{under}.curl")
        with open(cfg, "w") as f:
            for _ in range(SMALL_REQUESTS):
                f.write(f'url = "http://127.0.0.1:{port}/index.html"\noutput = "/dev/null"\n')
        t0 = time.monotonic()
        client = self.start(f"curl-small-{'sovia' if under else 'kernel'}",
                            ["curl", "-sS", "--fail", "-K", cfg], under)
        self.assert_exit(client, 60)
        return time.monotonic() - t0

    def stop(self, server):
        """Graceful stop: the workers exit and write their records."""
        self.assertEqual(server.stop(signal.SIGQUIT, timeout=15), 0,
                         "nginx did not stop on SIGQUIT" + self.context())

    def run_scenario(self, scenario):
        s_under, c_under = pt.under(scenario)
        server, port = self.start_nginx(s_under)
        clients = [self.fetch(f"curl{k}", port, c_under) for k in range(2)]
        self.stop(server)
        workers = self.served_records("nginx", server, *clients)
        for c in clients:
            with self.subTest(record=c.name, scenario=scenario):
                if not c_under:
                    self.check_no_record(c)
                elif scenario == pt.BOTH:
                    r = self.check_carried(c)
                    self.assertEqual(r["redirected"], r["carried"],
                                     f"{c.name}: not every connection redirected: {r}")
                    self.assertGreaterEqual(r["bytes_received"], 2 * BLOB, r)
                else:
                    self.check_kernel(c)
        self.check_served(scenario, "nginx workers", workers, len(clients), 4 * BLOB)

    def test_small_requests_timed(self):
        """The same server and client programs, with and without sovia."""
        times = {}
        for under in (True, False):
            server, port = self.start_nginx(under)
            times[under] = self.time_small(port, under)
            self.stop(server)
            self.tmp_reset()
        pt.report(f"nginx + curl, {SMALL_REQUESTS} requests of 17 bytes over one connection: "
                  f"{times[True] * 1e3:.0f} ms under sovia, {times[False] * 1e3:.0f} ms over "
                  f"kernel TCP (process start included)")

    def tmp_reset(self):
        """A second nginx in the same case needs fresh directories."""
        for sub in ("www", "tmp"):
            path = os.path.join(self.tmp, sub)
            for name in os.listdir(path):
                os.unlink(os.path.join(path, name))
            os.rmdir(path)


if __name__ == "__main__":
    pt.main(["nginx", "curl"])
