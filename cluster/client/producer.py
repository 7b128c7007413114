"""``Producer``: batches records per partition and ships them to partition leaders.

How it works, as in Kafka's Java producer:

* ``send`` picks the partition (murmur2 of the key, the sticky partition for unkeyed records,
  or the one given), appends the record to that partition's open batch
  (a ``RecordBatchBuilder``) and returns a ``concurrent.futures.Future[RecordMetadata]``.
* A sender thread ships a batch once it reaches ``batch.size`` bytes or has waited
  ``linger.ms``. One Produce request per leader carries batches of many partitions (up to
  ``max.request.size`` bytes); up to ``max.in.flight.requests.per.connection`` requests are in
  flight per broker.
* Retriable errors (``NOT_LEADER_OR_FOLLOWER``, ``UNKNOWN_TOPIC_OR_PARTITION``,
  ``LEADER_NOT_AVAILABLE``, ``FENCED_LEADER_EPOCH``, ``NOT_ENOUGH_REPLICAS``, network
  failures, timeouts) put the batch back in its partition queue, in order, after
  ``retry.backoff.ms`` (with a metadata refresh for leadership errors), until ``retries`` or
  ``delivery.timeout.ms`` runs out; then its futures fail with the typed error.
* Idempotence (``enable.idempotence``, on by default, as in Kafka 3.x) makes those retries
  safe: each record is written once, and in order per partition, even with five requests in
  flight. Before its first batch the sender thread asks any broker for a producer id and
  epoch (``InitProducerId``, retried within ``delivery.timeout.ms``). A batch gets its
  partition's next sequence (base sequence, ``+ record count`` per batch, wrapping at 2**31)
  when it is first drained and keeps it on every retry; the partition leader answers a retry
  of one of its last five batches with the original offset. So that a retry is always among
  those five, no batch is sent more than four batches after its partition's oldest
  unresolved one (answers may come back out of order, so counting unresolved batches would
  not do); a batch sent before goes alone, once every earlier batch of its partition is
  resolved, and new batches of the partition wait meanwhile.
  ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for a batch sent while its predecessor was unresolved is
  retried; for one sent after its predecessor was acknowledged, it fails the batch. A batch
  that fails for good leaves the partition's sequence broken: once nothing of the partition
  is in flight the producer bumps its epoch locally (Kafka's KIP-360; a new producer id when
  the epoch is exhausted) and the partition restarts at sequence 0. Idempotence needs
  ``acks=all``, ``retries`` > 0 and at most five requests in flight: left unset, any other
  setting turns it off; set to true, it is a config error. Without idempotence a retried
  batch may land after a later one, or twice.
* ``acks=0``: futures complete with offset -1 as soon as the request is sent.
* ``send_bulk`` is the fast path for many records: values are encoded with
  ``encode_batch`` into large batches (about ``max(batch.size, 1 MiB - 1 KiB)`` each, never
  more than ``max.request.size``) in the calling thread and pipelined to the leader. It
  returns one ``Future[BulkResult]`` rather than a future per record, because a million
  futures cost more than sending a million records; ``BulkResult.offset_of(i)`` gives the
  offset of value ``i``. With idempotence the sender writes the producer id, epoch and
  sequence into a batch's header (and redoes its CRC) when it first drains the batch.
* ``buffer.memory`` bounds the bytes waiting to be sent; ``send`` and ``send_bulk`` block
  (at most ``max.block.ms``) while it is full, and also while they wait for a topic's metadata.

``Producer`` is thread-safe. Callbacks added to the returned futures run in the sender thread;
they must not block.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from cluster.errors import (
    FencedLeaderEpochError,
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    LeaderNotAvailableError,
    LograftError,
    MessageTooLargeError,
    NetworkError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from cluster.wire import broker_pb2 as pb
from replica.batch_header import with_producer_fields
from replica.compression import CompressionType
from replica.records import RecordBatchBuilder, encode_batch

from ._connection import (
    COMMON_CONFIGS,
    ConfigDef,
    Connections,
    TopicPartition,
    boolean,
    int_at_least,
    map_rpc_error,
    resolve_config,
)
from .partitioner import Partitioner, partition_for_key

__all__ = [
    "PRODUCER_CONFIGS",
    "BulkBatch",
    "BulkResult",
    "Producer",
    "RecordMetadata",
]

logger = logging.getLogger(__name__)


def _acks(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("acks must be 0, 1, -1 or 'all'")
    text = str(value).strip().lower()
    mapping = {"all": -1, "-1": -1, "1": 1, "0": 0}
    if text not in mapping:
        raise ValueError("acks must be 0, 1, -1 or 'all'")
    return mapping[text]


def _compression(value: object) -> object:
    if not isinstance(value, str):
        raise ValueError("compression.type must be none, gzip, snappy, lz4 or zstd")
    return int(CompressionType.from_name(value))


PRODUCER_CONFIGS: tuple[ConfigDef, ...] = (
    *COMMON_CONFIGS,
    ConfigDef("acks", -1, _acks, "0: no acknowledgement, 1: leader, all (-1): every ISR"),
    ConfigDef("linger.ms", 5, int_at_least(0), "wait this long for a batch to fill"),
    ConfigDef("batch.size", 16384, int_at_least(0), "bytes per partition batch"),
    ConfigDef("compression.type", 0, _compression, "none, gzip, snappy, lz4 or zstd"),
    ConfigDef("max.request.size", 1048576, int_at_least(1), "largest request (record bytes)"),
    ConfigDef(
        "delivery.timeout.ms", 120000, int_at_least(1), "give up on a record after this long"
    ),
    ConfigDef("retries", 2147483647, int_at_least(0), "resend a failed batch this often"),
    ConfigDef(
        "max.in.flight.requests.per.connection",
        5,
        int_at_least(1),
        "unanswered requests per broker",
    ),
    ConfigDef("max.block.ms", 60000, int_at_least(0), "longest a send blocks"),
    ConfigDef("buffer.memory", 33554432, int_at_least(1), "bytes waiting to be sent"),
    ConfigDef(
        "enable.idempotence",
        True,
        boolean,
        "write each record once and in order despite retries (producer id and batch "
        "sequences); needs acks=all, retries > 0 and at most 5 requests in flight. Left "
        "unset, an incompatible setting turns it off; set to true, it is an error",
    ),
)
"""Every config ``Producer`` accepts, with its default. ``compression.type`` resolves to
the codec id; ``enable.idempotence`` to whether the producer really is idempotent."""

_RECORD_OVERHEAD = 12
"""Estimate of a record's framing bytes (length, attributes, deltas, lengths, header count);
exact for values under 64 bytes at small offset deltas, an over-estimate above."""
_BATCH_OVERHEAD = 61
_BULK_CHUNK_BYTES = 1024 * 1024 - 1024
"""Bulk batches aim at just under 1 MiB: large enough to amortise per-batch costs, small
enough for the default ``max.message.bytes`` (1 MiB + 12)."""
_REQUEST_OVERHEAD = 512
_BYTES = (bytes, bytearray, memoryview)
_METADATA_ERRORS = (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    LeaderNotAvailableError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    NetworkError,
    RequestTimedOutError,
)

_MAX_IDEMPOTENT_IN_FLIGHT = 5
"""Kafka's limit on ``max.in.flight.requests.per.connection`` for an idempotent producer,
and here also on a partition's sequence window (its oldest unresolved batch and every batch
sequenced after it): the leader remembers the last five batches of a producer, so a retried
batch is recognised as a duplicate only if at most four later batches were written after
it. Kafka gets that from in-order responses; gRPC may answer a later request first."""
_SEQUENCE_MODULUS = 2**31
"""Batch sequences are int32 and wrap from 2**31 - 1 to 0."""
_MAX_PRODUCER_EPOCH = 2**15 - 1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written; ``offset`` is -1 with ``acks=0``."""

    topic: str
    partition: int
    offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class BulkBatch:
    """One batch of a bulk send: values ``[start_index, start_index + record_count)``."""

    partition: int
    base_offset: int
    record_count: int
    start_index: int
    latency_ms: float
    """From sending the request that carried the batch to its response."""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """The outcome of ``send_bulk``: every batch written, in input order."""

    topic: str
    record_count: int
    batches: tuple[BulkBatch, ...]

    def offset_of(self, index: int) -> tuple[int, int]:
        """``(partition, offset)`` of the value at ``index`` (offset -1 with ``acks=0``).

        Holds for unkeyed bulk sends, whose batches cover consecutive indexes; keyed bulk
        sends group values by partition, so there ``start_index`` counts within the group.
        """
        starts = [b.start_index for b in self.batches]
        position = bisect.bisect_right(starts, index) - 1
        if position < 0 or index >= self.record_count:
            raise IndexError(index)
        batch = self.batches[position]
        if batch.base_offset < 0:
            return batch.partition, -1
        return batch.partition, batch.base_offset + index - batch.start_index


