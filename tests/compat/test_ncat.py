#!/usr/bin/env python3
"""ncat (unmodified, nmap's) piping 200 MB from a server to its client
under `sovia run`: both ends, and one end only. The server sends the
blob (--send-only) and ends; the client writes what it got to a file,
which must hash as the blob. Records: the server's 200 MB over sovia and
the client's read of them, or kernel TCP.

usage: test_ncat.py --sovia /path/to/sovia --bindir DIR
"""
import compat as c


@c.scenarios()
class Ncat(c.CompatCase):
    BLOB_SIZE = 200 << 20

    def run_scenario(self, scenario):
        # the shell only redirects and execs: ncat keeps its pid
        self.pipe(scenario,
                  lambda port, got: ["sh", "-c", "exec ncat --listen --send-only 127.0.0.1 "
                                     f'{port} < "{self.blob}"'],
                  lambda port, got: ["sh", "-c",
                                     f'exec ncat --recv-only 127.0.0.1 {port} > "{got}"'])
        self.check_sides(scenario, client_sent=0, server_sent=self.BLOB_SIZE)


if __name__ == "__main__":
    c.main(["ncat"])
