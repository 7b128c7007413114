"""The ``lograft`` sink: Spark's writer interfaces over :mod:`spark.sink_transactions`.

``LograftStreamWriter`` (``df.writeStream.format("lograft")``) writes each micro-batch
exactly once: tasks prepare one transaction per Spark partition and the driver's
``commit`` completes them. ``LograftBatchWriter`` (``df.write.format("lograft")``) does
the same for one job, without progress records (a batch job is not replayed). Both take
Arrow batches (PySpark's Arrow writers), which halves Spark's cost per row.

Options: ``topic`` (else a ``topic`` column), ``transactional.id.prefix`` (default
``lograft-spark``), ``completion.threads`` (driver, default 8), and producer settings by
Kafka's names, with or without the ``kafka.`` prefix; ``acks=all`` and idempotence are
fixed. The ``write``/``commit`` methods run in different processes (executors, driver):
nothing passes between them but the pickled writer and the commit messages.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from lograft.protocol.errors import IllegalStateError
from spark.arrow_records import check_sink_schema
from spark.sink_transactions import (
    PartitionWrite,
    SinkSettings,
    abort_batch,
    complete_batch,
    complete_partition,
    transactional_id,
    write_partition,
)

__all__ = ["LograftBatchWriter", "LograftStreamWriter"]


log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise IllegalStateError("the lograft sink's write() runs only inside a Spark task")
    return context


class LograftStreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once micro-batches (see the module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = SinkSettings.from_options(options, record_progress=True)
        check_sink_schema(schema, self.settings.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """In a task: this partition's rows of the batch, in a prepared transaction."""
        context = _task_context()
        batch_id = int(context.getLocalProperty(BATCH_ID_PROPERTY) or "-1")
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id < 0 or not query_id:
            raise IllegalStateError("the lograft stream sink's task has no batch or query id")
        partition = context.partitionId()
        txn_id = transactional_id(self.settings.transactional_id_prefix, query_id, partition)
        return write_partition(
            self.settings,
            txn_id,
            batch_id,
            iterator,
            query_id=query_id,
        )

    def complete_partition(self, message: PartitionWrite) -> None:
        """On the driver: commit one partition's prepared transaction."""
        complete_partition(self.settings, message)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """On the driver: complete the batch's transactions; Spark records the batch as
        done only after this returns."""
        complete_batch(self.settings, messages, batchId, self.complete_partition)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """On the driver, after a task failed for good: abort what the batch left open."""
        abort_batch(self.settings, messages, batchId)


class LograftBatchWriter(DataSourceArrowWriter):
    """``df.write.format("lograft")``: the job's rows commit when the job succeeds."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.settings = SinkSettings.from_options(options, record_progress=False)
        check_sink_schema(schema, self.settings.topic)
        # Made on the driver and pickled to the tasks: one id per job.
        self.job_id = uuid.uuid4().hex
        log.info(
            "batch write job_id=%s transactional_ids=%s-%s-<partition>",
            self.job_id,
            self.settings.transactional_id_prefix,
            self.job_id,
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """In a task: this partition's rows, in a prepared transaction."""
        partition = _task_context().partitionId()
        txn_id = transactional_id(self.settings.transactional_id_prefix, self.job_id, partition)
        return write_partition(
            self.settings,
            txn_id,
            0,
            iterator,
            query_id=self.job_id,
        )

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """On the driver: commit every partition's transaction."""
        complete_batch(self.settings, messages, 0, lambda m: complete_partition(self.settings, m))

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """On the driver, after a task failed for good: abort what the job left open."""
        abort_batch(self.settings, messages, 0, query_id=self.job_id)
