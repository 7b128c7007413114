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

One reconciliation at a time: while a step is handed out and not yet :meth:`done`, a new
target is only recorded; ``done`` returns the step that reconciles with it. Each step is
computed against what the consumer really owns, so no partition is assigned twice or kept
past its revocation. A step handed out before a fence or a leave is stale: its ``done``
takes partitions away but never adds any (the ``lost`` or ``revoke`` step that followed
already covers its ``assign``).

Leaving sends epoch -1; only the answer to that heartbeat completes the leave (an answer to
a heartbeat sent before ``leave`` does not). ``subscribe`` while leaving joins again once
the leave is answered.

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

from lograft.protocol.errors import (
    FencedMemberEpochError,
    IllegalStateError,
    LograftError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    error_for_code,
)

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
"""``member_epoch`` of a heartbeat that joins (or rejoins) the group."""
LEAVE_EPOCH = -1
"""``member_epoch`` of a heartbeat that leaves the group."""
_FENCED_CODES = frozenset({UnknownMemberIdError.code, FencedMemberEpochError.code})


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
        self._in_flight_leave = False
        self._pending: Reconciliation | None = None
        self._rejoin_after_leave = False
        self.fatal_error: LograftError | None = None

    # ---- the consumer's calls -------------------------------------------------------------

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (replacing any earlier subscription); join if needed."""
        self.subscription = tuple(sorted(set(topics)))
        self._send_subscription = True
        self._urgent = True
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FENCED):
            self._transition(MemberState.JOINING)
        elif self.state is MemberState.LEAVING:
            self._rejoin_after_leave = True

    def leave(self) -> Reconciliation:
        """Leave the group with the next heartbeat (epoch -1).

        Returns the owned partitions to revoke first (callbacks, a last commit).
        """
        self._rejoin_after_leave = False
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.LEAVING, MemberState.FATAL):
            return Reconciliation()
        revoke = self._drop_all()
        self._transition(MemberState.LEAVING)
        self._urgent = True
        return Reconciliation(revoke=revoke)

    def heartbeat_due(self, now_ms: int) -> bool:
        """Whether to send a heartbeat now (none is in flight, and one is urgent or due)."""
        return self.heartbeat_wait_ms(now_ms) == 0

    def heartbeat_wait_ms(self, now_ms: int) -> int | None:
        """Milliseconds until a heartbeat is due (0: now); ``None`` while none is expected.

        ``None`` while one is in flight, and when unsubscribed or failed for good.
        """
        if self._in_flight or self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return None
        if self._urgent or self._last_sent_ms is None:
            return 0
        return max(0, self._last_sent_ms + self.heartbeat_interval_ms - now_ms)

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
        self._in_flight_leave = leaving
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
        answers_leave = self._in_flight_leave
        self._in_flight_leave = False
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return Reconciliation()  # a late answer: nothing depends on it any more
        if self.state is MemberState.LEAVING:
            if not answers_leave:
                # The answer to a heartbeat sent before leave(): the leave is still to send.
                self._urgent = True
                return Reconciliation()
            if error_code and error_for_code(error_code, error_message).retriable:
                self._urgent = True
                return Reconciliation()
            # Done, or the coordinator no longer knows the member, or refuses for good:
            # either way the member is out.
            return self._left()
        if error_code in _FENCED_CODES:
            return self._fenced(error_code, error_message)
        if error_code == StaleMemberEpochError.code:
            # Not retriable for a commit, but a heartbeat just goes again with its epoch.
            self.on_heartbeat_failed()
            return Reconciliation()
        if error_code:
            error = error_for_code(error_code, error_message)
            if error.retriable:
                self.on_heartbeat_failed()
                return Reconciliation()
            self.fatal_error = error
            lost = self._drop_all()
            self._transition(MemberState.FATAL)
            logger.error("group membership failed group=%s error=%s", self.group_id, error)
            return Reconciliation(lost=lost)
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
        if self._pending is not None:
            # One reconciliation at a time: done() takes up the new target.
            return Reconciliation()
        return self._reconcile()

    def fail(self, error: LograftError) -> Reconciliation:
        """End the membership for good (e.g. the coordinator refuses the protocol).

        Every owned partition is lost; while leaving, the leave is simply complete.
        """
        self._in_flight = False
        self._in_flight_leave = False
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            return Reconciliation()
        if self.state is MemberState.LEAVING:
            self._rejoin_after_leave = False
            return self._left()
        self.fatal_error = error
        lost = self._drop_all()
        self._transition(MemberState.FATAL)
        logger.error("group membership failed group=%s error=%s", self.group_id, error)
        return Reconciliation(lost=lost)

    def done(self, step: Reconciliation) -> Reconciliation:
        """The consumer carried out ``step``: update what it owns; report it next.

        Returns the next step when the target moved meanwhile (empty when there is none):
        carry it out and call ``done`` again.
        """
        if step.empty:
            return Reconciliation()
        if step is self._pending:
            self._pending = None
            owned = (self.owned - step.revoke) | step.assign
        else:
            # A lost or leave step, or a step handed out before a fence or leave: it can
            # only take partitions away.
            owned = self.owned - step.lost - step.revoke
        if owned != self.owned:
            self.owned = owned
            self._send_owned = True
            self._urgent = True
        if (
            self.state is MemberState.RECONCILING
            and self._pending is None
            and self.target is not None
        ):
            return self._reconcile()
        return Reconciliation()

    # ---- helpers --------------------------------------------------------------------------

    def _reconcile(self) -> Reconciliation:
        assert self.target is not None
        revoke = self.owned - self.target
        assign = self.target - self.owned
        step = Reconciliation(revoke=revoke, assign=assign)
        self._transition(MemberState.STABLE if step.empty else MemberState.RECONCILING)
        # The coordinator only hands out partitions nobody else owns: the consumer revokes
        # what it loses and then takes what it gains, in one step.
        self._pending = None if step.empty else step
        return step

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
        if error_code == UnknownMemberIdError.code:
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
        if self._rejoin_after_leave:
            self._rejoin_after_leave = False
            self._transition(MemberState.JOINING)
            self._send_subscription = True
            self._send_owned = True
            self._urgent = True
        return Reconciliation()

    def _drop_all(self) -> frozenset[TopicPartition]:
        """Forget every partition: those owned and those of a step not yet done."""
        dropped = self.owned
        if self._pending is not None:
            dropped |= self._pending.assign
            self._pending = None
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
