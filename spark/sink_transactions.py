"""The sink's two-phase commit: tasks prepare transactions, the driver completes them.

Each Spark partition of a query writes through its own ``transactional.id``,
``<prefix>-<query id>-<partition>`` (the query id survives restarts from a checkpoint, so a
replay uses the same ids). In a task, :func:`write_partition`:

1. ``init_transactions()``: fences every earlier attempt of the id (a failed task, the run
   before a crash) and aborts its unfinished transaction, which is why this comes first;
2. reads the partition's *progress*: the offset the id's consumer group (named as the id)
   has committed on :data:`PROGRESS_PARTITION`, which is the next batch id it has to write.
   If it is past this batch, an earlier run committed it: write nothing
   (``ALREADY_COMMITTED``);
3. begins a transaction, sends the rows, adds ``progress = batch id + 1`` to it
   (``send_offsets_to_transaction``: the progress commits if and only if the rows do), and
   ``prepare_transaction()`` (KIP-939): flushed, kept open, never timed out;
4. returns a :class:`PartitionWrite` naming the prepared transaction.

On the driver, :func:`complete_partition` takes each message: ``init_transactions(
keep_prepared_txn=True)`` (waits for anything of the id still completing), returns if the
progress is already past the batch (a repeated ``commit``), else ``complete_transaction``,
which commits only the transaction the message names; anything else (a newer attempt
fenced it, it was aborted) raises ``BatchNotCommittedError`` and the query fails, to
write the batch again when it restarts. ``docs/spark.md`` walks every crash point.

Progress is read without ``require_stable``: ``init_transactions`` returns only once every
earlier transaction of the id has completed on every partition it touched, and nothing but
that id commits its group, so no transaction of the group can be pending then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from cluster.client._client_config import COMMON_CONFIGS, ConfigDef
from cluster.client.admin import AdminClient
from cluster.client.consumer import Consumer, ConsumerGroupMetadata
from cluster.client.producer import PRODUCER_CONFIGS, PreparedTxnState, Producer, RecordFuture
from lograft.protocol.errors import (
    BatchNotCommittedError,
    IllegalStateError,
    InvalidConfigError,
    InvalidRecordError,
    LograftError,
)
from lograft.protocol.topic_partition import TopicPartition
from spark.arrow_records import SinkColumns, columns_of
from spark.options import client_config, option, option_int, settings_for

__all__ = [
    "ALREADY_COMMITTED",
    "DEFAULT_PREFIX",
    "EMPTY",
    "PREPARED",
    "PROGRESS_PARTITION",
    "PartitionWrite",
    "SinkSettings",
    "abort_batch",
    "complete_batch",
    "complete_partition",
    "next_batch_of",
    "transactional_id",
    "write_partition",
]

log = logging.getLogger(__name__)

PROGRESS_PARTITION: Final = TopicPartition("__consumer_offsets", 0)
"""Where a sink partition's progress is committed. The group coordinator takes offsets only
for partitions that exist; this one exists wherever groups do, whatever topics the query
writes to (the committed offset is a batch id, not a position in it)."""

PREPARED: Final = "prepared"
"""A :class:`PartitionWrite` outcome: the rows wait in a prepared transaction for the driver."""
EMPTY: Final = "empty"
"""An outcome: the partition had no rows; it wrote nothing and opened no transaction."""
ALREADY_COMMITTED: Final = "already-committed"
"""An outcome: an earlier run committed this batch (progress is past it); nothing written."""

DEFAULT_PREFIX: Final = "lograft-spark"
"""``transactional.id.prefix`` by default: ids are ``<prefix>-<query id>-<partition>``."""
DEFAULT_COMPLETION_THREADS: Final = 8
ABORT_TIMEOUT_S: Final = 30.0
"""How long a failing task waits for its transaction's abort (then the next
``init_transactions`` of its id aborts it)."""
_FIXED_PRODUCER: Final[Mapping[str, object]] = {
    "enable.idempotence": "true",
    "acks": "all",
    "transaction.two.phase.commit.enable": "true",
}


@dataclass(frozen=True, slots=True)
class SinkSettings:
    """What a task and the driver need to write and complete (pickled to the tasks)."""

    producer_config: Mapping[str, object]
    """The user's producer settings, checked; the transactional ones are added per id."""
    topic: str | None
    """The ``topic`` option; ``None``: each row's ``topic`` column."""
    transactional_id_prefix: str = DEFAULT_PREFIX
    record_progress: bool = True
    """Streaming: commit each batch id with its rows so a replay can skip it. A batch
    write runs once, so it skips the progress group."""
    completion_threads: int = DEFAULT_COMPLETION_THREADS
    """How many transactions the driver completes at once."""

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, record_progress: bool) -> SinkSettings:
        """Read and check the sink's options (raises ``InvalidConfigError``)."""
        if option(options, "transactional.id") or option(options, "kafka.transactional.id"):
            raise InvalidConfigError(
                "the lograft sink makes a transactional.id per Spark partition; set "
                "'transactional.id.prefix' instead"
            )
        producer_config = client_config(
            options, PRODUCER_CONFIGS, "producer", fixed=_FIXED_PRODUCER
        )
        threads = option_int(options, "completion.threads", 1)
        return cls(
            producer_config=producer_config,
            topic=option(options, "topic"),
            transactional_id_prefix=option(options, "transactional.id.prefix", DEFAULT_PREFIX)
            or DEFAULT_PREFIX,
            record_progress=record_progress,
            completion_threads=threads if threads is not None else DEFAULT_COMPLETION_THREADS,
        )

    def transactional_config(self, transactional_id: str) -> dict[str, object]:
        """The producer config of one sink partition's transactional id."""
        return {**self.producer_config, "transactional.id": transactional_id}

    def client_config(self, defs: Sequence[ConfigDef[Any]]) -> dict[str, object]:
        """The user's settings another client (``defs``) takes: servers, timeouts, id
        (the progress reader and ``abort``'s admin client take the common ones)."""
        return settings_for(self.producer_config, defs)

    def progress_reader_config(self, transactional_id: str) -> dict[str, object]:
        """A consumer of the id's progress group: the producer's connection settings."""
        config = self.client_config(COMMON_CONFIGS)
        config.update({"group.id": transactional_id, "enable.auto.commit": "false"})
        return config


