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
  partition's leader (one request per broker in flight), and so do offset lookups (one per
  leader): a partition without a leader, or whose leader does not answer, holds up no
  other (it is retried after ``retry.backoff.ms`` with fresh metadata). While the caller
  works through the records of one fetch, the next is already requested (a single
  fetch-ahead per partition), and records are decoded lazily, a batch at a time, only as
  ``poll`` hands them out. ``pause`` stops returning and fetching a partition until
  ``resume``; ``lag`` is the high watermark minus the position.
* ``poll_batches`` returns whole record batches as bytes instead of records
  (``ConsumerBatch``: topic, partition, offsets, the batch as stored), for callers that
  decode, store or forward the bytes themselves.
* ``OFFSET_OUT_OF_RANGE`` applies ``auto.offset.reset``; with ``none`` it raises
  ``OffsetOutOfRangeError``. Retriable errors (not the leader, unknown partition, network)
  refresh the metadata and retry after ``retry.backoff.ms``; other errors raise from
  ``poll``, and so does an error that ends the group membership for good.

A ``Consumer`` is not thread-safe (as in Kafka): use it from one thread. Its callbacks run
in that thread, inside ``poll``, ``unsubscribe`` and ``close``.
"""

# Over 600 lines: the public Consumer's API; fetching, commits and rebalances are in _ modules.
from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

from lograft.protocol.errors import IllegalStateError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import validate_topic_name

from ._clock import SYSTEM_CLOCK, Clock, ClockQueue
from ._commits import Committer
from ._connection import Connections, TopicPartition
from ._consumer_config import CONSUMER_CONFIGS, ConsumerConfig
from ._consumer_values import (
    ConsumerBatch,
    ConsumerGroupMetadata,
    ConsumerRebalanceListener,
    ConsumerRecord,
)
from ._fetch import FetchCall, Fetcher
from ._group_client import CoordinatorClient, GroupMember
from ._list_offsets import list_offsets
from ._lookups import Lookup, Lookups
from ._rebalance import Rebalancer
from ._subscription import EARLIEST, LATEST, SubscriptionState

__all__ = [
    "CONSUMER_CONFIGS",
    "Consumer",
    "ConsumerBatch",
    "ConsumerConfig",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "RebalanceCallback",
]

logger = logging.getLogger(__name__)

# Time: the consumer and its helpers read time and wait only through a ``Clock`` (``_clock``):
# poll's timeout, auto.commit.interval.ms, retry.backoff.ms, max.poll.interval.ms, commit and
# close timeouts. ``Consumer._with_clock`` gives it a ``ManualClock`` in tests. The deadlines
# of gRPC calls, and the blocking lookups of ``Connections``, stay on real time.

_CLOSE_TIMEOUT_MS = 30000


RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
"""``callback(consumer, partitions)``: what ``subscribe`` calls on a rebalance."""

_Response = tuple[FetchCall, Any] | Lookup | None
"""A fetch outcome, a finished lookup, or ``None``: a wake-up."""

_T = TypeVar("_T")


class Consumer:
    """Reads records from assigned or subscribed partitions; see the module docstring.

    ``Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "billing"})``
    or ``Consumer(bootstrap_servers=..., auto_offset_reset="earliest")``; see
    ``CONSUMER_CONFIGS``. Unknown config names and bad values raise ``InvalidConfigError``.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self._setup(config, overrides, SYSTEM_CLOCK)

    @classmethod
    def _with_clock(
        cls, clock: Clock, config: Mapping[str, object] | None = None, **overrides: object
    ) -> Consumer:
        """A consumer that reads time and waits through ``clock`` (a ``ManualClock`` in
        tests); otherwise exactly ``Consumer(config, **overrides)``.

        Private, as Kafka's ``Time`` injection is: the clock is a testing seam, not API.
        """
        consumer = cls.__new__(cls)
        consumer._setup(config, overrides, clock)
        return consumer

    # Over 70 lines: every config read once, as each part it configures is built, in order.
    def _setup(
        self, config: Mapping[str, object] | None, overrides: dict[str, object], clock: Clock
    ) -> None:
        self.config = settings = ConsumerConfig.resolve(config, overrides)
        self._clock = clock
        self._max_poll_records = settings.max_poll_records
        self._backoff_s = settings.retry_backoff_ms / 1000.0
        self._request_timeout_ms = settings.request_timeout_ms
        self._conn = Connections.from_config(settings)
        self._responses: ClockQueue[_Response] = ClockQueue(clock)
        self._iter_buffer: deque[ConsumerRecord] = deque()
        self._closed = False
        # Groups and commits.
        self._group_id = settings.group_id
        read_committed = settings.isolation_level == "read_committed"
        self._isolation_level = 1 if read_committed else 0
        self._coordinator = (
            CoordinatorClient(
                self._conn,
                self._group_id,
                request_timeout_ms=self._request_timeout_ms,
                retry_backoff_ms=settings.retry_backoff_ms,
                clock=clock,
                require_stable=read_committed,
            )
            if self._group_id is not None
            else None
        )
        self._subscriptions = SubscriptionState(
            settings.auto_offset_reset,
            committed_first=self._coordinator is not None,
            discard=self._discard_iterated,
        )
        self._lookups = Lookups(
            self._conn,
            self._subscriptions,
            self._coordinator,
            respond=self._responses.put,
            request_timeout_ms=self._request_timeout_ms,
            backoff_s=self._backoff_s,
            group_id=self._group_id,
            clock=clock,
            isolation_level=self._isolation_level,
        )
        self._fetcher = Fetcher(
            self._conn,
            self._subscriptions,
            respond=self._responses.put,
            want_metadata=self._lookups.want_metadata,
            record_type=ConsumerRecord,
            batch_type=ConsumerBatch,
            fetch_min_bytes=settings.fetch_min_bytes,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            fetch_max_bytes=settings.fetch_max_bytes,
            partition_max_bytes=settings.max_partition_fetch_bytes,
            request_timeout_ms=self._request_timeout_ms,
            backoff_s=self._backoff_s,
            clock=clock,
            read_committed=read_committed,
        )
        self._commits = Committer(
            self._coordinator,
            self._subscriptions,
            auto_commit=settings.enable_auto_commit and self._group_id is not None,
            auto_commit_interval_s=settings.auto_commit_interval_ms / 1000.0,
            request_timeout_ms=self._request_timeout_ms,
            group_id=self._group_id,
            clock=clock,
        )
        self._rebalance = Rebalancer(
            self,
            self._subscriptions,
            self._commits,
            self._conn,
            want_metadata=self._lookups.want_metadata,
            group_id=self._group_id,
            clock=clock,
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
        if self._subscriptions.mode == "assign":
            raise IllegalStateError(
                "subscribe() and assign() exclude each other: call unsubscribe() first"
            )
        if not names:
            self.unsubscribe()
            return
        self._rebalance.set_callbacks(on_assign, on_revoke, on_lost, listener)
        self._subscriptions.topics = tuple(sorted(names))
        self._subscriptions.mode = "subscribe"
        member = self._rebalance.member
        if member is None:
            member = self._rebalance.member = self._commits.member = GroupMember(
                self._coordinator,
                assignor=self.config.group_remote_assignor,
                session_timeout_ms=self.config.session_timeout_ms,
                max_poll_interval_ms=self.config.max_poll_interval_ms,
                client_id=self.config.client_id,
                wakeup=self._wakeup,
            )
        member.subscribe(self._subscriptions.topics)
        logger.debug("subscribed group=%s topics=%s", self._group_id, ",".join(names))

    def subscription(self) -> set[str]:
        """The subscribed topics (empty without ``subscribe``)."""
        return set(self._subscriptions.topics)

    def unsubscribe(self) -> None:
        """Give up every partition: leave the group, or drop the ``assign`` assignment.

        Leaving revokes the partitions first (a last auto-commit, ``on_revoke``).
        """
        self._check_open()
        subscriptions = self._subscriptions
        try:
            if subscriptions.mode == "subscribe":
                self._rebalance.leave_group()
            elif subscriptions.mode == "assign":
                self._commits.auto_commit_async([tp for tp in subscriptions.states])
        finally:
            subscriptions.drop(list(subscriptions.states))
            subscriptions.mode = None
            subscriptions.topics = ()

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Read exactly these partitions (replacing any earlier assignment).

        With ``group.id`` a new partition starts at the group's committed offset; an empty
        list is ``unsubscribe``. Raises ``IllegalStateError`` after ``subscribe``.
        """
        self._check_open()
        subscriptions = self._subscriptions
        if subscriptions.mode == "subscribe":
            raise IllegalStateError(
                "assign() and subscribe() exclude each other: call unsubscribe() first"
            )
        wanted = list(dict.fromkeys(partitions))
        for tp in wanted:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"expected TopicPartition, got {type(tp).__name__}")
        keep = set(wanted)
        dropped = [tp for tp in subscriptions.states if tp not in keep]
        self._commits.auto_commit_async(dropped)
        subscriptions.drop(dropped)
        subscriptions.assign(wanted)
        subscriptions.mode = "assign" if wanted else None
        topics = {tp.topic for tp in wanted}
        if topics:
            self._conn.refresh_metadata(topics)
        logger.debug("assigned partitions=%s", ",".join(f"{t.topic}-{t.partition}" for t in wanted))

    def assignment(self) -> set[TopicPartition]:
        """The partitions the consumer reads now (assigned, or owned in its group)."""
        return set(self._subscriptions.states)

    def _discard_iterated(self, partitions: set[tuple[str, int]]) -> None:
        """Forget records of ``partitions`` that ``poll`` returned but ``__next__`` did not."""
        if self._iter_buffer:
            self._iter_buffer = deque(
                r for r in self._iter_buffer if (r.topic, r.partition) not in partitions
            )

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset ``poll`` returns for ``tp``."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._subscriptions.seek(tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Start from the first offset of these partitions (all assigned ones if none given)."""
        subscriptions = self._subscriptions
        for tp in partitions or tuple(subscriptions.states):
            subscriptions.request_reset(tp, subscriptions.state(tp), EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Start after the last offset of these partitions (all assigned ones if none given)."""
        subscriptions = self._subscriptions
        for tp in partitions or tuple(subscriptions.states):
            subscriptions.request_reset(tp, subscriptions.state(tp), LATEST)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``tp`` (resolving it if needed)."""
        state = self._subscriptions.state(tp)
        if state.position is None:
            if state.committed_pending:
                self._lookups.load_committed([tp], self._request_timeout_ms)
            self._lookups.resolve_positions([tp])
        assert state.position is not None
        return state.position

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark of ``tp`` seen in the last fetch, if any."""
        hw = self._subscriptions.state(tp).high_watermark
        return hw if hw >= 0 else None

    def lag(self, tp: TopicPartition) -> int | None:
        """Records of ``tp`` not yet returned: high watermark - position (``None``: unknown).

        Known once a fetch of ``tp`` has answered and its position is set.
        """
        state = self._subscriptions.state(tp)
        if state.high_watermark < 0 or state.position is None:
            return None
        return max(state.high_watermark - state.position, 0)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions and returning their records; they stay assigned."""
        for tp in partitions:
            self._subscriptions.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return these paused partitions again."""
        for tp in partitions:
            self._subscriptions.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return self._subscriptions.paused()

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
        found = list_offsets(self._conn, {tp: EARLIEST for tp in partitions}, self._api_ms())
        return {tp: found[tp][0] for tp in partitions}

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset of each partition: the high watermark, or with
        ``isolation.level=read_committed`` the last stable offset."""
        found = list_offsets(
            self._conn, {tp: LATEST for tp in partitions}, self._api_ms(), self._isolation_level
        )
        return {tp: found[tp][0] for tp in partitions}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to pass to ``Producer.send_offsets_to_transaction``."""
        self._check_open()
        if self._group_id is None:
            raise IllegalStateError("group_metadata needs group.id")
        member = self._rebalance.member
        if member is None:
            return ConsumerGroupMetadata(self._group_id)
        member_id, member_epoch = member.member()
        return ConsumerGroupMetadata(self._group_id, member_id, member_epoch)

    def _api_ms(self) -> int:
        return self._request_timeout_ms

    def _stalled_partitions(self, min_ms: int) -> dict[TopicPartition, str]:
        """Partitions read whose leader has not answered for ``min_ms`` or more, and why
        (``LEADER_NOT_AVAILABLE: T-1``, ``NETWORK_EXCEPTION: broker 3 at ...``).

        Their fetches and offset lookups are retried in ``poll``; the others are read
        meanwhile. Private: ``lograft consume`` uses it to tell the user what it waits for.
        """
        return self._subscriptions.stalled(self._clock.monotonic(), min_ms / 1000.0)

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
        return self._commits.commit(offsets, asynchronous)

    def committed(
        self, partitions: Sequence[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition; ``None`` where none is.

        Retries retriable failures for ``timeout_ms`` (default ``request.timeout.ms``).
        """
        self._check_open()
        return self._commits.committed(partitions, timeout_ms)

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions of ``partitions``: offsets of what ``poll`` returned, + 1."""
        return self._subscriptions.positions(partitions)

    # ---- polling -------------------------------------------------------------------------

    def _wakeup(self) -> None:
        """From the heartbeat thread: a rebalance step is waiting (wakes a blocked poll)."""
        self._responses.put(None)

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

    def poll_batches(self, timeout_ms: int = 1000) -> list[ConsumerBatch]:
        """Whole record batches, as bytes, instead of records: for callers that decode
        (or only store or forward) the bytes themselves.

        Like ``poll`` in everything else (rebalances, auto-commits, errors, positions,
        ``read_committed``: aborted transactions' batches and control batches are left
        out), returning whole batches until they hold ``max.poll.records`` records or more.
        Each batch moves its partition's position to its ``next_offset``. See
        ``ConsumerBatch`` for the bytes and ``start_offset``.
        """
        return self._poll_batches(timeout_ms, None)

    def _poll_batches(
        self, timeout_ms: int, interrupt: threading.Event | None
    ) -> list[ConsumerBatch]:
        """``poll_batches``; returns early with nothing once ``interrupt`` is set (as
        ``_poll``)."""
        return self._poll_with(timeout_ms, interrupt, self._fetcher.drain_batches)

    def _poll(self, timeout_ms: int, interrupt: threading.Event | None) -> list[ConsumerRecord]:
        """``poll``; returns early with nothing once ``interrupt`` is set.

        Whoever sets ``interrupt`` from another thread calls ``_wakeup`` after it, so a
        blocked wait ends at once (``AsyncConsumer`` does, to run its other calls).
        """
        return self._poll_with(timeout_ms, interrupt, self._fetcher.drain)

    def _poll_with(
        self,
        timeout_ms: int,
        interrupt: threading.Event | None,
        drain: Callable[[int], list[_T]],
    ) -> list[_T]:
        """``_poll``, handing out what ``drain(max.poll.records)`` takes from the fetches."""
        self._check_open()
        clock = self._clock
        deadline = clock.monotonic() + max(timeout_ms, 0) / 1000.0
        self._rebalance.check_poll_timer()
        self._rebalance.run_steps()
        self._commits.maybe_auto_commit()
        lookups, fetcher = self._lookups, self._fetcher
        while True:
            self._handle_responses(block_s=0.0)
            self._rebalance.run_steps()  # a rebalance that arrived meanwhile goes first
            if interrupt is not None and interrupt.is_set():
                return []
            if lookups.metadata_wanted:
                lookups.refresh_metadata()
            lookups.start()
            # The next fetch goes out before this one is decoded (a megabyte of records
            # takes a few milliseconds), and again after the drain, which may have used up
            # a fetch: one is always on its way while the caller works through these (one
            # fetch ahead per partition, FETCH_AHEAD).
            fetcher.send()
            records = drain(self._max_poll_records)
            fetcher.send()
            if records:
                return records
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return []
            if not fetcher.in_flight:
                # Nothing could be fetched (no leader, backing off, positions being looked
                # up, no partitions yet): wait a little, bounded; a rebalance step or a
                # finished lookup wakes this wait.
                self._handle_responses(block_s=min(remaining, self._backoff_s))
                continue
            self._handle_responses(block_s=remaining)

    def _handle_responses(self, block_s: float) -> None:
        """Take in what the background threads sent: fetch outcomes, lookups, wake-ups."""
        first = True
        while True:
            try:
                if first and block_s > 0:
                    item = self._responses.get(block_s)
                else:
                    item = self._responses.get_nowait()
            except queue.Empty:
                return
            first = False
            if isinstance(item, Lookup):
                self._lookups.handle(item)
            elif item is not None:  # None: a wake-up
                self._fetcher.handle_response(*item)

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
        clock = self._clock
        deadline = clock.monotonic() + budget_s

        def remaining() -> float:
            return max(deadline - clock.monotonic(), 0.0)

        try:
            member = self._rebalance.member
            if self._subscriptions.mode == "subscribe" and member is not None:
                try:
                    self._rebalance.leave_group(deadline)
                finally:
                    member.wait_unsubscribed(remaining())
            elif self._subscriptions.mode == "assign":
                self._commits.auto_commit_sync(list(self._subscriptions.states), remaining())
        finally:
            self._closed = True
            self._subscriptions.states.clear()
            self._iter_buffer.clear()
            if self._rebalance.member is not None:
                self._rebalance.member.close(remaining())
            # Commits already made go out first, within the budget.
            self._commits.close(remaining())
            self._lookups.close()
            # Closing the channels ends the calls still in flight (heartbeat, commit,
            # lookups): the threads waiting on them finish soon after.
            self._conn.close()
            logger.debug("consumer closed client_id=%s", self.config.client_id)

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
