#!/usr/bin/env python3
"""Exit records of unmodified servers that a signal ends, both ends under
`sovia run` (docs/TRANSPARENT.md, "Exit records"):

- Python's http.server has no SIGTERM handler: SIGTERM's default action
  ends it (the parent sees the signal) and it still writes its record,
  with the bytes of the file it served (signal 15);
- with SIGINT it exits through KeyboardInterrupt: a record (signal 0);
- memcached handles SIGTERM itself and exits: a record (signal 0), while
  its client still holds its connection.

Each client's bytes are checked (curl's file, memcached's answer), and its
own record too.

usage: test_exit_records.py --sovia /path/to/sovia
"""
import hashlib
import os
import signal
import sys
import time

import progtest as pt

FILE = 1 << 20

MEMCACHED_CLIENT = r"""
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"set k 0 0 5\r\nhello\r\nget k\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    buf += chunk
print(buf.decode(), end="", flush=True)
while not os.path.exists(sys.argv[2]):  # holds the connection meanwhile
    time.sleep(0.01)
"""


class ExitRecords(pt.ProgramCase):
    def record(self, proc):
        r = self.record_of(proc)
        self.assertIsNotNone(r, f"{proc.name}: no record" + self.context())
        return r

    def http_server(self, sig):
        port = pt.free_port()
        www = os.path.join(self.tmp, "www")
        os.makedirs(www)
        blob = os.urandom(FILE)
        with open(os.path.join(www, "blob"), "wb") as f:
            f.write(blob)
        server = self.start_server("http.server", [sys.executable, "-m", "http.server", "-b",
                                                   "127.0.0.1", "-d", www, str(port)], True, port)
        out = os.path.join(self.tmp, "got")
        client = self.start("curl", ["curl", "-sS", "--fail", "-o", out,
                                     f"http://127.0.0.1:{port}/blob"], True)
        self.assert_exit(client, 30)
        with open(out, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).digest(), hashlib.sha256(blob).digest())
        rc = server.stop(sig)
        r = self.record(server)
        self.assertEqual(r["carried"], 1, f"{r}" + self.context())
        self.assertGreaterEqual(r["bytes_sent"], FILE, r)
        self.assertEqual(self.check_carried(client)["bytes_received"], r["bytes_sent"])
        return rc, r

    def test_http_server_sigterm(self):
        rc, r = self.http_server(signal.SIGTERM)
        self.assertEqual(rc, -signal.SIGTERM, "not ended by SIGTERM" + self.context())
        self.assertEqual(r["signal"], signal.SIGTERM, r)

    def test_http_server_sigint(self):
        rc, r = self.http_server(signal.SIGINT)
        self.assertIn(rc, (0, -signal.SIGINT), self.context())
        self.assertEqual(r["signal"], -rc, r)

    def test_memcached_sigterm(self):
        port = pt.free_port()
        user = ["-u", "root"] if os.geteuid() == 0 else []
        server = self.start_server("memcached", ["memcached", *user, "-l", "127.0.0.1", "-p",
                                                 str(port), "-U", "0"], True, port)
        go = os.path.join(self.tmp, "go")
        client = self.start("client", [sys.executable, "-c", MEMCACHED_CLIENT, str(port), go],
                            True)
        deadline = time.monotonic() + 15
        while not client.out().endswith("END\n") and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(client.out(), "STORED\nVALUE k 0 5\nhello\nEND\n",
                         self.context())
        self.assertEqual(server.stop(signal.SIGTERM), 0, self.context())
        r = self.record(server)
        self.assertEqual(r["carried"], 1, f"{r}" + self.context())
        self.assertEqual(r["signal"], 0, r)
        self.assertEqual((r["bytes_sent"], r["bytes_received"]), (33, 27), r)
        open(go, "w").close()
        self.assert_exit(client, 15)
        self.check_carried(client)


if __name__ == "__main__":
    pt.main(["curl", "memcached"])
