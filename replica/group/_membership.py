"""Group membership (Kafka's ``ConsumerGroupHeartbeat``): members, their epochs, the group
epoch and target assignment, and the session and rebalance timers that remove members.

The rules are the protocol's, in :mod:`replica.group.coordinator`; this module carries out
every one that is about membership: joining, heartbeating (with the epoch checks that fence
a member), leaving, bumping the group epoch with a new target assignment, and expiring
members on :meth:`GroupMembership.tick`. Each heartbeat moves its member one step towards
its target (the table is in :mod:`replica.group._reconciliation`).

The coordinator checks that it is ``ACTIVE`` before calling in; every change goes through
the :class:`~replica.group._store.GroupStore`.
"""

from __future__ import annotations

import base64
import logging
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    UnknownMemberIdError,
    UnsupportedAssignorError,
)
from lograft.protocol.topic_partition import MAX_PARTITIONS, TopicPartition, validate_topic_name
from replica.group._config import (
    INT32_MAX,
    MAX_CLIENT_ID_LENGTH,
    MAX_MEMBER_ID_LENGTH,
    GroupCoordinatorConfig,
    validate_group_id,
    validate_topic_partition,
)
from replica.group._reconciliation import next_assignment
from replica.group._store import Group, GroupStore, Member
from replica.group.assignors import assign, canonical_assignor
from replica.group.records import (
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    TargetAssignmentKey,
    TargetAssignmentValue,
)

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "ExpiredMember",
    "GroupMembership",
    "HeartbeatResult",
    "TickResult",
]

