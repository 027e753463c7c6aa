#!/usr/bin/env python3
"""A plain TCP echo pair for the cross-host test (test_xhost.py); nothing
sovia-specific in it.

    xhost_echo.py server PORT CONNS        echo CONNS connections, one at a time
    xhost_echo.py tserver PORT CONNS       the same, each connection in a thread
                                           of its own (several open at once)
    xhost_echo.py client HOST PORT BYTES N  N connections, each sends BYTES random
                                           bytes and checks they all come back;
                                           prints "ok N" (or what went wrong)
    xhost_echo.py both HOST1 HOST2 PORT BYTES [hold]  one connection to each
                                           host, both open at once, exchanged
                                           together; prints "ok 2" (hold: says
                                           "connected" and waits for a line first)
    xhost_echo.py exec HOST PORT            1 MiB echoed, then exec itself with the
                                           socket, which echoes 1 MiB more: "ok"
    xhost_echo.py local PORT [HOST PORT2]   an echo to itself on 127.0.0.1 (and
                                           then one to HOST); prints "ok" and
                                           whether libfabric is mapped after
                                           each ("libfabric no" / "yes")
    xhost_echo.py localany PORT             the same, its listener on 0.0.0.0,
                                           libfabric looked at 2 s after the
                                           echo; says how long its first
                                           connect() + accept() took
    xhost_echo.py fork HOST PORT            1 MiB echoed, fork: the child echoes
                                           1 MiB on the same socket (one thread)
                                           and exits
                                           (closing its copy), then the parent
                                           echoes 1 MiB more and ends the
                                           stream: "ok" (or what went wrong)
    xhost_echo.py steps HOST PORT BYTES N   as client, but waits for a line on
                                           stdin before each connection after
                                           the first
    xhost_echo.py ask HOST PORT BYTES N     as client, but each connection's bytes
                                           come back before it ends its side (a
                                           request and its answer)
    xhost_echo.py prefork PORT CONNS W [first]  W forked workers accept and
                                           echo CONNS connections in all (the
                                           listening parent accepts none; with
                                           first, one, before the fork)
"""
import time
import hashlib
import os
import select
import socket
import sys
import threading


