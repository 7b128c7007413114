"""One unary call's cost: gRPC's asyncio server against lograft's framed listener.

A server process answers ``Fetch`` with an empty ``FetchResponse``, over ``grpc.aio`` or
over :class:`lograft.protocol.framed.server.FramedListener`; this process calls it one call at a
time, synchronously (the gRPC stub, or a framed channel's ``submit().result()``), and
reports the round trip and the server's CPU time per call (``/proc``), median of
``--runs``. Writes ``bench/results/rpc_transport.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import grpc
from _common import ROOT, cpu_seconds, write_report

from cluster.launcher.processes import free_base_port
from lograft.protocol.framed.client import ClientLoop, FramedChannel
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc


async def _fetch(request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
    return pb.FetchResponse()


async def _serve(kind: str, port: int) -> None:
    if kind == "grpc":
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "lograft.v1.Broker",
            {
                "Fetch": grpc.unary_unary_rpc_method_handler(
                    _fetch,
                    request_deserializer=pb.FetchRequest.FromString,
                    response_serializer=pb.FetchResponse.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()
        return
    from lograft.protocol.framed.server import FramedListener

    listener = FramedListener(
        "127.0.0.1", port, grpc_port=1, handlers={"Fetch": _fetch}, max_request_bytes=1 << 20
    )
    await listener.bind()
    await listener.serve()
    await asyncio.Event().wait()


def _measure(kind: str, calls: int) -> dict[str, float]:
    port = free_base_port(1)
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--port", str(port)], cwd=ROOT
    )
    io_loop: ClientLoop | None = None
    try:
        request = pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
        if kind == "grpc":
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = pb_grpc.BrokerStub(channel)

            def call() -> None:
                stub.Fetch(request, timeout=10)
        else:
            io_loop = ClientLoop("bench-io")
            framed = FramedChannel(
                "127.0.0.1",
                port,
                io_loop.loop,
                max_request_bytes=1 << 20,
                max_response_bytes=1 << 20,
                connect_timeout_s=1.0,
            )
            deadline = time.monotonic() + 30
            while True:  # until the server process listens
                try:
                    framed.submit("Fetch", request, 10).result()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

            def call() -> None:
                framed.submit("Fetch", request, 10).result()

        for _ in range(500):
            call()
        cpu_before = cpu_seconds(server.pid)
        started = time.perf_counter()
        for _ in range(calls):
            call()
        elapsed = time.perf_counter() - started
        return {
            "round_trip_us": round(elapsed / calls * 1e6, 1),
            "server_cpu_us_per_call": round(
                (cpu_seconds(server.pid) - cpu_before) / calls * 1e6, 1
            ),
        }
    finally:
        if io_loop is not None:
            io_loop.close([])
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--serve", choices=("grpc", "framed"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.port))
        return
    report: dict[str, Any] = {
        "setup": f"one server process, one synchronous caller, {args.calls} calls a run, "
        f"empty Fetch, {os.cpu_count()} cores",
        "runs": args.runs,
    }
    for kind in ("grpc", "framed"):
        runs = [_measure(kind, args.calls) for _ in range(args.runs)]
        report[kind] = {
            "runs": runs,
            "median": {field: statistics.median(run[field] for run in runs) for field in runs[0]},
        }
    write_report(report, ROOT / "bench" / "results" / "rpc_transport.json")


if __name__ == "__main__":
    main()
