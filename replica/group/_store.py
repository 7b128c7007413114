"""The groups of one ``__consumer_offsets`` partition, as its records build them.

Live state changes only by :meth:`GroupStore.write`, which applies a record and keeps it for
the caller to persist; replay (:meth:`GroupStore.apply`) goes through the same code, so
replaying what was written rebuilds exactly this state. Membership
(:mod:`replica.group._membership`) and offsets (:mod:`replica.group._offsets`) both write
here: a group holds its members and its committed offsets, and deleting the group deletes
both.

While the store is ``live`` (the coordinator is ``ACTIVE``) it also keeps each group's
ownership index and refuses a record that would give a partition to two members, remove a
member that still holds partitions, or move a member epoch backwards. During replay it is
not kept: only the state the whole log leads to has to be consistent, and the index is
built once from it, by :meth:`GroupStore.index_loaded`.
"""

from __future__ import annotations

from lograft.protocol.topic_partition import TopicPartition
from replica.group.errors import GroupInvariantError, GroupRecordError
from replica.group.records import (
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupKey,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    GroupValue,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
)

__all__ = ["NEW_GROUP", "NO_ASSIGNMENT", "Group", "GroupStore", "Member"]

NO_ASSIGNMENT = CurrentAssignmentValue(0, 0, MemberState.STABLE, frozenset(), frozenset())
"""A member's assignment before its first one (and after its tombstone)."""
NEW_GROUP = GroupMetadataValue(0, 0, ())
"""A group's metadata before its first epoch bump."""


class Member:
    """A member: persisted metadata and assignment, plus timers that are never persisted."""

    __slots__ = (
        "current",
        "member_id",
        "metadata",
        "revocation_deadline_ms",
        "session_deadline_ms",
    )

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.metadata: MemberMetadataValue | None = None
        self.current = NO_ASSIGNMENT
        self.session_deadline_ms = 0
        self.revocation_deadline_ms: int | None = None

    @property
    def meta(self) -> MemberMetadataValue:
        """The member's metadata (every loaded member has it)."""
        if self.metadata is None:
            raise GroupInvariantError(f"member {self.member_id} has no metadata")
        return self.metadata


class Group:
    """A group; ``owners`` maps each partition a member holds (assigned or pending) to it."""

    __slots__ = ("group_id", "members", "metadata", "offsets", "owners", "targets")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.metadata = NEW_GROUP
        self.members: dict[str, Member] = {}
        self.targets: dict[str, frozenset[TopicPartition]] = {}
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        self.owners: dict[TopicPartition, str] = {}


