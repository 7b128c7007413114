"""The records the group coordinator persists to ``__consumer_offsets``, and their bytes.

Every change of a group is a record: a *key* naming what changed and a *value* holding its
whole new state, or no value at all (a *tombstone*: the thing is gone). The latest record
of a key wins, so the topic can be compacted (``cleanup.policy=compact``) and a coordinator
rebuilds the same state from a compacted log as from the full one
(:meth:`~replica.group.coordinator.GroupCoordinator.replay`).

========================  ==========================  =====================================
key (what)                value (its state)           written when
========================  ==========================  =====================================
``OffsetCommitKey``       ``OffsetCommitValue``       an offset is committed, reset (value)
(group, topic, part.)                                 or deleted, alone or with its group
                                                      (tombstone)
``GroupMetadataKey``      ``GroupMetadataValue``      the group is created, its epoch is
(group)                                               bumped, a new target assignment is
                                                      computed; tombstone: group deleted
``MemberMetadataKey``     ``MemberMetadataValue``     a member joins or changes its
(group, member)                                       subscription, assignor or timeouts;
                                                      tombstone: the member is removed
``TargetAssignmentKey``   ``TargetAssignmentValue``   the member's share of a new target
(group, member)                                       assignment; tombstone: removed
``CurrentAssignmentKey``  ``CurrentAssignmentValue``  the member's epoch, owned partitions or
(group, member)                                       pending revocations change; tombstone:
                                                      removed
========================  ==========================  =====================================

The keys and values are frozen dataclasses defined in :mod:`replica.group._record_types`
and re-exported here; this module turns them into bytes and back.

Bytes (big-endian; Kafka's ``__consumer_offsets`` keys likewise start with a type)::

    key   = type u16 | group_id str | (topic str | partition i32)  or  (member_id str)
    value = version u16 | fields of that version         (tombstone: no value at all)

    str   = length u16 | UTF-8 bytes
    set   = topics u32 | for each: topic str | count u32 | partition i32 ...   (sorted)

(``str`` and ``set`` are :mod:`replica.coordinator_record_fields`'s, which the transaction
coordinator's records share.)

Every value is written at :data:`VALUE_VERSION` except ``MemberMetadataValue``, written at
:data:`MEMBER_METADATA_VERSION` (version 2 appends ``client_host``; version 1, without it,
is still read).

Keys and values read back are untrusted (a damaged disk, a bug in another version): sizes
are checked before parsing (:data:`MAX_KEY_BYTES`, :data:`MAX_VALUE_BYTES`), counts against
the bytes left, strings must be UTF-8, topic names valid, partition sets sorted and free of
duplicates, and unknown types or versions are refused. Anything wrong raises
:class:`~replica.group.errors.GroupRecordError`, never anything else. Encoding makes the
shared field checks too (a value out of its field's range, a string too long, an invalid
topic name or partition), raising the same error, so a field the decoder would refuse is
never written.
"""

from __future__ import annotations

import enum

from lograft.protocol.topic_partition import MAX_PARTITIONS
from replica.coordinator_record_fields import MAX_STRING_BYTES, FieldReader, FieldWriter
from replica.group._record_types import (
    NO_LEADER_EPOCH,
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
from replica.group.errors import GroupRecordError

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_STRING_BYTES",
    "MAX_VALUE_BYTES",
    "MEMBER_METADATA_VERSION",
    "NO_LEADER_EPOCH",
    "VALUE_VERSION",
    "CurrentAssignmentKey",
    "CurrentAssignmentValue",
    "GroupKey",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "GroupRecord",
    "GroupValue",
    "KeyType",
    "MemberMetadataKey",
    "MemberMetadataValue",
    "MemberState",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "TargetAssignmentKey",
    "TargetAssignmentValue",
    "decode",
    "encode",
    "encode_key",
    "encode_value",
]

MAX_KEY_BYTES = 4096
"""Largest key accepted: a group id, member id and topic name of the longest kind fit."""
MAX_VALUE_BYTES = 8 * 1024 * 1024
"""Largest value accepted, checked before parsing so a bogus count cannot exhaust memory."""
VALUE_VERSION = 1
"""The value version this module writes (and the only one it reads), except for
``MemberMetadataValue``."""
MEMBER_METADATA_VERSION = 2
"""The ``MemberMetadataValue`` version this module writes (it reads 1 and 2)."""


class KeyType(enum.IntEnum):
    """The first two bytes of every key."""

    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    MEMBER_METADATA = 3
    TARGET_ASSIGNMENT = 4
    CURRENT_ASSIGNMENT = 5


