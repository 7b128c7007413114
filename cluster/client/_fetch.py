"""The consumer's fetcher (Kafka's ``Fetcher``): fetch requests out, records back.

* ``send`` groups the partitions that may be fetched (positioned, not paused, not backing
  off, at most ``FETCH_AHEAD`` completed fetches buffered) by leader and sends one
  ``Fetch`` per broker, one in flight per broker; the outcome comes back through the
  consumer's response queue.
* ``handle_response`` checks each partition's answer against the state it was asked for
  (its epoch: a seek since makes it stale), notes the high watermark and buffers the
  batches; they are decoded lazily.
* ``drain`` decodes buffered batches into ``ConsumerRecord`` objects up to a limit, a
  whole batch at a time (``lograft.protocol.record_codec.decode_rows``) and only when the
  records before it are handed out, rotating the starting partition so that none starves,
  and moves the positions. ``drain_batches`` hands out the batches' bytes instead
  (``Consumer.poll_batches``).
* Errors: ``OFFSET_OUT_OF_RANGE`` resets the position (``auto.offset.reset``; ``none``
  raises), retriable ones back the partition off and ask for fresh metadata, others raise.
  A partition without a leader is not fetched (the others are); each partition notes since
  when its leader has not answered (``PartitionState.stalled_since``).
  A corrupt batch raises on every poll until the user seeks past it.

Backoffs are counted on the consumer's ``Clock``; a ``Fetch``'s gRPC deadline is real time.

Not thread-safe: the consumer's polling thread owns it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lograft.protocol.batch_header import BatchHeader, iter_headers
from lograft.protocol.control_records import AbortedBatchFilter
from lograft.protocol.errors import (
    CorruptMessageError,
    LograftError,
    NetworkError,
    OffsetOutOfRangeError,
    error_for_code,
)
from lograft.protocol.record_codec import decode_rows, next_readable_batch
from lograft.protocol.wire import broker_pb2 as pb

from ._clock import Clock
from ._connection import Connections, TopicPartition
from ._subscription import CompletedFetch, PartitionState, SubscriptionState

if TYPE_CHECKING:
    from ._consumer_values import ConsumerBatch, ConsumerRecord

__all__ = ["FETCH_AHEAD", "FetchCall", "Fetcher"]

logger = logging.getLogger(__name__)

FETCH_AHEAD = 1
"""Completed fetches a partition may have buffered while another is requested."""


@dataclass(slots=True)
class FetchCall:
    """One ``Fetch`` sent to a broker, to match its answer against the partitions' states."""

    node: int
    offsets: dict[TopicPartition, tuple[int, int]]
    """tp → (fetch offset, state epoch) at the time of the request."""


