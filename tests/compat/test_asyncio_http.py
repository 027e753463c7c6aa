#!/usr/bin/env python3
"""An HTTP/1.1 server and client on Python's asyncio streams
(progs/asyncio_http.py), and curl against the same server, under `sovia
run`: both ends and one end only. Over one keep-alive connection the
client fetches an 8 MB file twice, posts it back and gets its SHA-256,
then a small page; curl fetches the file and the page over one
connection. Every body is checked by its SHA-256; the server, ended by
SIGTERM, counts the requests. Records: carried both ways, or kernel TCP.

usage: test_asyncio_http.py --sovia /path/to/sovia --bindir DIR
"""
import os
import sys

import compat as c


@c.scenarios()
class AsyncioHttp(c.CompatCase):
    BLOB_SIZE = 8 << 20

    def run_scenario(self, scenario):
        c.http_exchange(self, scenario, [sys.executable, os.path.join(c.PROGS, "asyncio_http.py")])


if __name__ == "__main__":
    c.main(["curl"])