_STATE_CODES: dict[MemberState, int] = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
_STATES_BY_CODE = {code: state for state, code in _STATE_CODES.items()}


# ---- encoding --------------------------------------------------------------------------------


def encode_key(key: GroupKey) -> bytes:
    """The bytes of a record key (at most :data:`MAX_KEY_BYTES`)."""
    w = FieldWriter(GroupRecordError)
    match key:
        case OffsetCommitKey(group_id, topic, partition):
            w.u16(KeyType.OFFSET_COMMIT, "type")
            w.string(group_id, "group_id")
            w.topic(topic, "topic")
            w.partition(partition, "partition")
        case GroupMetadataKey(group_id):
            w.u16(KeyType.GROUP_METADATA, "type")
            w.string(group_id, "group_id")
        case MemberMetadataKey(group_id, member_id):
            w.u16(KeyType.MEMBER_METADATA, "type")
            w.string(group_id, "group_id")
            w.string(member_id, "member_id")
        case TargetAssignmentKey(group_id, member_id):
            w.u16(KeyType.TARGET_ASSIGNMENT, "type")
            w.string(group_id, "group_id")
            w.string(member_id, "member_id")
        case CurrentAssignmentKey(group_id, member_id):
            w.u16(KeyType.CURRENT_ASSIGNMENT, "type")
            w.string(group_id, "group_id")
            w.string(member_id, "member_id")
        case _:
            raise GroupRecordError(f"not a group record key: {key!r}")
    return w.done("key", MAX_KEY_BYTES)


def encode_value(value: GroupValue | None) -> bytes | None:
    """The bytes of a record value (at most :data:`MAX_VALUE_BYTES`); None for a tombstone."""
    if value is None:
        return None
    w = FieldWriter(GroupRecordError)
    version = MEMBER_METADATA_VERSION if isinstance(value, MemberMetadataValue) else VALUE_VERSION
    w.u16(version, "version")
    match value:
        case OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp_ms):
            w.i64(offset, "offset")
            w.i32(leader_epoch, "leader_epoch")
            w.string(metadata, "metadata")
            w.i64(commit_timestamp_ms, "commit_timestamp_ms")
        case GroupMetadataValue(group_epoch, assignment_epoch, topic_partitions):
            w.i32(group_epoch, "group_epoch")
            w.i32(assignment_epoch, "assignment_epoch")
            w.u32(len(topic_partitions), "topic count")
            for topic, count in topic_partitions:
                w.topic(topic, "topic")
                w.i32(count, "partition count")
        case MemberMetadataValue(client_id, topics, assignor, rebalance_ms, session_ms, host):
            w.string(client_id, "client_id")
            w.u32(len(topics), "subscribed topic count")
            for topic in topics:
                w.topic(topic, "subscribed topic")
            w.string(assignor, "assignor")
            w.i32(rebalance_ms, "rebalance_timeout_ms")
            w.i32(session_ms, "session_timeout_ms")
            w.string(host, "client_host")
        case TargetAssignmentValue(partitions):
            w.partitions(partitions, "target")
        case CurrentAssignmentValue(epoch, previous, state, assigned, pending):
            w.i32(epoch, "member_epoch")
            w.i32(previous, "previous_member_epoch")
            w.u8(_STATE_CODES[state], "state")
            w.partitions(assigned, "assigned")
            w.partitions(pending, "pending_revocation")
        case _:
            raise GroupRecordError(f"not a group record value: {value!r}")
    return w.done("value", MAX_VALUE_BYTES)


def encode(record: GroupRecord) -> tuple[bytes, bytes | None]:
    """``(encode_key(record.key), encode_value(record.value))``."""
    return encode_key(record.key), encode_value(record.value)


# ---- decoding --------------------------------------------------------------------------------


def _bytes(raw: object, what: str, limit: int) -> bytes:
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise GroupRecordError(f"{what} must be bytes, not {type(raw).__name__}")
    data = bytes(raw)
    if len(data) > limit:
        raise GroupRecordError(f"{what} is {len(data)} bytes, at most {limit}")
    return data


def _decode_key(raw: bytes) -> GroupKey:
    r = FieldReader(raw, "key", GroupRecordError)
    type_code = r.u16("type")
    try:
        key_type = KeyType(type_code)
    except ValueError:
        raise GroupRecordError(f"unknown key type {type_code}") from None
    group_id = r.string("group_id")
    if not group_id:
        raise GroupRecordError("key has an empty group_id")
    key: GroupKey
    if key_type is KeyType.OFFSET_COMMIT:
        topic = r.topic("topic")
        key = OffsetCommitKey(group_id, topic, r.partition("partition"))
    elif key_type is KeyType.GROUP_METADATA:
        key = GroupMetadataKey(group_id)
    else:
        member_id = r.string("member_id")
        if not member_id:
            raise GroupRecordError("key has an empty member_id")
        if key_type is KeyType.MEMBER_METADATA:
            key = MemberMetadataKey(group_id, member_id)
        elif key_type is KeyType.TARGET_ASSIGNMENT:
            key = TargetAssignmentKey(group_id, member_id)
        else:
            key = CurrentAssignmentKey(group_id, member_id)
    r.end()
    return key


