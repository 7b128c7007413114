"""Spark source throughput: a ``Trigger.AvailableNow`` query from lograft into ``noop``.

Starts three combined nodes with ``lograft cluster up`` (temporary data directory), creates
a topic of three partitions (RF 3, ``min.insync.replicas=2``) and fills it with
``--records`` values of 1 KiB (``Producer.send_bulk``, ``acks=all``). Then, ``--runs``
times, a streaming query reads the whole topic (``startingOffsets=earliest``, a fresh
checkpoint each run, ``read_committed`` as the source defaults to) with
``Trigger.AvailableNow`` into Spark's built-in ``noop`` sink, in one local session
(``local[2]``). Each run's rows/s is rows over the wall time from ``start()`` to the
query's end (query start-up included); ``batch_rows_per_s`` leaves the start-up out (rows
over the micro-batches' own durations). For scale, a single ``Consumer`` in this process
reads the same topic once (``consumer_rows_per_s``). Prints one JSON document and writes
it to bench/results/spark_source.json.

Usage: python bench/spark_source.py [--records 300000] [--runs 3] [--option NAME=VALUE ...]
(``--option`` passes a source option to the query, e.g. ``max.partition.fetch.bytes=4194304``.)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from typing import Any

from _common import ROOT, create_topic, local_cluster, spark_session, write_report

from cluster.client import Consumer, Producer, TopicPartition

TOPIC = "bench-spark-source"
PARTITIONS = 3
VALUE = b"x" * 1024
BULK = 10_000
QUERY_TIMEOUT_S = 600


def _fill(bootstrap: str, records: int) -> None:
    with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        for first in range(0, records, BULK):
            count = min(BULK, records - first)
            producer.send_bulk(TOPIC, [VALUE] * count).result(timeout=120)
        producer.flush()


def _consumer_rate(bootstrap: str, records: int) -> float:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    with Consumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        max_poll_records=5000,
    ) as consumer:
        consumer.assign(tps)
        read = 0
        start = time.monotonic()
        deadline = start + QUERY_TIMEOUT_S
        while read < records and time.monotonic() < deadline:
            read += len(consumer.poll(timeout_ms=1000))
        return read / (time.monotonic() - start)


def _run(
    session: Any, bootstrap: str, checkpoint: str, run: int, options: dict[str, str]
) -> dict[str, Any]:
    reader = (
        session.readStream.format("lograft")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    frame = reader.load()
    start = time.monotonic()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(QUERY_TIMEOUT_S):
        query.stop()
        raise RuntimeError(f"run {run}: the query did not finish in {QUERY_TIMEOUT_S} s")
    elapsed = time.monotonic() - start
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000.0
    return {
        "run": run,
        "rows": rows,
        "micro_batches": len(progress),
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
        "batch_rows_per_s": round(rows / batch_s) if batch_s > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.option)
    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-bench-spark-source-") as data,
        local_cluster(data) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, PARTITIONS)
        fill_start = time.monotonic()
        _fill(bootstrap, args.records)
        fill_s = time.monotonic() - fill_start
        consumer_rate = _consumer_rate(bootstrap, args.records)
        session = spark_session("lograft-bench-source")
        try:
            for run in range(args.runs):
                checkpoint = os.path.join(data, f"checkpoint-{run}")
                runs.append(_run(session, bootstrap, checkpoint, run, options))
        finally:
            session.stop()
    for result in runs:
        if result["rows"] != args.records:
            raise RuntimeError(f"run {result['run']} read {result['rows']} of {args.records}")
    report = {
        "benchmark": "spark_source",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "nodes": 3,
            "partitions": PARTITIONS,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "record_bytes": len(VALUE),
            "records": args.records,
            "spark_master": "local[2]",
            "trigger": "AvailableNow",
            "sink": "noop",
            "isolation_level": "read_committed",
            "source_options": options,
            "runs": args.runs,
        },
        "summary": {
            "median_rows_per_s": statistics.median(r["rows_per_s"] for r in runs),
            "median_batch_rows_per_s": statistics.median(
                r["batch_rows_per_s"] for r in runs if r["batch_rows_per_s"] is not None
            ),
            "consumer_rows_per_s": round(consumer_rate),
            "fill_rows_per_s": round(args.records / fill_s),
        },
        "runs": runs,
    }
    write_report(report, ROOT / "bench" / "results" / "spark_source.json")


if __name__ == "__main__":
    main()
