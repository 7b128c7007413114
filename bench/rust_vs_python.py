"""The Rust client (clients/rust) against the Python client on one three-node cluster.

Builds ``lograft-rs`` (``cargo build --release``), starts three local nodes (``lograft
cluster up``, combined roles) and measures, ``--runs`` times each (alternating which client
goes first), the same number of records of the same size, ``acks=all`` with idempotence, on
a topic of ``--partitions`` partitions, three replicas, ``min.insync.replicas=2``:

* ``rust_produce_batched``: ``Producer::send_batch``, ``--batch`` records per
  ``ProduceRecords`` call, one task per partition;
* ``rust_produce_per_record``: ``Producer::send`` once per record, ``--concurrency`` sends
  awaiting at once (the producer's partition tasks put the records sent meanwhile into one
  ``ProduceRecords`` call);
* ``python_produce``: ``cluster.client.Producer.send`` with a callback per record, then
  ``flush()`` (its own RecordBatch codec and ``Produce``);
* ``rust_consume``: ``Consumer::poll`` (``FetchRecords``) of the batched topic's records;
* ``python_consume``: ``cluster.client.Consumer.poll`` (``Fetch``) of the same records.

Each measurement is a separate process (records/s from its first call, after the client is
made, to its last acknowledgement or record; a consumer's clock starts before it is
assigned its partitions, as it may start fetching then). Prints one JSON document (every
run and the median per workload, and the Rust/Python ratios of the medians) and writes it
to bench/results/rust_vs_python.json.

Usage: python bench/rust_vs_python.py [--runs 3] [--records 100000] [--size 100]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, create_topic, local_cluster, run_json, write_report

logger = logging.getLogger("bench.rust_vs_python")

CRATE = ROOT / "clients" / "rust"
RUST_CLI = CRATE / "target" / "release" / "lograft-rs"

# One Python client run, in its own process so that its interpreter starts clean.
_PY_PRODUCE = """
import json, sys, time
from cluster.client import Producer
boot, topic, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
payload = b"x" * size
failed = []
def done(future):
    if future.exception() is not None:
        failed.append(future.exception())
with Producer(bootstrap_servers=boot, acks="all", enable_idempotence=True) as producer:
    producer.partitions_for(topic)
    start = time.perf_counter()
    send = producer.send
    for _ in range(count):
        send(topic, payload, callback=done)
    producer.flush(300)
    seconds = time.perf_counter() - start
assert not failed, failed[:3]
print(json.dumps({"records": count, "seconds": round(seconds, 4),
                  "records_per_sec": round(count / seconds, 1)}))
"""

_PY_CONSUME = """
import json, sys, time
from cluster.client import Consumer, TopicPartition
boot, topic, count, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with Consumer(bootstrap_servers=boot, auto_offset_reset="earliest") as consumer:
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + 300
    while got < count:
        assert time.monotonic() < deadline, f"read {got} of {count}"
        got += len(consumer.poll(timeout_ms=100))
    seconds = time.perf_counter() - start
print(json.dumps({"records": got, "seconds": round(seconds, 4),
                  "records_per_sec": round(got / seconds, 1)}))
"""


def build_rust_cli() -> float:
    """``cargo build --release`` of ``lograft-rs``; the seconds it took (short when fresh)."""
    started = time.monotonic()
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "--bin", "lograft-rs"],
        cwd=CRATE,
        check=True,
        timeout=1800,
    )
    return round(time.monotonic() - started, 1)


def rust(command: str, bootstrap: str, topic: str, *args: str) -> dict[str, Any]:
    """One ``lograft-rs perf-*`` run; its JSON line."""
    return run_json([str(RUST_CLI), command, "--bootstrap", bootstrap, "--topic", topic, *args])


def python(script: str, *args: str) -> dict[str, Any]:
    """One Python client run (``script`` with ``args``); its JSON line."""
    return run_json([sys.executable, "-c", script, *args])


def one_run(bootstrap: str, run: int, options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every workload once, on topics of its own (named after ``run``)."""
    count, size = str(options.records), str(options.size)
    topics = {name: f"{name}-{run}" for name in ("rbatch", "rrecord", "py")}
    for topic in topics.values():
        create_topic(bootstrap, topic, options.partitions)
    common = ["--count", count, "--size", size, "--acks", "all", "--idempotent"]
    workloads = {
        "rust_produce_batched": lambda: rust(
            "perf-produce", bootstrap, topics["rbatch"], *common, "--batch", str(options.batch)
        ),
        "rust_produce_per_record": lambda: rust(
            "perf-produce",
            bootstrap,
            topics["rrecord"],
            *common,
            "--concurrency",
            str(options.concurrency),
        ),
        "python_produce": lambda: python(_PY_PRODUCE, bootstrap, topics["py"], count, size),
    }
    order = list(workloads)
    if run % 2:
        order.reverse()  # alternate who goes first: the cluster warms up as it runs
    results = {name: workloads[name]() for name in order}
    # Both consumers read the same records: those the batched Rust producer wrote.
    consumers = {
        "rust_consume": lambda: rust("perf-consume", bootstrap, topics["rbatch"], "--count", count),
        "python_consume": lambda: python(
            _PY_CONSUME, bootstrap, topics["rbatch"], count, str(options.partitions)
        ),
    }
    order = list(consumers)
    if run % 2:
        order.reverse()
    results.update({name: consumers[name]() for name in order})
    logger.info("run %d: %s", run, results)
    return results


def main() -> None:
    """Build, start a cluster, run the workloads ``--runs`` times, report the medians."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--batch", type=int, default=5000, help="records per send_batch call")
    parser.add_argument("--concurrency", type=int, default=20000, help="Rust sends in flight")
    parser.add_argument(
        "--output", type=Path, default=ROOT / "bench" / "results" / "rust_vs_python.json"
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    build_s = build_rust_cli()
    runs: list[dict[str, dict[str, Any]]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-rust-bench-") as data,
        local_cluster(str(Path(data) / "cluster")) as bootstrap,
    ):
        for run in range(options.runs):
            runs.append(one_run(bootstrap, run, options))
    medians = {
        name: statistics.median(r[name]["records_per_sec"] for r in runs) for name in runs[0]
    }
    report = {
        "benchmark": "rust_vs_python",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "records": options.records,
            "value_bytes": options.size,
            "partitions": options.partitions,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "acks": "all",
            "idempotence": True,
            "rust_batch_records": options.batch,
            "rust_concurrency": options.concurrency,
            "runs": options.runs,
        },
        "rust_release_build_s": build_s,
        "median_records_per_sec": medians,
        "ratios": {
            "rust_batched_vs_python_produce": round(
                medians["rust_produce_batched"] / medians["python_produce"], 2
            ),
            "rust_per_record_vs_python_produce": round(
                medians["rust_produce_per_record"] / medians["python_produce"], 2
            ),
            "rust_vs_python_consume": round(medians["rust_consume"] / medians["python_consume"], 2),
        },
        "runs": runs,
    }
    write_report(report, options.output)


if __name__ == "__main__":
    main()
