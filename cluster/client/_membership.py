"""The member side of a consumer group (Kafka's KIP-848 protocol), as a pure state machine.

The coordinator computes every member's assignment; a member heartbeats
(``ConsumerGroupHeartbeat``) and reconciles what it owns with what it is given, one step at
a time, so that no partition is ever owned twice and members that keep their partitions
never stop (the cooperative rebalance):

1. A heartbeat answer carrying an assignment sets the member's *target*.
2. Partitions owned but not in the target are **revoked** first: the consumer runs its
   revocation callback (and commits, with auto-commit) and stops fetching them; the next
   heartbeat reports the smaller owned set, which lets the coordinator hand them on.
   Partitions the member keeps are never revoked: it goes on fetching them.
3. Then partitions in the target but not owned are **assigned** (the coordinator only
   hands out partitions no other member owns): the consumer runs its assignment callback
   and starts fetching them; the next heartbeat reports them.
4. ``FENCED_MEMBER_EPOCH`` or ``UNKNOWN_MEMBER_ID``: every owned partition is **lost**
   (another member may own it already: no commit), and the member joins again at epoch 0.

Nothing here reads a clock or does I/O: ``now_ms`` comes in, request fields and
reconciliation steps go out. Not thread-safe; the consumer owns it.

States (``from`` → allowed ``to``)::

    UNSUBSCRIBED  -> JOINING
    JOINING       -> RECONCILING, STABLE, FENCED, LEAVING, FATAL
    RECONCILING   -> STABLE, RECONCILING, FENCED, LEAVING, FATAL
    STABLE        -> RECONCILING, STABLE, FENCED, LEAVING, FATAL
    FENCED        -> JOINING, LEAVING
    LEAVING       -> UNSUBSCRIBED
    FATAL         -> (none)
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from cluster.errors import IllegalStateError, LograftError, error_for_code

from ._connection import TopicPartition

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "GroupMembership",
    "HeartbeatFields",
    "MemberState",
    "Reconciliation",
]

logger = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
_FENCED_CODES = frozenset({25, 110})  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH
_RETRY_CODES = frozenset(
    {14, 15, 16}
)  # COORDINATOR_LOAD_IN_PROGRESS/_NOT_AVAILABLE, NOT_COORDINATOR
_STALE_EPOCH_CODE = 113  # STALE_MEMBER_EPOCH: heartbeat again with the current epoch


class MemberState(enum.Enum):
    """Where the member stands in the group."""

    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    RECONCILING = "reconciling"
    STABLE = "stable"
    FENCED = "fenced"
    LEAVING = "leaving"
    FATAL = "fatal"


_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.UNSUBSCRIBED: frozenset({MemberState.JOINING}),
    MemberState.JOINING: frozenset(
        {
            MemberState.RECONCILING,
            MemberState.STABLE,
            MemberState.FENCED,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.RECONCILING: frozenset(
        {
            MemberState.STABLE,
            MemberState.RECONCILING,
            MemberState.FENCED,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.STABLE: frozenset(
        {
            MemberState.RECONCILING,
            MemberState.STABLE,
            MemberState.FENCED,
            MemberState.LEAVING,
            MemberState.FATAL,
        }
    ),
    MemberState.FENCED: frozenset({MemberState.JOINING, MemberState.LEAVING}),
    MemberState.LEAVING: frozenset({MemberState.UNSUBSCRIBED}),
    MemberState.FATAL: frozenset(),
}


@dataclass(frozen=True, slots=True)
class HeartbeatFields:
    """What the next ``ConsumerGroupHeartbeat`` carries; ``None`` fields mean unchanged."""

    member_id: str
    member_epoch: int
    subscribed_topics: tuple[str, ...] | None
    assignor: str | None
    owned: frozenset[TopicPartition] | None
    rebalance_timeout_ms: int


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What the consumer must do now, in this order: drop ``lost``, revoke, then assign."""

    lost: frozenset[TopicPartition] = frozenset()
    revoke: frozenset[TopicPartition] = frozenset()
    assign: frozenset[TopicPartition] = frozenset()

    @property
    def empty(self) -> bool:
        """Nothing to do."""
        return not (self.lost or self.revoke or self.assign)


