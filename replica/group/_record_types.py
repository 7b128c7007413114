"""The ``__consumer_offsets`` record keys and values, as frozen dataclasses.

What each key means and when it is written, and the bytes of each, are in
:mod:`replica.group.records` (which re-exports every name here: import them from there or
from :mod:`replica.group`). A value that breaks a rule of its type (unsorted topics, a value
of the wrong type for its key) raises :class:`~replica.group.errors.GroupRecordError`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from lograft.protocol.topic_partition import TopicPartition
from replica.group.errors import GroupRecordError

__all__ = [
    "NO_LEADER_EPOCH",
    "CurrentAssignmentKey",
    "CurrentAssignmentValue",
    "GroupKey",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupRecord",
    "GroupValue",
    "MemberMetadataKey",
    "MemberMetadataValue",
    "MemberState",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "TargetAssignmentKey",
    "TargetAssignmentValue",
]

NO_LEADER_EPOCH = -1
"""``committed_leader_epoch`` when the committer did not know it."""


class MemberState(enum.Enum):
    """Where a member stands in reconciling towards its target assignment (Kafka's names).

    * ``STABLE`` -- the member owns its whole target at the target's epoch.
    * ``UNREVOKED_PARTITIONS`` -- it was told to give partitions up and has not yet
      reported that it did; they stay its own (``pending_revocation``) until it does.
    * ``UNRELEASED_PARTITIONS`` -- it is at the target's epoch but waits for partitions
      that other members have not released yet.
    """

    STABLE = "Stable"
    UNREVOKED_PARTITIONS = "UnrevokedPartitions"
    UNRELEASED_PARTITIONS = "UnreleasedPartitions"


# ---- keys ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class OffsetCommitKey:
    """The committed offset of one partition for one group."""

    group_id: str
    topic: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition this key names."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True, order=True)
class GroupMetadataKey:
    """The group itself: its existence, group epoch and assignment epoch."""

    group_id: str


@dataclass(frozen=True, slots=True, order=True)
class MemberMetadataKey:
    """What a member asked for: subscription, assignor, timeouts."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True, order=True)
class TargetAssignmentKey:
    """A member's share of the group's target assignment."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True, order=True)
class CurrentAssignmentKey:
    """A member's epoch and the partitions it has been told it owns."""

    group_id: str
    member_id: str


GroupKey = (
    OffsetCommitKey
    | GroupMetadataKey
    | MemberMetadataKey
    | TargetAssignmentKey
    | CurrentAssignmentKey
)
"""Any record key."""


# ---- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset: the next offset to consume, as Kafka commits it."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """The group epoch, the epoch of the current target assignment, and the partition counts
    of the subscribed topics that target was computed from (sorted by topic).

    The counts let a coordinator that loads the group notice topics that changed while no
    coordinator was watching.
    """

    group_epoch: int
    assignment_epoch: int
    topic_partitions: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        topics = [topic for topic, _ in self.topic_partitions]
        if topics != sorted(set(topics)):
            raise GroupRecordError("topic_partitions must be sorted by topic, each topic once")

    @classmethod
    def of(
        cls, group_epoch: int, assignment_epoch: int, counts: Mapping[str, int]
    ) -> GroupMetadataValue:
        """Build one from a topic -> partition count mapping (sorted for a canonical value)."""
        return cls(group_epoch, assignment_epoch, tuple(sorted(counts.items())))

    @property
    def partition_counts(self) -> dict[str, int]:
        """``topic_partitions`` as a dict."""
        return dict(self.topic_partitions)


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    """What the member asked for. ``assignor`` is empty when the member named none.

    ``client_host`` is where its heartbeats come from, as Kafka shows it (``/127.0.0.1``);
    empty when unknown (records of version 1).
    """

    client_id: str
    subscribed_topics: tuple[str, ...]
    assignor: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    client_host: str = ""

    def __post_init__(self) -> None:
        if list(self.subscribed_topics) != sorted(set(self.subscribed_topics)):
            raise GroupRecordError("subscribed_topics must be sorted, each topic once")


@dataclass(frozen=True, slots=True)
class TargetAssignmentValue:
    """The partitions the target assignment gives the member."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    """The member's epoch and what it has been told it owns.

    ``assigned`` is what its heartbeat answers list; ``pending_revocation`` is what it was
    told to give up but still owns until it reports otherwise. No partition is in both, and
    no partition is in either set of two members of a group.
    """

    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: frozenset[TopicPartition]
    pending_revocation: frozenset[TopicPartition]

    @property
    def owned(self) -> frozenset[TopicPartition]:
        """``assigned`` plus ``pending_revocation``: every partition the member may hold."""
        return self.assigned | self.pending_revocation


GroupValue = (
    OffsetCommitValue
    | GroupMetadataValue
    | MemberMetadataValue
    | TargetAssignmentValue
    | CurrentAssignmentValue
)
"""Any record value."""

_VALUE_TYPE: dict[type, type] = {
    OffsetCommitKey: OffsetCommitValue,
    GroupMetadataKey: GroupMetadataValue,
    MemberMetadataKey: MemberMetadataValue,
    TargetAssignmentKey: TargetAssignmentValue,
    CurrentAssignmentKey: CurrentAssignmentValue,
}


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One record: ``value`` None is a tombstone (the key's thing is deleted)."""

    key: GroupKey
    value: GroupValue | None

    def __post_init__(self) -> None:
        expected = _VALUE_TYPE.get(type(self.key))
        if expected is None:
            raise GroupRecordError(f"not a group record key: {self.key!r}")
        if self.value is not None and type(self.value) is not expected:
            raise GroupRecordError(
                f"{type(self.key).__name__} needs a {expected.__name__}, "
                f"not a {type(self.value).__name__}"
            )

    @property
    def tombstone(self) -> bool:
        """Whether this record deletes its key."""
        return self.value is None