JOIN_EPOCH = 0
"""``member_epoch`` of a heartbeat that joins (or rejoins) the group."""
LEAVE_EPOCH = -1
"""``member_epoch`` of a heartbeat that leaves the group (and of an admin commit)."""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The answer to a heartbeat, and the records to persist before sending it.

    ``assignment`` is the member's whole current assignment when it must (re)learn it (it
    joined, reported its owned partitions, or its assignment or epoch changed); ``None``
    means unchanged. ``member_epoch`` is -1 after a leave.
    """

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: frozenset[TopicPartition] | None
    records: tuple[GroupRecord, ...]


@dataclass(frozen=True, slots=True)
class ExpiredMember:
    """A member :meth:`~replica.group.coordinator.GroupCoordinator.tick` removed, and why.

    ``reason`` is ``session_timeout`` (no heartbeat for ``session_timeout_ms``) or
    ``rebalance_timeout`` (did not revoke within ``rebalance_timeout_ms``).
    """

    group_id: str
    member_id: str
    member_epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class TickResult:
    """What a tick removed, and the records to persist."""

    expired: tuple[ExpiredMember, ...]
    records: tuple[GroupRecord, ...]


class GroupMembership:
    """Heartbeats, epochs, target assignments and timers of every group in ``store``.

    ``rng`` generates member ids; ``logger`` is the shell's (a core creates none). Not
    thread-safe: the coordinator that owns it is not.
    """

    def __init__(
        self,
        config: GroupCoordinatorConfig,
        store: GroupStore,
        rng: random.Random,
        *,
        logger: logging.Logger,
    ) -> None:
        self._config = config
        self._store = store
        self._rng = rng
        self._log = logger

    # ---- heartbeat ----------------------------------------------------------------------------

    # Over 70 lines: every check before the first state change, then the change, in one place.
    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        now_ms: int,
        rebalance_timeout_ms: int = -1,
        subscribed_topics: Iterable[str] | None = None,
        assignor: str | None = None,
        owned_partitions: Iterable[TopicPartition] | None = None,
        session_timeout_ms: int | None = None,
        client_id: str | None = None,
        client_host: str | None = None,
    ) -> HeartbeatResult:
        """Handle one ``ConsumerGroupHeartbeat``; see
        :meth:`~replica.group.coordinator.GroupCoordinator.heartbeat`."""
        validate_group_id(group_id)
        if not isinstance(member_epoch, int) or member_epoch < LEAVE_EPOCH:
            raise InvalidRequestError(
                f"member_epoch {member_epoch} is not valid: 0 joins, -1 leaves "
                "(static membership is not supported)"
            )
        if not isinstance(member_id, str) or len(member_id) > MAX_MEMBER_ID_LENGTH:
            raise InvalidRequestError(f"member_id must be at most {MAX_MEMBER_ID_LENGTH} chars")
        if member_epoch == LEAVE_EPOCH:
            return self._leave(group_id, member_id)
        topics = self._validate_subscription(subscribed_topics)
        owned = None
        if owned_partitions is not None:
            owned = frozenset(owned_partitions)
            for tp in owned:
                validate_topic_partition(tp)
        chosen = canonical_assignor(assignor) if assignor else None
        if chosen is not None and chosen not in self._config.assignors:
            raise UnsupportedAssignorError(
                f"assignor {assignor!r} is not enabled "
                f"(enabled: {', '.join(self._config.assignors)})"
            )
        session = self._validate_session_timeout(session_timeout_ms)
        if client_id is not None and len(client_id) > MAX_CLIENT_ID_LENGTH:
            client_id = client_id[:MAX_CLIENT_ID_LENGTH]
        if client_host is not None and len(client_host) > MAX_CLIENT_ID_LENGTH:
            client_host = client_host[:MAX_CLIENT_ID_LENGTH]
        if rebalance_timeout_ms > INT32_MAX:
            raise InvalidRequestError(f"rebalance_timeout_ms {rebalance_timeout_ms} is too large")
        group = self._store.groups.get(group_id)
        if member_epoch == JOIN_EPOCH:
            if topics is None:
                raise InvalidRequestError("a joining member must send its subscribed topics")
            if rebalance_timeout_ms <= 0:
                raise InvalidRequestError("a joining member must send a positive rebalance timeout")
            if owned:
                raise InvalidRequestError("owned partitions must be empty when joining")
            member = group.members.get(member_id) if group is not None and member_id else None
            if member is None:
                if group is not None and len(group.members) >= self._config.max_group_size:
                    raise GroupMaxSizeReachedError(
                        f"group {group_id} has {len(group.members)} members, the maximum"
                    )
                member_id = member_id or self._new_member_id(group)
            owned = frozenset()
        else:
            if not member_id:
                raise InvalidRequestError("a heartbeat with member_epoch > 0 needs its member_id")
            if group is None:
                raise GroupIdNotFoundError(f"group {group_id} does not exist")
            member = group.members.get(member_id)
            if member is None:
                raise UnknownMemberIdError(f"group {group_id} has no member {member_id}")
            self._check_member_epoch(group_id, member, member_epoch, owned)
        # ---- accepted: from here on, state changes and records are written ----
        if group is None:
            group = self._store.groups[group_id] = Group(group_id)
        new_member = member is None
        if member is None:
            member = group.members[member_id] = Member(member_id)
        old = member.metadata
        meta = MemberMetadataValue(
            client_id=client_id if client_id is not None else (old.client_id if old else ""),
            subscribed_topics=topics
            if topics is not None
            else (old.subscribed_topics if old else ()),
            assignor=chosen if chosen is not None else (old.assignor if old else ""),
            rebalance_timeout_ms=rebalance_timeout_ms
            if rebalance_timeout_ms > 0
            else (old.rebalance_timeout_ms if old else 0),
            session_timeout_ms=session
            or (old.session_timeout_ms if old else self._config.session_timeout_ms),
            client_host=client_host
            if client_host is not None
            else (old.client_host if old else ""),
        )
        if meta != old:
            self._store.write(MemberMetadataKey(group_id, member_id), meta)
        if new_member:
            self._log.info(
                "member joined group=%s member_id=%s client_id=%s topics=%s assignor=%s",
                group_id,
                member_id,
                meta.client_id,
                ",".join(meta.subscribed_topics),
                meta.assignor or "-",
            )
            self.bump_and_assign(group, "member_joined")
        elif old is not None and (
            old.subscribed_topics != meta.subscribed_topics or old.assignor != meta.assignor
        ):
            self.bump_and_assign(group, "subscription_changed")
        before = member.current
        after = self._reconcile(group, member, owned, now_ms)
        include = (
            member_epoch == JOIN_EPOCH
            or owned is not None
            or after.assigned != before.assigned
            or after.member_epoch != member_epoch
        )
        return HeartbeatResult(
            member_id=member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=self._interval_ms(meta),
            assignment=after.assigned if include else None,
            records=self._store.take(),
        )

    def _validate_subscription(self, topics: Iterable[str] | None) -> tuple[str, ...] | None:
        if topics is None:
            return None
        if isinstance(topics, str):
            raise InvalidRequestError("subscribed_topics must be a collection of topic names")
        unique = sorted(set(topics))
        if len(unique) > self._config.max_subscribed_topics:
            raise InvalidRequestError(
                f"{len(unique)} subscribed topics, at most {self._config.max_subscribed_topics}"
            )
        for topic in unique:
            validate_topic_name(topic)
        return tuple(unique)

    def _validate_session_timeout(self, session_timeout_ms: int | None) -> int | None:
        if session_timeout_ms is None or session_timeout_ms <= 0:
            return None
        low, high = self._config.min_session_timeout_ms, self._config.max_session_timeout_ms
        if not low <= session_timeout_ms <= high:
            raise InvalidSessionTimeoutError(
                f"session_timeout_ms {session_timeout_ms} is not in [{low}, {high}]"
            )
        return session_timeout_ms

    def _check_member_epoch(
        self,
        group_id: str,
        member: Member,
        member_epoch: int,
        owned: frozenset[TopicPartition] | None,
    ) -> None:
        current = member.current
        where = f"group {group_id} member {member.member_id}"
        if member_epoch > current.member_epoch:
            raise FencedMemberEpochError(
                f"{where}: epoch {member_epoch} is newer than the coordinator's "
                f"{current.member_epoch}; give up every partition and rejoin"
            )
        if member_epoch < current.member_epoch and (
            member_epoch != current.previous_member_epoch
            or owned is None
            or not owned <= current.assigned
        ):
            raise FencedMemberEpochError(
                f"{where}: epoch {member_epoch} is older than the coordinator's "
                f"{current.member_epoch}; give up every partition and rejoin"
            )
        if owned is not None and not owned <= current.owned:
            extra = ", ".join(str(tp) for tp in sorted(owned - current.owned))
            raise FencedMemberEpochError(
                f"{where}: reports owning {extra}, which it was not given; "
                "give up every partition and rejoin"
            )

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self._store.groups.get(group_id)
        if group is None or not member_id or member_id not in group.members:
            raise UnknownMemberIdError(f"group {group_id} has no member {member_id or '(none)'}")
        member = group.members[member_id]
        self._remove_member(group, member, "left")
        self.bump_and_assign(group, "member_left")
        return HeartbeatResult(
            member_id=member_id,
            member_epoch=LEAVE_EPOCH,
            heartbeat_interval_ms=self._interval_ms(member.meta),
            assignment=None,
            records=self._store.take(),
        )

    def _interval_ms(self, meta: MemberMetadataValue) -> int:
        return max(1, min(self._config.heartbeat_interval_ms, meta.session_timeout_ms // 3))

    def _new_member_id(self, group: Group | None) -> str:
        while True:
            raw = self._rng.getrandbits(128).to_bytes(16, "big")
            member_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
            if group is None or member_id not in group.members:
                return member_id

    def _reconcile(
        self,
        group: Group,
        member: Member,
        owned: frozenset[TopicPartition] | None,
        now_ms: int,
    ) -> CurrentAssignmentValue:
        """Move ``member`` one step towards its target; restart its session timer."""
        before = member.current
        after = next_assignment(group, member.member_id, before, owned)
        if after != before:
            self._store.write(CurrentAssignmentKey(group.group_id, member.member_id), after)
            self._log.debug(
                "member assignment group=%s member_id=%s epoch=%d->%d state=%s assigned=%d "
                "pending_revocation=%d",
                group.group_id,
                member.member_id,
                before.member_epoch,
                after.member_epoch,
                after.state.value,
                len(after.assigned),
                len(after.pending_revocation),
            )
        member.session_deadline_ms = now_ms + member.meta.session_timeout_ms
        if after.state is MemberState.UNREVOKED_PARTITIONS:
            if (
                before.state is not MemberState.UNREVOKED_PARTITIONS
                or before.pending_revocation != after.pending_revocation
            ):
                member.revocation_deadline_ms = now_ms + member.meta.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None
        return after

    # ---- target assignment --------------------------------------------------------------------

    def bump_and_assign(self, group: Group, reason: str) -> None:
        """Bump the group epoch and compute the target assignment for it."""
        counts = self._subscribed_counts(group)
        assignor = self.group_assignor(group)
        subscriptions = {m.member_id: m.meta.subscribed_topics for m in group.members.values()}
        targets = assign(assignor, subscriptions, counts, group.targets)
        epoch = group.metadata.group_epoch + 1
        for member_id in sorted(targets):
            if group.targets.get(member_id) != targets[member_id]:
                self._store.write(
                    TargetAssignmentKey(group.group_id, member_id),
                    TargetAssignmentValue(targets[member_id]),
                )
        self._store.write(
            GroupMetadataKey(group.group_id), GroupMetadataValue.of(epoch, epoch, counts)
        )
        self._log.info(
            "group epoch bumped group=%s epoch=%d reason=%s members=%d assignor=%s partitions=%d",
            group.group_id,
            epoch,
            reason,
            len(group.members),
            assignor,
            sum(counts.values()),
        )

    def _subscribed_counts(self, group: Group) -> dict[str, int]:
        topics: set[str] = set()
        for member in group.members.values():
            topics.update(member.meta.subscribed_topics)
        return {t: self._store.topics[t] for t in sorted(topics) if t in self._store.topics}

    def group_assignor(self, group: Group) -> str:
        """The assignor most members name (ties: the configured order); else the default."""
        votes = Counter(
            m.meta.assignor
            for m in group.members.values()
            if m.meta.assignor in self._config.assignors
        )
        if not votes:
            return self._config.assignors[0]
        most = max(votes.values())
        return next(a for a in self._config.assignors if votes.get(a) == most)

    def _remove_member(self, group: Group, member: Member, reason: str) -> None:
        """Write the member's tombstones (the caller bumps the group epoch afterwards)."""
        key = (group.group_id, member.member_id)
        self._store.write(CurrentAssignmentKey(*key), None)
        self._store.write(TargetAssignmentKey(*key), None)
        self._store.write(MemberMetadataKey(*key), None)
        self._log.info(
            "member removed group=%s member_id=%s epoch=%d reason=%s",
            group.group_id,
            member.member_id,
            member.current.member_epoch,
            reason,
        )

    # ---- time and metadata ------------------------------------------------------------------

    def start_timers(self, now_ms: int) -> None:
        """After a load: every member's session (and pending revocation) starts at ``now_ms``
        (timers are never persisted)."""
        for group in self._store.groups.values():
            for member in group.members.values():
                member.session_deadline_ms = now_ms + member.meta.session_timeout_ms
                if member.current.state is MemberState.UNREVOKED_PARTITIONS:
                    member.revocation_deadline_ms = now_ms + member.meta.rebalance_timeout_ms

    def assign_unassigned(self) -> tuple[GroupRecord, ...]:
        """After a load: compute each target whose epoch bump was persisted without it."""
        for group_id in sorted(self._store.groups):  # a target never computed (not written by us)
            group = self._store.groups[group_id]
            if group.members and group.metadata.assignment_epoch < group.metadata.group_epoch:
                self.bump_and_assign(group, "load")
        return self._store.take()

    def tick(self, now_ms: int) -> TickResult:
        """Remove members whose session timed out, or that did not revoke within their
        rebalance timeout; their groups get a new epoch and target."""
        expired: list[ExpiredMember] = []
        for group_id in sorted(self._store.groups):
            group = self._store.groups[group_id]
            gone: list[tuple[Member, str]] = []
            for member_id in sorted(group.members):
                member = group.members[member_id]
                if now_ms >= member.session_deadline_ms:
                    gone.append((member, "session_timeout"))
                elif member.revocation_deadline_ms is not None and (
                    now_ms >= member.revocation_deadline_ms
                ):
                    gone.append((member, "rebalance_timeout"))
            for member, reason in gone:
                expired.append(
                    ExpiredMember(group_id, member.member_id, member.current.member_epoch, reason)
                )
                self._remove_member(group, member, reason)
            if gone:
                self.bump_and_assign(group, gone[0][1])
        return TickResult(tuple(expired), self._store.take())

    def next_deadline_ms(self) -> int | None:
        """When :meth:`tick` next has something to do (None: no members)."""
        deadlines = [
            d
            for g in self._store.groups.values()
            for m in g.members.values()
            for d in (m.session_deadline_ms, m.revocation_deadline_ms)
            if d is not None
        ]
        return min(deadlines, default=None)

    def on_topic_metadata(self, partition_counts: Mapping[str, int]) -> tuple[GroupRecord, ...]:
        """The cluster's topics now (topic -> partition count; absent = no such topic).

        Groups whose subscribed topics changed get a new epoch and target assignment.
        """
        topics: dict[str, int] = {}
        for topic, count in partition_counts.items():
            validate_topic_name(topic)
            if not isinstance(count, int) or not 0 <= count <= MAX_PARTITIONS:
                raise InvalidRequestError(f"partition count {count!r} of {topic} is out of range")
            if count:
                topics[topic] = count
        self._store.topics = topics
        for group_id in sorted(self._store.groups):
            group = self._store.groups[group_id]
            if group.members and self._subscribed_counts(group) != group.metadata.partition_counts:
                self.bump_and_assign(group, "metadata_changed")
        return self._store.take()