# Over 70 lines: one match arm per group record type, a table read top to bottom.
def _decode_value(key: GroupKey, raw: bytes) -> GroupValue:
    r = FieldReader(raw, f"{type(key).__name__} value", GroupRecordError)
    version = r.u16("version")
    readable = (
        (VALUE_VERSION, MEMBER_METADATA_VERSION)
        if isinstance(key, MemberMetadataKey)
        else (VALUE_VERSION,)
    )
    if version not in readable:
        raise GroupRecordError(
            f"{type(key).__name__} value version {version} is not supported "
            f"(this coordinator reads version {' and '.join(map(str, readable))})"
        )
    value: GroupValue
    match key:
        case OffsetCommitKey():
            offset = r.i64("offset")
            if offset < 0:
                raise GroupRecordError(f"committed offset {offset} is negative")
            leader_epoch = r.i32("leader_epoch")
            if leader_epoch < NO_LEADER_EPOCH:
                raise GroupRecordError(f"leader_epoch {leader_epoch} is below -1")
            value = OffsetCommitValue(
                offset, leader_epoch, r.string("metadata"), r.i64("timestamp")
            )
        case GroupMetadataKey():
            group_epoch = r.non_negative_i32("group_epoch")
            assignment_epoch = r.non_negative_i32("assignment_epoch")
            if assignment_epoch > group_epoch:
                raise GroupRecordError(
                    f"assignment_epoch {assignment_epoch} > group_epoch {group_epoch}"
                )
            counts: list[tuple[str, int]] = []
            for _ in range(r.count("topic count", 6)):
                topic = r.topic("topic")
                if counts and topic <= counts[-1][0]:
                    raise GroupRecordError("group topics not sorted or repeated")
                count = r.i32("partition count")
                if not 0 < count <= MAX_PARTITIONS:
                    raise GroupRecordError(f"partition count {count} of {topic} out of range")
                counts.append((topic, count))
            value = GroupMetadataValue(group_epoch, assignment_epoch, tuple(counts))
        case MemberMetadataKey():
            client_id = r.string("client_id")
            topics: list[str] = []
            for _ in range(r.count("subscribed topic count", 3)):
                topic = r.topic("subscribed topic")
                if topics and topic <= topics[-1]:
                    raise GroupRecordError("subscribed topics not sorted or repeated")
                topics.append(topic)
            assignor = r.string("assignor")
            rebalance_ms = r.non_negative_i32("rebalance_timeout_ms")
            session_ms = r.non_negative_i32("session_timeout_ms")
            host = r.string("client_host") if version >= 2 else ""
            value = MemberMetadataValue(
                client_id, tuple(topics), assignor, rebalance_ms, session_ms, host
            )
        case TargetAssignmentKey():
            value = TargetAssignmentValue(r.partitions("target"))
        case CurrentAssignmentKey():
            epoch = r.non_negative_i32("member_epoch")
            previous = r.non_negative_i32("previous_member_epoch")
            code = r.u8("state")
            state = _STATES_BY_CODE.get(code)
            if state is None:
                raise GroupRecordError(f"unknown member state {code}")
            assigned = r.partitions("assigned")
            pending = r.partitions("pending_revocation")
            if assigned & pending:
                raise GroupRecordError("a partition is both assigned and pending revocation")
            value = CurrentAssignmentValue(epoch, previous, state, assigned, pending)
        case _:  # pragma: no cover - _decode_key returns only the types above
            raise GroupRecordError(f"not a group record key: {key!r}")
    r.end()
    return value


def decode(key: bytes, value: bytes | None) -> GroupRecord:
    """Decode a key and value read from ``__consumer_offsets`` (value None: a tombstone).

    Raises :class:`~replica.group.errors.GroupRecordError` on anything that is not a valid
    record of a known type and version.
    """
    k = _decode_key(_bytes(key, "key", MAX_KEY_BYTES))
    if value is None:
        return GroupRecord(k, None)
    return GroupRecord(k, _decode_value(k, _bytes(value, "value", MAX_VALUE_BYTES)))