class GroupMembership:
    """One consumer's membership in ``group_id`` (see the module docstring)."""

    def __init__(self, group_id: str, assignor: str, rebalance_timeout_ms: int) -> None:
        self.group_id = group_id
        self.assignor = assignor
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.state = MemberState.UNSUBSCRIBED
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 3000
        self.subscription: tuple[str, ...] = ()
        self.owned: frozenset[TopicPartition] = frozenset()
        self.target: frozenset[TopicPartition] | None = None
        self._send_subscription = True
        self._send_owned = True
        self._urgent = True
        self._last_sent_ms: int | None = None
        self._in_flight = False
        self.fatal_error: LograftError | None = None

    # ---- the consumer's calls -------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (replacing any earlier subscription); join if needed."""
        self.subscription = tuple(sorted(set(topics)))
        self._send_subscription = True
        self._urgent = True
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FENCED):
            self._transition(MemberState.JOINING)

    def leave(self) -> Reconciliation:
        """Leave the group with the next heartbeat (epoch -1).

        Returns the owned partitions to revoke first (callbacks, a last commit).
        """
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.FATAL):
            return Reconciliation()
        revoke = self._drop_all()
        self._transition(MemberState.LEAVING)
        self._urgent = True
        return Reconciliation(revoke=revoke)

    def heartbeat_due(self, now_ms: int) -> bool:
        """Whether to send a heartbeat now (none is in flight, and one is urgent or due)."""
        if self._in_flight or self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return False
        if self._urgent or self._last_sent_ms is None:
            return True
        return now_ms - self._last_sent_ms >= self.heartbeat_interval_ms

    def next_heartbeat(self, now_ms: int) -> HeartbeatFields:
        """The fields of the heartbeat to send now; marks it in flight."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            raise IllegalStateError(f"no heartbeat in state {self.state.value}")
        joining = self.state is MemberState.JOINING
        leaving = self.state is MemberState.LEAVING
        fields = HeartbeatFields(
            member_id=self.member_id,
            member_epoch=LEAVE_EPOCH if leaving else self.member_epoch,
            subscribed_topics=self.subscription if (self._send_subscription or joining) else None,
            assignor=self.assignor if joining else None,
            owned=self.owned if (self._send_owned or joining) else None,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )
        self._send_subscription = False
        self._send_owned = False
        self._urgent = False
        self._in_flight = True
        self._last_sent_ms = now_ms
        return fields

    def on_heartbeat_failed(self) -> None:
        """The heartbeat got no answer (network, timeout): send it again, fields and all."""
        self._in_flight = False
        self._send_subscription = True
        self._send_owned = True
        self._urgent = True

    def on_heartbeat_response(
        self,
        error_code: int,
        error_message: str,
        member_id: str,
        member_epoch: int,
        heartbeat_interval_ms: int,
        assignment: frozenset[TopicPartition] | None,
    ) -> Reconciliation:
        """Take an answer; returns what the consumer must do (then call :meth:`done`)."""
        self._in_flight = False
        if self.state is MemberState.LEAVING:
            if error_code == 0 or error_code in _FENCED_CODES:
                return self._left()
            self._urgent = True
            return Reconciliation()
        if error_code in _FENCED_CODES:
            return self._fenced(error_code, error_message)
        if error_code in _RETRY_CODES or error_code == _STALE_EPOCH_CODE:
            self.on_heartbeat_failed()
            return Reconciliation()
        if error_code:
            error = error_for_code(error_code, error_message)
            if error.retriable:
                self.on_heartbeat_failed()
                return Reconciliation()
            self.fatal_error = error
            self._transition(MemberState.FATAL)
            logger.error("group membership failed group=%s error=%s", self.group_id, error)
            return Reconciliation(lost=self._drop_all())
        if heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = heartbeat_interval_ms
        if member_id:
            self.member_id = member_id
        self.member_epoch = member_epoch
        if assignment is not None:
            self.target = assignment
        if self.target is None:
            if self.state is MemberState.JOINING:
                self._transition(MemberState.STABLE)
            return Reconciliation()
        revoke = self.owned - self.target
        assign = self.target - self.owned
        self._transition(MemberState.RECONCILING if revoke or assign else MemberState.STABLE)
        # The coordinator only hands out partitions nobody else owns: the consumer revokes
        # what it loses and then takes what it gains, in one step.
        return Reconciliation(revoke=revoke, assign=assign)

    def done(self, step: Reconciliation) -> None:
        """The consumer carried out ``step``: update what it owns; report it next."""
        if step.empty:
            return
        owned = (self.owned - step.lost - step.revoke) | step.assign
        if owned != self.owned:
            self.owned = owned
            self._send_owned = True
            self._urgent = True
        if self.state is MemberState.RECONCILING and self.owned == self.target:
            self._transition(MemberState.STABLE)

    # ---- helpers --------------------------------------------------------------------------

    def _fenced(self, error_code: int, error_message: str) -> Reconciliation:
        logger.warning(
            "group member fenced group=%s member_id=%s epoch=%d error_code=%d message=%s",
            self.group_id,
            self.member_id,
            self.member_epoch,
            error_code,
            error_message,
        )
        lost = self._drop_all()
        self._transition(MemberState.FENCED)
        if error_code == 25:
            self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self._transition(MemberState.JOINING)
        self._send_subscription = True
        self._urgent = True
        return Reconciliation(lost=lost)

    def _left(self) -> Reconciliation:
        self.member_epoch = JOIN_EPOCH
        self.member_id = ""
        self._transition(MemberState.UNSUBSCRIBED)
        return Reconciliation()

    def _drop_all(self) -> frozenset[TopicPartition]:
        dropped = self.owned
        self.owned = frozenset()
        self.target = None
        return dropped

    def _transition(self, to: MemberState) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise IllegalStateError(
                f"group {self.group_id}: member state {self.state.value} -> {to.value} "
                "is not allowed"
            )
        if to is not self.state:
            logger.info(
                "group member state group=%s member_id=%s from=%s to=%s epoch=%d",
                self.group_id,
                self.member_id,
                self.state.value,
                to.value,
                self.member_epoch,
            )
        self.state = to