def transactional_id(prefix: str, query_id: str, spark_partition: int) -> str:
    """The ``transactional.id`` (and progress group) of one Spark partition of a query."""
    return f"{prefix}-{query_id}-{spark_partition}"


@dataclass(frozen=True)
class PartitionWrite(WriterCommitMessage):
    """A task's commit message: what it left for the driver to complete."""

    transactional_id: str
    batch_id: int
    outcome: str
    """:data:`PREPARED`, :data:`EMPTY` or :data:`ALREADY_COMMITTED`."""
    prepared: str | None = None
    """``str(PreparedTxnState)`` of the prepared transaction (only when PREPARED)."""
    records: int = 0
    query_id: str = ""
    """The query (or batch job) the id belongs to: ``abort`` derives the ids of the
    partitions that sent no message from it."""


def next_batch_of(settings: SinkSettings, txn_id: str) -> int | None:
    """The batch id after the last one committed through ``txn_id`` (``None``: none was).

    Call it after ``init_transactions`` of the id (see the module docstring).
    """
    consumer = Consumer(settings.progress_reader_config(txn_id))
    try:
        return consumer.committed([PROGRESS_PARTITION])[PROGRESS_PARTITION]
    finally:
        consumer.close()


def _send(
    producer: Producer, columns: SinkColumns, topic: str | None
) -> list[Future[Any] | RecordFuture]:
    if columns.bulk_ready and topic is not None:
        values: list[bytes] = columns.values  # type: ignore[assignment]  # bulk_ready: no None
        return [producer.send_bulk(topic, values, keys=columns.keys)]
    futures: list[Future[Any] | RecordFuture] = []
    keys, topics, partitions = columns.keys, columns.topics, columns.partitions
    headers, timestamps = columns.headers, columns.timestamps_ms
    for i, value in enumerate(columns.values):
        row_topic = topic if topic is not None else (topics[i] if topics is not None else None)
        if row_topic is None:
            raise InvalidRecordError(f"row {i} has a null topic and no 'topic' option is set")
        futures.append(
            producer.send(
                row_topic,
                value,
                key=keys[i] if keys is not None else None,
                partition=partitions[i] if partitions is not None else None,
                timestamp_ms=timestamps[i] if timestamps is not None else None,
                headers=headers[i] if headers is not None else None,
            )
        )
    return futures


def write_partition(
    settings: SinkSettings,
    txn_id: str,
    batch_id: int,
    batches: Iterator[pa.RecordBatch],
    *,
    query_id: str = "",
) -> PartitionWrite:
    """A task's part of batch ``batch_id``: its rows in a prepared transaction (see the
    module docstring). An empty partition writes nothing and opens no transaction."""
    first = next((b for b in batches if b.num_rows > 0), None)

    def message(outcome: str, prepared: str | None = None, records: int = 0) -> PartitionWrite:
        return PartitionWrite(txn_id, batch_id, outcome, prepared, records, query_id)

    if first is None:
        return message(EMPTY)
    producer = Producer(settings.transactional_config(txn_id))
    started = False
    try:
        producer.init_transactions()
        if settings.record_progress:
            done = next_batch_of(settings, txn_id)
            if done is not None and done > batch_id:
                log.info(
                    "batch already committed transactional_id=%s batch=%d progress=%d",
                    txn_id,
                    batch_id,
                    done,
                )
                return message(ALREADY_COMMITTED)
        producer.begin_transaction()
        started = True
        futures: list[Future[Any] | RecordFuture] = []
        records = 0
        for batch in _chain(first, batches):
            if batch.num_rows == 0:
                continue
            futures.extend(_send(producer, columns_of(batch, settings.topic), settings.topic))
            records += batch.num_rows
        if settings.record_progress:
            producer.send_offsets_to_transaction(
                {PROGRESS_PARTITION: batch_id + 1}, ConsumerGroupMetadata(txn_id)
            )
        producer.flush()
        for future in futures:
            future.result()  # a failed record raises here, before anything is prepared
        prepared = producer.prepare_transaction()
        started = False
        log.info(
            "partition prepared transactional_id=%s batch=%d records=%d state=%s",
            txn_id,
            batch_id,
            records,
            prepared,
        )
        return message(PREPARED, str(prepared), records)
    except BaseException:
        if started:
            _abort_quietly(producer, txn_id, batch_id)
        raise
    finally:
        producer.close()