def listening(addr, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(16)
    return s


def echo_conn(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)


def serve(s, conns):
    for _ in range(conns):
        echo_conn(s.accept()[0])


def server(port, conns):
    s = listening("0.0.0.0", port)
    print("listening", flush=True)
    serve(s, conns)


def tserver(port, conns):
    s = listening("0.0.0.0", port)
    print("listening", flush=True)
    ts = []
    for _ in range(conns):
        c, _ = s.accept()
        ts.append(threading.Thread(target=echo_conn, args=(c,)))
        ts[-1].start()
    for t in ts:
        t.join()


def prefork(port, conns, workers, first):
    s = listening("0.0.0.0", port)
    if first:
        print("listening", flush=True)
        echo_conn(s.accept()[0])
    r, w = os.pipe()  # a byte per connection: a worker takes one, then accepts
    pids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            while os.read(r, 1):
                echo_conn(s.accept()[0])
            os._exit(0)
        pids.append(pid)
    os.close(r)
    os.write(w, b"x" * conns)
    os.close(w)
    if not first:
        print("listening", flush=True)
    return 0 if all(os.waitpid(p, 0)[1] == 0 for p in pids) else 1


def exchange(c, size):
    data = os.urandom(size)
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


def echo_once(c, size):
    """size bytes out and back, the connection left open."""
    data = os.urandom(size)
    t = threading.Thread(target=c.sendall, args=(data,))
    t.start()
    got = bytearray()
    while len(got) < size:
        b = c.recv(65536)
        if not b:
            break
        got += b
    t.join()
    return bytes(got) == data


def pump(c, size):
    """echo_once in one thread: size bytes out and back through select()."""
    data, sent, got = os.urandom(size), 0, bytearray()
    while len(got) < size:
        r, w, _ = select.select([c], [c] if sent < size else [], [], 20)
        if not r and not w:
            return False
        if w:
            sent += c.send(data[sent:sent + 65536])
        if r:
            b = c.recv(65536)
            if not b:
                return False
            got += b
    return bytes(got) == data


def one(host, port, size, ask=False):
    with socket.create_connection((host, port), timeout=20) as c:
        return echo_once(c, size) if ask else exchange(c, size)


def both(hosts, port, size, hold):
    """Both connections made first, then exchanged at the same time (with
    `hold`: once a line comes on stdin)."""
    conns = [socket.create_connection((h, port), timeout=20) for h in hosts]
    if hold:
        print("connected", flush=True)
        sys.stdin.readline()
    good = [False] * len(conns)
    def run(i):
        good[i] = exchange(conns[i], size)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(conns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for c in conns:
        c.close()
    return sum(good)


def libfabric_mapped():
    with open("/proc/self/maps") as f:
        return "yes" if "libfabric" in f.read() else "no"


def local_any(port):
    """A listener any host could reach, used by this host only: sovia has
    no reason to load libfabric (its far side waits for another host's
    client). 2 s is five times what loading it takes here."""
    s = listening("0.0.0.0", port)
    t0 = time.perf_counter()
    c = socket.create_connection(("127.0.0.1", port), timeout=20)
    a, _ = s.accept()
    took = time.perf_counter() - t0
    c.close()
    a.close()
    print(f"first connect+accept {took * 1e3:.2f} ms", file=sys.stderr, flush=True)
    t = threading.Thread(target=serve, args=(s, 1))
    t.start()
    ok = one("127.0.0.1", port, 1 << 20)
    t.join()
    time.sleep(2)
    print("ok" if ok else "bad: the local exchange differs", flush=True)
    print(f"libfabric {libfabric_mapped()}", flush=True)
    s.close()
    return 0 if ok else 1


def local(port, rest):
    s = listening("127.0.0.1", port)
    t = threading.Thread(target=serve, args=(s, 1))
    t.start()
    ok = one("127.0.0.1", port, 1 << 20)
    t.join()
    s.close()
    print("ok" if ok else "bad: the local exchange differs", flush=True)
    print(f"libfabric {libfabric_mapped()}", flush=True)
    if rest:
        ok = one(rest[0], int(rest[1]), 1 << 20) and ok
        print("ok" if ok else "bad: the exchange with the other host differs", flush=True)
        print(f"libfabric {libfabric_mapped()}", flush=True)
    return 0 if ok else 1


def main():
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    if sys.argv[1] == "tserver":
        tserver(int(sys.argv[2]), int(sys.argv[3]))
        return 0
    if sys.argv[1] == "prefork":
        return prefork(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                       sys.argv[5:] == ["first"])
    if sys.argv[1] == "both":
        good = both(sys.argv[2:4], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:] == ["hold"])
        print(f"ok {good}" if good == 2 else f"bad: {2 - good} of 2 connections differ", flush=True)
        return 0 if good == 2 else 1
    if sys.argv[1] == "exec":  # exec HOST PORT: one exchange, exec, one more on the same socket
        c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=20)
        if not echo_once(c, 1 << 20):
            print("bad: before the exec", flush=True)
            return 1
        c.set_inheritable(True)
        os.execv(sys.executable, [sys.executable, __file__, "exec2", str(c.fileno())])
    if sys.argv[1] == "fork":  # fork HOST PORT: the socket used by both, in turn
        c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=20)
        if not echo_once(c, 1 << 20):
            print("bad: before the fork", flush=True)
            return 1
        pid = os.fork()
        if pid == 0:  # no thread here (ThreadSanitizer's preload cannot have one)
            os._exit(0 if pump(c, 1 << 20) else 1)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print(f"bad: in the child (status {status})", flush=True)
            return 1
        ok = exchange(c, 1 << 20)
        print("ok" if ok else "bad: after the fork", flush=True)
        return 0 if ok else 1
    if sys.argv[1] == "exec2":
        c = socket.socket(fileno=int(sys.argv[2]))
        c.setblocking(True)  # create_connection left the descriptor O_NONBLOCK
        ok = exchange(c, 1 << 20)
        print("ok" if ok else "bad: after the exec", flush=True)
        return 0 if ok else 1
    if sys.argv[1] == "local":
        return local(int(sys.argv[2]), sys.argv[3:])
    if sys.argv[1] == "localany":
        return local_any(int(sys.argv[2]))
    host, port, size, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    good = 0
    for i in range(n):
        if sys.argv[1] == "steps" and i:
            print("next?", flush=True)
            sys.stdin.readline()
        good += one(host, port, size, sys.argv[1] == "ask")
    print(f"ok {good}" if good == n else f"bad: {n - good} of {n} connections differ", flush=True)
    return 0 if good == n else 1


if __name__ == "__main__":
    sys.exit(main())
