"""A subscribed consumer's side of its group's rebalances, carried out in the polling thread.

The group member (``GroupMember``, with its heartbeat thread) queues reconciliation steps;
``run_steps`` carries them out from ``poll``, in this order for each step:

* partitions *lost* (the member was fenced: others may own them, so no commit) →
  ``on_lost`` (``on_revoke`` when not given) → dropped;
* partitions *revoked* → a synchronous auto-commit of their positions → ``on_revoke`` →
  dropped, with every record fetched for them;
* partitions *assigned* → added (positions to be read from the committed offsets) →
  ``on_assign``.

A member that missed ``max.poll.interval.ms`` has left its group: ``check_poll_timer``
drops its partitions as lost and joins again. ``leave_group`` revokes everything, then
sends the leave. Callbacks are called as ``callback(consumer, partitions)``, or as the
methods of a ``ConsumerRebalanceListener``. Deadlines are on the consumer's ``Clock``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from ._clock import Clock
from ._commits import Committer
from ._connection import Connections, TopicPartition
from ._group_client import GroupMember
from ._membership import MemberState, Reconciliation
from ._subscription import SubscriptionState

if TYPE_CHECKING:
    from ._consumer_values import ConsumerRebalanceListener

OwnerT = TypeVar("OwnerT")
"""The consumer the callbacks are given (the ``Consumer`` facade, which this helper does not
import: the facade imports it)."""

__all__ = ["Rebalancer"]

logger = logging.getLogger(__name__)


class Rebalancer(Generic[OwnerT]):
    """Applies the rebalance steps of one consumer's group member; see the module docstring.

    Not thread-safe: the consumer's polling thread calls it (and the callbacks run there).
    """

    def __init__(
        self,
        consumer: OwnerT,
        subscriptions: SubscriptionState,
        commits: Committer,
        conn: Connections,
        *,
        want_metadata: Callable[[], None],
        group_id: str | None,
        clock: Clock,
    ) -> None:
        self._consumer = consumer
        self._clock = clock
        self._subscriptions = subscriptions
        self._commits = commits
        self._conn = conn
        self._want_metadata = want_metadata
        self._group_id = group_id
        self.member: GroupMember | None = None
        """The consumer's group member, from its first ``subscribe`` on."""
        self._on_assign: Callable[[OwnerT, list[TopicPartition]], None] | None = None
        self._on_revoke: Callable[[OwnerT, list[TopicPartition]], None] | None = None
        self._on_lost: Callable[[OwnerT, list[TopicPartition]], None] | None = None
        self._listener: ConsumerRebalanceListener | None = None

    def set_callbacks(
        self,
        on_assign: Callable[[OwnerT, list[TopicPartition]], None] | None,
        on_revoke: Callable[[OwnerT, list[TopicPartition]], None] | None,
        on_lost: Callable[[OwnerT, list[TopicPartition]], None] | None,
        listener: ConsumerRebalanceListener | None,
    ) -> None:
        """Call these from now on (replacing the earlier ones)."""
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._listener = listener

    def check_poll_timer(self) -> None:
        """Restart the poll timer; after it expired, drop the partitions and join again."""
        member = self.member
        if member is None or self._subscriptions.mode != "subscribe":
            return
        if member.note_poll():
            # The member left for missing max.poll.interval.ms: its partitions are gone.
            lost = sorted(self._subscriptions.states)
            try:
                if lost:
                    self._lose(lost)
            finally:
                member.subscribe(self._subscriptions.topics)

    def run_steps(self) -> None:
        """Carry out queued rebalance steps; raise the error that ended the membership."""
        member = self.member
        if member is None or self._subscriptions.mode != "subscribe":
            return
        while (step := member.take_step()) is not None:
            try:
                self._apply(step)
            finally:
                member.done(step)
        error = member.fatal_error
        if error is not None:
            raise error

    def leave_group(self, deadline: float | None = None) -> None:
        """Revoke every partition (auto-commit until ``deadline``), then leave the group."""
        member = self.member
        assert member is not None
        try:
            owned = sorted(self._subscriptions.states)
            if owned and member.state not in (MemberState.FATAL, MemberState.UNSUBSCRIBED):
                self._revoke(owned, deadline)
        finally:
            member.leave()

    def _apply(self, step: Reconciliation) -> None:
        subscriptions = self._subscriptions
        lost = sorted(step.lost & subscriptions.states.keys())
        if lost:
            self._lose(lost)
        revoke = sorted(step.revoke & subscriptions.states.keys())
        if revoke:
            self._revoke(revoke)
        assign = sorted(step.assign - subscriptions.states.keys())
        if not assign:
            return
        subscriptions.add(assign)
        if any(self._conn.metadata.partition(tp.topic, tp.partition) is None for tp in assign):
            self._want_metadata()
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
            self._commits.auto_commit_sync(
                partitions, None if deadline is None else deadline - self._clock.monotonic()
            )
            self._callback("revoke", partitions)
        finally:
            self._subscriptions.drop(partitions)

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
            self._subscriptions.drop(partitions)

    def _callback(self, kind: str, partitions: list[TopicPartition]) -> None:
        if kind == "lost" and self._on_lost is None and self._on_revoke is not None:
            kind = "revoke"  # Kafka's default: lost partitions are revoked ones
        function = {"assign": self._on_assign, "revoke": self._on_revoke, "lost": self._on_lost}
        chosen = function[kind]
        if chosen is not None:
            chosen(self._consumer, list(partitions))
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
