"""The producer's record accumulator (Kafka's ``RecordAccumulator``): batches waiting to go.

Each partition has a queue of batches in creation order; its last batch may be *open*: the
``PendingRecords`` that ``send`` appends records to, as given, until they hold about
``batch.size`` bytes. The sender encodes them in one go (``encode_records``) when it drains
the batch, which costs a fraction of encoding them one by one in ``send``. A batch becomes
ready when it is full, has waited ``linger.ms``, or a flush or close covers it; the sender
takes ready batches from the queue heads, and puts back the ones it retries, in creation
order (which is sequence order). Bulk sends encode whole batches in the calling thread and
queue them closed.

``buffer.memory`` bounds the bytes of the batches not yet complete: appending blocks (at
most ``max.block.ms``) while it is full. Every batch not yet complete is kept, by creation
number, for ``flush`` and ``close``.

Thread-safety: every method whose name ends in ``_locked`` needs ``lock`` held; the others
take it. The sender thread and the caller threads share that one lock, and two conditions on
it: ``wake`` (the sender has work) and ``done`` (a batch completed or buffer memory freed).
An append that makes a batch ready does not wake the sender itself: it sets
``sender_wanted``, and ``send`` asks the sender (``Sender.take_wake_locked``) whether to wake
it or drain in the caller's thread.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lograft.protocol.batch_builder import encode_records
from lograft.protocol.errors import IllegalStateError, MessageTooLargeError, RequestTimedOutError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_partition import TopicPartition

from ._clock import Clock
from ._record_future import BatchOutcome

if TYPE_CHECKING:
    from ._bulk import BulkCall

__all__ = [
    "BATCH_OVERHEAD",
    "RECORD_OVERHEAD",
    "REQUEST_OVERHEAD",
    "ProducerBatch",
    "RecordAccumulator",
    "requeue",
]

log = logging.getLogger(__name__)

RECORD_OVERHEAD = 12
"""Estimate of a record's framing bytes (length, attributes, deltas, lengths, header count);
exact for values under 64 bytes at small offset deltas, an over-estimate above."""
BATCH_OVERHEAD = 61
"""Bytes of a RecordBatch v2 header (``HEADER_SIZE``), counted in every batch's size."""
REQUEST_OVERHEAD = 512
"""An allowance (bytes) for a produce request's own fields (header, topics, partitions):
its batches may take ``max.request.size`` less this."""
BULK_CHUNK_BYTES = 1024 * 1024 - 1024
"""Bulk batches aim at just under 1 MiB: large enough to amortise per-batch costs, small
enough for the default ``max.message.bytes`` (1 MiB + 12)."""


class ProducerBatch:
    """A batch for one partition: open (its ``PendingRecords``) until drained, then bytes.

    ``seq`` numbers batches in creation order. With idempotence, ``base_sequence`` is -1
    until the batch is first drained; then it holds the batch's sequence without wrapping
    (the header carries it modulo 2**31) and ``producer_id``/``producer_epoch`` the identity
    it was sequenced under. ``stamped`` says whether ``data`` carries those values yet.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "bulk",
        "bulk_start",
        "created",
        "data",
        "deadline",
        "follows_acked",
        "in_flight",
        "maybe_written",
        "outcome",
        "pending",
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
        "tp",
    )

    def __init__(self, tp: TopicPartition, seq: int, now: float, delivery_timeout_s: float) -> None:
        self.tp = tp
        self.seq = seq
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.pending: PendingRecords | None = None
        self.data: bytes | None = None
        self.outcome: BatchOutcome | None = None
        """Shared by the futures of the records sent one at a time (None for bulk)."""
        self.bulk: BulkCall | None = None
        self.bulk_start = 0
        self.record_count = 0
        self.size = BATCH_OVERHEAD
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
        self.maybe_written = False
        """Whether an attempt under the current sequence may have been written: such a
        batch is retried under that sequence before its partition's epoch is bumped."""


def requeue(q: deque[ProducerBatch], batch: ProducerBatch) -> None:
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


