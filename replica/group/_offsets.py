"""Committed offsets (Kafka's ``OffsetCommit``, ``OffsetFetch`` and ``OffsetDelete``):
committing with a member's epoch or as an admin, fetching, resetting, deleting, and lag;
and offsets committed inside a transaction (``TxnOffsetCommit``, KIP-98 and KIP-447).

Transactional offsets are written to the log in a transactional batch of the producer, but
held *pending*, per producer id, until the transaction's marker reaches this partition: a
commit marker makes them the group's committed offsets, an abort drops them. Replaying the
log does the same with the batches and markers it reads, so a reload gives the same state.
While a group has pending offsets for a partition, a stable fetch of it is answered
``UNSTABLE_OFFSET_COMMIT`` (retriable), so a consumer starting up does not read from an
offset a transaction in flight is about to move.

Who may commit what is the protocol's, in :mod:`replica.group.coordinator` ("Offsets").
Committed offsets do not expire: they go with their group (``DeleteGroups``) or by
``OffsetDelete``. The coordinator checks that it is ``ACTIVE`` before calling in; every
change goes through the :class:`~replica.group._store.GroupStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InvalidRequestError,
    LograftError,
    OffsetMetadataTooLargeError,
    StaleMemberEpochError,
    UnassignedPartitionError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition
from replica.group._config import (
    INT32_MAX,
    INT64_MAX,
    GroupCoordinatorConfig,
    validate_group_id,
    validate_topic_partition,
)
from replica.group._store import NEW_GROUP, Group, GroupStore
from replica.group.records import (
    NO_LEADER_EPOCH,
    GroupMetadataKey,
    GroupRecord,
    OffsetCommitKey,
    OffsetCommitValue,
)

__all__ = [
    "CommitResult",
    "OffsetAndMetadata",
    "OffsetManager",
    "PartitionLag",
]


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """An offset to commit: the next offset to consume, its leader epoch, free-form metadata."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """Per partition: ``None`` (committed) or the error; and the records to persist."""

    errors: dict[TopicPartition, LograftError | None]
    records: tuple[GroupRecord, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Lag of one partition: ``end_offset - committed_offset`` (None when nothing is
    committed, as Kafka's tools show ``-``)."""

    committed_offset: int | None
    end_offset: int
    lag: int | None