class _Bulk:
    """Collects the batches of one ``send_bulk`` call into its future."""

    __slots__ = ("batches", "error", "future", "record_count", "remaining", "sealed", "topic")

    def __init__(self, topic: str, record_count: int) -> None:
        self.topic = topic
        self.record_count = record_count
        self.future: Future[BulkResult] = Future()
        self.batches: list[BulkBatch] = []
        self.error: BaseException | None = None
        self.remaining = 0
        self.sealed = False

    def finish_if_done(self) -> None:
        if not self.sealed or self.remaining > 0 or self.future.done():
            return
        try:
            if self.error is not None:
                self.future.set_exception(self.error)
            else:
                batches = tuple(sorted(self.batches, key=lambda b: (b.start_index, b.partition)))
                self.future.set_result(BulkResult(self.topic, self.record_count, batches))
        except InvalidStateError:
            pass


class _Batch:
    """A batch for one partition: open (a builder) until drained, then bytes.

    With idempotence, ``base_sequence`` is -1 until the batch is first drained; then it
    holds the batch's sequence without wrapping (the header carries it modulo 2**31) and
    ``producer_id``/``producer_epoch`` the identity it was sequenced under. ``stamped``
    says whether ``data`` carries those values yet.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "bulk",
        "bulk_start",
        "created",
        "data",
        "deadline",
        "follows_acked",
        "futures",
        "in_flight",
        "producer_epoch",
        "producer_id",
        "record_count",
        "reserved",
        "resolved",
        "retry_at",
        "sent_at",
        "seq",
        "size",
        "stamped",
        "timestamps",
        "tp",
    )

    def __init__(self, tp: TopicPartition, seq: int, now: float, delivery_timeout_s: float) -> None:
        self.tp = tp
        self.seq = seq
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.builder: Any = None
        self.data: bytes | None = None
        self.futures: list[Future[RecordMetadata]] = []
        self.timestamps: list[int] = []
        self.bulk: _Bulk | None = None
        self.bulk_start = 0
        self.record_count = 0
        self.size = _BATCH_OVERHEAD
        self.reserved = 0
        self.attempts = 0
        self.retry_at = 0.0
        self.sent_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.stamped = False
        self.in_flight = False
        self.resolved = False
        """Sequenced and given its final outcome (written, or failed for good)."""
        self.follows_acked = False
        """Whether the batch before it had been acknowledged when this attempt was sent: an
        OUT_OF_ORDER_SEQUENCE_NUMBER then means a real gap, not a request overtaking its
        predecessor (gRPC may reorder the requests of one channel)."""


class _PartitionSequences:
    """The idempotence bookkeeping of one partition (Kafka's ``TxnPartitionEntry``).

    Owned by the sender thread and changed under the producer's lock. ``window`` holds, in
    sequence order, the oldest batch that has a sequence and no final outcome (in flight or
    waiting for a retry) and every batch sequenced after it, resolved or not; it is empty
    when every sequenced batch is resolved. Sequences are kept without wrapping.
    """

    __slots__ = (
        "last_acked_sequence",
        "needs_bump",
        "next_sequence",
        "producer_epoch",
        "producer_id",
        "window",
    )

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.window: deque[_Batch] = deque()
        self.needs_bump = False
        """A sequenced batch failed for good, so the broker's sequence for this partition
        has a gap or is unknown: restart at sequence 0 under a new epoch once nothing of
        the partition is in flight."""

    def in_flight(self) -> int:
        return sum(1 for b in self.window if b.in_flight)

    def waiting_for_retry(self) -> bool:
        """Whether a batch sent before waits in the queue to be sent again."""
        return any(not b.in_flight and not b.resolved for b in self.window)

    def trim(self) -> None:
        while self.window and self.window[0].resolved:
            self.window.popleft()


def _resolve_idempotence(config: dict[str, object], explicit: bool) -> bool:
    """Whether the producer is idempotent, as Kafka 3.2+ decides it.

    Idempotence needs ``acks=all``, ``retries`` > 0 and at most five requests in flight.
    Left at its default it is quietly turned off by an incompatible setting; set to true
    explicitly, the conflict raises ``InvalidConfigError``.
    """
    if not config["enable.idempotence"]:
        return False
    conflicts: list[str] = []
    if config["acks"] != -1:
        conflicts.append(f"acks=all (not {config['acks']})")
    if config["retries"] == 0:
        conflicts.append("retries > 0")
    max_in_flight = config["max.in.flight.requests.per.connection"]
    assert isinstance(max_in_flight, int)
    if max_in_flight > _MAX_IDEMPOTENT_IN_FLIGHT:
        conflicts.append(
            f"max.in.flight.requests.per.connection <= {_MAX_IDEMPOTENT_IN_FLIGHT} "
            f"(not {max_in_flight})"
        )
    if not conflicts:
        return True
    if explicit:
        raise InvalidConfigError(
            "producer config enable.idempotence=true needs " + ", ".join(conflicts)
        )
    logger.debug("idempotence turned off conflicts=%s", ";".join(conflicts))
    return False


def _requeue(q: deque[_Batch], batch: _Batch) -> None:
    """Put a batch back in its partition queue in creation order (which is sequence order).

    Answers may come back in any order; sorting keeps an earlier batch ahead of a later one
    that failed first. Retried batches are older than any batch never sent, so they land at
    the head, usually after a short scan.
    """
    position = 0
    for queued in q:
        if queued.seq > batch.seq:
            break
        position += 1
    q.insert(position, batch)


@dataclass(slots=True)
class _Request:
    node: int
    batches: dict[TopicPartition, list[_Batch]]
    size: int


class Producer:
    """Sends records to a lograft cluster; see the module docstring for the behaviour.

    ``Producer({"bootstrap.servers": "127.0.0.1:9092", "acks": "all"})`` or
    ``Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=10)``; see ``PRODUCER_CONFIGS``.
    Unknown config names and bad values raise ``InvalidConfigError``, and so does
    ``enable.idempotence=true`` with ``acks`` other than all, ``retries=0`` or more than five
    requests in flight. Construction does not contact the cluster: the producer id of an
    idempotent producer is fetched by the sender thread before its first batch.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self.config = resolve_config("producer", PRODUCER_CONFIGS, config, overrides)
        cfg = self.config
        given = {str(name) for name in (config or {})}
        given.update(name.replace("_", ".") for name in overrides)
        self._idempotent = _resolve_idempotence(cfg, explicit="enable.idempotence" in given)
        cfg["enable.idempotence"] = self._idempotent
        self._acks = self._int("acks")
        self._linger_s = self._int("linger.ms") / 1000.0
        self._batch_size = max(self._int("batch.size"), 1)
        self._compression = self._int("compression.type")
        self._max_request_size = self._int("max.request.size")
        self._delivery_timeout_s = self._int("delivery.timeout.ms") / 1000.0
        self._retries = self._int("retries")
        self._backoff_s = self._int("retry.backoff.ms") / 1000.0
        self._max_in_flight = self._int("max.in.flight.requests.per.connection")
        self._max_block_s = self._int("max.block.ms") / 1000.0
        self._buffer_memory = self._int("buffer.memory")
        self._request_timeout_ms = self._int("request.timeout.ms")
        self._conn = Connections(
            str(cfg["bootstrap.servers"]),
            client_id=str(cfg["client.id"]),
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=self._int("retry.backoff.ms"),
            metadata_max_age_ms=self._int("metadata.max.age.ms"),
            max_send_bytes=self._max_request_size + 1024 * 1024,
        )
        self._partitioner = Partitioner(random.Random())
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._queues: dict[TopicPartition, deque[_Batch]] = {}
        self._open: dict[TopicPartition, _Batch] = {}
        self._incomplete: dict[int, _Batch] = {}
        self._seq = itertools.count()
        self._last_seq = -1
        self._flush_target = -1
        self._buffered = 0
        self._in_flight: dict[int, int] = {}
        self._completions: queue.SimpleQueue[tuple[_Request, Any, float]] = queue.SimpleQueue()
        self._metadata_wanted = False
        self._metadata_at = 0.0
        # Every topic sent to: a refresh covers them all, so none keeps an old partition count.
        self._topics: set[str] = set()
        self._background_refresh = False
        self._closing = False
        self._closed = False
        self._drain_rotation = 0
        # Idempotence (Kafka's TransactionManager without transactions): the producer id and
        # epoch, and each partition's sequences. Sender thread, under the lock.
        self._producer_id = -1
        self._producer_epoch = -1
        self._producer_id_retry_at = 0.0
        self._fatal: LograftError | None = None
        self._sequences: dict[TopicPartition, _PartitionSequences] = {}
        self._sender = threading.Thread(
            target=self._run, name=f"lograft-producer-{cfg['client.id']}", daemon=True
        )
        self._sender.start()

    def _int(self, name: str) -> int:
        value = self.config[name]
        assert isinstance(value, int)
        return value

    # ---- public API ---------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future completes with its ``RecordMetadata`` or typed error.

        Blocks (at most ``max.block.ms``) for the topic's metadata the first time and while
        ``buffer.memory`` is full; if that fails, ``send`` itself raises the typed error
        (``UnknownTopicOrPartitionError``, ``NetworkError``, ``RequestTimedOutError``).
        The future of a record larger than ``max.request.size`` fails at once with
        ``MessageTooLargeError``; that of an unknown partition with
        ``UnknownTopicOrPartitionError``.
        """
        if self._closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if value is not None and not isinstance(value, _BYTES):
            raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
        if key is not None and not isinstance(key, _BYTES):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        num_partitions = self._partition_count(topic, partition)
        size = (
            (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
            + _RECORD_OVERHEAD
        )
        if headers:
            size += sum(len(h) + (len(v) if v is not None else 0) + 4 for h, v in headers)
        future: Future[RecordMetadata] = Future()
        if size + _BATCH_OVERHEAD > self._max_request_size:
            future.set_exception(
                MessageTooLargeError(
                    f"record of about {size} bytes exceeds max.request.size="
                    f"{self._max_request_size}"
                )
            )
            return future
        if partition is not None:
            if not 0 <= partition < num_partitions:
                future.set_exception(
                    UnknownTopicOrPartitionError(
                        f"{topic}-{partition} (topic has {num_partitions} partitions)"
                    )
                )
                return future
            chosen = partition
            sticky = False
        elif key is not None:
            chosen = partition_for_key(key, num_partitions)
            sticky = False
        else:
            chosen = self._partitioner.sticky.partition(topic, num_partitions)
            sticky = True
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        with self._lock:
            self._reserve_locked(size)
            tp = TopicPartition(topic, chosen)
            batch = self._open.get(tp)
            if batch is None or batch.size + size > self._batch_size:
                if sticky:
                    # KIP-480: a new batch on the sticky partition moves unkeyed records on.
                    chosen = self._partitioner.sticky.on_new_batch(
                        topic,
                        chosen,
                        num_partitions,
                        self._conn.metadata.available_partitions(topic),
                    )
                    tp = TopicPartition(topic, chosen)
                    batch = self._open.get(tp)
                if batch is None or batch.size + size > self._batch_size:
                    batch = self._new_batch_locked(tp)
            try:
                batch.builder.append(value, key=key, timestamp_ms=ts, headers=headers or ())
            except BaseException:
                self._buffered -= size
                if batch.record_count == 0:
                    self._discard_empty_locked(batch)
                raise
            batch.futures.append(future)
            batch.timestamps.append(ts)
            batch.record_count += 1
            batch.size = batch.builder.estimated_size
            batch.reserved += size
            if batch.size >= self._batch_size:
                self._wake.notify()
        return future

    def send_bulk(
        self,
        topic: str,
        values: Sequence[bytes],
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[BulkResult]:
        """Send many values fast; one future for all of them (see the module docstring).

        ``partition`` pins every value to one partition; else with ``keys`` each value goes to
        its key's murmur2 partition; else consecutive chunks go to partitions in turn,
        starting from the sticky one. Encoding happens in the calling thread, which blocks
        while ``buffer.memory`` is full, so the call returns once the last chunk is queued.
        The future fails with the first typed error of any batch.
        """
        if self._closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if keys is not None and len(keys) != len(values):
            raise InvalidRequestError(f"{len(keys)} keys for {len(values)} values")
        num_partitions = self._partition_count(topic, partition)
        bulk = _Bulk(topic, len(values))
        if not values:
            bulk.sealed = True
            bulk.finish_if_done()
            return bulk.future
        if partition is not None and not 0 <= partition < num_partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}")
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        chunk_bytes = min(
            max(self._batch_size, _BULK_CHUNK_BYTES),
            self._max_request_size - _REQUEST_OVERHEAD,
        )
        groups: list[tuple[int | None, Sequence[bytes], Sequence[bytes | None] | None]]
        if partition is None and keys is not None:
            by_partition: dict[int, tuple[list[bytes], list[bytes | None]]] = {}
            for value, key in zip(values, keys, strict=True):
                p = (
                    partition_for_key(key, num_partitions)
                    if key is not None
                    else self._partitioner.sticky.partition(topic, num_partitions)
                )
                group = by_partition.setdefault(p, ([], []))
                group[0].append(value)
                group[1].append(key)
            groups = [(p, vs, ks) for p, (vs, ks) in sorted(by_partition.items())]
        else:
            groups = [(partition, values, keys)]
        try:
            for fixed, group_values, group_keys in groups:
                self._bulk_group(
                    bulk, topic, num_partitions, fixed, group_values, group_keys, ts, chunk_bytes
                )
        except BaseException as exc:
            with self._lock:
                if bulk.error is None:
                    bulk.error = exc
                bulk.sealed = True
            bulk.finish_if_done()
            raise
        with self._lock:
            bulk.sealed = True
            done = bulk.remaining == 0
        if done:
            bulk.finish_if_done()
        return bulk.future

    def _bulk_group(
        self,
        bulk: _Bulk,
        topic: str,
        num_partitions: int,
        fixed: int | None,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        ts: int,
        chunk_bytes: int,
    ) -> None:
        overhead = _RECORD_OVERHEAD
        if keys is not None:
            sizes = itertools.accumulate(
                len(v) + (len(k) if k is not None else 0) + overhead
                for v, k in zip(values, keys, strict=True)
            )
        else:
            sizes = itertools.accumulate(len(v) + overhead for v in values)
        ends = list(sizes)
        biggest_ok = self._max_request_size - _REQUEST_OVERHEAD - _BATCH_OVERHEAD
        start = 0
        total = len(values)
        rotate = fixed is None
        current = (
            fixed
            if fixed is not None
            else self._partitioner.sticky.partition(
                topic, num_partitions, self._conn.metadata.available_partitions(topic)
            )
        )
        while start < total:
            base = ends[start - 1] if start else 0
            end = bisect.bisect_right(ends, base + chunk_bytes, lo=start)
            if end == start:
                record_size = ends[start] - base
                if record_size > biggest_ok:
                    raise MessageTooLargeError(
                        f"value {start} of about {record_size} bytes exceeds "
                        f"max.request.size={self._max_request_size}"
                    )
                end = start + 1
            chunk_values = values[start:end]
            chunk_keys = keys[start:end] if keys is not None else None
            data = encode_batch(
                chunk_values,
                chunk_keys,
                timestamp_ms=ts,
                compression=self._compression,
            )
            reserved = ends[end - 1] - base
            with self._lock:
                self._reserve_locked(reserved)
                batch = _Batch(
                    TopicPartition(topic, current),
                    next(self._seq),
                    time.monotonic(),
                    self._delivery_timeout_s,
                )
                batch.data = data
                batch.size = len(data)
                batch.reserved = reserved
                batch.record_count = end - start
                batch.bulk = bulk
                batch.bulk_start = start
                bulk.remaining += 1
                self._enqueue_locked(batch)
                self._wake.notify()
            start = end
            if rotate and start < total:
                current = self._partitioner.sticky.on_new_batch(
                    topic, current, num_partitions, self._conn.metadata.available_partitions(topic)
                )

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far, ignoring ``linger.ms``, and wait for the outcomes.

        Raises ``RequestTimedOutError`` if they do not all complete within ``timeout`` seconds.
        Failed records are reported through their futures, not here.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._last_seq
            self._flush_target = max(self._flush_target, target)
            self._wake.notify()
            while self._incomplete and next(iter(self._incomplete)) <= target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise RequestTimedOutError(
                        f"flush timed out with {len(self._incomplete)} batches incomplete"
                    )
                self._done.wait(remaining)

    def close(self, timeout: float | None = None) -> None:
        """Flush (waiting at most ``timeout`` seconds), then stop; idempotent.

        Batches still incomplete after ``timeout`` fail with ``IllegalStateError``.
        """
        with self._lock:
            if self._closed:
                return
            self._closing = True
        try:
            self.flush(timeout)
        except RequestTimedOutError:
            logger.warning("close timed out; failing incomplete batches")
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._sender.join(timeout=max(self._request_timeout_ms / 1000.0, 1.0))
        self._fail_all(IllegalStateError("producer closed before the record was sent"))
        self._conn.close()
        logger.debug("producer closed client_id=%s", self.config["client.id"])

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (fetching its metadata if needed)."""
        return list(range(self._partition_count(topic)))

    # ---- accumulator (caller threads) ---------------------------------------------------

    def _partition_count(self, topic: str, partition: int | None = None) -> int:
        """The topic's partition count as last seen.

        Older than ``metadata.max.age.ms``, the metadata of every topic this producer sends
        to is refreshed on a background thread while this send goes on with what is known
        (so added partitions are picked up without ever blocking a send or the sender). An
        unknown topic, or an explicit ``partition`` beyond the known count, is looked up at
        once, waiting up to ``max.block.ms`` (Kafka's waitOnMetadata); a partition still
        missing then is for the caller to refuse.
        """
        if topic not in self._topics:
            with self._lock:
                self._topics.add(topic)
        count = self._conn.metadata.partition_count(topic)
        if count is not None and (partition is None or partition < count):
            if self._conn.metadata_is_stale():
                self._refresh_metadata_in_background()
            return count
        deadline = time.monotonic() + self._max_block_s
        snapshot = self._conn.wait_for_topic(topic, int(self._max_block_s * 1000))
        count = snapshot.partition_count(topic)
        while count is not None and partition is not None and partition >= count:
            if time.monotonic() + self._backoff_s >= deadline:
                break
            time.sleep(self._backoff_s)  # retry.backoff.ms between lookups, as Kafka's client
            try:
                count = self._conn.refresh_metadata([topic]).partition_count(topic)
            except LograftError as exc:
                if not exc.retriable:
                    raise
        if count is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partitions")
        return count

    def _refresh_metadata_in_background(self) -> None:
        with self._lock:
            if self._background_refresh or self._closed:
                return
            self._background_refresh = True
        threading.Thread(
            target=self._refresh_known_topics, name="lograft-producer-metadata", daemon=True
        ).start()

    def _refresh_known_topics(self) -> None:
        try:
            with self._lock:
                topics = set(self._topics)
            self._conn.refresh_metadata(topics)
        except LograftError as exc:
            logger.info("periodic metadata refresh failed error=%s", exc.error_name)
        finally:
            with self._lock:
                self._background_refresh = False

    def _reserve_locked(self, size: int) -> None:
        if self._buffered + size > self._buffer_memory and self._buffered > 0:
            deadline = time.monotonic() + self._max_block_s
            while self._buffered + size > self._buffer_memory and self._buffered > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOutError(
                        f"buffer.memory={self._buffer_memory} full for max.block.ms"
                    )
                self._done.wait(remaining)
                if self._closed:
                    raise IllegalStateError("producer closed while waiting for buffer memory")
        self._buffered += size

    def _new_batch_locked(self, tp: TopicPartition) -> _Batch:
        previous = self._open.pop(tp, None)
        batch = _Batch(tp, next(self._seq), time.monotonic(), self._delivery_timeout_s)
        batch.builder = RecordBatchBuilder(self._compression)
        self._open[tp] = batch
        self._enqueue_locked(batch)
        if previous is not None or self._linger_s == 0:
            self._wake.notify()
        elif len(self._open) == 1:
            self._wake.notify()  # the sender may be idle with no linger deadline
        return batch

    def _discard_empty_locked(self, batch: _Batch) -> None:
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        q = self._queues.get(batch.tp)
        if q is not None and batch in q:
            q.remove(batch)
        self._incomplete.pop(batch.seq, None)

    def _enqueue_locked(self, batch: _Batch) -> None:
        q = self._queues.get(batch.tp)
        if q is None:
            q = self._queues[batch.tp] = deque()
        q.append(batch)
        self._incomplete[batch.seq] = batch
        self._last_seq = batch.seq

    # ---- sender thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                self._handle_completions()
                if self._metadata_wanted:
                    self._refresh_metadata()
                if self._idempotent:
                    self._maybe_init_producer_id()
                    if self._fatal is not None:
                        self._fail_queued(self._fatal)
                self._expire_batches()
                with self._lock:
                    if self._closed:
                        return
                    requests, wake_at = self._drain_locked(time.monotonic())
                    if not requests and self._completions.empty():
                        if self._fatal is not None and any(self._queues.values()):
                            continue  # queued after _fail_queued ran: fail them, do not wait
                        timeout = None if wake_at is None else max(0.0, wake_at - time.monotonic())
                        if timeout is None and self._metadata_wanted:
                            timeout = self._backoff_s
                        if self._awaiting_producer_id_locked():
                            retry_in = max(0.0, self._producer_id_retry_at - time.monotonic())
                            timeout = retry_in if timeout is None else min(timeout, retry_in)
                        self._wake.wait(timeout)
                        continue
                for request in requests:
                    self._send(request)
        except Exception:
            # A bug, not a broker failure: report it and fail every pending record loudly
            # rather than leave callers waiting forever.
            logger.exception("producer sender thread crashed")
            with self._lock:
                self._closing = True
            self._fail_all(UnknownServerError("producer sender thread crashed"))

    def _drain_locked(self, now: float) -> tuple[list[_Request], float | None]:
        """Take the batches that are ready, grouped into requests per leader."""
        metadata = self._conn.metadata
        wake_at: float | None = None
        flushing = self._flush_target
        closing = self._closing
        requests: list[_Request] = []
        current: dict[int, _Request] = {}
        planned: dict[int, int] = {}
        full_nodes: set[int] = set()
        items = [(tp, q) for tp, q in self._queues.items() if q]
        if not items:
            return requests, None
        self._drain_rotation = (self._drain_rotation + 1) % len(items)
        items = items[self._drain_rotation :] + items[: self._drain_rotation]
        for tp, q in items:
            try:
                node = metadata.leader_for(tp)
            except LograftError:
                self._metadata_wanted = True
                continue
            if node in full_nodes:
                continue
            sequences: _PartitionSequences | None = None
            in_flight_before = 0
            if self._idempotent:
                sequences = self._sequences.get(tp)
                if sequences is None:
                    sequences = self._sequences[tp] = _PartitionSequences()
                self._maybe_restart_sequences_locked(tp, sequences)
                in_flight_before = sequences.in_flight()
            taken = 0
            while q:
                batch = q[0]
                if batch.retry_at > now:
                    wake_at = batch.retry_at if wake_at is None else min(wake_at, batch.retry_at)
                    break
                if batch.builder is not None and self._open.get(tp) is batch:
                    ready = (
                        closing
                        or batch.seq <= flushing
                        or batch.size >= self._batch_size
                        or now - batch.created >= self._linger_s
                    )
                    if not ready:
                        due = batch.created + self._linger_s
                        wake_at = due if wake_at is None else min(wake_at, due)
                        break
                request = current.get(node)
                resend = batch.base_sequence >= 0
                if sequences is not None and not self._may_send_locked(
                    sequences, batch, taken, in_flight_before, request
                ):
                    break
                if request is not None and request.size + batch.size > self._max_request_size:
                    requests.append(request)
                    del current[node]
                    request = None
                if request is None:
                    if self._in_flight.get(node, 0) + planned.get(node, 0) >= self._max_in_flight:
                        full_nodes.add(node)
                        break
                    request = current[node] = _Request(node, {}, _REQUEST_OVERHEAD)
                    planned[node] = planned.get(node, 0) + 1
                q.popleft()
                if self._open.get(tp) is batch:
                    del self._open[tp]
                request.batches.setdefault(tp, []).append(batch)
                request.size += batch.size
                taken += 1
                if sequences is not None:
                    self._assign_sequence_locked(sequences, batch)
                    if resend:
                        # Kafka's rule: a batch sent before goes alone, so that a duplicate
                        # answer (its original offset) cannot be mixed with other batches.
                        break
        requests.extend(current.values())
        for request in requests:
            self._in_flight[request.node] = self._in_flight.get(request.node, 0) + 1
        return requests, wake_at

    # ---- idempotence (sender thread, under the lock unless said otherwise) ---------------

    def _awaiting_producer_id_locked(self) -> bool:
        """True when batches wait for a producer id that InitProducerId should fetch."""
        return (
            self._idempotent
            and self._producer_id < 0
            and self._fatal is None
            and any(self._queues.values())
        )

    def _maybe_init_producer_id(self) -> None:
        """Fetch a producer id and epoch from any broker once there is something to send.

        Retriable failures are retried after ``retry.backoff.ms`` (the batches meanwhile wait,
        bounded by ``delivery.timeout.ms``); any other failure is fatal, as in Kafka: every
        record sent through this producer then fails with it. Not under the lock: it blocks
        for at most ``request.timeout.ms`` per broker.
        """
        with self._lock:
            if not self._awaiting_producer_id_locked():
                return
            if time.monotonic() < self._producer_id_retry_at:
                return
        code = 0
        error: LograftError | None = None
        try:
            response = self._conn.call("InitProducerId", pb.InitProducerIdRequest())
            code = response.error_code
            if code:
                error = error_for_code(code, response.error_message or "InitProducerId")
            elif response.producer_id < 0 or response.producer_epoch < 0:
                error = UnknownServerError(
                    f"InitProducerId gave producer id {response.producer_id} epoch "
                    f"{response.producer_epoch}"
                )
        except LograftError as exc:
            error = exc
        if error is None:
            with self._lock:
                self._producer_id = response.producer_id
                self._producer_epoch = response.producer_epoch
                self._wake.notify()
            logger.info(
                "producer id assigned producer_id=%d producer_epoch=%d client_id=%s",
                response.producer_id,
                response.producer_epoch,
                self.config["client.id"],
            )
            return
        if error.retriable:
            self._producer_id_retry_at = time.monotonic() + self._backoff_s
            logger.info("InitProducerId failed, will retry error_code=%d error=%s", code, error)
            return
        logger.error("InitProducerId failed; producer is unusable error=%s", error)
        with self._lock:
            self._fatal = error

    def _fail_queued(self, error: LograftError) -> None:
        """Fail every batch not in flight (the producer hit a fatal error)."""
        with self._lock:
            batches = [batch for q in self._queues.values() for batch in q]
            for q in self._queues.values():
                q.clear()
            self._open.clear()
        for batch in batches:
            self._fail(batch, error)

    def _maybe_restart_sequences_locked(
        self, tp: TopicPartition, sequences: _PartitionSequences
    ) -> None:
        """Restart a partition's sequences at 0 under the current producer id and epoch.

        Once nothing of the partition is in flight: when its sequence is broken
        (``needs_bump``), after bumping the epoch locally as Kafka's idempotent producer does
        (KIP-360; a new producer id once the epoch is exhausted), re-sequencing the batches
        that wait for a retry; or when the producer's epoch moved on (another partition
        bumped it) and the partition has no unresolved batch left. The broker accepts a newer
        epoch starting at sequence 0.
        """
        if sequences.in_flight():
            return
        current = (self._producer_id, self._producer_epoch)
        if sequences.needs_bump:
            if (sequences.producer_id, sequences.producer_epoch) == current and current[0] >= 0:
                if self._producer_epoch >= _MAX_PRODUCER_EPOCH:
                    self._producer_id = self._producer_epoch = -1
                else:
                    self._producer_epoch += 1
                logger.info(
                    "producer epoch bumped topic=%s partition=%d producer_id=%d producer_epoch=%d",
                    tp.topic,
                    tp.partition,
                    self._producer_id,
                    self._producer_epoch,
                )
            if self._producer_id < 0:
                return  # InitProducerId first
        elif (
            (sequences.producer_id, sequences.producer_epoch) == current
            or current[0] < 0
            or sequences.window
        ):
            return
        sequences.producer_id = self._producer_id
        sequences.producer_epoch = self._producer_epoch
        sequences.next_sequence = 0
        sequences.last_acked_sequence = -1
        sequences.needs_bump = False
        sequences.window = deque(b for b in sequences.window if not b.resolved)
        for batch in sequences.window:
            self._restamp_locked(sequences, batch)

    def _restamp_locked(self, sequences: _PartitionSequences, batch: _Batch) -> None:
        batch.producer_id = sequences.producer_id
        batch.producer_epoch = sequences.producer_epoch
        batch.base_sequence = sequences.next_sequence
        batch.stamped = False
        sequences.next_sequence += batch.record_count

    def _may_send_locked(
        self,
        sequences: _PartitionSequences,
        batch: _Batch,
        taken: int,
        in_flight_before: int,
        request: _Request | None,
    ) -> bool:
        """Whether the partition's head ``batch`` may join a request now (idempotence rules).

        A batch sent before goes only as the partition's first unresolved batch, alone and
        with nothing else of the partition in flight. A new batch waits while the partition
        has batches to retry, a broken sequence, a full window (five batches from the oldest
        unresolved one) or sequences of an old epoch. Until the broker has acknowledged one
        batch of this producer epoch, the partition has at most one request in flight: a
        broker that does not know the producer yet accepts any sequence, so a second request
        overtaking the first could leave a gap.
        """
        if batch.base_sequence >= 0:
            return (
                taken == 0
                and in_flight_before == 0
                and bool(sequences.window)
                and sequences.window[0] is batch
            )
        if (
            self._producer_id < 0
            or sequences.needs_bump
            or (sequences.producer_id, sequences.producer_epoch)
            != (self._producer_id, self._producer_epoch)
            or len(sequences.window) >= _MAX_IDEMPOTENT_IN_FLIGHT
            or sequences.waiting_for_retry()
        ):
            return False
        if sequences.last_acked_sequence < 0:
            if in_flight_before:
                return False
            if taken and (request is None or request.size + batch.size > self._max_request_size):
                return False  # the next request would be the partition's second
        return True

    def _assign_sequence_locked(self, sequences: _PartitionSequences, batch: _Batch) -> None:
        """Mark ``batch`` in flight, giving it the partition's next sequence if it has none."""
        if batch.base_sequence < 0:
            self._restamp_locked(sequences, batch)
            sequences.window.append(batch)
        batch.in_flight = True
        batch.follows_acked = sequences.last_acked_sequence + 1 == batch.base_sequence

    def _resolve_sequence_locked(self, batch: _Batch, acked: bool) -> None:
        """A sequenced batch has its final outcome: written (``acked``) or failed for good."""
        batch.in_flight = False
        if batch.resolved:
            return
        batch.resolved = True
        sequences = self._sequences.get(batch.tp)
        if sequences is None or batch not in sequences.window:
            return  # sequenced under an identity the partition has left behind
        if acked:
            last = batch.base_sequence + batch.record_count - 1
            sequences.last_acked_sequence = max(sequences.last_acked_sequence, last)
        else:
            # Written or not, nobody knows which sequence the broker expects next.
            sequences.needs_bump = True
        sequences.trim()

    def _send(self, request: _Request) -> None:
        """Encode the request's open batches and send it without waiting for the answer."""
        topics: dict[str, list[Any]] = {}
        now = time.monotonic()
        for tp, batches in request.batches.items():
            for batch in batches:
                if batch.data is None:
                    batch.data = batch.builder.build()
                    batch.builder = None
                if not batch.stamped and batch.base_sequence >= 0:
                    batch.data = with_producer_fields(
                        batch.data,
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence % _SEQUENCE_MODULUS,
                    )
                    batch.stamped = True
                batch.sent_at = now
            records = (
                batches[0].data
                if len(batches) == 1
                else b"".join(b.data for b in batches if b.data is not None)
            )
            topics.setdefault(tp.topic, []).append(
                pb.PartitionProduceData(partition=tp.partition, records=records)
            )
        message = pb.ProduceRequest(
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            topics=[pb.TopicProduceData(name=name, partitions=ps) for name, ps in topics.items()],
        )
        try:
            stub = self._conn.stub_for_node(request.node)
            call = stub.Produce.future(message, timeout=self._conn.timeout_s())
        except LograftError as exc:
            self._completions.put((request, exc, now))
            return
        call.add_done_callback(lambda done: self._on_response(request, done, now))
        if self._acks == 0:
            for batches in request.batches.values():
                for batch in batches:
                    self._complete(batch, -1, -1, now)

    def _on_response(self, request: _Request, call: Any, sent_at: float) -> None:
        """gRPC callback thread: hand the answer to the sender thread."""
        self._completions.put((request, call, sent_at))
        with self._lock:
            self._wake.notify()

    def _handle_completions(self) -> None:
        while True:
            try:
                request, outcome, sent_at = self._completions.get_nowait()
            except queue.Empty:
                return
            with self._lock:
                self._in_flight[request.node] -= 1
            if self._acks == 0:
                if isinstance(outcome, LograftError):
                    logger.debug("acks=0 request failed error=%s", outcome)
                continue
            error: LograftError | None = None
            response = None
            if isinstance(outcome, LograftError):
                error = outcome
            else:
                try:
                    response = outcome.result()
                except Exception as exc:
                    error = map_rpc_error(exc) if hasattr(exc, "code") else NetworkError(str(exc))
            if error is not None:
                for batches in request.batches.values():
                    self._fail_or_retry(batches, error)
                continue
            seen: set[TopicPartition] = set()
            assert response is not None
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    answered = request.batches.get(tp)
                    if answered is None or tp in seen:
                        continue
                    seen.add(tp)
                    batches = answered
                    if p.error_code:
                        self._fail_or_retry(
                            batches, error_for_code(p.error_code, p.error_message or str(tp))
                        )
                        continue
                    if len(p.batch_base_offsets) == len(batches):
                        # One offset per batch: a retried duplicate keeps its original offset,
                        # which need not be contiguous with the batches after it.
                        for batch, base in zip(batches, p.batch_base_offsets, strict=True):
                            self._complete(batch, base, p.log_append_time_ms, sent_at)
                        continue
                    base = p.base_offset
                    for batch in batches:
                        self._complete(batch, base, p.log_append_time_ms, sent_at)
                        base += batch.record_count
            for tp, batches in request.batches.items():
                if tp not in seen:
                    self._fail_or_retry(
                        batches, UnknownServerError(f"no answer for {tp.topic}-{tp.partition}")
                    )

    def _complete(self, batch: _Batch, base_offset: int, append_time: int, sent_at: float) -> None:
        topic, partition = batch.tp.topic, batch.tp.partition
        if batch.bulk is not None:
            bulk = batch.bulk
            latency_ms = (time.monotonic() - sent_at) * 1000.0
            with self._lock:
                bulk.batches.append(
                    BulkBatch(
                        partition, base_offset, batch.record_count, batch.bulk_start, latency_ms
                    )
                )
                bulk.remaining -= 1
            bulk.finish_if_done()
        else:
            for i, (future, ts) in enumerate(zip(batch.futures, batch.timestamps, strict=True)):
                offset = base_offset + i if base_offset >= 0 else -1
                try:  # noqa: SIM105 - hot path: cheaper than contextlib.suppress per record
                    future.set_result(
                        RecordMetadata(
                            topic, partition, offset, append_time if append_time >= 0 else ts
                        )
                    )
                except InvalidStateError:
                    pass  # cancelled by the caller
        self._retire(batch, acked=True)

    def _fail(self, batch: _Batch, error: BaseException) -> None:
        if batch.bulk is not None:
            bulk = batch.bulk
            with self._lock:
                if bulk.error is None:
                    bulk.error = error
                bulk.remaining -= 1
            bulk.finish_if_done()
        else:
            for future in batch.futures:
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(error)
        logger.warning(
            "batch failed topic=%s partition=%d records=%d error=%s",
            batch.tp.topic,
            batch.tp.partition,
            batch.record_count,
            getattr(error, "error_name", type(error).__name__),
        )
        self._retire(batch, acked=False)

    def _retire(self, batch: _Batch, acked: bool) -> None:
        with self._lock:
            if self._incomplete.pop(batch.seq, None) is not None:
                self._buffered -= batch.reserved
            if batch.base_sequence >= 0:
                self._resolve_sequence_locked(batch, acked)
            batch.futures = []
            batch.timestamps = []
            self._done.notify_all()

    def _retriable(self, batch: _Batch, error: LograftError) -> bool:
        """Whether ``error`` lets ``batch`` be sent again.

        OUT_OF_ORDER_SEQUENCE_NUMBER for an idempotent batch is retriable when the batch was
        sent before its predecessor was acknowledged: the predecessor was in flight (or
        being retried) and the request overtook it, so the batch goes again once the
        predecessor is resolved. Sent right after an acknowledged batch, it means the broker
        lost sequences: the batch fails and its partition restarts under a new epoch.
        """
        if isinstance(error, OutOfOrderSequenceNumberError) and batch.base_sequence >= 0:
            return not batch.follows_acked
        return error.retriable

    def _fail_or_retry(self, batches: list[_Batch], error: LograftError) -> None:
        now = time.monotonic()
        retry: list[_Batch] = []
        for batch in batches:
            if (
                self._retriable(batch, error)
                and batch.attempts < self._retries
                and now + self._backoff_s < batch.deadline
                and not self._closed
            ):
                batch.attempts += 1
                batch.retry_at = now + self._backoff_s
                retry.append(batch)
            else:
                self._fail(batch, error)
        if not retry:
            return
        logger.info(
            "retrying batches topic=%s partition=%d batches=%d error=%s",
            retry[0].tp.topic,
            retry[0].tp.partition,
            len(retry),
            error.error_name,
        )
        with self._lock:
            q = self._queues.setdefault(retry[0].tp, deque())
            for batch in retry:
                batch.in_flight = False
                _requeue(q, batch)
            if isinstance(error, _METADATA_ERRORS):
                self._metadata_wanted = True
            self._wake.notify()

    def _refresh_metadata(self) -> None:
        now = time.monotonic()
        if now - self._metadata_at < self._backoff_s:
            return
        self._metadata_at = now
        with self._lock:
            topics = self._topics | {tp.topic for tp, q in self._queues.items() if q}
        try:
            self._conn.refresh_metadata(topics or None)
            self._metadata_wanted = False
        except LograftError as exc:
            logger.info("metadata refresh failed error=%s", exc.error_name)

    def _expire_batches(self) -> None:
        now = time.monotonic()
        expired: list[_Batch] = []
        with self._lock:
            for tp, q in self._queues.items():
                while q and q[0].deadline <= now:
                    batch = q.popleft()
                    if self._open.get(tp) is batch:
                        del self._open[tp]
                    expired.append(batch)
        for batch in expired:
            self._fail(
                batch,
                RequestTimedOutError(
                    f"expiring {batch.record_count} records for {batch.tp.topic}-"
                    f"{batch.tp.partition}: delivery.timeout.ms passed"
                ),
            )

    def _fail_all(self, error: LograftError) -> None:
        with self._lock:
            batches = list(self._incomplete.values())
            for q in self._queues.values():
                q.clear()
            self._open.clear()
        for batch in batches:
            self._fail(batch, error)