class PendingRecords:
    """The records of an open batch as ``send`` got them, encoded when the batch is drained.

    ``headers`` holds each record's encoded headers once any record has some (None before).
    Values and keys are ``bytes`` (``send`` copies other buffers), so nothing the caller
    changes afterwards reaches the batch.
    """

    __slots__ = ("headers", "keys", "timestamps", "values")

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self.keys: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[bytes] | None = None

    def build(self, compression: int) -> bytes:
        """The batch's bytes (compressed with codec ``compression``, CRC set)."""
        return encode_records(
            self.values, self.keys, self.timestamps, self.headers, compression=compression
        )


class RecordAccumulator:
    """Per-partition batch queues, the open batches and ``buffer.memory``; see the module."""

    def __init__(
        self,
        *,
        clock: Clock,
        linger_s: float,
        batch_size: int,
        compression: int,
        max_request_size: int,
        delivery_timeout_s: float,
        buffer_memory: int,
        max_block_s: float,
    ) -> None:
        self.clock = clock
        self.linger_s = linger_s
        # A batch must fit one request: batch.size above max.request.size would build
        # batches no broker takes (Kafka users meet that as RECORD_LIST_TOO_LARGE).
        self.batch_size = max(1, min(batch_size, max_request_size - REQUEST_OVERHEAD))
        self.compression = compression
        self.max_request_size = max_request_size
        self.delivery_timeout_s = delivery_timeout_s
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_s
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        """Notified when the sender may have something to do."""
        self.done = threading.Condition(self.lock)
        """Notified when a batch completes (its buffer memory is free)."""
        self.queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.open: dict[TopicPartition, ProducerBatch] = {}
        self.incomplete: dict[int, ProducerBatch] = {}
        """Every batch not yet complete, by ``seq`` (so in creation order)."""
        self._seq = itertools.count()
        self._last_seq = -1
        self.flush_target = -1
        """Batches up to this ``seq`` are ready regardless of ``linger.ms``."""
        self.buffered = 0
        self.sender_wanted = False
        """Set by ``append_locked`` and ``new_batch_locked`` when a batch became ready or
        the sender's linger deadline may have moved: the caller, before it releases the
        lock, takes it and sends the batches itself or wakes the sender."""
        self.closing = False
        """No more sends; every queued batch is ready."""
        self.closed = False
        """The sender stops; nothing is retried any more."""

    # ---- appending (caller threads) -------------------------------------------------------

    def append_locked(
        self,
        tp: TopicPartition,
        value: bytes | None,
        key: bytes | None,
        timestamp_ms: int,
        headers: bytes | None,
        size: int,
    ) -> ProducerBatch | None:
        """Add one record of about ``size`` bytes to ``tp``'s open batch, if it has room and
        ``buffer.memory`` needs no wait; the batch (the record is its last), else None and
        nothing changed. Values are checked by ``send``; ``headers`` are encoded.

        One call for the common case: ``send`` holds the lock once per record, and this is
        the whole of what it does under it.
        """
        batch = self.open.get(tp)
        if (
            batch is None
            or (batch.size + size > self.batch_size and batch.record_count)
            or (self.buffered + size > self.buffer_memory and self.buffered)
        ):
            return None
        self.buffered += size
        pending = batch.pending
        assert pending is not None
        pending.values.append(value)
        pending.keys.append(key)
        pending.timestamps.append(timestamp_ms)
        index = batch.record_count
        if headers is not None:
            if pending.headers is None:
                pending.headers = [b"\x00"] * index
            pending.headers.append(headers)
        elif pending.headers is not None:
            pending.headers.append(b"\x00")
        batch.record_count = index + 1
        batch.size += size
        batch.reserved += size
        if batch.size >= self.batch_size:
            self.sender_wanted = True
        return batch

    def open_room_locked(self, tp: TopicPartition, size: int) -> None:
        """Open a new batch for ``tp`` unless its open one takes ``size`` more bytes."""
        if not self.has_room_locked(tp, size):
            self.new_batch_locked(tp)

    def reserve_locked(self, size: int) -> None:
        """Count ``size`` bytes against ``buffer.memory``, waiting up to ``max.block.ms``."""
        self.wait_for_memory_locked(size)
        self.buffered += size

    def wait_for_memory_locked(self, size: int) -> None:
        """Wait up to ``max.block.ms`` until ``buffer.memory`` has room for ``size`` bytes
        (a record alone larger than ``buffer.memory`` goes once nothing else is buffered)."""
        if self.buffered + size > self.buffer_memory and self.buffered > 0:
            deadline = self.clock.monotonic() + self.max_block_s
            while self.buffered + size > self.buffer_memory and self.buffered > 0:
                remaining = deadline - self.clock.monotonic()
                if remaining <= 0:
                    raise RequestTimedOutError(
                        f"buffer.memory={self.buffer_memory} full for max.block.ms"
                    )
                self.clock.wait(self.done, remaining)
                if self.closed:
                    raise IllegalStateError("producer closed while waiting for buffer memory")

    def has_room_locked(self, tp: TopicPartition, size: int) -> bool:
        """Whether ``tp``'s open batch takes ``size`` more bytes (an empty one takes any)."""
        batch = self.open.get(tp)
        return batch is not None and (
            batch.size + size <= self.batch_size or not batch.record_count
        )

    def new_batch_locked(self, tp: TopicPartition) -> ProducerBatch:
        """Open a new batch for ``tp``, closing its previous one."""
        previous = self.open.pop(tp, None)
        batch = ProducerBatch(tp, next(self._seq), self.clock.monotonic(), self.delivery_timeout_s)
        batch.pending = PendingRecords()
        batch.outcome = BatchOutcome(tp.topic, tp.partition)
        self.open[tp] = batch
        self._enqueue_locked(batch)
        if previous is not None or self.linger_s == 0 or len(self.open) == 1:
            # The last: the sender may be idle with no linger deadline.
            self.sender_wanted = True
        return batch

    # Over 70 lines: one pass over the values: each chunk sized, encoded, reserved, queued.
    def append_bulk(
        self,
        bulk: BulkCall,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        timestamp_ms: int,
        chunk_bytes: int,
        next_partition: Callable[[int], int] | None,
    ) -> None:
        """Encode ``values`` into closed batches of about ``chunk_bytes`` and queue them.

        The first batch goes to ``partition``; with ``next_partition`` each following batch
        goes to the partition it returns for the previous one (else all to ``partition``).
        Encoding happens here, in the calling thread, which blocks while ``buffer.memory``
        is full. A value too large for any request raises ``MessageTooLargeError``.
        """
        overhead = RECORD_OVERHEAD
        if keys is not None:
            sizes = itertools.accumulate(
                len(v) + (len(k) if k is not None else 0) + overhead
                for v, k in zip(values, keys, strict=True)
            )
        else:
            sizes = itertools.accumulate(len(v) + overhead for v in values)
        ends = list(sizes)
        biggest_ok = self.max_request_size - REQUEST_OVERHEAD - BATCH_OVERHEAD
        start = 0
        total = len(values)
        current = partition
        while start < total:
            base = ends[start - 1] if start else 0
            end = bisect.bisect_right(ends, base + chunk_bytes, lo=start)
            if end == start:
                record_size = ends[start] - base
                if record_size > biggest_ok:
                    raise MessageTooLargeError(
                        f"value {start} of about {record_size} bytes exceeds "
                        f"max.request.size={self.max_request_size}"
                    )
                end = start + 1
            chunk_values = values[start:end]
            chunk_keys = keys[start:end] if keys is not None else None
            data = encode_batch(
                chunk_values,
                chunk_keys,
                timestamp_ms=timestamp_ms,
                compression=self.compression,
            )
            reserved = ends[end - 1] - base
            with self.lock:
                self.reserve_locked(reserved)
                batch = ProducerBatch(
                    TopicPartition(topic, current),
                    next(self._seq),
                    self.clock.monotonic(),
                    self.delivery_timeout_s,
                )
                batch.data = data
                batch.size = len(data)
                batch.reserved = reserved
                batch.record_count = end - start
                batch.bulk = bulk
                batch.bulk_start = start
                bulk.remaining += 1
                self._enqueue_locked(batch)
                self.wake.notify()
            start = end
            if next_partition is not None and start < total:
                current = next_partition(current)

    def _enqueue_locked(self, batch: ProducerBatch) -> None:
        q = self.queues.get(batch.tp)
        if q is None:
            q = self.queues[batch.tp] = deque()
        q.append(batch)
        self.incomplete[batch.seq] = batch
        self._last_seq = batch.seq

    # ---- flush (caller threads) -----------------------------------------------------------

    def flush(self, timeout: float | None) -> None:
        """Make every batch queued so far ready and wait until each is complete.

        Raises ``RequestTimedOutError`` if they are not within ``timeout`` seconds.
        """
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        with self.lock:
            target = self._last_seq
            self.flush_target = max(self.flush_target, target)
            self.wake.notify()
            while self.incomplete and next(iter(self.incomplete)) <= target:
                remaining = None if deadline is None else deadline - self.clock.monotonic()
                if remaining is not None and remaining <= 0:
                    raise RequestTimedOutError(
                        f"flush timed out with {len(self.incomplete)} batches incomplete"
                    )
                self.clock.wait(self.done, remaining)

    # ---- draining (sender thread) ---------------------------------------------------------

    def linger_due_locked(self, batch: ProducerBatch, now: float) -> float | None:
        """None if the queue-head ``batch`` may go now, else when its ``linger.ms`` ends.

        Only the open batch lingers, until it is full, has waited ``linger.ms``, or a flush
        or close covers it.
        """
        if batch.pending is None or self.open.get(batch.tp) is not batch:
            return None
        if (
            self.closing
            or batch.seq <= self.flush_target
            or batch.size >= self.batch_size
            or now - batch.created >= self.linger_s
        ):
            return None
        return batch.created + self.linger_s

    def take_locked(self, q: deque[ProducerBatch]) -> ProducerBatch:
        """Remove the head of a partition queue for sending, closing it if it was open."""
        batch = q.popleft()
        if self.open.get(batch.tp) is batch:
            del self.open[batch.tp]
        return batch

    def requeue_locked(self, batches: list[ProducerBatch]) -> None:
        """Put batches of one partition back in its queue, in creation order, for a retry."""
        q = self.queues.setdefault(batches[0].tp, deque())
        for batch in batches:
            batch.in_flight = False
            requeue(q, batch)

    def queued_topics_locked(self) -> set[str]:
        """The topics that have queued batches."""
        return {tp.topic for tp, q in self.queues.items() if q}

    def has_queued_locked(self) -> bool:
        """Whether any batch waits in a queue."""
        return any(self.queues.values())

    def expire_locked(self, now: float) -> list[ProducerBatch]:
        """Remove and return the queue-head batches past ``delivery.timeout.ms``."""
        expired: list[ProducerBatch] = []
        for tp, q in self.queues.items():
            while q and q[0].deadline <= now:
                batch = q.popleft()
                if self.open.get(tp) is batch:
                    del self.open[tp]
                expired.append(batch)
        return expired

    def retire_locked(self, batches: list[ProducerBatch]) -> None:
        """``batches`` are complete: free their buffer memory, wake flush and blocked sends."""
        incomplete = self.incomplete
        for batch in batches:
            if incomplete.pop(batch.seq, None) is not None:
                self.buffered -= batch.reserved
        self.done.notify_all()

    def abort_queued(self) -> list[ProducerBatch]:
        """Empty every queue; returns the batches that were queued (none in flight)."""
        with self.lock:
            batches = [batch for q in self.queues.values() for batch in q]
            for q in self.queues.values():
                q.clear()
            self.open.clear()
        return batches

    def abort_incomplete(self) -> list[ProducerBatch]:
        """Empty every queue; returns every incomplete batch, queued or in flight."""
        with self.lock:
            batches = list(self.incomplete.values())
            for q in self.queues.values():
                q.clear()
            self.open.clear()
        return batches
