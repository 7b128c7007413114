"""Consumer groups over gRPC: the coordinator's RPCs and the heartbeat thread.

* :class:`CoordinatorClient` finds the group's coordinator (``FindCoordinator`` to any
  broker) and calls it: ``OffsetCommit``, ``OffsetFetch``, ``ConsumerGroupHeartbeat``.
  ``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE`` and network failures forget the
  coordinator, so the next call looks it up again. Commits and offset fetches retry
  retriable failures after ``retry.backoff.ms`` until their deadline. Thread-safe.
* :class:`GroupMember` runs the heartbeat thread around the pure
  :class:`~cluster.client._membership.GroupMembership`: it sends ``ConsumerGroupHeartbeat``
  whenever the membership says one is due (at the interval the coordinator gives, at once
  after a change), feeds the answers back and queues the resulting reconciliation steps for
  the consumer, whose ``poll`` carries them out in the application's thread. It also leaves
  the group when ``poll`` is not called within ``max.poll.interval.ms``. The membership is
  only touched under the member's lock; RPCs are sent without holding it.

Group error codes become the typed errors of :mod:`lograft.protocol.errors`.

Time is read, and every wait (retry backoff, the heartbeat timer, the poll timer, waits for
an epoch or the leave) is made, through the consumer's :class:`~cluster.client._clock.Clock`;
the deadlines of the gRPC calls themselves stay on real time.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc

from lograft.protocol.errors import (
    CoordinatorNotAvailableError,
    LograftError,
    NetworkError,
    NotCoordinatorError,
    UnknownServerError,
    error_for_code,
)
from lograft.protocol.wire import broker_pb2 as pb

from ._clock import Clock
from ._connection import Connections, TopicPartition, map_rpc_error
from ._membership import GroupMembership, HeartbeatFields, MemberState, Reconciliation
from ._rpc_errors import retried_in_background

__all__ = ["CoordinatorClient", "GroupMember"]

logger = logging.getLogger(__name__)


_FORGET_COORDINATOR = frozenset({CoordinatorNotAvailableError.code, NotCoordinatorError.code})


def _rpc_error(exc: Exception) -> LograftError:
    if isinstance(exc, LograftError):
        return exc
    if isinstance(exc, grpc.RpcError):
        return map_rpc_error(exc)
    return NetworkError(str(exc))


def _partitions_pb(partitions: Iterable[TopicPartition]) -> list[Any]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]


def _partitions_from_pb(topics: Iterable[Any]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.topic, p) for t in topics for p in t.partitions)


# ---- the coordinator's RPCs -----------------------------------------------------------------


class CoordinatorClient:
    """Calls to one group's coordinator over ``conn``; see the module docstring. Thread-safe."""

    def __init__(
        self,
        conn: Connections,
        group_id: str,
        *,
        request_timeout_ms: int,
        retry_backoff_ms: int,
        clock: Clock,
        require_stable: bool = False,
    ) -> None:
        self.conn = conn
        self.group_id = group_id
        self.require_stable = require_stable
        """KIP-447 (read_committed consumers): offsets a transaction in flight may move are
        answered UNSTABLE_OFFSET_COMMIT, and asked again."""
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.clock = clock
        """Where retries back off and deadlines are counted (the member's clock too)."""
        self._lock = threading.Lock()
        self._coordinator: tuple[int, str, int] | None = None
        self.lookups = 0
        """How many FindCoordinator calls were made (for tests and logs)."""

    @property
    def coordinator(self) -> tuple[int, str, int] | None:
        """``(node_id, host, port)`` of the coordinator, if known."""
        return self._coordinator

    def forget_coordinator(self) -> None:
        """Look the coordinator up again before the next call."""
        with self._lock:
            if self._coordinator is not None:
                logger.info(
                    "coordinator forgotten group=%s node=%d", self.group_id, self._coordinator[0]
                )
            self._coordinator = None

    def _coordinator_address(self, timeout_ms: int) -> tuple[int, str, int]:
        with self._lock:
            known = self._coordinator
        if known is None:
            with self._lock:
                self.lookups += 1
            response = self.conn.call(
                "FindCoordinator",
                pb.FindCoordinatorRequest(group_id=self.group_id),
                timeout_ms=timeout_ms,
            )
            if response.error_code:
                raise error_for_code(
                    response.error_code, response.error_message or f"group {self.group_id}"
                )
            known = (response.node_id, response.host, response.port)
            with self._lock:
                self._coordinator = known
            logger.info(
                "coordinator found group=%s node=%d address=%s:%d",
                self.group_id,
                known[0],
                known[1],
                known[2],
            )
        return known

    def call_once(self, method: str, request: Any, timeout_ms: int | None = None) -> Any:
        """One call to the coordinator (looking it up first if needed); no retries.

        Failures raise typed errors; network failures also forget the coordinator.
        ``timeout_ms`` is the gRPC deadline: real time, whatever the clock.
        """
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        try:
            node_id, host, port = self._coordinator_address(timeout)
            return self.conn.call_address(
                host,
                port,
                method,
                request,
                timeout_ms=max(timeout, 1),
                what=f"coordinator {node_id} of group {self.group_id!r}",
            )
        except Exception as exc:
            error = _rpc_error(exc)
            if error.retriable:
                self.forget_coordinator()
            raise error from None

    def _retrying(self, what: str, attempt: Callable[[int], Any], timeout_ms: int | None) -> Any:
        """Run ``attempt(remaining_ms)`` until it returns or fails for good or time is up."""
        budget_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        clock = self.clock
        deadline = clock.monotonic() + budget_ms / 1000.0
        backoff_s = self.retry_backoff_ms / 1000.0
        while True:
            remaining_ms = int((deadline - clock.monotonic()) * 1000)
            try:
                return attempt(max(remaining_ms, 1))
            except LograftError as exc:
                if not exc.retriable:
                    raise
                if exc.code in _FORGET_COORDINATOR:
                    self.forget_coordinator()
                if clock.monotonic() + backoff_s >= deadline:
                    raise
                logger.debug("%s retry group=%s error=%s", what, self.group_id, exc)
                clock.sleep(backoff_s)

    def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, int],
        member_id: str,
        member_epoch: int,
        timeout_ms: int | None = None,
    ) -> None:
        """``OffsetCommit`` of ``offsets`` (the next offset to read of each partition).

        Retriable failures are retried until ``timeout_ms`` (``request.timeout.ms``);
        otherwise raises the typed error of the whole call or of the first failed partition.
        """
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                pb.OffsetCommitPartition(
                    partition=tp.partition, committed_offset=offset, committed_leader_epoch=-1
                )
            )
        request = pb.OffsetCommitRequest(
            group_id=self.group_id,
            member_id=member_id,
            member_epoch=member_epoch,
            topics=[pb.OffsetCommitTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
        )

        def attempt(remaining_ms: int) -> None:
            response = self.call_once("OffsetCommit", request, remaining_ms)
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code:
                        raise error_for_code(
                            p.error_code, p.error_message or f"{topic.name}-{p.partition}"
                        )

        self._retrying("offset commit", attempt, timeout_ms)
        logger.debug(
            "offsets committed group=%s member_epoch=%d partitions=%d",
            self.group_id,
            member_epoch,
            len(offsets),
        )

    def fetch_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """``OffsetFetch``: the committed offset of each partition, ``None`` if none is.

        Retriable failures are retried until ``timeout_ms`` (``request.timeout.ms``).
        """
        wanted = sorted(set(partitions))
        request = pb.OffsetFetchRequest(
            group_id=self.group_id,
            topics=_partitions_pb(wanted),
            require_stable=self.require_stable,
        )

        def attempt(remaining_ms: int) -> dict[TopicPartition, int | None]:
            response = self.call_once("OffsetFetch", request, remaining_ms)
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message)
            found: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    if p.error_code:
                        raise error_for_code(p.error_code, str(tp))
                    if tp in found:
                        found[tp] = p.committed_offset if p.committed_offset >= 0 else None
            return found

        result: dict[TopicPartition, int | None] = self._retrying(
            "offset fetch", attempt, timeout_ms
        )
        return result


