#!/usr/bin/env python3
"""A gRPC service with unary calls (grpcio, Debian's python3-grpcio), for
tests/compat/test_grpc.py. No generated code: the methods take and return
raw bytes (generic handlers, no serializers).

    grpc_unary.py server PORT         /compat.Bytes/Echo returns the request,
                                      /compat.Bytes/Digest its hex SHA-256;
                                      serves until SIGTERM: "served N calls"
    grpc_unary.py client PORT N SIZE  N calls of each method with 1..SIZE
                                      bytes on one channel, each answer
                                      checked: "ok N calls, B bytes"
"""
import hashlib
import random
import signal
import sys
import threading
from concurrent import futures

import grpc

SERVICE = "compat.Bytes"


def server(port):
    served = 0
    lock = threading.Lock()

    def count(fn):
        def handler(request, context):
            nonlocal served
            with lock:
                served += 1
            return fn(request)
        return handler

    handlers = grpc.method_handlers_generic_handler(SERVICE, {
        "Echo": grpc.unary_unary_rpc_method_handler(count(lambda r: r)),
        "Digest": grpc.unary_unary_rpc_method_handler(
            count(lambda r: hashlib.sha256(r).hexdigest().encode())),
    })
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                      options=[("grpc.max_receive_message_length", 64 << 20),
                               ("grpc.max_send_message_length", 64 << 20),
                               ("grpc.so_reuseport", 0)])
    srv.add_generic_rpc_handlers((handlers,))
    if srv.add_insecure_port(f"127.0.0.1:{port}") != port:
        sys.exit(f"cannot listen on {port}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    srv.start()
    stop.wait()
    srv.stop(grace=5).wait()
    print(f"served {served} calls", flush=True)


def client(port, n, size):
    rng = random.Random(n * 31 + size)
    total = 0
    options = [("grpc.max_receive_message_length", 64 << 20),
               ("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
        echo = ch.unary_unary(f"/{SERVICE}/Echo")
        digest = ch.unary_unary(f"/{SERVICE}/Digest")
        for _ in range(n):
            msg = rng.randbytes(rng.randint(1, size))
            if echo(msg, timeout=20) != msg:
                sys.exit(f"Echo of {len(msg)} bytes came back different")
            if digest(msg, timeout=20) != hashlib.sha256(msg).hexdigest().encode():
                sys.exit(f"Digest of {len(msg)} bytes is wrong")
            total += len(msg)
    print(f"ok {2 * n} calls, {total} bytes", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "server":
        server(int(sys.argv[2]))
    elif len(sys.argv) == 5 and sys.argv[1] == "client":
        client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
