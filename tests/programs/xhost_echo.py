#!/usr/bin/env python3
"""A plain TCP echo pair for the cross-host test (test_xhost.py); nothing
sovia-specific in it.

    xhost_echo.py server PORT CONNS        echo CONNS connections, one at a time
    xhost_echo.py client HOST PORT BYTES N  N connections, each sends BYTES random
                                           bytes and checks they all come back;
                                           prints "ok N" (or what went wrong)
"""
import hashlib
import os
import socket
import sys
import threading


def server(port, conns):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(16)
    print("listening", flush=True)
    for _ in range(conns):
        c, _ = s.accept()
        with c:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                c.sendall(b)


def one(host, port, size):
    data = os.urandom(size)
    with socket.create_connection((host, port), timeout=20) as c:
        def write():
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
        t = threading.Thread(target=write)
        t.start()
        h, n = hashlib.sha256(), 0
        while True:
            b = c.recv(65536)
            if not b:
                break
            h.update(b)
            n += len(b)
        t.join()
    return n == size and h.digest() == hashlib.sha256(data).digest()


def main():
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    host, port, size, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    good = sum(one(host, port, size) for _ in range(n))
    print(f"ok {good}" if good == n else f"bad: {n - good} of {n} connections differ", flush=True)
    return 0 if good == n else 1


if __name__ == "__main__":
    sys.exit(main())
