#!/usr/bin/env python3
"""Node.js's http module, server and client (progs/node_http.js), and
curl against the same server, under `sovia run`: both ends and one end
only. Over one keep-alive connection the Node client fetches an 8 MB file
twice, posts it back and gets its SHA-256, then a small page; curl
fetches the file and the page over one connection. Every body is checked
by its SHA-256; the server, ended by SIGTERM, counts the requests.
Records: carried both ways, or kernel TCP.

libuv closes every socket with syscall(SYS_close), not close(): a body
that the server's close ends (GET /destroy: socket.destroy()) must end
for curl reading to the end of stream, as over kernel TCP.

usage: test_node_http.py --sovia /path/to/sovia --bindir DIR
"""
import os

import compat as c

NODE_HTTP = ["node", os.path.join(c.PROGS, "node_http.js")]


@c.scenarios()
class NodeHttp(c.CompatCase):
    BLOB_SIZE = 8 << 20

    def run_scenario(self, scenario):
        c.http_exchange(self, scenario, NODE_HTTP)

    def destroy(self, scenario):
        """curl reads a body that the server's destroy() ends."""
        s_under, c_under = c.under(scenario)
        port = c.free_port()
        server = self.start_server("node-server", [*NODE_HTTP, "server", str(port), self.blob],
                                   s_under, port)
        curl = self.start("curl", ["curl", "-sS", "--fail", f"http://127.0.0.1:{port}/destroy"],
                          c_under)
        self.assert_exit(curl, 10)
        self.assertEqual(curl.out(), "bye\n", self.context())
        self.stop_server(server)
        self.check_sides(scenario, client_sent=1, server_sent=4)

    def test_server_destroys_connection_both(self):
        self.destroy(c.BOTH)

    def test_server_destroys_connection_client_only(self):
        self.destroy(c.CLIENT_ONLY)

    def test_server_destroys_connection_server_only(self):
        self.destroy(c.SERVER_ONLY)


if __name__ == "__main__":
    c.main(["node", "curl"])
