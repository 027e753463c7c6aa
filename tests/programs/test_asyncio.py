#!/usr/bin/env python3
"""The asyncio echo server and client (asyncio_echo.py) under `sovia run`:
20 round trips of 64 bytes, then 3 connections echoing 1 MiB each at once,
checked byte for byte; both under sovia (with each profile), then only
one side.

usage: test_asyncio.py --sovia /path/to/sovia
"""
import progtest as pt


class AsyncioEcho(pt.ProgramCase):
    def test_both_under_sovia(self):
        pt.python_echo(self, "asyncio_echo.py", pt.BOTH)

    def test_client_only_under_sovia(self):
        pt.python_echo(self, "asyncio_echo.py", pt.CLIENT_ONLY)

    def test_server_only_under_sovia(self):
        pt.python_echo(self, "asyncio_echo.py", pt.SERVER_ONLY)

    def test_both_under_sovia_latency_profile(self):
        pt.python_echo(self, "asyncio_echo.py", pt.BOTH, "latency")

    def test_both_under_sovia_throughput_profile(self):
        pt.python_echo(self, "asyncio_echo.py", pt.BOTH, "throughput")


if __name__ == "__main__":
    pt.main()
