#!/usr/bin/env python3
"""How long `sovia run` takes to decide that a connection stays on (or
falls back to) kernel TCP, case by case, against the same steps over kernel
TCP alone; and the first exchange of a connection (connect, 16 bytes there
and back) same user, between users (a prefork server started as root whose
worker runs as nobody, as nginx's) and over kernel TCP.

usage: fallback_times.py SOVIA [ROUNDS]   (as root: some cases use `nobody`)

Each line gives medians and the slowest of ROUNDS (default 50) rounds. A
measurement, not a test: run it on a quiet machine and interleave (the
sovia and kernel variants of a case alternate round by round).

Cases (the decision, and what is timed):
  no_listener      the server does not run sovia: the client's connect()
                   finds no sovia listener (timed: connect(), after a first
                   connection of the same process).
  plain_client     the client does not run sovia: the server's accept()
                   finds no VI (timed: accept() of a connection already
                   there, after a first one).
  squatted         another user squats the shadow name of the port: the
                   client leaves that socket (timed: connect(), after a
                   first connection).
  server_died      the server is SIGKILLed before it accepts: the client's
                   VI breaks (timed: from the kill to the client's recv()
                   returning the kernel connection's reset).
  listener_closed  the server closes its listening socket before it
                   accepts: the client's VI is dropped (timed: from the
                   close to the client's recv() returning).
"""
import os
import pwd
import signal
import socket
import statistics
import subprocess
import sys
import time

SOVIA = None
# Another user may not reach our Python (pyenv under /root): the system's.
PY_OTHER = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def run_py(code, under, user=None, args=(), py=None):
    """A Python program (code) under `sovia run` or not, as user (or us);
    its stdout lines come back through .stdout."""
    py = py or (PY_OTHER if user else sys.executable)
    cmd = [py, "-c", code, *map(str, args)]
    if under:
        cmd = [SOVIA, "run", "--", *cmd]
    pre = None
    if user:
        pw = pwd.getpwnam(user)

        def pre():
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=pre, env=env)


SERVER = r"""
import socket, sys, os, time, pwd
port = int(sys.argv[1]); mode = sys.argv[2]; worker = sys.argv[3] if len(sys.argv) > 3 else ''
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('127.0.0.1', port)); l.listen(64)
print(l.getsockname()[1], flush=True)
if mode == 'accept':            # time accept() of each connection, once it is there
    import select
    while True:
        select.select([l], [], [])
        t0 = time.perf_counter(); c, _ = l.accept(); dt = time.perf_counter() - t0
        c.recv(16); c.sendall(b'k'); print(dt * 1e3, flush=True); c.close()
elif mode == 'close':           # close the listener on a line
    sys.stdin.readline(); l.close(); print('closed', flush=True); time.sleep(30)
elif mode == 'echo':            # with a worker user: a prefork server, its worker echoes
    if worker:
        w = os.fork()
        if w:
            print(w, flush=True); os.wait(); sys.exit()
        if worker != 'root':
            pw = pwd.getpwnam(worker); os.setgroups([]); os.setgid(pw.pw_gid); os.setuid(pw.pw_uid)
    while True:
        c, _ = l.accept()
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(d)
        c.close()
else:                           # 'wait': never accepts
    time.sleep(30)
"""

