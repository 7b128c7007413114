"""The consumer's offset commits (the commit half of Kafka's ``ConsumerCoordinator``).

* Every commit is an ``OffsetCommit`` sent by one committer thread, one at a time and in
  the order made; a caller waits on its ``Future`` (``commit``) or not
  (``commit(asynchronous=True)``, auto-commits). A subscribed consumer commits as its
  group member (id and epoch as of sending) and, refused with ``STALE_MEMBER_EPOCH``,
  commits again once its heartbeat brings the new epoch; with ``assign`` it commits
  outside of membership (member id "", epoch -1).
* With ``enable.auto.commit`` the positions (offsets of what ``poll`` returned, + 1) are
  committed every ``auto.commit.interval.ms`` from ``poll``, before partitions are given
  up and on close; an auto-commit failure is logged, never raised.
* ``committed`` reads the group's committed offsets back.

The auto-commit interval and every commit timeout are counted on the consumer's ``Clock``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from lograft.protocol.errors import IllegalStateError, LograftError, StaleMemberEpochError

from ._clock import Clock, future_result
from ._connection import TopicPartition
from ._group_client import CoordinatorClient, GroupMember
from ._subscription import SubscriptionState

__all__ = ["Committer"]

logger = logging.getLogger(__name__)


class Committer:
    """Commits the offsets of one consumer; see the module docstring.

    ``coordinator`` is ``None`` without ``group.id``: then nothing is ever committed.
    Not thread-safe: the consumer's polling thread calls it (the commits themselves run
    on the committer thread).
    """

    def __init__(
        self,
        coordinator: CoordinatorClient | None,
        subscriptions: SubscriptionState,
        *,
        auto_commit: bool,
        auto_commit_interval_s: float,
        request_timeout_ms: int,
        group_id: str | None,
        clock: Clock,
    ) -> None:
        self._coordinator = coordinator
        self._subscriptions = subscriptions
        self._auto_commit = auto_commit
        self._auto_commit_interval_s = auto_commit_interval_s
        self._clock = clock
        self._next_auto_commit = clock.monotonic() + auto_commit_interval_s
        self._request_timeout_ms = request_timeout_ms
        self._group_id = group_id
        self._executor: ThreadPoolExecutor | None = None
        self.member: GroupMember | None = None
        """The consumer's group member (from its first ``subscribe``): who commits."""

    def commit(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[tuple[TopicPartition, int]] | None,
        asynchronous: bool,
    ) -> dict[TopicPartition, int] | Future[dict[TopicPartition, int]]:
        """``Consumer.commit``: check ``offsets`` (default: every position), then commit."""
        if self._coordinator is None:
            raise IllegalStateError("commit() needs group.id in the consumer config")
        if offsets is None:
            chosen = self._subscriptions.positions(self._subscriptions.states)
        else:
            pairs = offsets.items() if isinstance(offsets, Mapping) else offsets
            chosen = {}
            for tp, offset in pairs:
                if not isinstance(tp, TopicPartition):
                    raise TypeError(f"expected TopicPartition, got {type(tp).__name__}")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise ValueError(f"offset of {tp} must be an int >= 0, got {offset!r}")
                chosen[tp] = offset
        future = self.commit_async(chosen)
        if asynchronous:
            return future
        return future.result()

    def committed(
        self, partitions: Sequence[TopicPartition], timeout_ms: int | None
    ) -> dict[TopicPartition, int | None]:
        """``Consumer.committed``: the group's committed offsets, ``None`` where none is."""
        if self._coordinator is None:
            raise IllegalStateError("committed() needs group.id in the consumer config")
        return self._coordinator.fetch_offsets(partitions, timeout_ms)

    def commit_async(self, offsets: dict[TopicPartition, int]) -> Future[dict[TopicPartition, int]]:
        """Queue an ``OffsetCommit``; one at a time, in order, on the committer thread."""
        coordinator = self._coordinator
        assert coordinator is not None
        if not offsets:
            done: Future[dict[TopicPartition, int]] = Future()
            done.set_result({})
            return done
        member = self.member if self._subscriptions.mode == "subscribe" else None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lograft-commit")

        timeout_s = self._request_timeout_ms / 1000.0
        clock = self._clock

        def send() -> dict[TopicPartition, int]:
            deadline = clock.monotonic() + timeout_s
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
                            member_id, member_epoch, deadline - clock.monotonic()
                        )
                    ):
                        raise

        return self._executor.submit(send)

    def auto_commit_async(self, partitions: Iterable[TopicPartition]) -> None:
        """With auto-commit, commit the positions of ``partitions`` without waiting."""
        if not self._auto_commit:
            return
        offsets = self._subscriptions.positions(partitions)
        if offsets:
            self.commit_async(offsets).add_done_callback(_log_auto_commit)

    def auto_commit_sync(
        self, partitions: Iterable[TopicPartition], timeout_s: float | None = None
    ) -> None:
        """Commit the positions of ``partitions`` now; a failure is logged, not raised."""
        if not self._auto_commit:
            return
        offsets = self._subscriptions.positions(partitions)
        if not offsets:
            return
        try:
            future_result(
                self._clock,
                self.commit_async(offsets),
                None if timeout_s is None else max(timeout_s, 0),
            )
        except (LograftError, TimeoutError) as exc:
            logger.warning(
                "auto-commit failed group=%s partitions=%d error=%s",
                self._group_id,
                len(offsets),
                exc,
            )

    def maybe_auto_commit(self) -> None:
        """Auto-commit every position once ``auto.commit.interval.ms`` has passed."""
        if not self._auto_commit or self._subscriptions.mode is None:
            return
        now = self._clock.monotonic()
        if now < self._next_auto_commit:
            return
        self._next_auto_commit = now + self._auto_commit_interval_s
        self.auto_commit_async(self._subscriptions.states)

    def close(self, timeout_s: float) -> None:
        """Let the commits already made go out (within ``timeout_s``), then stop the thread."""
        if self._executor is None:
            return
        try:
            future_result(self._clock, self._executor.submit(lambda: None), timeout_s)
        except TimeoutError:
            logger.warning("commits still pending at close group=%s", self._group_id)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _log_auto_commit(future: Future[dict[TopicPartition, int]]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        logger.warning("auto-commit failed error=%s", error)
