"""``Consumer``: reads partitions it is assigned, or that its consumer group gives it.

* ``assign`` gives the consumer its partitions; ``seek``, ``seek_to_beginning`` and
  ``seek_to_end`` move its position; a partition without a position starts at the group's
  committed offset (with ``group.id``), else where ``auto.offset.reset`` says (``earliest``,
  ``latest``; ``none`` raises ``IllegalStateError`` until ``seek`` is called).
* ``subscribe`` joins the consumer group ``group.id`` (Kafka's KIP-848 protocol): the
  coordinator assigns the partitions of the subscribed topics among the members and moves
  them incrementally (a cooperative rebalance: members keep fetching what they keep). A
  background thread heartbeats; ``poll`` carries out each change in the caller's thread:
  partitions *lost* (the member was fenced: no commit) → ``on_lost`` (``on_revoke`` when
  not given); partitions *revoked* → a synchronous commit of their positions (with
  ``enable.auto.commit``) → ``on_revoke`` → dropped, with every record fetched for them;
  partitions *assigned* → ``on_assign`` → their positions are read from the committed
  offsets (in the background; ``position`` reads one at once). ``poll`` never returns a
  record of a partition after its revocation. Callbacks take ``(consumer, partitions)``;
  a ``ConsumerRebalanceListener`` may be given instead.
  ``subscribe`` and ``assign`` exclude each other; ``unsubscribe`` leaves the group.
* A member that does not ``poll`` within ``max.poll.interval.ms`` leaves the group (its
  partitions go to others); the next ``poll`` drops them as lost and joins again. The
  coordinator removes a member it does not hear from within ``session.timeout.ms`` and
  decides the heartbeat interval.
* ``commit`` commits the positions (the offset of the next record ``poll`` returns) of the
  consumer's partitions, or offsets given, synchronously or asynchronously (a
  ``concurrent.futures.Future``); ``committed`` reads them back. With
  ``enable.auto.commit`` (the default) ``poll`` commits every ``auto.commit.interval.ms``,
  and the consumer commits before a revocation and on ``close``: only offsets of records
  ``poll`` has returned. Commits need ``group.id``; with ``assign`` they are made outside
  of group membership (member epoch -1).
* ``poll`` returns up to ``max.poll.records`` records within about its timeout: committed
  offsets, ``auto.offset.reset`` positions and metadata are looked up on a background
  thread, and a partition has no records until its position is known. Fetches go to each
  partition's leader (one request per broker in flight); while the caller works through
  the records of one fetch, the next is already requested (a single fetch-ahead per
  partition), and records are decoded lazily, only as ``poll`` hands them out. ``pause``
  stops returning and fetching a partition until ``resume``; ``lag`` is the high watermark
  minus the position.
* ``OFFSET_OUT_OF_RANGE`` applies ``auto.offset.reset``; with ``none`` it raises
  ``OffsetOutOfRangeError``. Retriable errors (not the leader, unknown partition, network)
  refresh the metadata and retry after ``retry.backoff.ms``; other errors raise from
  ``poll``, and so does an error that ends the group membership for good.

A ``Consumer`` is not thread-safe (as in Kafka): use it from one thread. Its callbacks run
in that thread, inside ``poll``, ``unsubscribe`` and ``close``.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, overload

from cluster.errors import (
    CorruptMessageError,
    IllegalStateError,
    LograftError,
    NetworkError,
    OffsetOutOfRangeError,
    StaleMemberEpochError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from cluster.wire import broker_pb2 as pb
from replica.batch_header import iter_headers
from replica.records import Record, iter_records
from replica.topic_partition import validate_topic_name

from ._connection import (
    COMMON_CONFIGS,
    ConfigDef,
    Connections,
    TopicPartition,
    boolean,
    int_at_least,
    map_rpc_error,
    one_of,
    resolve_config,
)
from ._group_client import CoordinatorClient, GroupMember
from ._membership import MemberState, Reconciliation

__all__ = [
    "CONSUMER_CONFIGS",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "RebalanceCallback",
]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


def _int32_at_least(low: int) -> Callable[[object], object]:
    """An integer ``>= low`` that fits the int32 fields of the group protocol."""
    parse_low = int_at_least(low)

    def parse(value: object) -> object:
        number = parse_low(value)
        assert isinstance(number, int)
        if number > _INT32_MAX:
            raise ValueError(f"must be at most {_INT32_MAX}")
        return number

    return parse


def _group_id(value: object) -> object:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError("expected a non-empty string, or None for no group")
    return value


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
    ConfigDef(
        "group.id",
        None,
        _group_id,
        "the consumer group: needed by subscribe() and to commit offsets; None: no group",
    ),
    ConfigDef(
        "enable.auto.commit",
        True,
        boolean,
        "with group.id: commit the positions of what poll() returned periodically, "
        "before partitions are revoked and on close()",
    ),
    ConfigDef(
        "auto.commit.interval.ms",
        5000,
        int_at_least(0),
        "how often poll() auto-commits (enable.auto.commit)",
    ),
    ConfigDef(
        "session.timeout.ms",
        45000,
        _int32_at_least(1),
        "sent to the group coordinator: it removes a member it does not hear from this long",
    ),
    ConfigDef(
        "max.poll.interval.ms",
        300000,
        _int32_at_least(1),
        "longest time between poll() calls before the member leaves its group (and rejoins "
        "at the next poll); also how long it may take to release revoked partitions",
    ),
    ConfigDef(
        "group.remote.assignor",
        "range",
        one_of("range", "roundrobin"),
        "how the coordinator spreads partitions among the members: range or roundrobin",
    ),
)
"""Every config ``Consumer`` accepts, with its default."""

_EARLIEST = -2
_LATEST = -1
_FETCH_AHEAD = 1
"""Completed fetches a partition may have buffered while another is requested."""
_CLOSE_TIMEOUT_MS = 30000

RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
"""``callback(consumer, partitions)``: what ``subscribe`` calls on a rebalance."""


class ConsumerRebalanceListener:
    """Rebalance callbacks as methods (kafka-python's and Kafka's listener); override some.

    Each method gets the sorted partitions concerned. ``on_partitions_lost`` calls
    ``on_partitions_revoked`` unless overridden, as in Kafka.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Before these partitions go to another member: commit or flush work for them."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """After these partitions were added; ``seek`` here to start elsewhere."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        """These partitions may already belong to another member: do not commit them."""
        self.on_partitions_revoked(lost)


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
    """Unique per consumer; renewed by every seek, so data fetched before it is dropped."""
    committed_pending: bool = False
    """The group's committed offset is to be read before the position is known."""
    lookup: bool = False
    """A committed-offset or offset lookup for this state (its epoch) is in flight."""
    paused: bool = False
    in_flight: bool = False
    retry_at: float = 0.0
    high_watermark: int = -1
    buffered: deque[_Completed] = field(default_factory=deque)