class Fetcher:
    """Fetches the partitions of a ``SubscriptionState``; see the module docstring.

    ``respond`` queues a fetch outcome (``(call, grpc future or LograftError)``) for the
    polling thread, which passes it to ``handle_response``; ``want_metadata`` asks for a
    metadata refresh. ``record_type`` and ``batch_type`` are ``ConsumerRecord`` and
    ``ConsumerBatch`` (defined by the public ``consumer`` module, which imports this one).
    """

    def __init__(
        self,
        conn: Connections,
        subscriptions: SubscriptionState,
        *,
        respond: Callable[[tuple[FetchCall, Any]], None],
        want_metadata: Callable[[], None],
        record_type: type[ConsumerRecord],
        batch_type: type[ConsumerBatch],
        fetch_min_bytes: int,
        fetch_max_wait_ms: int,
        fetch_max_bytes: int,
        partition_max_bytes: int,
        request_timeout_ms: int,
        backoff_s: float,
        clock: Clock,
        read_committed: bool = False,
    ) -> None:
        self._conn = conn
        self._read_committed = read_committed
        self._clock = clock
        self._subscriptions = subscriptions
        self._respond = respond
        self._want_metadata = want_metadata
        self._record_type = record_type
        self._batch_type = batch_type
        self._fetch_min_bytes = fetch_min_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_max_bytes = fetch_max_bytes
        self._partition_max_bytes = partition_max_bytes
        self._request_timeout_ms = request_timeout_ms
        self._backoff_s = backoff_s
        self._nodes_in_flight: set[int] = set()
        self._rotation = 0

    @property
    def in_flight(self) -> bool:
        """Whether a fetch is out to some broker."""
        return bool(self._nodes_in_flight)

    def _fetchable(self) -> list[tuple[TopicPartition, PartitionState]]:
        """Partitions with buffered fetches, not paused, starting one further each time so
        that none starves."""
        items = [
            (tp, s) for tp, s in self._subscriptions.states.items() if s.buffered and not s.paused
        ]
        if items:
            self._rotation = (self._rotation + 1) % len(items)
            items = items[self._rotation :] + items[: self._rotation]
        return items

    def _corrupt(self, state: PartitionState) -> None:
        """Stay at a bad batch: drop what was fetched past it and fetch again from the
        position, so that every poll raises there until the user seeks, and nothing after
        it is skipped silently."""
        state.epoch = self._subscriptions.new_epoch()  # drop any fetch in flight past it
        state.buffered.clear()
        state.fetch_offset = state.position

    def drain(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` buffered records of partitions not paused; moves their positions.

        A fetch's batches are decoded one at a time, when the records before them have been
        handed out, each into ``ConsumerRecord`` objects at once
        (:func:`lograft.protocol.record_codec.decode_rows`).
        """
        out: list[ConsumerRecord] = []
        for tp, state in self._fetchable():
            topic, partition = tp.topic, tp.partition
            while state.buffered and len(out) < limit:
                completed = state.buffered[0]
                records = completed.records
                if not records:
                    try:
                        header = _next_batch(completed)
                        if header is None:
                            state.buffered.popleft()
                            if state.position is None or state.position < completed.next_offset:
                                state.position = completed.next_offset
                            continue
                        records = completed.records = decode_rows(
                            self._record_type,
                            topic,
                            partition,
                            completed.data,
                            header,
                            completed.fetch_offset,
                        )
                        completed.batch = header
                    except CorruptMessageError:
                        self._corrupt(state)
                        if out:
                            return out  # the records before the bad batch first
                        raise
                    if not records:
                        continue
                wanted = limit - len(out)
                if len(records) <= wanted:
                    out += records
                    completed.records = []
                else:
                    out += records[:wanted]
                    del records[:wanted]
                state.position = out[-1].offset + 1
        return out

    def drain_batches(self, limit: int) -> list[ConsumerBatch]:
        """Whole buffered batches of partitions not paused, as bytes, until they hold
        ``limit`` records or more; moves the positions past them.

        A batch ``drain`` has returned part of is handed out whole, its ``start_offset`` at
        the position. Aborted (``read_committed``) and control batches are left out, as
        ``drain`` leaves out their records.
        """
        out: list[ConsumerBatch] = []
        make = self._batch_type
        count = 0
        for tp, state in self._fetchable():
            while state.buffered and count < limit:
                completed = state.buffered[0]
                header = completed.batch if completed.records else None
                completed.records = []
                if header is None:
                    try:
                        header = _next_batch(completed)
                    except CorruptMessageError:
                        self._corrupt(state)
                        if out:
                            return out
                        raise
                    if header is None:
                        state.buffered.popleft()
                        if state.position is None or state.position < completed.next_offset:
                            state.position = completed.next_offset
                        continue
                start = completed.fetch_offset
                if state.position is not None and state.position > start:
                    start = state.position
                data = completed.data[header.position : header.position + header.size]
                out.append(
                    make(
                        tp.topic, tp.partition, header.base_offset, header.next_offset, start, data
                    )
                )
                count += header.records_count
                state.position = header.next_offset
        return out

    def send(self) -> None:
        """Send a ``Fetch`` to each leader with fetchable partitions and none in flight."""
        now = self._clock.monotonic()
        metadata = self._conn.metadata
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = {}
        for tp, state in self._subscriptions.states.items():
            if (
                state.in_flight
                or state.paused
                or state.fetch_offset is None
                or len(state.buffered) > FETCH_AHEAD
                or state.retry_at > now
            ):
                continue
            try:
                node = metadata.leader_for(tp)
            except LograftError as exc:
                if not exc.retriable:
                    raise
                state.note_stalled(now, str(exc))
                self._want_metadata()
                continue
            if node in self._nodes_in_flight:
                continue
            by_node.setdefault(node, []).append((tp, state))
        for node, entries in by_node.items():
            topics: dict[str, list[Any]] = {}
            call = FetchCall(node, {})
            for tp, state in entries:
                assert state.fetch_offset is not None
                topics.setdefault(tp.topic, []).append(
                    pb.FetchPartition(
                        partition=tp.partition,
                        fetch_offset=state.fetch_offset,
                        partition_max_bytes=self._partition_max_bytes,
                        current_leader_epoch=-1,
                    )
                )
                call.offsets[tp] = (state.fetch_offset, state.epoch)
            # Only wait on the broker when nothing is buffered to hand out meanwhile.
            buffered = any(s.buffered for _, s in entries)
            request = pb.FetchRequest(
                max_wait_ms=0 if buffered else self._fetch_max_wait_ms,
                min_bytes=self._fetch_min_bytes,
                max_bytes=self._fetch_max_bytes,
                topics=[pb.FetchTopic(name=n, partitions=ps) for n, ps in topics.items()],
                replica_id=-1,
                isolation_level=1 if self._read_committed else 0,
            )
            try:
                future = self._conn.submit(
                    node,
                    "Fetch",
                    request,
                    (self._request_timeout_ms + self._fetch_max_wait_ms) / 1000.0,
                )
            except LograftError as exc:
                self._respond((call, exc))
            else:
                future.add_done_callback(functools.partial(self._answered, call))
            self._nodes_in_flight.add(node)
            for _, state in entries:
                state.in_flight = True

    def _answered(self, call: FetchCall, outcome: Any) -> None:
        self._respond((call, outcome))

    def handle_response(self, call: FetchCall, outcome: Any) -> None:
        """Take in the outcome of ``call``: a finished framed-call future or a
        ``LograftError``."""
        states = self._subscriptions.states
        self._nodes_in_flight.discard(call.node)
        for tp in call.offsets:
            state = states.get(tp)
            if state is not None:
                state.in_flight = False
        if isinstance(outcome, LograftError):
            error: LograftError | None = outcome
            response = None
        else:
            try:
                response = outcome.result()
                error = None
            except LograftError as exc:
                error = exc
                response = None
            except Exception as exc:
                error = NetworkError(str(exc))
                response = None
        now = self._clock.monotonic()
        if error is not None:
            if not error.retriable:
                raise error
            logger.info("fetch failed node=%d error=%s", call.node, error.error_name)
            self._want_metadata()
            for tp in call.offsets:
                state = states.get(tp)
                if state is not None:
                    state.retry_at = now + self._backoff_s
                    state.note_stalled(now, str(error))
            return
        assert response is not None
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                sent = call.offsets.get(tp)
                state = states.get(tp)
                if sent is None or state is None or state.epoch != sent[1]:
                    continue  # unassigned or moved since the request
                fetch_offset = sent[0]
                if p.high_watermark >= 0:
                    # A read_committed consumer's end (and lag) is the last stable offset.
                    state.high_watermark = (
                        p.last_stable_offset if self._read_committed else p.high_watermark
                    )
                if p.error_code:
                    self._partition_error(tp, state, p.error_code, p.error_message, fetch_offset)
                    continue
                state.note_answered()
                data = p.records
                if not data:
                    continue
                next_offset = fetch_offset
                for header in iter_headers(data):
                    next_offset = max(next_offset, header.next_offset)
                if next_offset == fetch_offset:
                    continue  # only a partial batch: the server sends whole ones; retry
                skip = (
                    AbortedBatchFilter(
                        (a.producer_id, a.first_offset) for a in p.aborted_transactions
                    )
                    if self._read_committed
                    else None
                )
                state.buffered.append(CompletedFetch(data, fetch_offset, next_offset, skip))
                state.fetch_offset = next_offset

    def _partition_error(
        self,
        tp: TopicPartition,
        state: PartitionState,
        code: int,
        message: str,
        fetch_offset: int,
    ) -> None:
        error = error_for_code(code, message or f"{tp.topic}-{tp.partition}")
        reset_policy = self._subscriptions.reset_policy
        if isinstance(error, OffsetOutOfRangeError):
            if reset_policy == "none":
                raise OffsetOutOfRangeError(
                    f"offset {fetch_offset} of {tp.topic}-{tp.partition} is out of range "
                    "and auto.offset.reset=none"
                )
            logger.info(
                "offset out of range topic=%s partition=%d offset=%d reset=%s",
                tp.topic,
                tp.partition,
                fetch_offset,
                reset_policy,
            )
            state.note_answered()
            self._subscriptions.request_reset(tp, state, self._subscriptions.default_reset())
            return
        if not error.retriable:
            raise error
        logger.info(
            "fetch partition error topic=%s partition=%d error=%s",
            tp.topic,
            tp.partition,
            error.error_name,
        )
        now = self._clock.monotonic()
        state.retry_at = now + self._backoff_s
        state.note_stalled(now, str(error))
        self._want_metadata()


def _next_batch(completed: CompletedFetch) -> BatchHeader | None:
    """The header of the next batch of ``completed`` to hand out, CRC-checked; ``None`` at
    the end. Moves its cursor past the batch (``lograft.protocol.record_codec.next_readable_batch``
    says which batches are passed over, and raises ``CorruptMessageError``)."""
    header, completed.cursor = next_readable_batch(
        completed.data, completed.cursor, completed.fetch_offset, completed.skip
    )
    return header
