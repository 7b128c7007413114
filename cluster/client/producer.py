"""``Producer``: batches records per partition and ships them to partition leaders.

How it works, as in Kafka's Java producer:

* ``send`` picks the partition (murmur2 of the key, the sticky partition for unkeyed records,
  or the one given), appends the record, as given, to that partition's open batch (the
  sender encodes a batch's records in one go when it ships it) and returns a
  ``RecordFuture``: ``concurrent.futures.Future``'s interface, but one outcome shared by the
  records of a batch, so a future is three slots.
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
  retried; for one sent after its predecessor was acknowledged (the leader lost sequences it
  had acknowledged), the batch goes again under a new epoch (a transactional producer fails
  it). A batch that fails for good, or such a gap, leaves the partition's sequence broken:
  once nothing of the partition is in flight the producer bumps its epoch locally (Kafka's
  KIP-360; a new producer id when the epoch is exhausted) and the partition restarts at
  sequence 0. Idempotence needs
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

``Producer`` is thread-safe. Callbacks added to the returned futures run in the client's I/O
thread, where the answer arrived (as Kafka's producer runs them); they must not block.
"""

# Over 600 lines: the public Producer and its results; its configs and machinery are in _ modules.
from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType

from lograft.protocol.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    LograftError,
    MessageTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.record_codec import encode_headers
from lograft.protocol.varints import INT64_MAX

from ._accumulator import (
    BATCH_OVERHEAD,
    BULK_CHUNK_BYTES,
    RECORD_OVERHEAD,
    REQUEST_OVERHEAD,
    ProducerBatch,
    RecordAccumulator,
)
from ._bulk import BulkBatch, BulkCall, BulkResult
from ._client_config import given_config
from ._clock import SYSTEM_CLOCK, Clock
from ._connection import Connections, TopicPartition
from ._consumer_values import ConsumerGroupMetadata
from ._coordinator import TRANSACTION_KEY, CoordinatorCalls
from ._metadata import ClusterMetadata
from ._producer_config import PRODUCER_CONFIGS, ProducerConfig, resolve_idempotence
from ._producer_metadata import ProducerMetadata
from ._record_future import RecordFuture, RecordMetadata
from ._sender import Sender
from ._sequencing import Sequencer
from ._transactions import PreparedTxnState, TransactionManager
from .partitioner import Partitioner, partition_for_key

__all__ = [
    "PRODUCER_CONFIGS",
    "BulkBatch",
    "BulkResult",
    "PreparedTxnState",
    "Producer",
    "ProducerConfig",
    "RecordFuture",
    "RecordMetadata",
]

logger = logging.getLogger(__name__)
# The sequencing core's logger, named after its module as when it made its own: its log
# lines, and whatever filters on that name, are unchanged.
_SEQUENCER_LOGGER = logging.getLogger("cluster.client._sequencing")

# Where the machinery lives (Kafka's seams): ``_accumulator`` holds the batches per partition
# (``RecordAccumulator``), ``_sender`` is the background thread that sends them and handles
# the answers (``Sender``), ``_sequencing`` is the pure idempotence core (producer id, epoch,
# sequences), ``_producer_metadata`` the topics' metadata, ``_producer_config`` the configs
# and ``_clock`` the injectable time. This module keeps the public API and the results.


_BYTES = (bytes, bytearray, memoryview)


class _FutureDelivery:
    """Completes the futures of a batch the sender is done with (its ``Delivery``).

    Runs in the client's I/O thread as answers arrive (and, for batches that fail without
    one, in the sender thread, a sending caller's thread or ``close``); a bulk's shared
    counters are changed under the producer's lock.
    """

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def succeeded(
        self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int, latency_ms: float
    ) -> None:
        if batch.bulk is not None:
            bulk = batch.bulk
            with self._lock:
                bulk.batches.append(
                    BulkBatch(
                        batch.tp.partition,
                        base_offset,
                        batch.record_count,
                        batch.bulk_start,
                        latency_ms,
                    )
                )
                bulk.remaining -= 1
            bulk.finish_if_done()
            return
        assert batch.outcome is not None
        batch.outcome.succeed(base_offset, log_append_time_ms)

    def failed(self, batch: ProducerBatch, error: BaseException) -> None:
        if batch.bulk is not None:
            bulk = batch.bulk
            with self._lock:
                if bulk.error is None:
                    bulk.error = error
                bulk.remaining -= 1
            bulk.finish_if_done()
            return
        assert batch.outcome is not None
        batch.outcome.fail(error)