class OffsetManager:
    """The committed offsets of every group in ``store``.

    ``logger`` is the shell's (a core creates none). Not thread-safe: the coordinator that
    owns it is not.
    """

    def __init__(
        self, config: GroupCoordinatorConfig, store: GroupStore, *, logger: logging.Logger
    ) -> None:
        self._config = config
        self._store = store
        self._log = logger
        # Offsets committed in transactions not ended yet, per producer id, in log order.
        self._pending: dict[int, list[GroupRecord]] = {}

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> CommitResult:
        """Handle one ``OffsetCommit``; see
        :meth:`~replica.group.coordinator.GroupCoordinator.commit_offsets`."""
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        owned = self._committer_partitions(group_id, group, member_id, member_epoch)
        errors, accepted = self._check_offsets(group_id, member_id, member_epoch, owned, offsets)
        if accepted:
            self._commit(group_id, group, accepted, now_ms)
        return CommitResult(errors, self._store.take())

    def txn_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        producer_id: int,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> CommitResult:
        """Handle one ``TxnOffsetCommit``: offsets that count once the producer's
        transaction commits. The member is checked as for ``OffsetCommit`` when it names
        itself (KIP-447); ``member_epoch`` -1 without a member id commits unchecked, as a
        producer that is not a group member does in Kafka. The records returned are to be
        written in a transactional batch of ``producer_id``; they stay pending meanwhile."""
        validate_group_id(group_id)
        if producer_id < 0:
            raise InvalidRequestError(f"TxnOffsetCommit with producer id {producer_id}")
        group = self._store.groups.get(group_id)
        owned = (
            None
            if member_epoch < 0 and not member_id
            else self._committer_partitions(group_id, group, member_id, member_epoch)
        )
        errors, accepted = self._check_offsets(group_id, member_id, member_epoch, owned, offsets)
        records = tuple(
            GroupRecord(
                OffsetCommitKey(group_id, tp.topic, tp.partition),
                OffsetCommitValue(oam.offset, oam.leader_epoch, oam.metadata, now_ms),
            )
            for tp, oam in sorted(accepted.items())
        )
        self._pending.setdefault(producer_id, []).extend(records)
        return CommitResult(errors, records)

    def replay_pending(self, producer_id: int, records: Iterable[GroupRecord]) -> None:
        """Records of a transactional batch read back from the log: pending offsets."""
        self._pending.setdefault(producer_id, []).extend(records)

    def complete_transaction(self, producer_id: int, committed: bool) -> int:
        """A marker of ``producer_id`` reached the partition: its pending offsets become
        committed (or are dropped). They are in the log already, so nothing is written.
        Returns how many there were (0 for a repeated or unrelated marker)."""
        pending = self._pending.pop(producer_id, [])
        if committed:
            for record in pending:
                self._store.apply(record)
        return len(pending)

    def pending_partitions(self, group_id: str) -> frozenset[TopicPartition]:
        """Partitions of ``group_id`` with offsets pending in an open transaction."""
        return frozenset(
            record.key.topic_partition
            for records in self._pending.values()
            for record in records
            if record.key.group_id == group_id and isinstance(record.key, OffsetCommitKey)
        )

    def _committer_partitions(
        self, group_id: str, group: Group | None, member_id: str, member_epoch: int
    ) -> frozenset[TopicPartition] | None:
        """Who may commit: the partitions the committing member owns, or None for an admin
        commit to a group without members; raises the group-level refusal."""
        admin = member_epoch < 0
        owned: frozenset[TopicPartition] | None = None
        if group is None:
            if not admin:
                raise GroupIdNotFoundError(f"group {group_id} does not exist")
        elif group.members or not admin:
            member = group.members.get(member_id) if member_id else None
            if member is None and admin:
                # Kafka's answer to an admin commit while consumers are active.
                raise UnknownMemberIdError(
                    f"group {group_id} has {len(group.members)} active members: offsets can "
                    "only be committed without membership (admin tools, reset-offsets) while "
                    "the group has no members; stop its consumers first"
                )
            if member is None:
                raise UnknownMemberIdError(
                    f"group {group_id} has no member {member_id or '(none)'}"
                )
            current = member.current
            if member_epoch > current.member_epoch:
                raise FencedMemberEpochError(
                    f"group {group_id} member {member_id}: epoch {member_epoch} is newer than "
                    f"the coordinator's {current.member_epoch}"
                )
            if member_epoch < current.member_epoch:
                raise StaleMemberEpochError(
                    f"group {group_id} member {member_id}: epoch {member_epoch} is older than "
                    f"its current {current.member_epoch}; heartbeat and commit again"
                )
            owned = current.owned
        return owned

    def _check_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        owned: frozenset[TopicPartition] | None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> tuple[dict[TopicPartition, LograftError | None], dict[TopicPartition, OffsetAndMetadata]]:
        errors: dict[TopicPartition, LograftError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, oam in offsets.items():
            error = self._offset_error(tp, oam)
            if error is None and owned is not None and tp not in owned:
                error = UnassignedPartitionError(
                    f"{tp} is not assigned to member {member_id} of group {group_id} "
                    f"at epoch {member_epoch}"
                )
            if error is None and owned is None:
                error = self._unknown_partition(tp)
            errors[tp] = error
            if error is None:
                accepted[tp] = oam
        return errors, accepted

    def reset_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | None],
        now_ms: int,
    ) -> CommitResult:
        """Admin: set (or, with None, delete) committed offsets of a group without members;
        see :meth:`~replica.group.coordinator.GroupCoordinator.reset_offsets`."""
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        if group is not None and group.members:
            raise GroupNotEmptyError(
                f"group {group_id} has {len(group.members)} members; offsets can only be reset "
                "while it has none"
            )
        errors: dict[TopicPartition, LograftError | None] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        deleted: list[TopicPartition] = []
        for tp, oam in offsets.items():
            if oam is None:
                try:
                    validate_topic_partition(tp)
                    errors[tp] = None
                    deleted.append(tp)
                except LograftError as e:
                    errors[tp] = e
                continue
            error = self._offset_error(tp, oam) or self._unknown_partition(tp)
            errors[tp] = error
            if error is None:
                accepted[tp] = oam
        if accepted:
            group = self._commit(group_id, group, accepted, now_ms)
        if group is not None:
            for tp in sorted(deleted):
                if tp in group.offsets:
                    self._store.write(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
        return CommitResult(errors, self._store.take())

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> CommitResult:
        """Handle one ``OffsetDelete``; see
        :meth:`~replica.group.coordinator.GroupCoordinator.delete_offsets`."""
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        subscribed = {t for m in group.members.values() for t in m.meta.subscribed_topics}
        errors: dict[TopicPartition, LograftError | None] = {}
        for tp in sorted(set(partitions)):
            try:
                validate_topic_partition(tp)
            except LograftError as e:
                errors[tp] = e
                continue
            if tp.topic in subscribed:
                errors[tp] = GroupSubscribedToTopicError(
                    f"members of group {group_id} subscribe to {tp.topic}: its offsets are in use"
                )
                continue
            errors[tp] = None
            if tp in group.offsets:
                self._store.write(OffsetCommitKey(group_id, tp.topic, tp.partition), None)
        return CommitResult(errors, self._store.take())

    def delete_all_offsets(self, group: Group) -> None:
        """Write a tombstone for every committed offset of ``group`` (it is being deleted;
        the caller takes the records)."""
        for tp in sorted(group.offsets):
            self._store.write(OffsetCommitKey(group.group_id, tp.topic, tp.partition), None)

    def _offset_error(self, tp: TopicPartition, oam: OffsetAndMetadata) -> LograftError | None:
        try:
            validate_topic_partition(tp)
        except LograftError as e:
            return e
        if not isinstance(oam.offset, int) or not 0 <= oam.offset <= INT64_MAX:
            return InvalidRequestError(f"committed offset {oam.offset!r} of {tp} must be >= 0")
        if (
            not isinstance(oam.leader_epoch, int)
            or not NO_LEADER_EPOCH <= oam.leader_epoch <= INT32_MAX
        ):
            return InvalidRequestError(f"leader epoch {oam.leader_epoch!r} of {tp} is not valid")
        size = len(oam.metadata.encode("utf-8"))
        if size > self._config.offset_metadata_max_bytes:
            return OffsetMetadataTooLargeError(
                f"metadata of {tp} is {size} bytes, "
                f"at most {self._config.offset_metadata_max_bytes}"
            )
        return None

    def _unknown_partition(self, tp: TopicPartition) -> LograftError | None:
        if tp.partition >= self._store.topics.get(tp.topic, 0):
            return UnknownTopicOrPartitionError(f"{tp} does not exist")
        return None

    def _commit(
        self,
        group_id: str,
        group: Group | None,
        accepted: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> Group:
        if group is None:
            self._store.write(GroupMetadataKey(group_id), NEW_GROUP)
            group = self._store.groups[group_id]
            self._log.info("group created group=%s by=offset_commit", group_id)
        for tp in sorted(accepted):
            oam = accepted[tp]
            self._store.write(
                OffsetCommitKey(group_id, tp.topic, tp.partition),
                OffsetCommitValue(oam.offset, oam.leader_epoch, oam.metadata, now_ms),
            )
        return group

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetCommitValue | None]:
        """Committed offsets (``OffsetFetch``): of ``partitions``, or every committed one;
        see :meth:`~replica.group.coordinator.GroupCoordinator.fetch_offsets`."""
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return {tp: committed[tp] for tp in sorted(committed)}
        return {tp: committed.get(tp) for tp in partitions}

    def lag(
        self, group_id: str, end_offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, PartitionLag]:
        """Lag per partition of ``end_offsets`` (``GROUP_ID_NOT_FOUND`` if no such group)."""
        validate_group_id(group_id)
        group = self._store.groups.get(group_id)
        if group is None:
            raise GroupIdNotFoundError(f"group {group_id} does not exist")
        out: dict[TopicPartition, PartitionLag] = {}
        for tp in sorted(end_offsets):
            end = end_offsets[tp]
            committed = group.offsets.get(tp)
            if committed is None:
                out[tp] = PartitionLag(None, end, None)
            else:
                out[tp] = PartitionLag(committed.offset, end, max(0, end - committed.offset))
        return out
