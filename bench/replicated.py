"""Replicated produce benchmark: three local nodes, replication.factor=3, six partitions.

Starts a three-node cluster with ``lograft cluster up`` (combined roles, data in a temporary
directory), creates one topic per case (6 partitions, RF 3, min.insync.replicas=2) and runs
``lograft perf produce`` as a separate client process for acks=1 and acks=all with 100-byte
and 1 KiB records through the bulk path (latency per request), then paced runs of acks=all
100-byte records at a fixed rate (latency per 10 ms chunk, from send_bulk to the ack), each
after an unmeasured two-second run at the same rate on the same topic.
Prints one JSON document and writes it to bench/results/replicated.json.

Usage: python bench/replicated.py [--scale 1.0] [--paced-rate 250000] [--config NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import LOGRAFT, ROOT, local_cluster, run_json, write_report

PARTITIONS = 6


def _create_topic(bootstrap: str, topic: str) -> None:
    subprocess.run(
        [
            *LOGRAFT,
            "--bootstrap",
            bootstrap,
            "topics",
            "create",
            topic,
            "--partitions",
            str(PARTITIONS),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


def _produce(
    bootstrap: str, topic: str, acks: str, size: int, count: int, rate: int | None
) -> dict[str, Any]:
    cmd = [
        *LOGRAFT,
        "--bootstrap",
        bootstrap,
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
        "--bulk",
        "--json",
    ]
    if rate is not None:
        cmd += ["--throughput", str(rate)]
    return run_json(cmd)


def _delete_topic(bootstrap: str, topic: str) -> None:
    subprocess.run(
        [*LOGRAFT, "--bootstrap", bootstrap, "topics", "delete", topic],
        check=True,
        cwd=ROOT,
        capture_output=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply record counts")
    parser.add_argument(
        "--paced-rate",
        type=int,
        action="append",
        default=[],
        help="records/s for a paced acks=all 100-byte run (repeatable; default 250000)",
    )
    parser.add_argument("--config", action="append", default=[], help="node NAME=VALUE")
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/replicated.json")
    parser.add_argument(
        "--keep-topics", action="store_true", help="keep each case's topic (and its data)"
    )
    args = parser.parse_args()
    paced_rates = args.paced_rate or [250_000]

    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-bench-") as data,
        local_cluster(data, args.config) as bootstrap,
    ):
        cases = [
            ("1", 100, int(2_000_000 * args.scale)),
            ("all", 100, int(2_000_000 * args.scale)),
            ("1", 1024, int(300_000 * args.scale)),
            ("all", 1024, int(300_000 * args.scale)),
        ]
        for acks, size, count in cases:
            topic = f"bench-acks{acks}-{size}"
            _create_topic(bootstrap, topic)
            result = _produce(bootstrap, topic, acks, size, count, None)
            runs.append({"case": "bulk", "acks": acks, "record_size": size, **result})
            print(json.dumps(runs[-1]), file=sys.stderr)
            if not args.keep_topics:
                _delete_topic(bootstrap, topic)
        for rate in paced_rates:
            topic = f"bench-paced-{rate}"
            _create_topic(bootstrap, topic)
            count = max(int(rate * 10 * min(args.scale, 1.0)), 1)
            # A first, unmeasured run warms the new topic (leaders, ISRs, producer ids).
            _produce(bootstrap, topic, "all", 100, max(rate * 2, 1), rate)
            result = _produce(bootstrap, topic, "all", 100, count, rate)
            runs.append({"case": "paced", "acks": "all", "record_size": 100, **result})
            print(json.dumps(runs[-1]), file=sys.stderr)
            if not args.keep_topics:
                _delete_topic(bootstrap, topic)
    report = {
        "benchmark": "replicated",
        "nodes": 3,
        "replication_factor": 3,
        "partitions": PARTITIONS,
        "min_insync_replicas": 2,
        "node_config": args.config,
        "topics_kept": args.keep_topics,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": runs,
    }
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
