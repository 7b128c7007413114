"""A streaming query's driver, run as its own process by the sink's crash tests.

``python -m tests.spark.sink_driver --bootstrap ... --input DIR --checkpoint DIR --topic T
[--fault F --fault-batch N]`` reads JSON-lines files (one per micro-batch), hash-partitions
them by key into three Spark partitions and writes them to ``T`` with the lograft sink,
``Trigger.AvailableNow``. A fault is a subclass of the sink, defined here and so pickled by
value to Spark's Python workers:

* ``kill-before-commit``: batch N's tasks have prepared; the driver's ``commit`` kills the
  driver's whole process group (JVM, workers) before completing anything;
* ``kill-inside-commit``: the same, after the first partition's transaction committed;
* ``fail-first-attempt``: batch N's partition 0 task fails after preparing on its first
  attempt (the master must allow retries: ``local[2,3]``);
* ``fail-mid-write``: the same, halfway through its rows, before preparing.

The process is started in a session of its own, so its process group is the driver's.
Each fault fires once per checkpoint (a file in it remembers), so a restart runs clean.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from spark.datasource import LograftDataSource
from spark.session import local_session_builder
from spark.sink import LograftStreamWriter
from spark.sink_transactions import PartitionWrite

FAULTS = (
    "none",
    "kill-before-commit",
    "kill-inside-commit",
    "fail-first-attempt",
    "fail-mid-write",
)


class InjectedTaskFailure(RuntimeError):
    """The fault ``fail-*`` raises in a task's first attempt."""


def _fire_once(options: Mapping[str, str], batch_id: int) -> bool:
    """Whether the fault is due at ``batch_id`` and has not fired for this checkpoint."""
    if options.get("fault", "none") == "none" or int(options["fault.batch"]) != batch_id:
        return False
    marker = Path(options["fault.marker"])
    if marker.exists():
        return False
    marker.write_text(options["fault"])
    return True


def _fail_halfway(batches: Iterator[pa.RecordBatch], batch_id: int) -> Iterator[pa.RecordBatch]:
    first = next(batches)
    yield first.slice(0, max(1, first.num_rows // 2))
    raise InjectedTaskFailure(f"batch {batch_id}: failing halfway through (attempt 0)")


def _kill_driver(options: Mapping[str, str]) -> None:
    # Spark's Python workers run in process groups of their own: the driver's group is
    # named by the driver's pid (it leads its session).
    sys.stderr.write("FAULT: killing the driver's process group\n")
    sys.stderr.flush()
    os.killpg(int(options["fault.driver_pid"]), signal.SIGKILL)
    # This worker is in a group of its own: left alive, it would go on with commit() as an
    # orphan, which a driver that really died cannot do.
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyWriter(LograftStreamWriter):
    """The lograft sink with one fault (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.fault_options = {
            k: options[k] for k in ("fault", "fault.batch", "fault.marker", "fault.driver_pid")
        }
        self.completed = 0

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        context = TaskContext.get()
        assert context is not None
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or "-1")
        fault = self.fault_options["fault"]
        first_attempt = context.partitionId() == 0 and context.attemptNumber() == 0
        if fault == "fail-mid-write" and first_attempt and _fire_once(self.fault_options, batch_id):
            # Half the rows are sent in an open (unprepared) transaction, then the task
            # fails: the retry must fence the attempt and abort its transaction.
            return super().write(_fail_halfway(iterator, batch_id))
        message = super().write(iterator)
        if (
            fault == "fail-first-attempt"
            and first_attempt
            and _fire_once(self.fault_options, batch_id)
        ):
            raise InjectedTaskFailure(f"batch {batch_id}: failing after prepare (attempt 0)")
        return message

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.fault_options["fault"] == "kill-before-commit" and _fire_once(
            self.fault_options, batchId
        ):
            _kill_driver(self.fault_options)
        super().commit(messages, batchId)

    def complete_partition(self, message: PartitionWrite) -> None:
        super().complete_partition(message)
        if self.fault_options["fault"] == "kill-inside-commit" and _fire_once(
            self.fault_options, message.batch_id
        ):
            _kill_driver(self.fault_options)


class FaultyDataSource(LograftDataSource):
    """``format("lograft_faulty")``: the lograft data source with :class:`FaultyWriter`."""

    @classmethod
    def name(cls) -> str:
        return "lograft_faulty"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return FaultyWriter(self.options, schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--master", default="local[2,3]")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--fault-batch", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    session = local_session_builder(args.master, "lograft-sink-driver").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(FaultyDataSource)
    query = (
        session.readStream.schema("key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .repartition(3, "key")
        .writeStream.format("lograft_faulty")
        .option("bootstrap.servers", args.bootstrap)
        .option("topic", args.topic)
        # One partition's transaction completed at a time: "inside commit" then means some
        # partitions committed and others not, never all of them at once.
        .option("completion.threads", "1")
        .option("fault", args.fault)
        .option("fault.batch", str(args.fault_batch))
        .option("fault.driver_pid", str(os.getpid()))
        .option("fault.marker", str(Path(args.checkpoint).with_suffix(".fault")))
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print(f"QUERY {query.id}", flush=True)
    query.awaitTermination()
    error = query.exception()
    print(f"DONE error={error}", flush=True)
    session.stop()
    return 0 if error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
