"""The values ``AdminClient``'s consumer-group calls return, read off the wire.

Kafka's names (``ConsumerGroupListing``, ``ConsumerGroupDescription``, ``MemberDescription``,
``OffsetAndMetadata``), and :func:`group_lag`, which joins a group's members, committed
offsets and log end offsets into the rows ``kafka-consumer-groups --describe`` shows.
Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lograft.protocol.errors import LograftError, error_for_code

from ._config_admin import Node
from ._connection import BrokerInfo, TopicPartition

__all__ = [
    "CONSUMER_GROUP_TYPE",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "GroupPartitionLag",
    "MemberDescription",
    "OffsetAndMetadata",
    "description_from_pb",
    "group_lag",
    "partition_errors",
    "partitions_from_pb",
]

CONSUMER_GROUP_TYPE = "consumer"
"""The type of every lograft group: Kafka's KIP-848 ``consumer`` protocol (no ``classic``)."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    """A group as ``list_consumer_groups`` shows it.

    ``state`` is Kafka's: ``Empty`` (no members; committed offsets may remain),
    ``Assigning``, ``Reconciling`` (members are moving to a new assignment) or ``Stable``.
    """

    group_id: str
    state: str
    type: str = CONSUMER_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """One member of a group: ids, where it runs (``host``, as Kafka shows it:
    ``/127.0.0.1``), the partitions it owns now (``assignment``) and those the group's
    target assignment gives it (``target_assignment``; they differ while it reconciles)."""

    member_id: str
    client_id: str
    host: str
    assignment: frozenset[TopicPartition]
    member_epoch: int = 0
    target_assignment: frozenset[TopicPartition] = frozenset()
    subscribed_topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """A group as ``describe_consumer_groups`` shows it: state, epochs, the server-side
    assignor in use, the coordinator broker and the members (sorted by member id)."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    coordinator: Node
    members: tuple[MemberDescription, ...]

    @property
    def type(self) -> str:
        """``consumer`` (see ``ConsumerGroupListing.type``)."""
        return CONSUMER_GROUP_TYPE


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next offset the group will read, the leader epoch of the
    record before it (``None`` when the committer did not know it) and free-form metadata."""

    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    """One row of ``lograft groups describe``: a partition the group owns or has committed.

    ``current_offset`` is the committed offset (``None``: nothing committed),
    ``log_end_offset`` the partition's latest offset (``None``: the topic is gone),
    ``lag`` their difference (``None`` if either is unknown); ``member_id``, ``client_id``
    and ``host`` name the member that owns the partition (``None``: no member does).
    """

    topic_partition: TopicPartition
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    member_id: str | None = None
    client_id: str | None = None
    host: str | None = None


def partitions_from_pb(topics: Iterable[Any]) -> frozenset[TopicPartition]:
    """``TopicPartitions`` messages as a set of partitions."""
    return frozenset(TopicPartition(t.topic, p) for t in topics for p in t.partitions)


def partition_errors(topics: Iterable[Any]) -> dict[TopicPartition, LograftError | None]:
    """``OffsetCommitTopicResponse`` messages: per partition ``None`` or its typed error."""
    return {
        TopicPartition(t.name, p.partition): (
            error_for_code(p.error_code, p.error_message or f"{t.name}-{p.partition}")
            if p.error_code
            else None
        )
        for t in topics
        for p in t.partitions
    }


def description_from_pb(group: Any, coordinator: BrokerInfo) -> ConsumerGroupDescription:
    """A ``DescribedGroup`` (without error) as a description; ``coordinator`` answered it."""
    members = tuple(
        sorted(
            (
                MemberDescription(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    host=m.client_host,
                    assignment=partitions_from_pb(m.assignment),
                    member_epoch=m.member_epoch,
                    target_assignment=partitions_from_pb(m.target_assignment),
                    subscribed_topics=tuple(m.subscribed_topic_names),
                )
                for m in group.members
            ),
            key=lambda m: m.member_id,
        )
    )
    return ConsumerGroupDescription(
        group_id=group.group_id,
        state=group.state,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor=group.assignor,
        coordinator=Node(coordinator.node_id, coordinator.host, coordinator.port),
        members=members,
    )


def group_lag(
    description: ConsumerGroupDescription,
    committed: Mapping[TopicPartition, int | None],
    log_end_offsets: Mapping[TopicPartition, int],
) -> tuple[GroupPartitionLag, ...]:
    """Rows for every partition a member owns or the group has an offset for, sorted.

    A partition missing from ``log_end_offsets`` has an unknown end (its topic is gone).
    The lag is ``log_end_offset - current_offset`` as Kafka's tool computes it (negative
    only if the log was truncated below the committed offset).
    """
    owners = {tp: m for m in description.members for tp in m.assignment}
    rows: list[GroupPartitionLag] = []
    for tp in sorted(set(owners) | {tp for tp, o in committed.items() if o is not None}):
        current = committed.get(tp)
        end = log_end_offsets.get(tp)
        owner = owners.get(tp)
        rows.append(
            GroupPartitionLag(
                topic_partition=tp,
                current_offset=current,
                log_end_offset=end,
                lag=end - current if end is not None and current is not None else None,
                member_id=owner.member_id if owner else None,
                client_id=owner.client_id if owner else None,
                host=owner.host if owner else None,
            )
        )
    return tuple(rows)
