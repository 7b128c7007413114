"""What ``DescribeGroups`` and ``ListGroups`` show: each group's state and its members.

Group state (derived from the records, as Kafka reports it for consumer groups; the first
row that holds wins)::

    state         when
    Empty         the group has no members
    Assigning     the assignment epoch is behind the group epoch
    Reconciling   a member is not STABLE at the assignment epoch
    Stable        otherwise

Nothing here changes state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lograft.protocol.topic_partition import TopicPartition
from replica.group._store import Group, GroupStore
from replica.group.records import MemberState

__all__ = [
    "GroupDescription",
    "GroupListing",
    "GroupState",
    "MemberDescription",
    "describe_group",
    "group_state",
    "list_groups",
]


class GroupState(enum.Enum):
    """A group's state as Kafka names it for consumer groups (see the module docstring)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member as ``DescribeGroups`` shows it."""

    member_id: str
    client_id: str
    member_epoch: int
    state: MemberState
    subscribed_topics: tuple[str, ...]
    assignor: str
    assignment: frozenset[TopicPartition]
    pending_revocation: frozenset[TopicPartition]
    target_assignment: frozenset[TopicPartition]
    rebalance_timeout_ms: int
    session_timeout_ms: int
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """One group as ``DescribeGroups`` shows it; ``assignor`` is the one the group uses."""

    group_id: str
    state: GroupState
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]
    topic_partitions: dict[str, int]


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group as ``ListGroups`` shows it."""

    group_id: str
    state: GroupState


def group_state(group: Group) -> GroupState:
    """The group's state (the table in the module docstring)."""
    if not group.members:
        return GroupState.EMPTY
    if group.metadata.assignment_epoch < group.metadata.group_epoch:
        return GroupState.ASSIGNING
    epoch = group.metadata.assignment_epoch
    for m in group.members.values():
        if m.current.state is not MemberState.STABLE or m.current.member_epoch != epoch:
            return GroupState.RECONCILING
    return GroupState.STABLE


def describe_group(group: Group, assignor: str) -> GroupDescription:
    """The group and its members, sorted by member id; ``assignor`` is the one it uses."""
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            client_id=m.meta.client_id,
            member_epoch=m.current.member_epoch,
            state=m.current.state,
            subscribed_topics=m.meta.subscribed_topics,
            assignor=m.meta.assignor,
            assignment=m.current.assigned,
            pending_revocation=m.current.pending_revocation,
            target_assignment=group.targets.get(m.member_id, frozenset()),
            rebalance_timeout_ms=m.meta.rebalance_timeout_ms,
            session_timeout_ms=m.meta.session_timeout_ms,
            client_host=m.meta.client_host,
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    return GroupDescription(
        group_id=group.group_id,
        state=group_state(group),
        group_epoch=group.metadata.group_epoch,
        assignment_epoch=group.metadata.assignment_epoch,
        assignor=assignor,
        members=members,
        topic_partitions=group.metadata.partition_counts,
    )


def list_groups(store: GroupStore) -> tuple[GroupListing, ...]:
    """Every group of ``store``, sorted by id."""
    return tuple(
        GroupListing(group_id, group_state(store.groups[group_id]))
        for group_id in sorted(store.groups)
    )