class GroupStore:
    """Every group of one partition, the cluster's topics, and the records not yet taken.

    ``topics`` (topic -> partition count, as the coordinator last heard) is never persisted.
    Not thread-safe: the coordinator that owns it is not.
    """

    __slots__ = ("_out", "groups", "live", "topics")

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.topics: dict[str, int] = {}
        self.live = False
        self._out: list[GroupRecord] = []

    def write(self, key: GroupKey, value: GroupValue | None) -> None:
        """Record a change and apply it: the only way live state changes (so replaying the
        records rebuilds exactly this state)."""
        record = GroupRecord(key, value)
        self.apply(record)
        self._out.append(record)

    def take(self) -> tuple[GroupRecord, ...]:
        """The records written since the last call, in order (one call's batch)."""
        out, self._out = tuple(self._out), []
        return out

    def apply(self, record: GroupRecord) -> None:
        """Apply one record: later records of a key replace earlier ones, tombstones delete."""
        key, value = record.key, record.value
        group = self.groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[key.group_id] = Group(key.group_id)
        match key:
            case GroupMetadataKey():
                if value is None:
                    if self.live and group.members:
                        raise GroupInvariantError(f"deleting group {key.group_id} with members")
                    del self.groups[key.group_id]
                else:
                    assert isinstance(value, GroupMetadataValue)
                    group.metadata = value
            case OffsetCommitKey():
                if value is None:
                    group.offsets.pop(key.topic_partition, None)
                else:
                    assert isinstance(value, OffsetCommitValue)
                    group.offsets[key.topic_partition] = value
            case TargetAssignmentKey():
                if value is None:
                    group.targets.pop(key.member_id, None)
                else:
                    assert isinstance(value, TargetAssignmentValue)
                    group.targets[key.member_id] = value.partitions
            case MemberMetadataKey():
                if value is None:
                    gone = group.members.pop(key.member_id, None)
                    if self.live and gone is not None and gone.current.owned:
                        raise GroupInvariantError(
                            f"removing member {key.member_id} that still holds partitions"
                        )
                else:
                    assert isinstance(value, MemberMetadataValue)
                    group.members.setdefault(key.member_id, Member(key.member_id)).metadata = value
            case CurrentAssignmentKey():
                member = group.members.get(key.member_id)
                if value is None and member is None:
                    return
                if member is None:
                    member = group.members[key.member_id] = Member(key.member_id)
                new = NO_ASSIGNMENT if value is None else value
                assert isinstance(new, CurrentAssignmentValue)
                if self.live:
                    self._move_ownership(group, key.member_id, member.current, new)
                member.current = new

    def _move_ownership(
        self,
        group: Group,
        member_id: str,
        old: CurrentAssignmentValue,
        new: CurrentAssignmentValue,
    ) -> None:
        for tp in old.owned - new.owned:
            if group.owners.pop(tp, None) != member_id:
                raise GroupInvariantError(
                    f"group {group.group_id}: {member_id} released {tp} it did not hold"
                )
        for tp in new.owned - old.owned:
            holder = group.owners.setdefault(tp, member_id)
            if holder != member_id:
                raise GroupInvariantError(
                    f"group {group.group_id}: {tp} given to {member_id} while {holder} holds it"
                )
        if new.member_epoch < old.member_epoch and new is not NO_ASSIGNMENT:
            raise GroupInvariantError(
                f"group {group.group_id}: member {member_id} epoch {old.member_epoch} -> "
                f"{new.member_epoch} goes backwards"
            )

    def index_loaded(self) -> None:
        """After replay: check that every member has metadata, drop targets of members that
        are gone, and build the ownership indexes (a partition given to two members by the
        records is a broken invariant)."""
        for group in self.groups.values():
            for member in group.members.values():
                if member.metadata is None:
                    raise GroupRecordError(
                        f"group {group.group_id}: member {member.member_id} has an assignment "
                        "record but no member metadata record"
                    )
            for member_id in [m for m in group.targets if m not in group.members]:
                del group.targets[member_id]
            group.owners = {}
            for member in group.members.values():
                for tp in member.current.owned:
                    other = group.owners.setdefault(tp, member.member_id)
                    if other != member.member_id:
                        raise GroupInvariantError(
                            f"group {group.group_id}: the records give {tp} to both {other} "
                            f"and {member.member_id}"
                        )

    def snapshot(self) -> tuple[GroupRecord, ...]:
        """The state as the fewest records that rebuild it, in a canonical order (two stores
        in the same state give equal snapshots)."""
        out: list[GroupRecord] = []
        for group_id in sorted(self.groups):
            group = self.groups[group_id]
            out.append(GroupRecord(GroupMetadataKey(group_id), group.metadata))
            for member_id in sorted(group.members):
                member = group.members[member_id]
                if member.metadata is not None:
                    out.append(GroupRecord(MemberMetadataKey(group_id, member_id), member.metadata))
                if member_id in group.targets:
                    out.append(
                        GroupRecord(
                            TargetAssignmentKey(group_id, member_id),
                            TargetAssignmentValue(group.targets[member_id]),
                        )
                    )
                out.append(GroupRecord(CurrentAssignmentKey(group_id, member_id), member.current))
            for tp in sorted(group.offsets):
                out.append(
                    GroupRecord(
                        OffsetCommitKey(group_id, tp.topic, tp.partition), group.offsets[tp]
                    )
                )
        return tuple(out)

    def check_invariants(self) -> None:
        """Raise :class:`~replica.group.errors.GroupInvariantError` if the state is broken:
        a partition held by two members, an ownership index out of step, a member epoch
        above the assignment epoch, a target giving a partition twice."""
        for group in self.groups.values():
            owners: dict[TopicPartition, str] = {}
            targets: set[TopicPartition] = set()
            for member in group.members.values():
                current = member.current
                if current.assigned & current.pending_revocation:
                    raise GroupInvariantError(f"{member.member_id}: assigned and pending overlap")
                if current.member_epoch > group.metadata.assignment_epoch:
                    raise GroupInvariantError(
                        f"group {group.group_id}: member {member.member_id} epoch "
                        f"{current.member_epoch} > assignment epoch "
                        f"{group.metadata.assignment_epoch}"
                    )
                for tp in current.owned:
                    if tp in owners:
                        raise GroupInvariantError(
                            f"group {group.group_id}: {tp} owned by {owners[tp]} and "
                            f"{member.member_id}"
                        )
                    owners[tp] = member.member_id
                target = group.targets.get(member.member_id, frozenset())
                if targets & target:
                    raise GroupInvariantError(
                        f"group {group.group_id}: target gives a partition twice"
                    )
                targets |= target
            if owners != group.owners:
                raise GroupInvariantError(f"group {group.group_id}: ownership index out of step")
