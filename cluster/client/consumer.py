"""``Consumer``: reads assigned partitions by offset, with one fetch ahead per partition.

* ``assign`` gives the consumer its partitions; ``seek``, ``seek_to_beginning`` and
  ``seek_to_end`` move its position; a partition without a position starts where
  ``auto.offset.reset`` says (``earliest``, ``latest``; ``none`` raises
  ``IllegalStateError`` until ``seek`` is called).
* ``poll`` returns up to ``max.poll.records`` records. Fetches go to each partition's leader
  (one request per broker in flight); while the caller works through the records of one
  fetch, the next is already requested (a single fetch-ahead per partition), and records are
  decoded lazily, only as ``poll`` hands them out.
* ``OFFSET_OUT_OF_RANGE`` applies ``auto.offset.reset``; with ``none`` it raises
  ``OffsetOutOfRangeError``. Retriable errors (not the leader, unknown partition, network)
  refresh the metadata and retry after ``retry.backoff.ms``; other errors raise from
  ``poll``.
* Consumer groups are not available yet: ``group.id`` is accepted and kept, but
  ``subscribe`` raises ``IllegalStateError``, and no offsets are committed. Use ``assign``.

A ``Consumer`` is not thread-safe (as in Kafka): use it from one thread.
"""

from __future__ import annotations

