"""What a wake-up costs on this machine: the floor under every call a lograft node makes.

Two processes, each an asyncio loop, exchange a 40-byte message over loopback TCP at a
fixed rate: the client's timer fires, it writes, the server wakes, reads and echoes, the
client wakes and reads. Nothing else runs in them, so the CPU time each spends per exchange
(``/proc``, over ``--seconds``) is the cost of sleeping in ``epoll_wait`` and being woken
for a message: the kernel's, the hypervisor's (on a virtual machine) and the event loop's.
A lograft exchange costs at least this plus its own Python; at the rates of an idle cluster
(a few calls a second per node pair) the wake-ups are most of what idle CPU is.

Usage: python bench/wake_cost.py [--rates 10,200,1000] [--seconds 10]
Writes bench/results/wake_cost.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import time
from typing import Any

from _common import ROOT, cpu_seconds, write_report

MESSAGE = b"x" * 40


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionResetError):  # the client is killed at the end
        while data := await reader.read(1024):
            writer.write(data)


async def _client(port: int, rate: float) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        due += 1.0 / rate
        await asyncio.sleep(max(0.0, due - loop.time()))  # the paced load
        writer.write(MESSAGE)
        await reader.readexactly(len(MESSAGE))


async def _measure(rate: float, seconds: float) -> dict[str, Any]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client-of", str(port), "--rates", str(rate)
    )
    try:
        await asyncio.sleep(1.0)  # connected and paced before the window opens
        server_before, client_before = cpu_seconds(os.getpid()), cpu_seconds(client.pid)
        started = time.monotonic()
        await asyncio.sleep(seconds)
        elapsed = time.monotonic() - started
        server_s = cpu_seconds(os.getpid()) - server_before
        client_s = cpu_seconds(client.pid) - client_before
    finally:
        client.kill()
        await client.wait()
        server.close()
    exchanges = rate * elapsed
    return {
        "exchanges_per_s": rate,
        "server_cpu_percent": round(server_s / elapsed * 100, 2),
        "client_cpu_percent": round(client_s / elapsed * 100, 2),
        "cpu_us_per_exchange_both_sides": round((server_s + client_s) / exchanges * 1e6),
        "server_cpu_us_per_exchange": round(server_s / exchanges * 1e6),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="10,200,1000")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--client-of", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client_of is not None:  # the other process of one case
        asyncio.run(_client(args.client_of, float(args.rates)))
        return
    cases = [asyncio.run(_measure(float(rate), args.seconds)) for rate in args.rates.split(",")]
    report = {
        "hardware": f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}",
        "setup": "two asyncio processes exchanging 40 B over loopback TCP at each rate",
        "seconds": args.seconds,
        "cases": cases,
    }
    write_report(report, ROOT / "bench" / "results" / "wake_cost.json")


if __name__ == "__main__":
    main()
