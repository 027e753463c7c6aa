#!/usr/bin/env python3
"""An echo server and client on asyncio streams: the program the asyncio
test runs under `sovia run`.

  asyncio_echo.py server PORT NCONN
      serves NCONN connections (echoes every byte, closes on EOF), then
      prints "served NCONN connections, BYTES bytes" and exits 0.
  asyncio_echo.py client PORT NCONN SIZE ROUNDS
      on the first connection ROUNDS round trips of 64 bytes, then on all
      NCONN connections concurrently SIZE pseudo-random bytes each (written
      in pieces of random sizes, then write_eof) while reading the echo;
      checks it byte for byte, prints "ok NCONN connections, BYTES bytes,
      ROUNDS round trips in SECONDS s" and exits 0; exits 1 on a mismatch.

Both give up after 60 s (exit 2).
"""
import asyncio
import random
import sys
import time

LIMIT = 60


async def server(port, nconn):
    done = asyncio.Event()
    state = {"served": 0, "bytes": 0}

    async def handle(reader, writer):
        while True:
            d = await reader.read(65536)
            if not d:
                break
            state["bytes"] += len(d)
            writer.write(d)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        state["served"] += 1
        if state["served"] == nconn:
            done.set()

    srv = await asyncio.start_server(handle, "127.0.0.1", port)
    async with srv:
        await done.wait()
    print(f"served {nconn} connections, {state['bytes']} bytes", flush=True)


async def round_trips(reader, writer, rounds):
    for i in range(rounds):
        msg = bytes([i % 256]) * 64
        writer.write(msg)
        await writer.drain()
        got = await reader.readexactly(len(msg))
        if got != msg:
            raise ValueError(f"round trip {i}: got {got!r}")


async def bulk(reader, writer, idx, size):
    data = random.Random(idx).randbytes(size)
    rng = random.Random(1000 + idx)

    async def send():
        off = 0
        while off < size:
            n = rng.randint(1, 65536)
            writer.write(data[off:off + n])
            off += n
            await writer.drain()
        writer.write_eof()

    async def receive():
        got = bytearray()
        while True:
            d = await reader.read(65536)
            if not d:
                return bytes(got)
            if data[len(got):len(got) + len(d)] != d:
                raise ValueError(f"connection {idx}: echo mismatch at byte {len(got)}")
            got += d

    _, got = await asyncio.gather(send(), receive())
    writer.close()
    await writer.wait_closed()
    if got != data:
        raise ValueError(f"connection {idx}: {len(got)} of {size} bytes back")


async def client(port, nconn, size, rounds):
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(nconn)]
    t0 = time.monotonic()
    await round_trips(*conns[0], rounds)
    rtt_s = time.monotonic() - t0
    await asyncio.gather(*(bulk(r, w, i, size) for i, (r, w) in enumerate(conns)))
    print(f"ok {nconn} connections, {nconn * size} bytes, {rounds} round trips in "
          f"{rtt_s:.4f} s", flush=True)


async def bounded(coro):
    try:
        await asyncio.wait_for(coro, LIMIT)
    except asyncio.TimeoutError:
        print("timed out", file=sys.stderr, flush=True)
        sys.exit(2)
    except ValueError as e:
        print(e, file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        asyncio.run(bounded(server(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        asyncio.run(bounded(client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                                   int(sys.argv[5]))))