import logging
import queue
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from cluster.errors import (
    CorruptMessageError,
    IllegalStateError,
    LograftError,
    NetworkError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from cluster.wire import broker_pb2 as pb
from replica.batch_header import iter_headers
from replica.records import Record, iter_records

from ._connection import (
    COMMON_CONFIGS,
    ConfigDef,
    Connections,
    TopicPartition,
    int_at_least,
    map_rpc_error,
    one_of,
    optional_string,
    resolve_config,
)

__all__ = ["CONSUMER_CONFIGS", "Consumer", "ConsumerRecord"]

logger = logging.getLogger(__name__)

CONSUMER_CONFIGS: tuple[ConfigDef, ...] = (
    *COMMON_CONFIGS,
    ConfigDef("fetch.min.bytes", 1, int_at_least(0), "bytes a fetch waits for"),
    ConfigDef("fetch.max.wait.ms", 500, int_at_least(0), "longest a fetch waits"),
    ConfigDef("fetch.max.bytes", 52428800, int_at_least(0), "bytes per fetch response"),
    ConfigDef(
        "max.partition.fetch.bytes", 1048576, int_at_least(0), "bytes per partition per fetch"
    ),
    ConfigDef("max.poll.records", 500, int_at_least(1), "records one poll returns at most"),
    ConfigDef(
        "auto.offset.reset",
        "latest",
        one_of("earliest", "latest", "none"),
        "where to start without a valid position: earliest, latest or none",
    ),
    ConfigDef("group.id", None, optional_string, "consumer group (groups arrive later)"),
)
"""Every config ``Consumer`` accepts, with its default."""

_EARLIEST = -2
_LATEST = -1
_FETCH_AHEAD = 1
"""Completed fetches a partition may have buffered while another is requested."""


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record read from ``topic``/``partition`` at ``offset``."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(slots=True)
class _Completed:
    """The records of one fetch for one partition, decoded lazily."""

    records: Iterator[Record]
    next_offset: int


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None
    """The offset of the next record ``poll`` returns; ``None``: reset first."""
    fetch_offset: int | None = None
    """The offset the next fetch asks for (past buffered data)."""
    reset: int | None = None
    """A pending ``seek_to_beginning`` (-2) or ``seek_to_end`` (-1)."""
    epoch: int = 0
    """Bumped by every seek, so data fetched before it is dropped."""
    in_flight: bool = False
    retry_at: float = 0.0
    high_watermark: int = -1
    buffered: deque[_Completed] = field(default_factory=deque)


@dataclass(slots=True)
class _FetchCall:
    node: int
    offsets: dict[TopicPartition, tuple[int, int]]
    """tp → (fetch offset, state epoch) at the time of the request."""


class Consumer:
    """Reads records from assigned partitions; see the module docstring for the behaviour.

    ``Consumer({"bootstrap.servers": "127.0.0.1:9092", "auto.offset.reset": "earliest"})``
    or ``Consumer(bootstrap_servers=..., auto_offset_reset="earliest")``; see
    ``CONSUMER_CONFIGS``. Unknown config names and bad values raise ``InvalidConfigError``.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self.config = resolve_config("consumer", CONSUMER_CONFIGS, config, overrides)
        self._fetch_min_bytes = self._int("fetch.min.bytes")
        self._fetch_max_wait_ms = self._int("fetch.max.wait.ms")
        self._fetch_max_bytes = self._int("fetch.max.bytes")
        self._partition_max_bytes = self._int("max.partition.fetch.bytes")
        self._max_poll_records = self._int("max.poll.records")
        self._reset_policy = str(self.config["auto.offset.reset"])
        self._backoff_s = self._int("retry.backoff.ms") / 1000.0
        self._request_timeout_ms = self._int("request.timeout.ms")
        self._conn = Connections(
            str(self.config["bootstrap.servers"]),
            client_id=str(self.config["client.id"]),
            request_timeout_ms=self._request_timeout_ms,
            retry_backoff_ms=self._int("retry.backoff.ms"),
            metadata_max_age_ms=self._int("metadata.max.age.ms"),
        )
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._nodes_in_flight: set[int] = set()
        self._responses: queue.SimpleQueue[tuple[_FetchCall, Any]] = queue.SimpleQueue()
        self._metadata_wanted = False
        self._metadata_at = 0.0
        self._iter_buffer: deque[ConsumerRecord] = deque()
        self._rotation = 0
        self._closed = False

    def _int(self, name: str) -> int:
        value = self.config[name]
        assert isinstance(value, int)
        return value

    # ---- assignment and positions --------------------------------------------------------

    def subscribe(self, topics: Sequence[str]) -> None:
        """Not available yet: consumer groups arrive in a later version. Use ``assign``."""
        raise IllegalStateError(
            "subscribe() needs consumer groups, which lograft does not have yet; use assign()"
        )

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        self._check_open()
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"expected TopicPartition, got {type(tp).__name__}")
        self._states = {tp: self._states.get(tp) or _PartitionState() for tp in wanted}
        topics = {tp.topic for tp in wanted}
        if topics:
            self._conn.refresh_metadata(topics)
        logger.debug("assigned partitions=%s", ",".join(f"{t.topic}-{t.partition}" for t in wanted))

    def assignment(self) -> set[TopicPartition]:
        """The assigned partitions."""
        return set(self._states)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned")
        return state

    def _moved(self, tp: TopicPartition, state: _PartitionState) -> None:
        state.epoch += 1
        state.buffered.clear()
        state.retry_at = 0.0
        if self._iter_buffer:
            self._iter_buffer = deque(
                r for r in self._iter_buffer if (r.topic, r.partition) != (tp.topic, tp.partition)
            )

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset ``poll`` returns for ``tp``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._state(tp)
        self._moved(tp, state)
        state.position = offset
        state.fetch_offset = offset
        state.reset = None

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the first offset of these partitions (all assigned ones if none given)."""
        for tp in partitions or tuple(self._states):
            state = self._state(tp)
            self._moved(tp, state)
            state.position = state.fetch_offset = None
            state.reset = _EARLIEST

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last offset of these partitions (all assigned ones if none given)."""
        for tp in partitions or tuple(self._states):
            state = self._state(tp)
            self._moved(tp, state)
            state.position = state.fetch_offset = None
            state.reset = _LATEST

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp`` (resolving it if needed)."""
        state = self._state(tp)
        if state.position is None:
            self._resolve_positions([tp])
        assert state.position is not None
        return state.position

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of ``tp`` seen in the last fetch, if any."""
        hw = self._state(tp).high_watermark
        return hw if hw >= 0 else None

    def partitions_for_topic(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``; raises ``UnknownTopicOrPartitionError``."""
        self._check_open()
        snapshot = self._conn.wait_for_topic(topic, self._request_timeout_ms)
        count = snapshot.partition_count(topic)
        if count is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r}")
        return list(range(count))

    def beginning_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset of each partition."""
        found = self._conn.list_offsets({tp: _EARLIEST for tp in partitions}, self._api_ms())
        return {tp: found[tp][0] for tp in partitions}

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset (high watermark) of each partition."""
        found = self._conn.list_offsets({tp: _LATEST for tp in partitions}, self._api_ms())
        return {tp: found[tp][0] for tp in partitions}

    def _api_ms(self) -> int:
        return self._request_timeout_ms

    def _resolve_positions(self, partitions: Sequence[TopicPartition]) -> None:
        wanted: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._states[tp]
            if state.position is not None:
                continue
            spec = state.reset
            if spec is None:
                if self._reset_policy == "none":
                    raise IllegalStateError(
                        f"no position for {tp.topic}-{tp.partition} and "
                        "auto.offset.reset=none: call seek() first"
                    )
                spec = _EARLIEST if self._reset_policy == "earliest" else _LATEST
            wanted[tp] = spec
        if not wanted:
            return
        found = self._conn.list_offsets(wanted, self._api_ms())
        for tp, (offset, _, _) in found.items():
            resolved = self._states.get(tp)
            if resolved is None or resolved.position is not None:
                continue
            resolved.position = resolved.fetch_offset = max(offset, 0)
            resolved.reset = None
            logger.debug(
                "position reset topic=%s partition=%d offset=%d", tp.topic, tp.partition, offset
            )

    # ---- polling -------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout_ms`` for some.

        Returns an empty list when none arrived in time. Raises typed errors for fetch
        failures that are not retriable, and ``OffsetOutOfRangeError`` when a position is
        out of range under ``auto.offset.reset=none``.
        """
        self._check_open()
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        while True:
            self._handle_responses(block_s=0.0)
            if self._metadata_wanted:
                self._refresh_metadata()
            unresolved = [tp for tp, s in self._states.items() if s.position is None]
            if unresolved:
                self._resolve_positions(unresolved)
            records = self._drain(self._max_poll_records)
            self._send_fetches()
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if not self._nodes_in_flight:
                # Nothing could be fetched (no leader, backing off): wait a little, bounded.
                time.sleep(min(remaining, self._backoff_s))
                continue
            self._handle_responses(block_s=remaining)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, polling as long as needed; stops when the consumer is closed."""
        while not self._iter_buffer:
            if self._closed:
                raise StopIteration
            self._iter_buffer.extend(self.poll(1000))
        return self._iter_buffer.popleft()

    def close(self) -> None:
        """Stop fetching and close the connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._states.clear()
        self._conn.close()
        logger.debug("consumer closed client_id=%s", self.config["client.id"])

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("consumer is closed")

    # ---- internals -----------------------------------------------------------------------

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        items = [(tp, s) for tp, s in self._states.items() if s.buffered]
        if not items:
            return out
        self._rotation = (self._rotation + 1) % len(items)
        items = items[self._rotation :] + items[: self._rotation]
        append = out.append
        for tp, state in items:
            topic, partition = tp.topic, tp.partition
            while state.buffered and len(out) < limit:
                completed = state.buffered[0]
                exhausted = True
                try:
                    for record in completed.records:
                        append(
                            ConsumerRecord(
                                topic,
                                partition,
                                record.offset,
                                record.timestamp,
                                record.key,
                                record.value,
                                record.headers,
                            )
                        )
                        state.position = record.offset + 1
                        if len(out) >= limit:
                            exhausted = False
                            break
                except CorruptMessageError:
                    # Stay at the bad batch: drop what was fetched past it and fetch again
                    # from the position, so every poll raises here until the user seeks,
                    # and nothing after it is skipped silently. Records already collected
                    # are returned first.
                    state.epoch += 1  # drop any fetch already in flight past the batch
                    state.buffered.clear()
                    state.fetch_offset = state.position
                    if out:
                        return out
                    raise
                if exhausted:
                    state.buffered.popleft()
                    if state.position is None or state.position < completed.next_offset:
                        state.position = completed.next_offset
            if len(out) >= limit:
                break
        return out

    def _send_fetches(self) -> None:
        now = time.monotonic()
        metadata = self._conn.metadata
        by_node: dict[int, list[tuple[TopicPartition, _PartitionState]]] = {}
        for tp, state in self._states.items():
            if (
                state.in_flight
                or state.fetch_offset is None
                or len(state.buffered) > _FETCH_AHEAD
                or state.retry_at > now
            ):
                continue
            try:
                node = metadata.leader_for(tp)
            except LograftError as exc:
                if not exc.retriable:
                    raise
                self._metadata_wanted = True
                continue
            if node in self._nodes_in_flight:
                continue
            by_node.setdefault(node, []).append((tp, state))
        for node, entries in by_node.items():
            topics: dict[str, list[Any]] = {}
            call = _FetchCall(node, {})
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
            )
            try:
                stub = self._conn.stub_for_node(node)
                future = stub.Fetch.future(
                    request,
                    timeout=(self._request_timeout_ms + self._fetch_max_wait_ms) / 1000.0,
                )
            except LograftError as exc:
                self._responses.put((call, exc))
            else:
                future.add_done_callback(lambda done, c=call: self._responses.put((c, done)))
            self._nodes_in_flight.add(node)
            for _, state in entries:
                state.in_flight = True

    def _handle_responses(self, block_s: float) -> None:
        first = True
        while True:
            try:
                if first and block_s > 0:
                    call, outcome = self._responses.get(timeout=block_s)
                else:
                    call, outcome = self._responses.get_nowait()
            except queue.Empty:
                return
            first = False
            self._handle_response(call, outcome)

    def _handle_response(self, call: _FetchCall, outcome: Any) -> None:
        self._nodes_in_flight.discard(call.node)
        for tp in call.offsets:
            state = self._states.get(tp)
            if state is not None:
                state.in_flight = False
        if isinstance(outcome, LograftError):
            error: LograftError | None = outcome
            response = None
        else:
            try:
                response = outcome.result()
                error = None
            except Exception as exc:
                error = map_rpc_error(exc) if hasattr(exc, "code") else NetworkError(str(exc))
                response = None
        now = time.monotonic()
        if error is not None:
            if not error.retriable:
                raise error
            logger.info("fetch failed node=%d error=%s", call.node, error.error_name)
            self._metadata_wanted = True
            for tp in call.offsets:
                state = self._states.get(tp)
                if state is not None:
                    state.retry_at = now + self._backoff_s
            return
        assert response is not None
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                sent = call.offsets.get(tp)
                state = self._states.get(tp)
                if sent is None or state is None or state.epoch != sent[1]:
                    continue  # unassigned or moved since the request
                fetch_offset = sent[0]
                if p.high_watermark >= 0:
                    state.high_watermark = p.high_watermark
                if p.error_code:
                    self._partition_error(tp, state, p.error_code, p.error_message, fetch_offset)
                    continue
                data = p.records
                if not data:
                    continue
                next_offset = fetch_offset
                for header in iter_headers(data):
                    next_offset = max(next_offset, header.next_offset)
                if next_offset == fetch_offset:
                    continue  # only a partial batch: the server sends whole ones; retry
                state.buffered.append(_Completed(iter_records(data, fetch_offset), next_offset))
                state.fetch_offset = next_offset

    def _partition_error(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        code: int,
        message: str,
        fetch_offset: int,
    ) -> None:
        error = error_for_code(code, message or f"{tp.topic}-{tp.partition}")
        if isinstance(error, OffsetOutOfRangeError):
            if self._reset_policy == "none":
                raise OffsetOutOfRangeError(
                    f"offset {fetch_offset} of {tp.topic}-{tp.partition} is out of range "
                    "and auto.offset.reset=none"
                )
            logger.info(
                "offset out of range topic=%s partition=%d offset=%d reset=%s",
                tp.topic,
                tp.partition,
                fetch_offset,
                self._reset_policy,
            )
            self._moved(tp, state)
            state.position = state.fetch_offset = None
            state.reset = _EARLIEST if self._reset_policy == "earliest" else _LATEST
            return
        if not error.retriable:
            raise error
        logger.info(
            "fetch partition error topic=%s partition=%d error=%s",
            tp.topic,
            tp.partition,
            error.error_name,
        )
        state.retry_at = time.monotonic() + self._backoff_s
        self._metadata_wanted = True

    def _refresh_metadata(self) -> None:
        now = time.monotonic()
        if now - self._metadata_at < self._backoff_s:
            return
        self._metadata_at = now
        try:
            self._conn.refresh_metadata({tp.topic for tp in self._states} or None)
            self._metadata_wanted = False
        except LograftError as exc:
            logger.info("metadata refresh failed error=%s", exc.error_name)
