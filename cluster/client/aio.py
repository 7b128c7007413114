"""``AsyncProducer`` and ``AsyncConsumer``: the Python clients for asyncio applications.

They take the configs of ``Producer`` and ``Consumer`` (same names, same defaults, same
semantics) and wrap one of them each. The event loop never blocks: every call that may
wait — on the network, on ``buffer.memory``, on a lock held by the client's own threads —
runs on a worker thread that belongs to the client, one per client, so a client's calls run
one at a time in the order they were made (the sync ``Consumer`` is single-threaded). The
outcome comes back to the loop as an awaitable (``asyncio.wrap_future``). Calls that only
need the thread-safe parts of a client (``committed``, ``beginning_offsets``, ``flush``, ...)
run on the loop's default executor instead, so they do not queue behind a long ``poll``.
Use a client from one event loop.

``AsyncProducer`` has aiokafka's shape::

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        future = await producer.send("events", b"hello", key=b"user-1")  # queued
        metadata = await future  # acknowledged
        metadata = await producer.send_and_wait("events", b"again")  # both at once

``await send(...)`` returns once the record is queued (waiting, off the loop, for the
topic's metadata and for room in ``buffer.memory``) with an ``asyncio.Future`` of its
``RecordMetadata``. Cancelling that future does not unsend the record; cancelling an
``await send(...)`` before it returns withdraws the record only if its turn on the worker
has not come yet. ``send_bulk`` is the bulk path of ``Producer.send_bulk``; ``flush``,
``close`` (``stop``) and ``async with`` behave as in ``Producer``.

``AsyncConsumer``::

    async with AsyncConsumer(bootstrap_servers="127.0.0.1:9092", group_id="billing") as c:
        await c.subscribe(["events"], on_assign=on_assign)  # sync or async callbacks
        async for record in c:  # or: await c.getmany(timeout_ms)
            ...
            await c.commit()

* Fetching, rebalancing and auto-commit are the sync ``Consumer``'s: a ``poll`` of it runs
  on the worker for each ``getmany``/``poll``/``getone`` that finds no record waiting. What
  it returns goes to a buffer, from which the calls hand records out; ``async for`` takes
  them one at a time. ``position`` and ``commit()`` count only records handed out: the
  position of a partition with buffered records is the offset of the first of them.
* Cancelling a task awaiting ``getmany``, ``poll``, ``getone`` or ``__anext__`` loses no
  record: a poll not yet started is not started, a poll under way is cut short, and what it
  returned waits in the buffer for the next call. Any call that moves positions (``seek``,
  ``pause``, ``assign``, ``unsubscribe``, a poll, ``close``) first gives buffered records
  back to the sync consumer (seeking each partition to its first one), so they are fetched
  again rather than skipped, and commits never pass them.
* Rebalance callbacks (``on_assign``, ``on_revoke``, ``on_lost``, or a listener: an
  ``AsyncConsumerRebalanceListener`` or a ``ConsumerRebalanceListener``) may be plain or
  ``async`` functions. They run on the event loop, as ``callback(consumer, partitions)``
  with this ``AsyncConsumer``, and the rebalance waits for them, as in Kafka: no record of a
  revoked partition is returned after its ``on_revoke`` began, and ``on_revoke`` runs before
  the partition goes to another member. A callback may await the consumer's other calls
  (``commit``, ``seek``, ``position``, ``committed``, ...); it must not poll or close it
  (``IllegalStateError``). Calls from other tasks (``close`` included) wait until the
  rebalance is done, as they would wait for a poll in Kafka's single-threaded consumer: a
  callback must not wait for another task's call on its consumer.
* Calls made while a ``getmany`` waits for records (from other tasks) cut that poll short
  and run at once (once a rebalance under way is done); the ``getmany`` then goes on
  waiting.
* ``assignment``, ``paused`` and ``subscription`` are plain methods, answering as of the
  last call completed; everything that reads or moves the consumer is ``async``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from lograft.protocol.errors import IllegalStateError, LograftError

from ._aio_buffer import by_partition
from ._aio_consumer_driver import ConsumerDriver
from ._aio_rebalance import IN_CALLBACK, KINDS, AsyncConsumerRebalanceListener, bridge, handlers
from ._aio_worker import Worker, observe
from ._connection import TopicPartition
from .consumer import (
    Consumer,
    ConsumerBatch,
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    ConsumerRecord,
    RebalanceCallback,
)
from .producer import BulkResult, PreparedTxnState, Producer, RecordMetadata

__all__ = [
    "AsyncConsumer",
    "AsyncConsumerRebalanceListener",
    "AsyncProducer",
    "AsyncRebalanceCallback",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

AsyncRebalanceCallback = Callable[["AsyncConsumer", list[TopicPartition]], Awaitable[None] | None]
"""``callback(consumer, partitions)``, plain or ``async``: what ``AsyncConsumer.subscribe``
calls on a rebalance, on the event loop."""


# ---- the producer ---------------------------------------------------------------------------


class AsyncProducer:
    """``Producer`` for asyncio; see the module docstring.

    ``AsyncProducer({"bootstrap.servers": "127.0.0.1:9092", "acks": "all"})`` or with
    keyword arguments, exactly as ``Producer`` (``PRODUCER_CONFIGS``); bad configs raise
    ``InvalidConfigError`` here. Construction does not contact the cluster.

    Every method is a coroutine (``await`` it). An async context manager: ``async with``
    calls ``start`` and ``close``.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self._producer = Producer(config, **overrides)
        self.config = self._producer.config
        """The resolved configuration (Kafka names)."""
        self._worker = Worker(f"lograft-aio-producer-{self.config.client_id}")
        self._closed = False
        self._close_future: asyncio.Future[None] | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("cannot send after the producer is closed")

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._check_open()
        return await asyncio.wrap_future(self._worker.submit(fn, *args))

    async def start(self) -> None:
        """Contact the cluster (one metadata request); ``NetworkError`` if no broker answers.

        Optional (aiokafka's ``start``): the producer works without it. ``async with``
        calls it.
        """
        self._check_open()
        await asyncio.get_running_loop().run_in_executor(
            None, self._producer._conn.refresh_metadata
        )

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns the future of its ``RecordMetadata`` (or typed error).

        As ``Producer.send``, which raises here what it raises (the topic's metadata not
        found within ``max.block.ms``, a bad key or value type, a closed producer).
        """
        loop = asyncio.get_running_loop()
        queued = await self._call(
            self._producer.send, topic, value, key, partition, timestamp_ms, headers
        )
        return observe(queued, loop)

    async def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """``send`` and wait for the acknowledgement: the record's ``RecordMetadata``."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    async def send_bulk(
        self,
        topic: str,
        values: Sequence[bytes],
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[BulkResult]:
        """``Producer.send_bulk`` (encoding runs on the worker); the future of its result."""
        loop = asyncio.get_running_loop()
        queued = await self._call(
            self._producer.send_bulk, topic, values, partition, keys, timestamp_ms
        )
        return observe(queued, loop)

    # ``timeout`` is Producer's: what the producer gives up on, not how long to await.
    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send every record queued so far and wait for the outcomes (``Producer.flush``).

        Sends made meanwhile by other tasks go on; ``RequestTimedOutError`` after
        ``timeout`` seconds.
        """
        await self._call(lambda: None)  # every send made before this call is queued
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, timeout)

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (fetching its metadata if needed)."""
        return await self._call(self._producer.partitions_for, topic)

    # ---- transactions: ``Producer``'s, awaited (they block: run off the event loop) -------

    async def _blocking(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._check_open()
        await self._call(lambda: None)  # every send made before this call is queued
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """``Producer.init_transactions``."""
        await self._blocking(self._producer.init_transactions, keep_prepared_txn)

    async def begin_transaction(self) -> None:
        """``Producer.begin_transaction``."""
        await self._call(self._producer.begin_transaction)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> None:
        """``Producer.send_offsets_to_transaction``."""
        await self._blocking(self._producer.send_offsets_to_transaction, offsets, group_metadata)

    async def commit_transaction(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """``Producer.commit_transaction``."""
        await self._blocking(self._producer.commit_transaction, timeout)

    async def abort_transaction(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """``Producer.abort_transaction``."""
        await self._blocking(self._producer.abort_transaction, timeout)

    async def prepare_transaction(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> PreparedTxnState:
        """``Producer.prepare_transaction`` (KIP-939)."""
        return await self._blocking(self._producer.prepare_transaction, timeout)

    async def complete_transaction(self, prepared: PreparedTxnState) -> bool:
        """``Producer.complete_transaction`` (KIP-939): whether it committed."""
        return await self._blocking(self._producer.complete_transaction, prepared)

    def transaction(self) -> _AsyncTransactionScope:
        """``async with producer.transaction():`` begins, commits at the end of the block,
        aborts if it raises (the exception goes on)."""
        return _AsyncTransactionScope(self)

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Flush (at most ``timeout`` seconds), then stop, as ``Producer.close``; idempotent.

        Runs to the end even if the awaiting task is cancelled.
        """
        if self._close_future is None:
            loop = asyncio.get_running_loop()
            self._closed = True
            closing = self._worker.submit(self._producer.close, timeout)
            self._worker.stop()
            self._close_future = observe(closing, loop)
        await asyncio.shield(self._close_future)

    async def stop(self) -> None:
        """``close()``: aiokafka's name."""
        await self.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _AsyncTransactionScope:
    """``AsyncProducer.transaction()``: begin on entry, commit on a clean exit, abort on error."""

    __slots__ = ("_producer",)

    def __init__(self, producer: AsyncProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> AsyncProducer:
        await self._producer.begin_transaction()
        return self._producer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self._producer.commit_transaction()
            return
        try:
            await self._producer.abort_transaction()
        except LograftError as abort_error:
            logger.warning("abort after an error failed error=%s", abort_error)


# ---- the consumer ---------------------------------------------------------------------------


class AsyncConsumer(ConsumerDriver):
    """``Consumer`` for asyncio; see the module docstring.

    ``AsyncConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"})`` or
    with keyword arguments, exactly as ``Consumer`` (``CONSUMER_CONFIGS``); bad configs
    raise ``InvalidConfigError`` here. Construction does not contact the cluster.

    Every method is a coroutine (``await`` it) except ``assignment``, ``paused`` and
    ``subscription``. An async context manager (``async with`` calls ``start`` and
    ``close``) and an async iterator (``async for record in consumer``).
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        consumer = Consumer(config, **overrides)
        self.config = consumer.config
        """The resolved configuration, typed (``config.group_id``; ``config["group.id"]``)."""
        self._max_records = self.config.max_poll_records
        super().__init__(consumer)
        self._close_future: asyncio.Future[None] | None = None

    # ---- polling -------------------------------------------------------------------------

    async def getmany(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max.poll.records`` records by partition, waiting at most ``timeout_ms``.

        aiokafka's ``getmany`` (without its partition filter and ``max_records``); an empty
        dict when none arrived in time. Carries out rebalances (awaiting the callbacks) and
        auto-commits, and raises what ``Consumer.poll`` raises.
        """
        return by_partition(await self._get(timeout_ms, self._max_records))

    async def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """``Consumer.poll``: up to ``max.poll.records`` records, as a list."""
        return await self._get(timeout_ms, self._max_records)

    async def poll_batches(self, timeout_ms: int = 1000) -> list[ConsumerBatch]:
        """``Consumer.poll_batches``: whole record batches as bytes instead of records.

        Records an earlier ``poll``/``getone`` fetched and has not handed out are given back
        first (the batches start at them); a cancelled call loses no batch (the next poll
        starts where it would have).
        """
        return await self._get_batches(timeout_ms)

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            records = await self._get(1000, 1)
            if records:
                return records[0]

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record (``getone``); the iteration stops when the consumer is closed."""
        if self._closed:
            raise StopAsyncIteration
        try:
            return await self.getone()
        except IllegalStateError:
            if self._closed:
                raise StopAsyncIteration from None
            raise

    # ---- subscription and assignment -----------------------------------------------------

    async def subscribe(
        self,
        topics: Sequence[str],
        on_assign: AsyncRebalanceCallback | None = None,
        on_revoke: AsyncRebalanceCallback | None = None,
        on_lost: AsyncRebalanceCallback | None = None,
        *,
        listener: AsyncConsumerRebalanceListener | ConsumerRebalanceListener | None = None,
    ) -> None:
        """``Consumer.subscribe``; the callbacks run on the event loop (module docstring).

        ``on_lost`` defaults to ``on_revoke``. Raises ``IllegalStateError`` without
        ``group.id`` or after ``assign``.
        """
        if listener is not None and (on_assign or on_revoke or on_lost):
            raise ValueError("give either listener or on_assign/on_revoke/on_lost, not both")
        chosen = handlers(on_assign, on_revoke, on_lost, listener)
        bridges: list[RebalanceCallback | None] = [None, None, None]
        if chosen:
            loop = asyncio.get_running_loop()
            bridges = [
                bridge(self, loop, chosen.get(kind), self._worker, self._publish) for kind in KINDS
            ]
        await self._call(self._consumer.subscribe, topics, *bridges)

    def subscription(self) -> set[str]:
        """The subscribed topics (empty without ``subscribe``)."""
        return self._consumer.subscription()

    async def unsubscribe(self) -> None:
        """``Consumer.unsubscribe``: leave the group, or drop the ``assign`` assignment."""
        await self._call(self._reclaiming, self._consumer.unsubscribe)

    async def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """``Consumer.assign``: read exactly these partitions."""
        await self._call(self._reclaiming, self._consumer.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        """The partitions the consumer reads, as of the last call completed."""
        return set(self._assignment)

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset returned for ``tp``."""

        def seek() -> None:
            self._consumer.seek(tp, offset)
            self._buffer.remove([tp])

        await self._call(seek)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the first offset of these partitions (all assigned ones if none given)."""

        def seek() -> None:
            self._consumer.seek_to_beginning(*partitions)
            self._buffer.remove(partitions or None)

        await self._call(seek)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last offset of these partitions (all assigned ones if none given)."""

        def seek() -> None:
            self._consumer.seek_to_end(*partitions)
            self._buffer.remove(partitions or None)

        await self._call(seek)

    async def position(self, tp: TopicPartition) -> int:
        """The offset of the next record returned for ``tp`` (resolving it if needed)."""

        def position() -> int:
            first = self._buffer.first_offset(tp)
            return first if first is not None else self._consumer.position(tp)

        return await self._call(position)

    async def group_metadata(self) -> ConsumerGroupMetadata:
        """``Consumer.group_metadata``: for ``AsyncProducer.send_offsets_to_transaction``."""
        return await self._call(self._consumer.group_metadata)

    async def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of ``tp`` seen in the last fetch, if any."""
        return await self._call(self._consumer.highwater, tp)

    async def lag(self, tp: TopicPartition) -> int | None:
        """Records of ``tp`` not yet returned: high watermark - position (``None``: unknown)."""

        def lag() -> int | None:
            lag = self._consumer.lag(tp)
            first = self._buffer.first_offset(tp)
            high_watermark = self._consumer.highwater(tp)
            if lag is None or first is None or high_watermark is None:
                return lag
            return max(high_watermark - first, 0)

        return await self._call(lag)

    async def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions and returning their records; they stay assigned."""

        def pause() -> None:
            self._consumer.pause(*partitions)
            self._reclaim(partitions)

        await self._call(pause)

    async def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return these paused partitions again."""
        await self._call(self._consumer.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions, as of the last call completed."""
        return set(self._paused)

    async def partitions_for_topic(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``; raises ``UnknownTopicOrPartitionError``."""
        return await self._aside(self._consumer.partitions_for_topic, topic)

    async def beginning_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The first offset of each partition."""
        return await self._aside(self._consumer.beginning_offsets, list(partitions))

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset (high watermark) of each partition."""
        return await self._aside(self._consumer.end_offsets, list(partitions))

    # ---- commits -------------------------------------------------------------------------

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Sequence[tuple[TopicPartition, int]] | None = None,
    ) -> dict[TopicPartition, int]:
        """Commit offsets to the group ``group.id``; returns what was committed.

        As ``Consumer.commit``: by default the positions of every partition, i.e. past
        every record handed out (not past buffered ones). Raises its typed errors. The
        commit is sent even if the awaiting task is cancelled, before or after the
        commit's turn came.
        """
        loop = asyncio.get_running_loop()
        given: list[tuple[TopicPartition, int]] | None = (
            None if offsets is None else list(dict[TopicPartition, int](offsets).items())
        )

        def commit() -> Future[dict[TopicPartition, int]]:
            if given is not None:
                return self._consumer.commit(given, asynchronous=True)
            chosen = self._consumer._positions(self._consumer.assignment())
            chosen.update(self._buffer.first_offsets())
            return self._consumer.commit(chosen, asynchronous=True)

        # Observed, not wrapped: cancelling the awaiting task does not withdraw the job.
        sent = await observe(self._submit(commit), loop)
        return await observe(sent, loop)

    async def committed(
        self, partitions: Sequence[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition; ``None`` where none is."""
        return await self._aside(self._consumer.committed, list(partitions), timeout_ms)

    # ---- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Contact the cluster (one metadata request); ``NetworkError`` if no broker answers.

        Optional (aiokafka's ``start``): the consumer works without it. ``async with``
        calls it.
        """
        await self._aside(self._consumer._conn.refresh_metadata)

    async def close(self, timeout_ms: int | None = None) -> None:
        """``Consumer.close``: leave the group and stop, within ``timeout_ms``; idempotent.

        A poll under way is cut short first (after the rebalance callback it awaits, if
        any, returns); buffered records are given back, so the last auto-commit does not
        pass them. Runs to the end even if the awaiting task is cancelled. Not from a
        rebalance callback (``IllegalStateError``).
        """
        if IN_CALLBACK.get() is self:
            raise IllegalStateError("a rebalance callback must not close its consumer")
        if self._close_future is None:
            loop = asyncio.get_running_loop()
            self._closed = True
            self._interrupt_poll()
            closing = self._worker.submit(
                self._job, self._reclaiming, (self._consumer.close, timeout_ms)
            )
            self._worker.stop()
            self._close_future = observe(closing, loop)
        await asyncio.shield(self._close_future)

    async def stop(self) -> None:
        """``close()``: aiokafka's name."""
        await self.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
