#!/usr/bin/env python3
"""socat (unmodified) piping 200 MB from a client to a server under
`sovia run`: both ends, and one end only. The server writes what it got
to a file, which must hash as the blob sent; both exit 0. Records: the
client's 200 MB over sovia and the server's read of them, or kernel TCP.

usage: test_socat.py --sovia /path/to/sovia --bindir DIR
"""
import compat as c


@c.scenarios()
class Socat(c.CompatCase):
    BLOB_SIZE = 200 << 20

    def run_scenario(self, scenario):
        self.pipe(scenario,
                  lambda port, got: ["socat", "-u", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr",
                                     f"CREATE:{got}"],
                  lambda port, got: ["socat", "-u", f"OPEN:{self.blob},rdonly",
                                     f"TCP:127.0.0.1:{port}"])
        self.check_sides(scenario, client_sent=self.BLOB_SIZE, server_sent=0)


if __name__ == "__main__":
    c.main(["socat"])
