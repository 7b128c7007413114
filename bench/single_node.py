"""Single-node benchmark: produce (bulk and per-record paths) and fetch, one client process.

Starts a node on a free 127.0.0.1 port with its data in a temporary directory, runs
`lograft perf produce` / `lograft perf consume` as separate client processes, and measures
raw fetch throughput (log bytes, no record decoding) with a gRPC stub in this process.
Prints one JSON document and writes it to bench/results/single_node.json.

Usage: python bench/single_node.py [--scale 1.0] [--acks 1] [--config NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from _common import ROOT, run_json, write_report

from lograft.protocol.batch_header import iter_headers
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

LOGRAFT = [sys.executable, "-m", "cluster.cli"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _raw_fetch(address: str, topic: str, max_bytes: int) -> dict[str, Any]:
    """Read a partition from offset 0 to the high watermark; bytes and records per second."""
    options = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = pb_grpc.BrokerStub(channel)
        offset, total_bytes, total_records = 0, 0, 0
        started = time.perf_counter()
        while True:
            response = stub.Fetch(
                pb.FetchRequest(
                    max_wait_ms=0,
                    min_bytes=1,
                    max_bytes=max_bytes,
                    replica_id=-1,
                    topics=[
                        pb.FetchTopic(
                            name=topic,
                            partitions=[
                                pb.FetchPartition(
                                    partition=0,
                                    fetch_offset=offset,
                                    partition_max_bytes=max_bytes,
                                    current_leader_epoch=-1,
                                )
                            ],
                        )
                    ],
                ),
                timeout=60,
            )
            part = response.topics[0].partitions[0]
            if part.error_code or not part.records:
                break
            for header in iter_headers(part.records):
                total_records += header.records_count
                offset = header.next_offset
            total_bytes += len(part.records)
        elapsed = time.perf_counter() - started
    return {
        "path": "raw-fetch",
        "fetch_max_bytes": max_bytes,
        "records": total_records,
        "bytes": total_bytes,
        "elapsed_s": round(elapsed, 3),
        "records_per_sec": round(total_records / elapsed),
        "mb_per_sec": round(total_bytes / elapsed / 1e6, 1),
    }


def _start_node(data_dir: str, address: str, configs: list[str]) -> subprocess.Popen[bytes]:
    """One node process on ``address``, with ``NAME=VALUE`` node ``configs``."""
    node_cmd = [
        sys.executable,
        "-m",
        "cluster.node",
        "--node-id",
        "1",
        "--data-dir",
        data_dir,
        "--listen",
        address,
        "--log-level",
        "WARNING",
    ]
    for item in configs:
        node_cmd += ["--config", item]
    return subprocess.Popen(node_cmd, cwd=ROOT)


def _produce_runs(address: str, scale: float, acks: str) -> list[dict[str, Any]]:
    """``perf produce`` bulk and per record, at 100 B and 1 KiB, each into a new topic."""
    runs: list[dict[str, Any]] = []
    cases = [
        ("bulk", 100, int(3_000_000 * scale)),
        ("bulk", 1024, int(500_000 * scale)),
        ("per-record", 100, int(300_000 * scale)),
        ("per-record", 1024, int(200_000 * scale)),
    ]
    for path, size, count in cases:
        topic = f"bench-{path}-{size}"
        subprocess.run(
            [
                *LOGRAFT,
                "--bootstrap",
                address,
                "topics",
                "create",
                topic,
                "--partitions",
                "1",
                "--replication-factor",
                "1",
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
        )
        cmd = [
            *LOGRAFT,
            "--bootstrap",
            address,
            "perf",
            "produce",
            "--topic",
            topic,
            "--num-records",
            str(count),
            "--record-size",
            str(size),
            "--acks",
            acks,
            "--json",
        ]
        if path == "bulk":
            cmd.append("--bulk")
        result = run_json(cmd)
        runs.append({"path": f"produce-{path}", "record_size": size, **result})
        print(json.dumps(runs[-1]), file=sys.stderr)
    return runs


def _consume_runs(address: str, scale: float) -> list[dict[str, Any]]:
    """The bulk topics read back: by raw fetches, then by ``perf consume``."""
    runs: list[dict[str, Any]] = []
    for size, count in (
        (100, int(3_000_000 * scale)),
        (1024, int(500_000 * scale)),
    ):
        topic = f"bench-bulk-{size}"
        raw = _raw_fetch(address, topic, 8 << 20)
        runs.append({"record_size": size, "topic": topic, **raw})
        print(json.dumps(runs[-1]), file=sys.stderr)
        consumed = run_json(
            [
                *LOGRAFT,
                "--bootstrap",
                address,
                "perf",
                "consume",
                "--topic",
                topic,
                "--messages",
                str(count),
                "--json",
            ]
        )
        runs.append({"path": "consume-client", "record_size": size, **consumed})
        print(json.dumps(runs[-1]), file=sys.stderr)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply record counts")
    parser.add_argument("--acks", default="1")
    parser.add_argument("--config", action="append", default=[], help="node NAME=VALUE")
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/single_node.json")
    args = parser.parse_args()

    port = _free_port()
    address = f"127.0.0.1:{port}"
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lograft-bench-") as data:
        node = _start_node(f"{data}/node-1", address, args.config)
        try:
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=60)
            runs += _produce_runs(address, args.scale, args.acks)
            runs += _consume_runs(address, args.scale)
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=60)
    report = {
        "benchmark": "single_node",
        "acks": args.acks,
        "node_config": args.config,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": runs,
    }
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
