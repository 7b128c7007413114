"""The ``__consumer_offsets`` records: every type round-trips, tombstones are null values,
and bytes that are not a valid record (truncated, oversized, unknown type or version, bad
fields, random garbage) raise ``GroupRecordError`` and nothing else."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.topic_partition import TopicPartition as TP
from replica.group import (
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecord,
    GroupRecordError,
    MemberMetadataKey,
    MemberMetadataValue,
    MemberState,
    OffsetCommitKey,
    OffsetCommitValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
    decode,
    encode,
    encode_key,
    encode_value,
)

PARTS = frozenset({TP("orders", 0), TP("orders", 7), TP("payments", 2)})

EXAMPLES = [
    GroupRecord(OffsetCommitKey("g", "orders", 3), OffsetCommitValue(42, 5, "meta", 1_700_000)),
    GroupRecord(OffsetCommitKey("gruppe-ü", "orders", 0), OffsetCommitValue(0)),
    GroupRecord(OffsetCommitKey("g", "orders", 3), None),
    GroupRecord(GroupMetadataKey("g"), GroupMetadataValue.of(7, 7, {"orders": 8, "a": 1})),
    GroupRecord(GroupMetadataKey("g"), GroupMetadataValue(0, 0)),
    GroupRecord(GroupMetadataKey("g"), None),
    GroupRecord(
        MemberMetadataKey("g", "m-1"),
        MemberMetadataValue("client-1", ("orders", "payments"), "range", 300_000, 45_000),
    ),
    GroupRecord(MemberMetadataKey("g", "m-1"), MemberMetadataValue("", (), "", 1, 6000)),
    GroupRecord(MemberMetadataKey("g", "m-1"), None),
    GroupRecord(TargetAssignmentKey("g", "m-1"), TargetAssignmentValue(PARTS)),
    GroupRecord(TargetAssignmentKey("g", "m-1"), TargetAssignmentValue(frozenset())),
    GroupRecord(TargetAssignmentKey("g", "m-1"), None),
    GroupRecord(
        CurrentAssignmentKey("g", "m-1"),
        CurrentAssignmentValue(
            4, 3, MemberState.UNREVOKED_PARTITIONS, PARTS, frozenset({TP("orders", 1)})
        ),
    ),
    GroupRecord(
        CurrentAssignmentKey("g", "m-1"),
        CurrentAssignmentValue(9, 4, MemberState.UNRELEASED_PARTITIONS, PARTS, frozenset()),
    ),
    GroupRecord(CurrentAssignmentKey("g", "m-1"), None),
]


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: f"{type(r.key).__name__}")
def test_every_record_type_round_trips(record: GroupRecord) -> None:
    key, value = encode(record)
    assert (value is None) == record.tombstone
    assert decode(key, value) == record
    assert encode(decode(key, value)) == (key, value), "the encoding is canonical"


def test_key_layout_starts_with_its_type() -> None:
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x02\x00\x01g"
    assert encode_key(OffsetCommitKey("g", "t", 1)) == (
        b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x01"
    )
    value = encode_value(OffsetCommitValue(5, -1, "", 9))
    assert value is not None and value[:2] == b"\x00\x01", "values start with version 1"
    assert encode_value(None) is None


def test_keys_of_different_types_differ() -> None:
    keys = {
        encode_key(k)
        for k in (
            MemberMetadataKey("g", "m"),
            TargetAssignmentKey("g", "m"),
            CurrentAssignmentKey("g", "m"),
        )
    }
    assert len(keys) == 3


def test_a_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(GroupRecordError):
        GroupRecord(GroupMetadataKey("g"), OffsetCommitValue(1))
    with pytest.raises(GroupRecordError):
        GroupRecord("not a key", None)  # type: ignore[arg-type]


def test_values_must_be_canonical() -> None:
    with pytest.raises(GroupRecordError):
        MemberMetadataValue("", ("b", "a"), "", 1, 1)
    with pytest.raises(GroupRecordError):
        GroupMetadataValue(1, 1, (("b", 1), ("a", 1)))


def test_group_record_error_is_corrupt_message() -> None:
    assert issubclass(GroupRecordError, CorruptMessageError)
    assert GroupRecordError.code == 2


# ---- bad bytes -------------------------------------------------------------------------------


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">H", len(raw)) + raw


def _value_of(record: GroupRecord) -> bytes:
    value = encode_value(record.value)
    assert value is not None
    return value


@pytest.mark.parametrize("record", [r for r in EXAMPLES if not r.tombstone], ids=str)
def test_every_truncation_is_refused(record: GroupRecord) -> None:
    key, value = encode(record)
    assert value is not None
    for cut in range(len(key)):
        with pytest.raises(GroupRecordError):
            decode(key[:cut], value)
    for cut in range(len(value)):
        with pytest.raises(GroupRecordError):
            decode(key, value[:cut])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (b"\x00\x09" + _str("g"), None, "unknown key type 9"),
        (b"\x00\x02" + _str(""), None, "empty group_id"),
        (b"\x00\x03" + _str("g") + _str(""), None, "empty member_id"),
        (b"\x00\x02" + _str("g") + b"x", None, "after its last field"),
        (b"\x00\x01" + _str("g") + _str("bad topic!") + b"\x00\x00\x00\x00", None, "topic"),
        (b"\x00\x01" + _str("g") + _str("t") + b"\xff\xff\xff\xff", None, "partition=-1"),
        (b"\x00\x02\x00\x02\xff\xfe", None, "UTF-8"),
        (b"\x00" * (MAX_KEY_BYTES + 1), None, "at most"),
        (
            encode_key(GroupMetadataKey("g")),
            b"\x00\x02" + b"\x00" * 12,
            "version 2 is not supported",
        ),
        (encode_key(GroupMetadataKey("g")), b"\x00" * (MAX_VALUE_BYTES + 1), "at most"),
        (
            encode_key(GroupMetadataKey("g")),
            b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x00",
            "assignment_epoch 2 > group_epoch 1",
        ),
        (
            encode_key(GroupMetadataKey("g")),
            b"\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x7f\xff\xff\xff",
            "cannot fit",
        ),
        (
            encode_key(OffsetCommitKey("g", "t", 0)),
            b"\x00\x01" + struct.pack(">qi", -5, -1) + _str("") + struct.pack(">q", 0),
            "negative",
        ),
        (
            encode_key(OffsetCommitKey("g", "t", 0)),
            b"\x00\x01" + struct.pack(">qi", 5, -2) + _str("") + struct.pack(">q", 0),
            "below -1",
        ),
        (
            encode_key(TargetAssignmentKey("g", "m")),
            b"\x00\x01" + struct.pack(">I", 1) + _str("t") + struct.pack(">Iii", 2, 3, 1),
            "not sorted",
        ),
        (
            encode_key(TargetAssignmentKey("g", "m")),
            b"\x00\x01" + struct.pack(">I", 1) + _str("t") + struct.pack(">Iii", 2, 3, 3),
            "not sorted or repeated",
        ),
        (
            encode_key(TargetAssignmentKey("g", "m")),
            b"\x00\x01" + struct.pack(">I", 2) + _str("t") + b"\x00" * 4 + _str("t") + b"\x00" * 4,
            "topics not sorted or repeated",
        ),
        (
            encode_key(CurrentAssignmentKey("g", "m")),
            _value_of(EXAMPLES[-2])[:10] + b"\x07" + _value_of(EXAMPLES[-2])[11:],
            "unknown member state 7",
        ),
        (
            encode_key(CurrentAssignmentKey("g", "m")),
            b"\x00\x01"
            + struct.pack(">iiB", 1, 0, 0)
            + (struct.pack(">I", 1) + _str("t") + struct.pack(">Ii", 1, 0)) * 2,
            "both assigned and pending",
        ),
        (
            encode_key(MemberMetadataKey("g", "m")),
            b"\x00\x01" + _str("c") + struct.pack(">I", 2) + _str("b") + _str("a"),
            "subscribed topics not sorted",
        ),
    ],
)
def test_bad_bytes_are_refused_with_a_clear_error(
    key: bytes, value: bytes | None, message: str
) -> None:
    with pytest.raises(GroupRecordError) as info:
        decode(key, value)
    assert message in str(info.value)


def test_non_bytes_are_refused() -> None:
    with pytest.raises(GroupRecordError):
        decode("key", None)  # type: ignore[arg-type]
    with pytest.raises(GroupRecordError):
        decode(encode_key(GroupMetadataKey("g")), 5)  # type: ignore[arg-type]


def test_oversized_fields_are_refused_when_encoding() -> None:
    with pytest.raises(GroupRecordError):
        encode_value(OffsetCommitValue(1, -1, "x" * 70_000, 0))
    with pytest.raises(GroupRecordError):
        encode_value(OffsetCommitValue(2**63))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64), st.none() | st.binary(max_size=96))
def test_random_bytes_raise_only_group_record_error(key: bytes, value: bytes | None) -> None:
    try:
        record = decode(key, value)
    except GroupRecordError:
        return
    assert encode(record) == (key, value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXAMPLES), st.data())
def test_mutated_records_raise_only_group_record_error(
    record: GroupRecord, data: st.DataObject
) -> None:
    key, value = encode(record)
    raw = bytearray(value if value is not None else key)
    if raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    try:
        if value is None:
            decode(bytes(raw), None)
        else:
            decode(key, bytes(raw))
    except GroupRecordError:
        pass


_names = st.text(alphabet="abcxyz-._0", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
_tps_strategy = st.frozensets(st.builds(TP, _names, st.integers(0, 9_999)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=40),
    st.text(min_size=1, max_size=40),
    st.integers(0, 2**31 - 1),
    _tps_strategy,
    _tps_strategy,
    st.dictionaries(_names, st.integers(1, 10_000), max_size=6),
)
def test_random_records_round_trip(
    group_id: str,
    member_id: str,
    epoch: int,
    assigned: frozenset[TP],
    pending: frozenset[TP],
    counts: dict[str, int],
) -> None:
    records = [
        GroupRecord(
            CurrentAssignmentKey(group_id, member_id),
            CurrentAssignmentValue(
                epoch, epoch // 2, MemberState.STABLE, assigned - pending, pending
            ),
        ),
        GroupRecord(TargetAssignmentKey(group_id, member_id), TargetAssignmentValue(assigned)),
        GroupRecord(GroupMetadataKey(group_id), GroupMetadataValue.of(epoch, epoch, counts)),
        GroupRecord(
            MemberMetadataKey(group_id, member_id),
            MemberMetadataValue(member_id, tuple(sorted(counts)), "range", epoch, 1),
        ),
    ]
    for record in records:
        assert decode(*encode(record)) == record
