#!/usr/bin/env python3
"""Node.js's http module, server and client (progs/node_http.js), and
curl against the same server, under `sovia run`: both ends and one end
only. Over one keep-alive connection the Node client fetches an 8 MB file
twice, posts it back and gets its SHA-256, then a small page; curl
fetches the file and the page over one connection. Every body is checked
by its SHA-256; the server, ended by SIGTERM, counts the requests.
Records: carried both ways, or kernel TCP.

libuv closes a socket with a raw close system call (uv__close_nocancel:
syscall(SYS_close)), which no preload sees. sovia finds out only when the
number is reused (preload accept4: sov_tp_drop_stale), and counts that
connection as fallen back: the server's record may say so once. A body
that the server's close ends (GET /destroy, curl reading to the end of
stream) never ends for a client under sovia (known broken).

usage: test_node_http.py --sovia /path/to/sovia --bindir DIR [--broken]
"""
import os

import compat as c

NODE_HTTP = ["node", os.path.join(c.PROGS, "node_http.js")]
RAW_CLOSE = ("issue 20 item 2 (raw system calls): Node's socket.destroy() closes the socket "
             "with syscall(SYS_close); the preload never sees it, the carried connection stays "
             "open and the client under sovia waits for the end of stream for ever (kernel "
             "TCP: FIN at once)")


@c.scenarios()
class NodeHttp(c.CompatCase):
    BLOB_SIZE = 8 << 20

    def run_scenario(self, scenario):
        # the first connection's number is reused by the second's accept
        c.http_exchange(self, scenario, NODE_HTTP, server_fell_back_max=1)

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

    @c.known_broken(RAW_CLOSE)
    def test_server_destroys_connection_both(self):
        self.destroy(c.BOTH)

    def test_server_destroys_connection_client_only(self):
        self.destroy(c.CLIENT_ONLY)

    def test_server_destroys_connection_server_only(self):
        self.destroy(c.SERVER_ONLY)


if __name__ == "__main__":
    c.main(["node", "curl"])