# ---- the member and its heartbeat thread ----------------------------------------------------


class GroupMember:
    """A consumer's membership of a group, with the heartbeat thread. Thread-safe.

    The consumer calls :meth:`subscribe`, :meth:`leave`, :meth:`take_step` and
    :meth:`done` from its own thread; the heartbeat thread (started by the first
    ``subscribe``) does the I/O. ``wakeup`` is called, without the lock held, whenever a
    step is queued, so a consumer blocked in ``poll`` can carry it out at once.
    """

    def __init__(
        self,
        coordinator: CoordinatorClient,
        *,
        assignor: str,
        session_timeout_ms: int,
        max_poll_interval_ms: int,
        client_id: str,
        wakeup: Callable[[], None],
    ) -> None:
        self.coordinator = coordinator
        self.group_id = coordinator.group_id
        self.session_timeout_ms = session_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.client_id = client_id
        self._wakeup = wakeup
        self._clock = coordinator.clock
        self._membership = GroupMembership(self.group_id, assignor, max_poll_interval_ms)
        self._cond = threading.Condition()
        self._steps: deque[Reconciliation] = deque()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._finished = False
        """The heartbeat thread has returned (``close`` waits for it through the clock)."""
        self._retry_at_ms = 0
        self._failures = 0
        self._last_poll_ms = self._now_ms()
        self._poll_expired = False
        self._fatal: LograftError | None = None

    # ---- the consumer's side -------------------------------------------------------------

    @property
    def state(self) -> MemberState:
        """Where the member stands."""
        with self._cond:
            return self._membership.state

    @property
    def fatal_error(self) -> LograftError | None:
        """The error that ended the membership for good, if any."""
        with self._cond:
            return self._fatal

    def member(self) -> tuple[str, int]:
        """``(member_id, member_epoch)`` as last given by the coordinator."""
        with self._cond:
            return self._membership.member_id, self._membership.member_epoch

    def subscribe(self, topics: Iterable[str]) -> None:
        """Join (or change the subscription); starts the heartbeat thread the first time."""
        with self._cond:
            if self._fatal is not None:
                raise self._fatal
            self._last_poll_ms = self._now_ms()
            self._membership.subscribe(topics)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"lograft-heartbeat-{self.group_id}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def leave(self) -> None:
        """Leave with the next heartbeat (epoch -1); queued steps are dropped.

        The consumer revokes its partitions itself first (callbacks, a last commit).
        """
        with self._cond:
            self._steps.clear()
            self._membership.leave()
            self._cond.notify_all()

    def take_step(self) -> Reconciliation | None:
        """The next reconciliation step to carry out, if any."""
        with self._cond:
            return self._steps.popleft() if self._steps else None

    def done(self, step: Reconciliation) -> None:
        """``step`` was carried out; a follow-up step, if any, is queued first."""
        with self._cond:
            follow = self._membership.done(step)
            if not follow.empty:
                self._steps.appendleft(follow)
            self._cond.notify_all()

    def note_poll(self) -> bool:
        """The application polled: restart the poll timer.

        Returns True once after the member left because ``max.poll.interval.ms`` passed
        without a poll: the consumer then drops its partitions as lost and subscribes again.
        """
        with self._cond:
            self._last_poll_ms = self._now_ms()
            expired, self._poll_expired = self._poll_expired, False
            return expired

    def wait_for_new_epoch(self, member_id: str, member_epoch: int, timeout_s: float) -> bool:
        """Wait until the coordinator gives a member epoch other than ``member_epoch``.

        For a commit refused with ``STALE_MEMBER_EPOCH``: the heartbeat answer with the
        new epoch is on its way. False on timeout, or when the member is out of the group.
        """
        clock = self._clock
        deadline = clock.monotonic() + timeout_s
        with self._cond:
            while True:
                m = self._membership
                if m.state in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.FATAL):
                    return False
                if m.member_epoch > 0 and (m.member_id, m.member_epoch) != (
                    member_id,
                    member_epoch,
                ):
                    return True
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return False
                clock.wait(self._cond, remaining)

    def wait_unsubscribed(self, timeout_s: float) -> bool:
        """Wait until the member is out of the group (the leave was answered)."""
        clock = self._clock
        deadline = clock.monotonic() + timeout_s
        with self._cond:
            while self._membership.state not in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
                remaining = deadline - clock.monotonic()
                if remaining <= 0 or self._thread is None or self._finished:
                    return False
                clock.wait(self._cond, remaining)
            return True

    def close(self, timeout_s: float) -> None:
        """Stop the heartbeat thread, waiting at most ``timeout_s`` for it."""
        clock = self._clock
        deadline = clock.monotonic() + max(timeout_s, 0.0)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            # Not thread.join(timeout): a manual clock could not end that wait.
            while self._thread is not None and not self._finished:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    logger.warning("heartbeat thread still running group=%s", self.group_id)
                    return
                clock.wait(self._cond, remaining)

    def _now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    # ---- the heartbeat thread ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                fields = self._next_heartbeat()
                if fields is None:
                    return
                self._send(fields)
        except Exception as exc:  # a broken invariant: fail the membership loudly
            logger.exception("heartbeat thread failed group=%s", self.group_id)
            error = exc if isinstance(exc, LograftError) else UnknownServerError(repr(exc))
            with self._cond:
                self._fatal = error
                self._enqueue(self._membership.fail(error))
                self._cond.notify_all()
            self._wakeup()
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _next_heartbeat(self) -> HeartbeatFields | None:
        """Wait until a heartbeat is due; its fields, or ``None`` when stopping."""
        with self._cond:
            while not self._stopping:
                now = self._now_ms()
                self._check_poll_timer(now)
                wait_ms = self._membership.heartbeat_wait_ms(now)
                if wait_ms is not None:
                    wait_ms = max(wait_ms, self._retry_at_ms - now)
                    if wait_ms <= 0:
                        return self._membership.next_heartbeat(now)
                if self._membership.state in (
                    MemberState.JOINING,
                    MemberState.RECONCILING,
                    MemberState.STABLE,
                ):
                    poll_ms = self._last_poll_ms + self.max_poll_interval_ms - now + 1
                    wait_ms = poll_ms if wait_ms is None else min(wait_ms, poll_ms)
                self._clock.wait(self._cond, None if wait_ms is None else max(wait_ms, 1) / 1000.0)
            return None

    def _check_poll_timer(self, now_ms: int) -> None:
        if self._membership.state not in (
            MemberState.JOINING,
            MemberState.RECONCILING,
            MemberState.STABLE,
        ):
            return
        if now_ms - self._last_poll_ms <= self.max_poll_interval_ms:
            return
        logger.warning(
            "consumer poll timeout has expired, leaving the group group=%s member_id=%s "
            "max_poll_interval_ms=%d: call poll() more often or raise max.poll.interval.ms",
            self.group_id,
            self._membership.member_id,
            self.max_poll_interval_ms,
        )
        self._steps.clear()
        self._membership.leave()  # the consumer drops the partitions as lost at its next poll
        self._poll_expired = True

    # Over 70 lines: one heartbeat round trip: build, send, then apply the answer under the lock.
    def _send(self, fields: HeartbeatFields) -> None:
        request = pb.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=fields.member_id,
            member_epoch=fields.member_epoch,
            rebalance_timeout_ms=fields.rebalance_timeout_ms,
            server_assignor=fields.assignor or "",
            session_timeout_ms=self.session_timeout_ms,
            client_id=self.client_id,
        )
        if fields.subscribed_topics is not None:
            request.subscribed_topic_names.SetInParent()
            request.subscribed_topic_names.names.extend(fields.subscribed_topics)
        if fields.owned is not None:
            request.owned_partitions.SetInParent()
            request.owned_partitions.topics.extend(_partitions_pb(fields.owned))
        backoff_ms = self.coordinator.retry_backoff_ms
        try:
            response = self.coordinator.call_once("ConsumerGroupHeartbeat", request)
        except LograftError as exc:
            with self._cond:
                if retried_in_background(exc):
                    self._failures += 1
                    # Logged once per run of failures: a retry every retry.backoff.ms follows.
                    logger.log(
                        logging.WARNING if self._failures == 1 else logging.DEBUG,
                        "heartbeat failed, retrying group=%s failures=%d error=%s",
                        self.group_id,
                        self._failures,
                        exc,
                    )
                    self._membership.on_heartbeat_failed()
                    self._retry_at_ms = self._now_ms() + backoff_ms
                    self._cond.notify_all()
                    return
                logger.error("heartbeat failed for good group=%s error=%s", self.group_id, exc)
                step = self._membership.fail(exc)
                if self._membership.state is MemberState.FATAL:
                    self._fatal = exc
                self._enqueue(step)
                self._cond.notify_all()
            self._wakeup()
            return
        code = response.error_code
        if code in _FORGET_COORDINATOR:
            self.coordinator.forget_coordinator()
        assignment = (
            _partitions_from_pb(response.assignment.topics)
            if response.HasField("assignment")
            else None
        )
        with self._cond:
            step = self._membership.on_heartbeat_response(
                code,
                response.error_message,
                response.member_id,
                response.member_epoch,
                response.heartbeat_interval_ms,
                assignment,
            )
            if code:
                self._failures += 1
                self._retry_at_ms = self._now_ms() + backoff_ms
                if self._membership.state is MemberState.FATAL:
                    self._fatal = error_for_code(code, response.error_message)
            else:
                self._failures = 0
            self._enqueue(step)
            self._cond.notify_all()
        if not step.empty:
            self._wakeup()

    def _enqueue(self, step: Reconciliation) -> None:
        if step.empty:
            return
        if step.lost:
            # Everything owned, or about to be, is gone: steps not yet started are moot.
            self._steps.clear()
        self._steps.append(step)
