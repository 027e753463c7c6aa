#!/usr/bin/env python3
"""An echo server and client on the `selectors` module (epoll on Linux),
non-blocking sockets throughout: the program the selectors test runs under
`sovia run`.

  selectors_echo.py server PORT NCONN
      serves NCONN connections (echoes every byte, closes on EOF), then
      prints "served NCONN connections, BYTES bytes" and exits 0.
  selectors_echo.py client PORT NCONN SIZE ROUNDS
      on the first connection ROUNDS round trips of 64 bytes, then on all
      NCONN connections at once SIZE pseudo-random bytes each, written in
      pieces of random sizes and half-closed; checks the echo byte for byte
      and prints "ok NCONN connections, BYTES bytes, ROUNDS round trips in
      SECONDS s" and exits 0; exits 1 on a mismatch.

Both give up after 60 s (exit 2).
"""
import random
import selectors
import socket
import sys
import time

DEADLINE = time.monotonic() + 60


def check_deadline():
    if time.monotonic() > DEADLINE:
        print("timed out", file=sys.stderr, flush=True)
        sys.exit(2)


def server(port, nconn):
    sel = selectors.DefaultSelector()
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", port))
    lst.listen(16)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ, None)
    conns = {}  # socket -> [pending output, eof seen]
    done = total = 0
    while done < nconn:
        check_deadline()
        for key, events in sel.select(timeout=1.0):
            if key.data is None:
                try:
                    c, _ = lst.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                conns[c] = [bytearray(), False]
                sel.register(c, selectors.EVENT_READ, "conn")
                continue
            c = key.fileobj
            st = conns[c]
            if events & selectors.EVENT_READ and not st[1]:
                try:
                    d = c.recv(65536)
                except BlockingIOError:
                    d = None
                if d == b"":
                    st[1] = True
                elif d:
                    st[0] += d
                    total += len(d)
            if st[0]:
                try:
                    n = c.send(st[0])
                    del st[0][:n]
                except BlockingIOError:
                    pass
            if st[1] and not st[0]:
                sel.unregister(c)
                c.close()
                del conns[c]
                done += 1
                continue
            want = (0 if st[1] else selectors.EVENT_READ) | \
                (selectors.EVENT_WRITE if st[0] else 0)
            sel.modify(c, want, "conn")
    sel.close()
    lst.close()
    print(f"served {nconn} connections, {total} bytes", flush=True)


def connect(port):
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.setblocking(False)
    err = c.connect_ex(("127.0.0.1", port))
    if err not in (0, 115):  # EINPROGRESS
        raise OSError(err, "connect")
    return c


def wait_connected(sel, c):
    sel.register(c, selectors.EVENT_WRITE)
    while not sel.select(timeout=1.0):
        check_deadline()
    sel.unregister(c)
    err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, "connect")


def round_trips(sel, c, rounds):
    """Send 64 bytes, wait (in the selector) for their echo, ROUNDS times."""
    sel.register(c, selectors.EVENT_READ)
    for i in range(rounds):
        msg = bytes([i % 256]) * 64
        c.sendall(msg)  # non-blocking socket: 64 bytes fit
        got = b""
        while len(got) < len(msg):
            check_deadline()
            if sel.select(timeout=1.0):
                try:
                    got += c.recv(len(msg) - len(got))
                except BlockingIOError:
                    pass
        if got != msg:
            print(f"round trip {i}: got {got!r}", file=sys.stderr)
            sys.exit(1)
    sel.unregister(c)


def client(port, nconn, size, rounds):
    sel = selectors.DefaultSelector()
    socks = [connect(port) for _ in range(nconn)]
    for c in socks:
        wait_connected(sel, c)
    t0 = time.monotonic()
    round_trips(sel, socks[0], rounds)
    rtt_s = time.monotonic() - t0
    rng = random.Random(1234)
    state = {}
    for i, c in enumerate(socks):
        data = random.Random(i).randbytes(size)
        state[c] = {"data": data, "sent": 0, "got": bytearray(), "shut": False}
        sel.register(c, selectors.EVENT_READ | selectors.EVENT_WRITE)
    open_ = len(socks)
    while open_:
        check_deadline()
        for key, events in sel.select(timeout=1.0):
            c = key.fileobj
            st = state[c]
            if events & selectors.EVENT_WRITE and st["sent"] < size:
                piece = rng.randint(1, 65536)
                try:
                    st["sent"] += c.send(st["data"][st["sent"]:st["sent"] + piece])
                except BlockingIOError:
                    pass
            if st["sent"] == size and not st["shut"]:
                c.shutdown(socket.SHUT_WR)
                st["shut"] = True
                sel.modify(c, selectors.EVENT_READ)
            if events & selectors.EVENT_READ:
                try:
                    d = c.recv(65536)
                except BlockingIOError:
                    continue
                if d == b"":
                    sel.unregister(c)
                    c.close()
                    open_ -= 1
                    if bytes(st["got"]) != st["data"]:
                        print(f"echo mismatch: {len(st['got'])} of {size} bytes back",
                              file=sys.stderr)
                        sys.exit(1)
                    continue
                st["got"] += d
                if st["data"][len(st["got"]) - len(d):len(st["got"])] != d:
                    print(f"echo mismatch at byte {len(st['got']) - len(d)}", file=sys.stderr)
                    sys.exit(1)
    sel.close()
    print(f"ok {nconn} connections, {nconn * size} bytes, {rounds} round trips in "
          f"{rtt_s:.4f} s", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]))
    else:
        client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
