"""Transactional produce against idempotent produce, on the same three-node cluster.

Starts three combined nodes with ``lograft cluster up`` (temporary data directory), creates
a topic of three partitions (RF 3, ``min.insync.replicas=2``) and, for each mode, sends
100-byte records with the per-record ``Producer.send`` (``acks=all``) for ``--seconds``:

* ``idempotent``: no transactions, nothing waited for until the end (the plain baseline);
* ``idempotent_flush_10ms``: ``flush()`` every 10 ms (a commit waits for its records too, so
  this isolates what a transaction adds to the flushes);
* ``txn_10ms`` / ``txn_100ms``: a transaction committed every 10 ms / 100 ms.

Each mode runs ``--runs`` times, alternating; the report gives each run's records/s, the
median, and the commit latency (p50/p99 of ``commit_transaction``). Prints one JSON document
and writes it to bench/results/transactions.json.

Usage: python bench/transactions.py [--seconds 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from typing import Any

from _common import ROOT, create_topic, local_cluster, write_report

from cluster.client import Producer

TOPIC = "bench-txn"
VALUE = b"x" * 100


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _run(bootstrap: str, mode: str, seconds: float, run: int) -> dict[str, Any]:
    interval_s = 0.1 if mode.endswith("100ms") else 0.01
    if mode == "idempotent":
        interval_s = seconds  # one window: no waiting until the end
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    transactional = mode.startswith("txn")
    if transactional:
        config["transactional.id"] = f"bench-{mode}-{run}"
    sent = 0
    commits: list[float] = []
    with Producer(config) as producer:
        if transactional:
            producer.init_transactions()
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            window_end = time.monotonic() + interval_s
            if transactional:
                producer.begin_transaction()
            while time.monotonic() < window_end:
                for _ in range(100):
                    producer.send(TOPIC, VALUE)
                sent += 100
            ended = time.monotonic()
            if transactional:
                producer.commit_transaction()
            else:
                producer.flush()
            commits.append((time.monotonic() - ended) * 1000.0)
        elapsed = time.monotonic() - start
    return {
        "mode": mode,
        "run": run,
        "records": sent,
        "seconds": round(elapsed, 2),
        "records_per_s": round(sent / elapsed),
        "transactions_or_flushes": len(commits),
        "commit_or_flush_ms_p50": round(_percentile(commits, 0.5), 2),
        "commit_or_flush_ms_p99": round(_percentile(commits, 0.99), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    modes = ("idempotent", "idempotent_flush_10ms", "txn_10ms", "txn_100ms")
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-bench-txn-") as data,
        local_cluster(data) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, 3)
        for run in range(args.runs):
            for mode in modes:
                results.append(_run(bootstrap, mode, args.seconds, run))
    summary = {
        mode: {
            "median_records_per_s": statistics.median(
                r["records_per_s"] for r in results if r["mode"] == mode
            ),
            "median_commit_or_flush_ms_p50": statistics.median(
                r["commit_or_flush_ms_p50"] for r in results if r["mode"] == mode
            ),
        }
        for mode in modes
    }
    report = {
        "benchmark": "transactions",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "nodes": 3,
            "partitions": 3,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "acks": "all",
            "record_bytes": len(VALUE),
            "api": "Producer.send per record",
            "seconds_per_run": args.seconds,
            "runs": args.runs,
        },
        "summary": summary,
        "runs": results,
    }
    write_report(report, ROOT / "bench" / "results" / "transactions.json")


if __name__ == "__main__":
    main()
