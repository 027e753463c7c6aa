#!/usr/bin/env python3
"""A Java NIO echo server and client (progs/NioEcho.java, compiled with
javac at test time; one Selector each, non-blocking channels: epoll
inside the JVM) under `sovia run`, both ends and one end only: 4
connections at once, 16 MB each, every byte of the echo checked by the
client. Records: the 64 MB each way over sovia, or kernel TCP.

usage: test_java_nio.py --sovia /path/to/sovia --bindir DIR
"""
import compat as c

NCONN, SIZE = 4, 16 << 20


@c.scenarios()
class JavaNio(c.CompatCase):
    def run_scenario(self, scenario):
        java = ["java", "-XX:TieredStopAtLevel=1", "-cp", c.java_classes(self), "NioEcho"]
        self.echo_pair(scenario, lambda port: [*java, "server", str(port), str(NCONN)],
                       lambda port: [*java, "client", str(port), str(NCONN), str(SIZE)],
                       NCONN, SIZE, timeout=60, start_timeout=30)
        self.check_sides(scenario, NCONN, client_sent=NCONN * SIZE, server_sent=NCONN * SIZE)


if __name__ == "__main__":
    c.main(["java", "javac"])