@dataclass(slots=True)
class _FetchCall:
    node: int
    offsets: dict[TopicPartition, tuple[int, int]]
    """tp → (fetch offset, state epoch) at the time of the request."""


@dataclass(slots=True)
class _Lookup:
    """A lookup run off the polling thread, so that ``poll`` never waits for it."""

    kind: Literal["committed", "offsets", "metadata"]
    epochs: dict[TopicPartition, int]
    """tp → state epoch at the time of the request: a seek since makes the answer stale."""
    future: Future[Any]


_Response = tuple[_FetchCall, Any] | _Lookup | None
"""A fetch outcome, a finished lookup, or ``None``: a wake-up."""


class Consumer:
    """Reads records from assigned or subscribed partitions; see the module docstring.

    ``Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"})``
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
        self._epochs = itertools.count(1)
        self._nodes_in_flight: set[int] = set()
        self._responses: queue.SimpleQueue[_Response] = queue.SimpleQueue()
        self._metadata_wanted = False
        self._metadata_at = 0.0
        self._metadata_refreshing = False
        self._lookups: ThreadPoolExecutor | None = None
        self._iter_buffer: deque[ConsumerRecord] = deque()
        self._rotation = 0
        self._closed = False
        # Groups and commits.
        group_id = self.config["group.id"]
        self._group_id = group_id if isinstance(group_id, str) else None
        self._auto_commit = bool(self.config["enable.auto.commit"]) and self._group_id is not None
        self._auto_commit_interval_s = self._int("auto.commit.interval.ms") / 1000.0
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._coordinator = (
            CoordinatorClient(
                self._conn,
                self._group_id,
                request_timeout_ms=self._request_timeout_ms,
                retry_backoff_ms=self._int("retry.backoff.ms"),
            )
            if self._group_id is not None
            else None
        )
        self._member: GroupMember | None = None
        self._mode: Literal["assign", "subscribe"] | None = None
        self._subscription: tuple[str, ...] = ()
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._committer: ThreadPoolExecutor | None = None

    def _int(self, name: str) -> int:
        value = self.config[name]
        assert isinstance(value, int)
        return value

    def _new_state(self) -> _PartitionState:
        return _PartitionState(
            epoch=next(self._epochs), committed_pending=self._coordinator is not None
        )

    # ---- subscription and assignment -----------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        *,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group ``group.id`` and read the partitions it assigns from ``topics``.

        Replaces an earlier subscription (and its callbacks); an empty list unsubscribes.
        ``on_assign``, ``on_revoke`` and ``on_lost`` are called as
        ``callback(consumer, partitions)`` from ``poll`` (see the module docstring);
        ``listener`` is the alternative with methods, not to be combined with them.
        Raises ``IllegalStateError`` without ``group.id`` or after ``assign``.
        """
        self._check_open()
        if isinstance(topics, str):
            raise TypeError("topics must be a list of topic names, not a str")
        names = list(dict.fromkeys(topics))
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"expected a topic name, got {type(name).__name__}")
            validate_topic_name(name)
        if listener is not None and (on_assign or on_revoke or on_lost):
            raise ValueError("give either listener or on_assign/on_revoke/on_lost, not both")
        if self._coordinator is None:
            raise IllegalStateError("subscribe() needs group.id in the consumer config")
        if self._mode == "assign":
            raise IllegalStateError(
                "subscribe() and assign() exclude each other: call unsubscribe() first"
            )
        if not names:
            self.unsubscribe()
            return
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._listener = listener
        self._subscription = tuple(sorted(names))
        self._mode = "subscribe"
        if self._member is None:
            self._member = GroupMember(
                self._coordinator,
                assignor=str(self.config["group.remote.assignor"]),
                session_timeout_ms=self._int("session.timeout.ms"),
                max_poll_interval_ms=self._int("max.poll.interval.ms"),
                client_id=str(self.config["client.id"]),
                wakeup=self._wakeup,
            )
        self._member.subscribe(self._subscription)
        logger.debug("subscribed group=%s topics=%s", self._group_id, ",".join(names))

    def subscription(self) -> set[str]:
        """The subscribed topics (empty without ``subscribe``)."""
        return set(self._subscription)

    def unsubscribe(self) -> None:
        """Give up every partition: leave the group, or drop the ``assign`` assignment.

        Leaving revokes the partitions first (a last auto-commit, ``on_revoke``).
        """
        self._check_open()
        try:
            if self._mode == "subscribe":
                self._leave_group()
            elif self._mode == "assign":
                self._auto_commit_async([tp for tp in self._states])
        finally:
            self._drop(list(self._states))
            self._mode = None
            self._subscription = ()

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment).

        With ``group.id`` a new partition starts at the group's committed offset; an empty
        list is ``unsubscribe``. Raises ``IllegalStateError`` after ``subscribe``.
        """
        self._check_open()
        if self._mode == "subscribe":
            raise IllegalStateError(
                "assign() and subscribe() exclude each other: call unsubscribe() first"
            )
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"expected TopicPartition, got {type(tp).__name__}")
        keep = set(wanted)
        dropped = [tp for tp in self._states if tp not in keep]
        self._auto_commit_async(dropped)
        self._drop(dropped)
        self._states = {tp: self._states.get(tp) or self._new_state() for tp in wanted}
        self._mode = "assign" if wanted else None
        topics = {tp.topic for tp in wanted}
        if topics:
            self._conn.refresh_metadata(topics)
        logger.debug("assigned partitions=%s", ",".join(f"{t.topic}-{t.partition}" for t in wanted))

    def assignment(self) -> set[TopicPartition]:
        """The partitions the consumer reads now (assigned, or owned in its group)."""
        return set(self._states)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned")
        return state

    def _moved(self, tp: TopicPartition, state: _PartitionState) -> None:
        state.epoch = next(self._epochs)
        state.buffered.clear()
        state.retry_at = 0.0
        state.committed_pending = False
        state.lookup = False  # the answer of one in flight is for the old epoch
        if self._iter_buffer:
            self._iter_buffer = deque(
                r for r in self._iter_buffer if (r.topic, r.partition) != (tp.topic, tp.partition)
            )

    def _drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop reading ``partitions``: forget their positions and every record fetched."""
        dropped = set()
        for tp in partitions:
            state = self._states.pop(tp, None)
            if state is not None:
                state.buffered.clear()
                dropped.add((tp.topic, tp.partition))
        if dropped and self._iter_buffer:
            self._iter_buffer = deque(
                r for r in self._iter_buffer if (r.topic, r.partition) not in dropped
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
            if state.committed_pending:
                self._load_committed([tp], self._request_timeout_ms)
            self._resolve_positions([tp])
        assert state.position is not None
        return state.position

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of ``tp`` seen in the last fetch, if any."""
        hw = self._state(tp).high_watermark
        return hw if hw >= 0 else None

    def lag(self, tp: TopicPartition) -> int | None:
        """Records of ``tp`` not yet returned: high watermark - position (``None``: unknown).

        Known once a fetch of ``tp`` has answered and its position is set.
        """
        state = self._state(tp)
        if state.high_watermark < 0 or state.position is None:
            return None
        return max(state.high_watermark - state.position, 0)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions and returning their records; they stay assigned."""
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return these paused partitions again."""
        for tp in partitions:
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, state in self._states.items() if state.paused}

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

    def _load_committed(self, partitions: Sequence[TopicPartition], timeout_ms: int) -> None:
        """Start partitions still waiting for it at their committed offset (if any), now."""
        pending = [
            tp
            for tp in partitions
            if (state := self._states.get(tp)) is not None and state.committed_pending
        ]
        if not pending or self._coordinator is None:
            return
        self._apply_committed(self._coordinator.fetch_offsets(pending, timeout_ms))

    def _apply_committed(self, found: Mapping[TopicPartition, int | None]) -> None:
        for tp, offset in found.items():
            state = self._states.get(tp)
            if state is None or not state.committed_pending:
                continue  # dropped or moved meanwhile
            state.committed_pending = False
            if offset is not None and state.position is None:
                state.position = state.fetch_offset = offset
                state.reset = None
                logger.debug(
                    "position from committed offset topic=%s partition=%d offset=%d",
                    tp.topic,
                    tp.partition,
                    offset,
                )

    def _reset_spec(self, tp: TopicPartition, state: _PartitionState) -> int:
        """Where ``tp`` starts without a position: a pending seek, else ``auto.offset.reset``."""
        if state.reset is not None:
            return state.reset
        if self._reset_policy == "none":
            raise IllegalStateError(
                f"no position for {tp.topic}-{tp.partition} and "
                "auto.offset.reset=none: call seek() first"
            )
        return _EARLIEST if self._reset_policy == "earliest" else _LATEST

    def _resolve_positions(self, partitions: Sequence[TopicPartition]) -> None:
        """Look up the reset positions of ``partitions`` now (blocking)."""
        wanted: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._states[tp]
            if state.position is not None or state.committed_pending:
                continue
            wanted[tp] = self._reset_spec(tp, state)
        if not wanted:
            return
        found = self._conn.list_offsets(wanted, self._api_ms())
        self._apply_offsets({tp: offset for tp, (offset, _, _) in found.items()})

    def _apply_offsets(self, found: Mapping[TopicPartition, int]) -> None:
        for tp, offset in found.items():
            resolved = self._states.get(tp)
            if resolved is None or resolved.position is not None or resolved.committed_pending:
                continue
            resolved.position = resolved.fetch_offset = max(offset, 0)
            resolved.reset = None
            logger.debug(
                "position reset topic=%s partition=%d offset=%d", tp.topic, tp.partition, offset
            )

    # ---- commits -------------------------------------------------------------------------

    @overload
    def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]] | None = ...,
        asynchronous: Literal[False] = ...,
    ) -> dict[TopicPartition, int]: ...

    @overload
    def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]] | None = ...,
        *,
        asynchronous: Literal[True],
    ) -> Future[dict[TopicPartition, int]]: ...

    def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]] | None = None,
        asynchronous: bool = False,
    ) -> dict[TopicPartition, int] | Future[dict[TopicPartition, int]]:
        """Commit offsets to the group ``group.id``; returns what was committed.

        ``offsets`` maps each partition to the offset of the next record to read (Kafka's
        convention: the last processed offset + 1), as a dict or ``(tp, offset)`` pairs;
        by default the positions of every partition the consumer reads, i.e. everything
        ``poll`` has returned. Synchronous commits retry retriable failures for
        ``request.timeout.ms`` (a subscribed consumer refused with ``STALE_MEMBER_EPOCH``
        commits again once its heartbeat brings the new epoch) and raise the typed error
        of the call or of the first failed partition (``STALE_MEMBER_EPOCH``,
        ``FENCED_MEMBER_EPOCH``, ``UNKNOWN_MEMBER_ID``, ``UNASSIGNED_PARTITION``, ...).
        With ``assign`` the commit is made outside of membership (member id "", epoch -1),
        which the coordinator accepts for a group without members.
        ``asynchronous=True`` returns a
        ``concurrent.futures.Future`` of the same result at once (``add_done_callback`` for
        a callback); commits are sent in the order they are made.
        """
        self._check_open()
        if self._coordinator is None:
            raise IllegalStateError("commit() needs group.id in the consumer config")
        if offsets is None:
            chosen = self._positions(self._states)
        else:
            pairs = offsets.items() if isinstance(offsets, Mapping) else offsets
            chosen = {}
            for tp, offset in pairs:
                if not isinstance(tp, TopicPartition):
                    raise TypeError(f"expected TopicPartition, got {type(tp).__name__}")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise ValueError(f"offset of {tp} must be an int >= 0, got {offset!r}")
                chosen[tp] = offset
        future = self._commit_async(chosen)
        if asynchronous:
            return future
        return future.result()

    def committed(
        self, partitions: Sequence[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition; ``None`` where none is.

        Retries retriable failures for ``timeout_ms`` (default ``request.timeout.ms``).
        """
        self._check_open()
        if self._coordinator is None:
            raise IllegalStateError("committed() needs group.id in the consumer config")
        return self._coordinator.fetch_offsets(partitions, timeout_ms)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions of ``partitions``: offsets of what ``poll`` returned, + 1."""
        found: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._states.get(tp)
            if state is not None and state.position is not None:
                found[tp] = state.position
        return found

    def _commit_async(
        self, offsets: dict[TopicPartition, int]
    ) -> Future[dict[TopicPartition, int]]:
        """Queue an ``OffsetCommit``; one at a time, in order, on the committer thread."""
        coordinator = self._coordinator
        assert coordinator is not None
        if not offsets:
            done: Future[dict[TopicPartition, int]] = Future()
            done.set_result({})
            return done
        member = self._member if self._mode == "subscribe" else None
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lograft-commit")

        timeout_s = self._request_timeout_ms / 1000.0

        def send() -> dict[TopicPartition, int]:
            deadline = time.monotonic() + timeout_s
            while True:
                # The member's epoch as of sending: a rebalance may have bumped it meanwhile.
                member_id, member_epoch = member.member() if member is not None else ("", -1)
                try:
                    coordinator.commit_offsets(offsets, member_id, member_epoch)
                    return offsets
                except LograftError as exc:
                    # STALE_MEMBER_EPOCH: the coordinator bumped the epoch and the heartbeat
                    # answer that says so is on its way; commit again with the new one.
                    if (
                        member is None
                        or exc.code != StaleMemberEpochError.code
                        or not member.wait_for_new_epoch(
                            member_id, member_epoch, deadline - time.monotonic()
                        )
                    ):
                        raise

        return self._committer.submit(send)

    def _auto_commit_async(self, partitions: Iterable[TopicPartition]) -> None:
        if not self._auto_commit:
            return
        offsets = self._positions(partitions)
        if offsets:
            self._commit_async(offsets).add_done_callback(_log_auto_commit)

    def _auto_commit_sync(
        self, partitions: Iterable[TopicPartition], timeout_s: float | None = None
    ) -> None:
        """Commit the positions of ``partitions`` now; a failure is logged, not raised."""
        if not self._auto_commit:
            return
        offsets = self._positions(partitions)
        if not offsets:
            return
        try:
            self._commit_async(offsets).result(None if timeout_s is None else max(timeout_s, 0))
        except (LograftError, TimeoutError) as exc:
            logger.warning(
                "auto-commit failed group=%s partitions=%d error=%s",
                self._group_id,
                len(offsets),
                exc,
            )

    def _maybe_auto_commit(self) -> None:
        if not self._auto_commit or self._mode is None:
            return
        now = time.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._auto_commit_interval_s
        self._auto_commit_async(self._states)

    # ---- rebalances ----------------------------------------------------------------------

    def _wakeup(self) -> None:
        """From the heartbeat thread: a rebalance step is waiting (wakes a blocked poll)."""
        self._responses.put(None)

    def _check_poll_timer(self) -> None:
        """Restart the poll timer; after it expired, drop the partitions and join again."""
        member = self._member
        if member is None or self._mode != "subscribe":
            return
        if member.note_poll():
            # The member left for missing max.poll.interval.ms: its partitions are gone.
            lost = sorted(self._states)
            try:
                if lost:
                    self._lose(lost)
            finally:
                member.subscribe(self._subscription)

    def _run_steps(self) -> None:
        """Carry out queued rebalance steps; raise the error that ended the membership."""
        member = self._member
        if member is None or self._mode != "subscribe":
            return
        while (step := member.take_step()) is not None:
            try:
                self._apply(step)
            finally:
                member.done(step)
        error = member.fatal_error
        if error is not None:
            raise error

    def _apply(self, step: Reconciliation) -> None:
        lost = sorted(step.lost & self._states.keys())
        if lost:
            self._lose(lost)
        revoke = sorted(step.revoke & self._states.keys())
        if revoke:
            self._revoke(revoke)
        assign = sorted(step.assign - self._states.keys())
        if not assign:
            return
        for tp in assign:
            self._states[tp] = self._new_state()
        if any(self._conn.metadata.partition(tp.topic, tp.partition) is None for tp in assign):
            self._metadata_wanted = True
        # Their committed offsets are read in the background (poll); ``position`` in
        # ``on_assign`` reads them at once.
        logger.info(
            "partitions assigned group=%s partitions=%s",
            self._group_id,
            ",".join(str(tp) for tp in assign),
        )
        self._callback("assign", assign)

    def _revoke(self, partitions: list[TopicPartition], deadline: float | None = None) -> None:
        """Commit (auto-commit, until ``deadline`` if given), tell the application, drop them."""
        logger.info(
            "partitions revoked group=%s partitions=%s",
            self._group_id,
            ",".join(str(tp) for tp in partitions),
        )
        try:
            self._auto_commit_sync(
                partitions, None if deadline is None else deadline - time.monotonic()
            )
            self._callback("revoke", partitions)
        finally:
            self._drop(partitions)

    def _lose(self, partitions: list[TopicPartition]) -> None:
        """Tell the application (no commit: others may own them already), then drop them."""
        logger.warning(
            "partitions lost group=%s partitions=%s",
            self._group_id,
            ",".join(str(tp) for tp in partitions),
        )
        try:
            self._callback("lost", partitions)
        finally:
            self._drop(partitions)

    def _callback(self, kind: str, partitions: list[TopicPartition]) -> None:
        if kind == "lost" and self._on_lost is None and self._on_revoke is not None:
            kind = "revoke"  # Kafka's default: lost partitions are revoked ones
        function = {"assign": self._on_assign, "revoke": self._on_revoke, "lost": self._on_lost}
        chosen = function[kind]
        if chosen is not None:
            chosen(self, list(partitions))
            return
        listener = self._listener
        if listener is None:
            return
        if kind == "assign":
            listener.on_partitions_assigned(list(partitions))
        elif kind == "revoke":
            listener.on_partitions_revoked(list(partitions))
        else:
            lost = getattr(listener, "on_partitions_lost", listener.on_partitions_revoked)
            lost(list(partitions))

    def _leave_group(self, deadline: float | None = None) -> None:
        member = self._member
        assert member is not None
        try:
            owned = sorted(self._states)
            if owned and member.state not in (MemberState.FATAL, MemberState.UNSUBSCRIBED):
                self._revoke(owned, deadline)
        finally:
            member.leave()

    # ---- polling -------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting at most ``timeout_ms`` for some.

        Returns an empty list when none arrived in time. Carries out pending rebalances
        (calling the ``subscribe`` callbacks) and auto-commits. Committed offsets and
        ``auto.offset.reset`` positions of new partitions are looked up, and metadata
        refreshed, in the background: a partition whose position is not known yet simply
        has no records, so ``poll(0)`` returns at once. (A rebalance that revokes
        partitions waits for their auto-commit, at most ``request.timeout.ms``, as in
        Kafka.) Raises typed errors for fetch and lookup failures that are not retriable,
        ``OffsetOutOfRangeError`` when a position is out of range under
        ``auto.offset.reset=none`` (``IllegalStateError`` when there is none to start
        from), and the error that ended the group membership for good (the coordinator
        refused it).
        """
        return self._poll(timeout_ms, None)

    def _poll(self, timeout_ms: int, interrupt: threading.Event | None) -> list[ConsumerRecord]:
        """``poll``; returns early with nothing once ``interrupt`` is set.

        Whoever sets ``interrupt`` from another thread calls ``_wakeup`` after it, so a
        blocked wait ends at once (``AsyncConsumer`` does, to run its other calls).
        """
        self._check_open()
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
        self._check_poll_timer()
        self._run_steps()
        self._maybe_auto_commit()
        while True:
            self._handle_responses(block_s=0.0)
            self._run_steps()  # a rebalance that arrived meanwhile goes first
            if interrupt is not None and interrupt.is_set():
                return []
            if self._metadata_wanted:
                self._refresh_metadata()
            self._start_lookups()
            records = self._drain(self._max_poll_records)
            self._send_fetches()
            if records:
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if not self._nodes_in_flight:
                # Nothing could be fetched (no leader, backing off, positions being looked
                # up, no partitions yet): wait a little, bounded; a rebalance step or a
                # finished lookup wakes this wait.
                self._handle_responses(block_s=min(remaining, self._backoff_s))
                continue
            self._handle_responses(block_s=remaining)

    def _start_lookups(self) -> None:
        """Look up the committed offsets, then the reset positions, of unpositioned partitions.

        In the background (``_lookup``): the answers come through ``_responses``.
        """
        now = time.monotonic()
        committed: dict[TopicPartition, int] = {}
        resets: dict[TopicPartition, int] = {}
        epochs: dict[TopicPartition, int] = {}
        for tp, state in self._states.items():
            if state.position is not None or state.lookup or state.retry_at > now:
                continue
            if state.committed_pending:
                committed[tp] = state.epoch
            else:
                resets[tp] = self._reset_spec(tp, state)
                epochs[tp] = state.epoch
        coordinator = self._coordinator
        if committed and coordinator is not None:
            wanted = list(committed)
            timeout_ms = self._request_timeout_ms
            self._lookup(
                "committed", committed, lambda: coordinator.fetch_offsets(wanted, timeout_ms)
            )
        if resets:
            conn, timeout_ms = self._conn, self._api_ms()
            self._lookup("offsets", epochs, lambda: conn.list_offsets(resets, timeout_ms))

    def _lookup(
        self,
        kind: Literal["committed", "offsets", "metadata"],
        epochs: dict[TopicPartition, int],
        work: Callable[[], Any],
    ) -> None:
        if self._lookups is None:
            # One thread per kind of lookup is enough: each kind has few in flight.
            self._lookups = ThreadPoolExecutor(
                max_workers=3, thread_name_prefix="lograft-consumer-lookup"
            )
        for tp in epochs:
            self._states[tp].lookup = True
        lookup = _Lookup(kind, epochs, self._lookups.submit(work))
        lookup.future.add_done_callback(lambda _done: self._responses.put(lookup))

    def _handle_lookup(self, lookup: _Lookup) -> None:
        live: dict[TopicPartition, _PartitionState] = {}
        for tp, epoch in lookup.epochs.items():
            state = self._states.get(tp)
            if state is not None and state.epoch == epoch:
                state.lookup = False
                live[tp] = state
        if lookup.kind == "metadata":
            self._metadata_refreshing = False
        if lookup.future.cancelled():
            return
        try:
            found = lookup.future.result()
        except LograftError as exc:
            if lookup.kind == "metadata":
                self._metadata_wanted = True
                logger.info("metadata refresh failed error=%s", exc.error_name)
                return
            if not exc.retriable:
                raise
            logger.info(
                "position lookup failed, retrying kind=%s group=%s partitions=%d error=%s",
                lookup.kind,
                self._group_id,
                len(live),
                exc,
            )
            retry_at = time.monotonic() + self._backoff_s
            for state in live.values():
                state.retry_at = retry_at
            if lookup.kind == "offsets":
                self._metadata_wanted = True
            return
        if lookup.kind == "committed":
            self._apply_committed({tp: found[tp] for tp in live if tp in found})
        elif lookup.kind == "offsets":
            self._apply_offsets({tp: found[tp][0] for tp in live if tp in found})

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record, polling as long as needed; stops when the consumer is closed."""
        while not self._iter_buffer:
            if self._closed:
                raise StopIteration
            self._iter_buffer.extend(self.poll(1000))
        return self._iter_buffer.popleft()

    def close(self, timeout_ms: int | None = None) -> None:
        """Leave the group, stop the threads and close the connections; idempotent.

        A subscribed consumer revokes its partitions (a last auto-commit, ``on_revoke``)
        and sends the leave heartbeat (epoch -1), waiting for its answer; with ``assign``
        the positions are auto-committed. All of it shares one deadline, ``timeout_ms``
        (default 30 s), so ``close`` returns within about that time even when the
        coordinator does not answer (only the callbacks' own time comes on top): what is
        not done by then is abandoned and logged.
        """
        if self._closed:
            return
        budget_s = (_CLOSE_TIMEOUT_MS if timeout_ms is None else max(timeout_ms, 0)) / 1000.0
        deadline = time.monotonic() + budget_s

        def remaining() -> float:
            return max(deadline - time.monotonic(), 0.0)

        try:
            if self._mode == "subscribe" and self._member is not None:
                try:
                    self._leave_group(deadline)
                finally:
                    self._member.wait_unsubscribed(remaining())
            elif self._mode == "assign":
                self._auto_commit_sync(list(self._states), remaining())
        finally:
            self._closed = True
            self._states.clear()
            self._iter_buffer.clear()
            if self._member is not None:
                self._member.close(remaining())
            if self._committer is not None:
                # Commits already made go out first, within the budget.
                try:
                    self._committer.submit(lambda: None).result(remaining())
                except TimeoutError:
                    logger.warning("commits still pending at close group=%s", self._group_id)
                self._committer.shutdown(wait=False, cancel_futures=True)
            if self._lookups is not None:
                self._lookups.shutdown(wait=False, cancel_futures=True)
            # Closing the channels ends the calls still in flight (heartbeat, commit,
            # lookups): the threads waiting on them finish soon after.
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
        items = [(tp, s) for tp, s in self._states.items() if s.buffered and not s.paused]
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
                    state.epoch = next(self._epochs)  # drop any fetch in flight past it
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
                or state.paused
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
                    item = self._responses.get(timeout=block_s)
                else:
                    item = self._responses.get_nowait()
            except queue.Empty:
                return
            first = False
            if isinstance(item, _Lookup):
                self._handle_lookup(item)
            elif item is not None:  # None: a wake-up
                self._handle_response(*item)

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
        """Refresh the metadata in the background (one refresh at a time)."""
        now = time.monotonic()
        if self._metadata_refreshing or now - self._metadata_at < self._backoff_s:
            return
        self._metadata_at = now
        self._metadata_refreshing = True
        self._metadata_wanted = False  # set again if the refresh fails
        conn = self._conn
        topics = {tp.topic for tp in self._states} or None
        self._lookup("metadata", {}, lambda: conn.refresh_metadata(topics))


def _log_auto_commit(future: Future[dict[TopicPartition, int]]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        logger.warning("auto-commit failed error=%s", error)