CLIENT = r"""
import socket, sys, time
port = int(sys.argv[1]); mode = sys.argv[2]; n = int(sys.argv[3])
if mode == 'connect':           # a first connection: sovia starts in this process
    s = socket.create_connection(('127.0.0.1', port)); s.sendall(b'x'); s.recv(1); s.close()
for i in range(n):
    s = socket.socket()
    t0 = time.perf_counter(); s.connect(('127.0.0.1', port)); dt = time.perf_counter() - t0
    if mode == 'connect':
        s.sendall(b'x'); s.recv(1); print(dt * 1e3, flush=True)
    elif mode == 'first':       # connect + 16 bytes there and back; then 50 round trips
        s.sendall(b'x' * 16); got = b''
        while len(got) < 16: got += s.recv(16)
        first = (time.perf_counter() - t0) * 1e3; t1 = time.perf_counter()
        for k in range(50):
            s.sendall(b'y' * 16); got = b''
            while len(got) < 16: got += s.recv(16)
        print(first, (time.perf_counter() - t1) / 50 * 1e3, flush=True)
    else:                       # 'event': a line when connected, then time until recv returns
        print('c', flush=True); sys.stdin.readline(); t0 = time.perf_counter()
        try: s.recv(1)
        except OSError: pass
        print((time.perf_counter() - t0) * 1e3, flush=True)
    s.close()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(p):
    p.kill()
    p.wait()


def lines(p, n):
    return [float(p.stdout.readline()) for _ in range(n)]


def summary(v):
    v = sorted(v)
    return f"median {statistics.median(v):7.3f} ms, slowest {v[-1]:7.3f} ms"


def case_connect(rounds, server_under, squat):
    """connect() times against a server (under sovia or not), its port's
    shadow name squatted by nobody first if asked."""
    out = {True: [], False: []}
    for _ in range(rounds):
        for under in (True, False):
            port = free_port()
            sq = None
            if squat:
                name = b"\0sovia-vipl.%d.sovia" % os.geteuid() + port.to_bytes(2, "big")
                sq = run_py("import socket,sys,time\ns=socket.socket(socket.AF_UNIX,"
                            "socket.SOCK_SEQPACKET)\ns.bind(bytes.fromhex(sys.argv[1]))\n"
                            "s.listen(8)\nprint(0,flush=True)\ntime.sleep(30)", False,
                            "nobody", [name.hex()])
                sq.stdout.readline()
            srv = run_py(SERVER, server_under, None, [port, "echo"])
            srv.stdout.readline()
            cli = run_py(CLIENT, under, None, [port, "connect", 5])
            out[under] += lines(cli, 5)
            stop(cli)
            stop(srv)
            if sq:
                stop(sq)
    return out


def case_accept(rounds):
    out = {True: [], False: []}
    for _ in range(rounds):
        for under in (True, False):
            port = free_port()
            srv = run_py(SERVER, under, None, [port, "accept"])
            srv.stdout.readline()
            cli = run_py(CLIENT, False, None, [port, "connect", 5])
            lines(cli, 5)
            out[under] += lines(srv, 6)[1:]
            stop(cli)
            stop(srv)
    return out


def case_event(rounds, event):
    """From the server's death or its listener's close to the client's
    recv() returning; both under sovia, or neither."""
    out = {True: [], False: []}
    for _ in range(rounds):
        for under in (True, False):
            port = free_port()
            srv = run_py(SERVER, under, None, [port, "close" if event == "close" else "wait"])
            srv.stdout.readline()
            cli = run_py(CLIENT, under, None, [port, "event", 1])
            cli.stdout.readline()
            if event == "close":
                cli.stdin.write("go\n")
                cli.stdin.flush()
                srv.stdin.write("close\n")
                srv.stdin.flush()
            else:
                cli.stdin.write("go\n")
                cli.stdin.flush()
                os.kill(srv.pid, signal.SIGKILL)
            out[under] += lines(cli, 1)
            stop(cli)
            stop(srv)
    return out


def case_first(rounds):
    """First exchange and the round trips after it: sovia within one user
    (a prefork server's root worker), between users (its worker as nobody;
    a client run as nobody of a root server), and kernel TCP."""
    out = {}
    procs = {}
    for label, worker, under, client in (("same user", "root", True, None),
                                         ("worker nobody", "nobody", True, None),
                                         ("client nobody", "root", True, "nobody"),
                                         ("kernel TCP", "nobody", False, None)):
        srv = run_py(SERVER, under, None, [0, "echo", worker])
        port = int(srv.stdout.readline())
        procs[label] = (srv, port, under, int(srv.stdout.readline()), client)
        out[label] = ([], [])
    for _ in range(rounds // 50 or 1):  # interleaved in blocks of 50
        for label, (srv, port, under, _, client) in procs.items():
            cli = run_py(CLIENT, under, client, [port, "first", 50], PY_OTHER)  # one Python for all
            for _ in range(50):
                first, rt = map(float, cli.stdout.readline().split())
                out[label][0].append(first)
                out[label][1].append(rt)
            stop(cli)
    for srv, _, _, worker, _ in procs.values():
        os.kill(worker, signal.SIGKILL)
        stop(srv)
    return out


def main():
    global SOVIA
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    SOVIA = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    root = os.geteuid() == 0
    cases = [("no_listener", lambda: case_connect(rounds, False, False)),
             ("plain_client", lambda: case_accept(rounds)),
             ("server_died", lambda: case_event(rounds, "kill")),
             ("listener_closed", lambda: case_event(rounds, "close"))]
    if root:
        cases.insert(2, ("squatted", lambda: case_connect(rounds, True, True)))
    for name, fn in cases:
        r = fn()
        print(f"{name:16s} sovia:  {summary(r[True])}   kernel: {summary(r[False])}", flush=True)
    if root:
        r = case_first(max(rounds, 200))
        for label, (first, rt) in r.items():
            print(f"{label:13s}: first exchange {summary(first)}; then round trip median "
                  f"{statistics.median(rt) * 1e3:.1f} us ({len(first)} connections)", flush=True)


if __name__ == "__main__":
    main()
