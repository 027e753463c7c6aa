#!/usr/bin/env python3
"""ZeroMQ peers (pyzmq, Debian's python3-zmq) for tests/compat/test_zeromq.py.
The binding end is the server, the connecting end the client.

    zmq_prog.py rep PORT N         answers N requests with the hex SHA-256
                                   of each: "served N requests"
    zmq_prog.py req PORT N SIZE    N requests of 1..SIZE bytes, checks each
                                   answer: "ok N requests, B bytes"
    zmq_prog.py pull PORT N        takes N messages: "received N messages,
                                   B bytes, sha SHA" (of them in order)
    zmq_prog.py push PORT N SIZE   sends N messages of 1..SIZE bytes:
                                   "sent N messages, B bytes, sha SHA"
Every receive waits 20 s at most (then exit 1); a sender's close waits at
most 20 s for its messages to leave.
"""
import hashlib
import random
import sys

import zmq

TIMEOUT_MS = 20000


def messages(n, size):
    rng = random.Random(size * 7919 + n)
    for _ in range(n):
        yield rng.randbytes(rng.randint(1, size))


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("rep", "req", "pull", "push"):
        sys.exit(__doc__)
    role, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    ctx = zmq.Context()
    sock = ctx.socket({"rep": zmq.REP, "req": zmq.REQ, "pull": zmq.PULL, "push": zmq.PUSH}[role])
    sock.setsockopt(zmq.RCVTIMEO, TIMEOUT_MS)
    sock.setsockopt(zmq.LINGER, TIMEOUT_MS)
    url = f"tcp://127.0.0.1:{port}"
    try:
        if role in ("rep", "pull"):
            sock.bind(url)
        else:
            sock.connect(url)
        total, digest = 0, hashlib.sha256()
        if role == "rep":
            for _ in range(n):
                sock.send(hashlib.sha256(sock.recv()).hexdigest().encode())
            print(f"served {n} requests", flush=True)
        elif role == "req":
            for msg in messages(n, size):
                sock.send(msg)
                answer = sock.recv()
                if answer != hashlib.sha256(msg).hexdigest().encode():
                    sys.exit(f"wrong answer {answer!r} to a request of {len(msg)} bytes")
                total += len(msg)
            print(f"ok {n} requests, {total} bytes", flush=True)
        elif role == "pull":
            for _ in range(n):
                msg = sock.recv()
                total += len(msg)
                digest.update(msg)
            print(f"received {n} messages, {total} bytes, sha {digest.hexdigest()}", flush=True)
        else:
            for msg in messages(n, size):
                sock.send(msg)
                total += len(msg)
                digest.update(msg)
            print(f"sent {n} messages, {total} bytes, sha {digest.hexdigest()}", flush=True)
    except zmq.Again:
        sys.exit(f"{role}: nothing received in {TIMEOUT_MS} ms")
    finally:
        sock.close()
        ctx.term()


if __name__ == "__main__":
    main()