def _failed(
    topic: str,
    partition: int,
    error: BaseException,
    callback: Callable[[RecordFuture], object] | None,
) -> RecordFuture:
    """The future of a record ``send`` refused before queueing it; ``callback`` runs now."""
    future = RecordFuture.failed(topic, partition, error)
    if callback is not None:
        future.add_done_callback(callback)
    return future


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
        self._setup(config, overrides, SYSTEM_CLOCK)

    @classmethod
    def _with_clock(
        cls, clock: Clock, config: Mapping[str, object] | None = None, **overrides: object
    ) -> Producer:
        """A producer that reads time and waits through ``clock`` (a ``ManualClock`` in
        tests); otherwise exactly ``Producer(config, **overrides)``.

        Private, as Kafka's ``Time`` injection is: the clock is a testing seam, not API.
        """
        producer = cls.__new__(cls)
        producer._setup(config, overrides, clock)
        return producer

    # Over 70 lines: every config read once, as each part it configures is built, in order.
    def _setup(
        self, config: Mapping[str, object] | None, overrides: dict[str, object], clock: Clock
    ) -> None:
        cfg = ProducerConfig.resolve(config, overrides)
        given = given_config(config, overrides)
        transactional_id = cfg.transactional_id
        idempotent = resolve_idempotence(
            cfg, explicit="enable.idempotence" in given or transactional_id is not None
        )
        if transactional_id is not None and not idempotent:
            raise InvalidConfigError("transactional.id needs enable.idempotence=true")
        self.config = cfg = dataclasses.replace(cfg, enable_idempotence=idempotent)
        self._clock = clock
        self._max_request_size = cfg.max_request_size
        self._request_timeout_ms = cfg.request_timeout_ms
        backoff_ms = cfg.retry_backoff_ms
        self._conn = Connections.from_config(
            cfg, max_send_bytes=self._max_request_size + 1024 * 1024
        )
        self._partitioner = Partitioner(random.Random())
        self._topic_partitions: dict[str, tuple[ClusterMetadata, list[TopicPartition]]] = {}
        """Each topic's ``TopicPartition`` objects, made once per metadata snapshot rather
        than per record (the snapshot they were made from comes first)."""
        # The system clock read directly: a method wrapping time.time cost a tenth of send.
        self._wall_clock = time.time if clock is SYSTEM_CLOCK else clock.time
        self._accumulator = RecordAccumulator(
            clock=clock,
            linger_s=cfg.linger_ms / 1000.0,
            batch_size=max(cfg.batch_size, 1),
            compression=cfg.compression_type,
            max_request_size=self._max_request_size,
            delivery_timeout_s=cfg.delivery_timeout_ms / 1000.0,
            buffer_memory=cfg.buffer_memory,
            max_block_s=cfg.max_block_ms / 1000.0,
        )
        self._lock = self._accumulator.lock
        self._metadata = ProducerMetadata(
            self._conn,
            self._lock,
            clock,
            max_block_s=cfg.max_block_ms / 1000.0,
            backoff_s=backoff_ms / 1000.0,
        )
        sequencer = (
            Sequencer(transactional=transactional_id is not None, logger=_SEQUENCER_LOGGER)
            if idempotent
            else None
        )
        self._transactions: TransactionManager | None = None
        if transactional_id is not None:
            assert sequencer is not None
            self._transactions = TransactionManager(
                transactional_id,
                timeout_ms=cfg.transaction_timeout_ms,
                two_phase=cfg.transaction_two_phase_commit_enable,
                calls=CoordinatorCalls(
                    self._conn,
                    retry_backoff_ms=backoff_ms,
                    key_type=TRANSACTION_KEY,
                    wait_for_brokers=True,
                ),
                sequencer=sequencer,
                lock=self._lock,
                wake=self._accumulator.wake,
                backoff_s=backoff_ms / 1000.0,
                request_timeout_ms=self._request_timeout_ms,
                max_block_ms=cfg.max_block_ms,
            )
        self._sender = Sender(
            accumulator=self._accumulator,
            conn=self._conn,
            metadata=self._metadata,
            # Idempotence (Kafka's TransactionManager without transactions).
            sequencer=sequencer,
            transactions=self._transactions,
            delivery=_FutureDelivery(self._lock),
            clock=clock,
            acks=cfg.acks,
            retries=cfg.retries,
            backoff_s=backoff_ms / 1000.0,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            request_timeout_ms=self._request_timeout_ms,
            client_id=cfg.client_id,
        )
        self._sender.thread.start()

    # ---- public API ---------------------------------------------------------------------

    # Over 70 lines: the per-record hot path, kept inline so that a record costs no extra calls.
    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        callback: Callable[[RecordFuture], object] | None = None,
    ) -> RecordFuture:
        """Queue one record; the future completes with its ``RecordMetadata`` or typed error.

        ``callback(future)``, if given, runs when the record is done, as if added with the
        future's ``add_done_callback`` (Kafka's ``send(record, callback)``); callbacks of one
        partition's records run in the order they were sent. Given here, it costs the
        producer less than ``add_done_callback`` and keeps fewer objects alive per record.

        Blocks (at most ``max.block.ms``) for the topic's metadata the first time and while
        ``buffer.memory`` is full; if that fails, ``send`` itself raises the typed error
        (``UnknownTopicOrPartitionError``, ``NetworkError``, ``RequestTimedOutError``).
        The future of a record larger than ``max.request.size`` fails at once with
        ``MessageTooLargeError``; that of an unknown partition with
        ``UnknownTopicOrPartitionError``.
        """
        acc = self._accumulator
        if acc.closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if self._transactions is not None:
            with acc.lock:
                self._transactions.check_send_locked()
        size = RECORD_OVERHEAD
        if value is not None:
            if type(value) is not bytes:
                if not isinstance(value, _BYTES):
                    raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
                value = bytes(value)  # the caller may change its buffer after send returns
            size += len(value)
        if key is not None:
            if type(key) is not bytes:
                if not isinstance(key, _BYTES):
                    raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
                key = bytes(key)
            size += len(key)
        encoded_headers = None
        if headers:
            encoded_headers = encode_headers(headers)
            size += len(encoded_headers)
        if timestamp_ms is None:
            ts = int(self._wall_clock() * 1000)
        elif 0 <= timestamp_ms <= INT64_MAX:
            ts = timestamp_ms
        else:
            # Kafka's ProducerRecord refuses negative timestamps too.
            raise ValueError(f"timestamp {timestamp_ms} must be a non-negative 64-bit integer")
        snapshot = self._conn.metadata
        known = self._topic_partitions.get(topic)
        if (
            known is not None
            and known[0] is snapshot
            and (partition is None or partition < len(known[1]))
        ):
            tps = known[1]  # the metadata has not changed since this topic's last send
        else:
            # Keyed by the snapshot from before the lookup: if the lookup refreshed the
            # metadata, the next send looks again rather than keep a count from before.
            count = self._metadata.partition_count(topic, partition)
            tps = [TopicPartition(topic, p) for p in range(count)]
            self._topic_partitions[topic] = (snapshot, tps)
        num_partitions = len(tps)
        if size + BATCH_OVERHEAD > self._max_request_size:
            return _failed(
                topic,
                -1 if partition is None else partition,
                MessageTooLargeError(
                    f"record of about {size} bytes exceeds max.request.size="
                    f"{self._max_request_size}"
                ),
                callback,
            )
        if partition is not None:
            if not 0 <= partition < num_partitions:
                return _failed(
                    topic,
                    partition,
                    UnknownTopicOrPartitionError(
                        f"{topic}-{partition} (topic has {num_partitions} partitions)"
                    ),
                    callback,
                )
            chosen = partition
            sticky = False
        elif key is not None:
            chosen = partition_for_key(key, num_partitions)
            sticky = False
        else:
            chosen = self._partitioner.sticky.partition(topic, num_partitions)
            sticky = True
        with acc.lock:
            tp = tps[chosen]
            batch = acc.append_locked(tp, value, key, ts, encoded_headers, size)
            if batch is None:
                acc.wait_for_memory_locked(size)
                if sticky and not acc.has_room_locked(tp, size):
                    # KIP-480: a new batch on the sticky partition moves unkeyed records on.
                    chosen = self._partitioner.sticky.on_new_batch(
                        topic,
                        chosen,
                        num_partitions,
                        self._conn.metadata.available_partitions(topic),
                    )
                    tp = tps[chosen]
                acc.open_room_locked(tp, size)
                batch = acc.append_locked(tp, value, key, ts, encoded_headers, size)
                assert batch is not None, "a record went into no batch after room was made"
            outcome = batch.outcome
            assert outcome is not None
            future = RecordFuture(outcome, batch.record_count - 1, ts, callback)
            if callback is not None:
                # Queued under the lock: the batch cannot be drained, so not completed,
                # before its callback is in place.
                outcome.callbacks.append(future)
            drain_here = acc.sender_wanted and self._sender.take_wake_locked()
        if drain_here:
            self._sender.drain_here()
        return future

    # Over 70 lines: check, partition and chunk the values in one pass over them.
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
        acc = self._accumulator
        if acc.closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if self._transactions is not None:
            with acc.lock:
                self._transactions.check_send_locked()
        if keys is not None and len(keys) != len(values):
            raise InvalidRequestError(f"{len(keys)} keys for {len(values)} values")
        num_partitions = self._metadata.partition_count(topic, partition)
        bulk = BulkCall(topic, len(values))
        if not values:
            bulk.sealed = True
            bulk.finish_if_done()
            return bulk.future
        if partition is not None and not 0 <= partition < num_partitions:
            raise UnknownTopicOrPartitionError(f"{topic}-{partition}")
        ts = timestamp_ms if timestamp_ms is not None else int(self._clock.time() * 1000)
        chunk_bytes = min(
            max(acc.batch_size, BULK_CHUNK_BYTES),
            self._max_request_size - REQUEST_OVERHEAD,
        )
        groups: list[tuple[int | None, Sequence[bytes], Sequence[bytes | None] | None]]
        if partition is None and keys is not None:
            by_partition: dict[int, tuple[list[bytes], list[bytes | None]]] = {}
            # Keys repeat within a call (a Spark batch, a table's ids): murmur2 in Python
            # costs a few microseconds per key, a dict lookup far less.
            key_partitions: dict[bytes, int] = {}
            for value, key in zip(values, keys, strict=True):
                if key is None:
                    p = self._partitioner.sticky.partition(topic, num_partitions)
                else:
                    p = key_partitions.get(key, -1)
                    if p < 0:
                        p = key_partitions[key] = partition_for_key(key, num_partitions)
                group = by_partition.setdefault(p, ([], []))
                group[0].append(value)
                group[1].append(key)
            groups = [(p, vs, ks) for p, (vs, ks) in sorted(by_partition.items())]
        else:
            groups = [(partition, values, keys)]

        def next_partition(current: int) -> int:
            available = self._conn.metadata.available_partitions(topic)
            return self._partitioner.sticky.on_new_batch(topic, current, num_partitions, available)

        try:
            for fixed, group_values, group_keys in groups:
                if fixed is not None:
                    first, rotate = fixed, None
                else:
                    available = self._conn.metadata.available_partitions(topic)
                    first = self._partitioner.sticky.partition(topic, num_partitions, available)
                    rotate = next_partition
                acc.append_bulk(
                    bulk, topic, first, group_values, group_keys, ts, chunk_bytes, rotate
                )
        except BaseException as exc:
            with acc.lock:
                if bulk.error is None:
                    bulk.error = exc
                bulk.sealed = True
            bulk.finish_if_done()
            raise
        with acc.lock:
            bulk.sealed = True
            done = bulk.remaining == 0
        if done:
            bulk.finish_if_done()
        return bulk.future

    # ---- transactions (Kafka's KIP-98 API; see cluster.client._transactions) ---------------

    def _txn(self) -> TransactionManager:
        if self._transactions is None:
            raise IllegalStateError("transactions need transactional.id")
        return self._transactions

    def init_transactions(self, keep_prepared_txn: bool = False) -> None:
        """Register the ``transactional.id`` with its coordinator: fences every older
        producer of the id and aborts its open transaction (with ``keep_prepared_txn``,
        KIP-939, keeps it open for :meth:`complete_transaction` instead). Call once, before
        the first transaction; blocks at most ``max.block.ms``."""
        self._txn().init_transactions(keep_prepared_txn)

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until it ends commit or abort together."""
        self._txn().begin_transaction()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> None:
        """Commit a consumer group's offsets as part of the open transaction (KIP-447):
        they count only if it commits. ``offsets`` are the next offsets to read;
        ``group_metadata`` is ``consumer.group_metadata()``, so a consumer that lost its
        partitions cannot commit through a stale producer."""
        self._txn().send_offsets(
            offsets,
            group_metadata.group_id,
            group_metadata.member_id,
            group_metadata.member_epoch,
            CoordinatorCalls(
                self._conn, retry_backoff_ms=self.config.retry_backoff_ms, wait_for_brokers=True
            ),
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush the transaction's records and commit it. Raises its error if a record
        failed (then :meth:`abort_transaction`), ``ProducerFencedError`` if a newer producer
        of the id took over (close this one). A timed-out commit may be called again."""
        txn = self._txn()
        txn.begin_end(commit=True)
        self.flush(timeout)
        txn.end(commit=True)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the open transaction: records not sent yet fail with
        ``TransactionAbortedError``, the rest are aborted by the markers."""
        txn = self._txn()
        txn.begin_end(commit=False)
        self.flush(timeout)
        txn.end(commit=False)

    def prepare_transaction(self, timeout: float | None = None) -> PreparedTxnState:
        """KIP-939: flush the open transaction and keep it open; the state returned lets
        :meth:`complete_transaction` (of this or a later producer of the id) commit it.
        Needs ``transaction.two.phase.commit.enable``."""
        txn = self._txn()
        self.flush(timeout)
        with self._lock:
            if txn.error is not None:
                raise txn.error
        return txn.prepare()

    def complete_transaction(self, prepared: PreparedTxnState) -> bool:
        """KIP-939: commit the prepared transaction if ``prepared`` names it, else abort it
        (after ``init_transactions(keep_prepared_txn=True)`` or :meth:`prepare_transaction`).
        Returns whether it committed; raises ``IllegalStateError`` if no transaction is
        prepared (none was open when ``init_transactions`` ran)."""
        txn = self._txn()
        commit = txn.prepared_matches(prepared)
        txn.begin_end(commit)
        txn.end(commit)
        return commit

    def transaction(self) -> _TransactionScope:
        """``with producer.transaction():`` begins a transaction, commits it when the block
        ends, and aborts it if the block raises (then the exception goes on)."""
        return _TransactionScope(self)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far, ignoring ``linger.ms``, and wait for the outcomes.

        Raises ``RequestTimedOutError`` if they do not all complete within ``timeout`` seconds.
        Failed records are reported through their futures, not here.
        """
        self._accumulator.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (waiting at most ``timeout`` seconds), then stop; idempotent.

        Batches still incomplete after ``timeout`` fail with ``IllegalStateError``.
        """
        acc = self._accumulator
        with acc.lock:
            if acc.closed:
                return
            acc.closing = True
        try:
            self.flush(timeout)
        except RequestTimedOutError:
            logger.warning("close timed out; failing incomplete batches")
        with acc.lock:
            acc.closed = True
            self._metadata.close()
            acc.wake.notify()
        self._sender.thread.join(timeout=max(self._request_timeout_ms / 1000.0, 1.0))
        self._sender.fail_all(IllegalStateError("producer closed before the record was sent"))
        self._conn.close()
        logger.debug("producer closed client_id=%s", self.config.client_id)

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
        return list(range(self._metadata.partition_count(topic)))


class _TransactionScope:
    """``Producer.transaction()``: begin on entry, commit on a clean exit, abort on error."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def __enter__(self) -> Producer:
        self._producer.begin_transaction()
        return self._producer

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self._producer.commit_transaction()
            return
        try:
            self._producer.abort_transaction()
        except LograftError as abort_error:
            logger.warning("abort after an error failed error=%s", abort_error)