def _abort_quietly(producer: Producer, txn_id: str, batch_id: int) -> None:
    """A failing task aborts its unprepared transaction at once: two-phase transactions
    never time out, so one left open would hold back the LSO of every partition it wrote
    to until the next ``init_transactions`` of the id. The task's own error is what
    matters; if the abort fails too, that next ``init_transactions`` aborts it."""
    try:
        producer.abort_transaction(timeout=ABORT_TIMEOUT_S)
    except LograftError as exc:
        log.warning(
            "abort after a failed write failed transactional_id=%s batch=%d error=%s",
            txn_id,
            batch_id,
            exc,
        )


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def complete_partition(settings: SinkSettings, message: PartitionWrite) -> None:
    """Commit the transaction ``message`` prepared (see the module docstring); raises
    ``BatchNotCommittedError`` if that transaction is no longer the one open."""
    if message.outcome != PREPARED or message.prepared is None:
        return
    batch_id, txn_id = message.batch_id, message.transactional_id
    with Producer(settings.transactional_config(txn_id)) as producer:
        producer.init_transactions(keep_prepared_txn=True)
        if settings.record_progress:
            done = next_batch_of(settings, txn_id)
            if done is not None and done > batch_id:
                log.info("batch already completed transactional_id=%s batch=%d", txn_id, batch_id)
                return
        try:
            committed = producer.complete_transaction(PreparedTxnState.parse(message.prepared))
        except IllegalStateError:
            committed = False  # nothing open: a newer attempt of the id aborted it
        if not committed:
            raise BatchNotCommittedError(
                f"batch {batch_id} of transactional id {txn_id}: its prepared transaction "
                f"{message.prepared} is no longer open (a newer attempt fenced it, or it was "
                "aborted); nothing of it is visible, and the batch is written again when "
                "the query restarts"
            )
    log.info("partition committed transactional_id=%s batch=%d", txn_id, batch_id)


def complete_batch(
    settings: SinkSettings,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int,
    complete: Callable[[PartitionWrite], None],
) -> int:
    """The driver's ``commit``: ``complete`` every prepared partition of the batch (a few at
    once); raises the first failure after the rest are done. Returns the records committed."""
    foreign = [m for m in messages if m is not None and not isinstance(m, PartitionWrite)]
    if foreign:
        raise IllegalStateError(f"batch {batch_id}: a commit message the sink did not write")
    writes = [m for m in messages if isinstance(m, PartitionWrite) and m.outcome == PREPARED]
    errors: list[BaseException] = []
    with ThreadPoolExecutor(max_workers=settings.completion_threads) as pool:
        for write, future in [(m, pool.submit(complete, m)) for m in writes]:
            error = future.exception()
            if error is not None:
                log.error(
                    "partition not committed transactional_id=%s batch=%d error=%s",
                    write.transactional_id,
                    batch_id,
                    error,
                )
                errors.append(error)
    if errors:
        raise errors[0]
    records = sum(m.records for m in writes)
    log.info("batch committed batch=%d partitions=%d records=%d", batch_id, len(writes), records)
    return records


def abort_batch(
    settings: SinkSettings,
    messages: Sequence[WriterCommitMessage | None],
    batch_id: int,
    query_id: str | None = None,
) -> None:
    """The driver's ``abort``: abort every transaction the batch may have left open, those
    of the messages and those of partitions that sent none (failed tasks), by fencing
    their ids (the message's index is its Spark partition; ``query_id`` names the query or
    job when no message does). Failures are logged: a transaction left open is aborted by
    the next ``init_transactions`` of its id (the next run of the query)."""
    writes = [m for m in messages if isinstance(m, PartitionWrite)]
    ids = {m.transactional_id for m in writes if m.outcome == PREPARED}
    query_ids = {m.query_id for m in writes if m.query_id} | ({query_id} if query_id else set())
    if len(query_ids) == 1:
        (query_id,) = query_ids
        ids |= {
            transactional_id(settings.transactional_id_prefix, query_id, index)
            for index, m in enumerate(messages)
            if m is None
        }
    if not ids:
        return
    with AdminClient(settings.client_config(COMMON_CONFIGS)) as admin:
        for txn_id in sorted(ids):
            try:
                admin.force_terminate_transaction(txn_id)
            except LograftError as exc:
                log.warning(
                    "abort failed transactional_id=%s batch=%d error=%s", txn_id, batch_id, exc
                )
    log.info("batch aborted batch=%d transactions=%d", batch_id, len(ids))
