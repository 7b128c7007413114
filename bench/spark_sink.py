"""Spark sink throughput: the same streaming query into lograft (exactly-once) and ``noop``.

Starts three combined nodes with ``lograft cluster up`` (temporary data directory), creates
a topic of three partitions (RF 3, ``min.insync.replicas=2``), and writes ``--rows`` rows
of 1 KiB values with string keys into parquet files once. Then, in one
local session (``local[2]``), ``--runs`` times and alternating, a streaming query reads the
files with ``Trigger.AvailableNow`` (``--batches`` micro-batches of ``--tasks`` files, one
Spark task each) and writes them

* to the ``lograft`` sink: ``acks=all``, idempotent, one prepared transaction per Spark
  partition per micro-batch, completed by the driver (the exactly-once path);
* to Spark's built-in ``noop`` sink, which drops the rows: the cost of Spark itself.

Each run's rows/s is rows over the wall time from ``start()`` to the query's end, a fresh
checkpoint each run; a first run of each sink warms up (Python workers start, the cluster
creates its internal topics) and is not counted. Prints one JSON document and writes
bench/results/spark_sink.json.

Usage: python bench/spark_sink.py [--rows 200000] [--runs 3] [--batches 4] [--tasks 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, create_topic, local_cluster, spark_session, write_report

TOPIC = "bench-spark-sink"
PARTITIONS = 3
VALUE_BYTES = 1024
QUERY_TIMEOUT_S = 900


def _run(
    session: Any,
    bootstrap: str,
    source: Path,
    work: Path,
    sink: str,
    run: int,
    files_per_trigger: int,
) -> dict[str, Any]:
    stream = (
        session.readStream.schema("key string, value binary")
        .option("maxFilesPerTrigger", files_per_trigger)
        .parquet(str(source))
    )
    writer = stream.writeStream.format(sink).option(
        "checkpointLocation", str(work / f"checkpoint-{sink}-{run}")
    )
    if sink == "lograft":
        writer = writer.option("bootstrap.servers", bootstrap).option("topic", TOPIC)
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    if not query.awaitTermination(QUERY_TIMEOUT_S):
        query.stop()
        raise RuntimeError(f"{sink} run {run} did not finish in {QUERY_TIMEOUT_S} s")
    elapsed = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{sink} run {run} failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return {
        "sink": sink,
        "run": run,
        "rows": rows,
        "batches": sum(1 for p in query.recentProgress if p["numInputRows"] > 0),
        "seconds": round(elapsed, 2),
        "rows_per_s": round(rows / elapsed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument(
        "--tasks", type=int, default=2, help="Spark tasks per micro-batch (files per trigger)"
    )
    args = parser.parse_args()

    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-bench-spark-sink-") as data,
        local_cluster(data) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, PARTITIONS)
        session = spark_session("lograft-bench-sink")
        work = Path(data) / "spark"
        source = work / "input"
        from pyspark.sql import functions as F

        (
            session.range(args.rows, numPartitions=args.batches * args.tasks)
            .select(
                F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias("key"),
                F.expr(f"unhex(repeat('78', {VALUE_BYTES}))").alias("value"),
            )
            .write.parquet(str(source))
        )
        try:
            # Run -1 warms up (Python workers, the cluster's internal topics), uncounted.
            for run in range(-1, args.runs):
                for sink in ("noop", "lograft"):
                    result = _run(session, bootstrap, source, work, sink, run, args.tasks)
                    if run >= 0:
                        results.append(result)
        finally:
            session.stop()
    summary = {
        sink: statistics.median(r["rows_per_s"] for r in results if r["sink"] == sink)
        for sink in ("noop", "lograft")
    }
    report = {
        "benchmark": "spark_sink",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "nodes": 3,
            "partitions": PARTITIONS,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "acks": "all",
            "value_bytes": VALUE_BYTES,
            "rows": args.rows,
            "micro_batches": args.batches,
            "tasks_per_micro_batch": args.tasks,
            "master": "local[2]",
            "runs": args.runs,
        },
        "summary": {
            "median_rows_per_s": summary,
            "lograft_over_noop": round(summary["lograft"] / summary["noop"], 3),
        },
        "runs": results,
    }
    write_report(report, ROOT / "bench" / "results" / "spark_sink.json")


if __name__ == "__main__":
    main()
