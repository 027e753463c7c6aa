#!/usr/bin/env python3
"""An HTTP/1.1 server and client on Python's asyncio streams (stdlib
only), for tests/compat/test_asyncio_http.py; curl fetches from the server
too. The same interface as node_http.js:

    asyncio_http.py server PORT FILE
        GET /blob: FILE; POST /sha256: the hex SHA-256 of the body;
        GET /hello: "hello\\n". Serves until SIGTERM, then prints
        "served N requests".
    asyncio_http.py client PORT FILE
        over one keep-alive connection: GET /blob twice, POST FILE to
        /sha256, GET /hello; prints "ok blob SHA SHA, post SHA, hello".
"""
import asyncio
import hashlib
import signal
import sys


async def read_message(reader):
    """(start line, headers, body) of one HTTP/1.1 message, None at EOF."""
    start = await reader.readline()
    if not start:
        return None
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return start.decode("latin-1").split(), headers, body


def response(status, body):
    return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status, b"OK" if status == 200 else b"Not Found", len(body), body)


async def server(port, path):
    with open(path, "rb") as f:
        blob = f.read()
    served = 0

    async def handle(reader, writer):
        nonlocal served
        try:
            while (msg := await read_message(reader)) is not None:
                (method, target, *_), headers, body = msg
                served += 1
                if (method, target) == ("GET", "/blob"):
                    writer.write(response(200, blob))
                elif (method, target) == ("POST", "/sha256"):
                    writer.write(response(200, hashlib.sha256(body).hexdigest().encode() + b"\n"))
                elif (method, target) == ("GET", "/hello"):
                    writer.write(response(200, b"hello\n"))
                else:
                    writer.write(response(404, b""))
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with srv:
        await stop.wait()
    print(f"served {served} requests", flush=True)


async def client(port, path):
    with open(path, "rb") as f:
        post = f.read()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def request(method, target, body=b""):
        writer.write(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        msg = await read_message(reader)
        if msg is None or msg[0][1] != "200":
            raise SystemExit(f"{method} {target}: {msg and msg[0]}")
        return msg[2]

    a = hashlib.sha256(await request("GET", "/blob")).hexdigest()
    b = hashlib.sha256(await request("GET", "/blob")).hexdigest()
    digest = (await request("POST", "/sha256", post)).decode().strip()
    hello = await request("GET", "/hello")
    writer.close()
    await writer.wait_closed()
    if hello != b"hello\n":
        raise SystemExit(f"hello: {hello!r}")
    print(f"ok blob {a} {b}, post {digest}, hello", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("server", "client"):
        sys.exit(__doc__)
    role = server if sys.argv[1] == "server" else client
    asyncio.run(role(int(sys.argv[2]), sys.argv[3]))
