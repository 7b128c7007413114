"""The coordinators' shared record field codec: fields round-trip in the documented layout,
and malformed bytes (truncated, a count larger than the bytes left, unsorted or repeated
partitions, bad topic names, partitions out of range, bytes over) raise the error type the
caller chose, and nothing else."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.topic_partition import MAX_PARTITIONS
from lograft.protocol.topic_partition import TopicPartition as TP
from replica.coordinator_record_fields import MAX_STRING_BYTES, FieldReader, FieldWriter
from replica.group.errors import GroupRecordError


class DamagedError(CorruptMessageError):
    """A stand-in for a coordinator's own corrupt-record error."""


# Each coordinator passes its own type: the reader and writer must raise exactly that one.
ERRORS = [DamagedError, GroupRecordError, CorruptMessageError]


def _str(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">H", len(raw)) + raw


def _set(*topics: tuple[str, list[int]]) -> bytes:
    """A set's bytes laid out by hand, in whatever order and with whatever repeats given."""
    out = struct.pack(">I", len(topics))
    for topic, partitions in topics:
        out += _str(topic) + struct.pack(f">I{len(partitions)}i", len(partitions), *partitions)
    return out


def _read_set(data: bytes, error: type[CorruptMessageError] = DamagedError) -> frozenset[TP]:
    r = FieldReader(data, "value", error)
    out = r.partitions("assigned")
    r.end()
    return out


# ---- the layout ------------------------------------------------------------------------------


def test_every_field_round_trips_in_its_documented_layout() -> None:
    w = FieldWriter(DamagedError)
    w.u8(255, "u8")
    w.u16(0xFFFF, "u16")
    w.u32(2**32 - 1, "u32")
    w.i8(-128, "i8")
    w.i16(-(2**15), "i16")
    w.i32(2**31 - 1, "i32")
    w.i64(-(2**63), "i64")
    w.string("grüße", "string")
    w.topic("orders", "topic")
    w.partition(MAX_PARTITIONS - 1, "partition")
    w.partitions([TP("b", 2), TP("a", 9), TP("b", 0)], "set")
    data = w.done("value")
    assert data == (
        struct.pack(">BHIbhiq", 255, 0xFFFF, 2**32 - 1, -128, -(2**15), 2**31 - 1, -(2**63))
        + _str("grüße")
        + _str("orders")
        + struct.pack(">i", MAX_PARTITIONS - 1)
        + _set(("a", [9]), ("b", [0, 2]))  # topics sorted, then each topic's partitions
    )
    r = FieldReader(data, "value", DamagedError)
    assert (r.u8("u8"), r.u16("u16"), r.u32("u32")) == (255, 0xFFFF, 2**32 - 1)
    assert (r.i8("i8"), r.i16("i16"), r.i32("i32")) == (-128, -(2**15), 2**31 - 1)
    assert r.i64("i64") == -(2**63)
    assert r.string("string") == "grüße"
    assert r.topic("topic") == "orders"
    assert r.partition("partition") == MAX_PARTITIONS - 1
    assert r.left() == len(_set(("a", [9]), ("b", [0, 2])))
    assert r.partitions("set") == {TP("a", 9), TP("b", 0), TP("b", 2)}
    r.end()


def test_an_empty_set_is_one_zero_count() -> None:
    w = FieldWriter(DamagedError)
    w.partitions([], "set")
    assert w.done("value") == b"\x00\x00\x00\x00"
    assert _read_set(b"\x00\x00\x00\x00") == frozenset()


def test_repeated_partitions_are_written_once() -> None:
    w = FieldWriter(DamagedError)
    w.partitions([TP("a", 1), TP("a", 1)], "set")
    assert w.done("value") == _set(("a", [1]))


# ---- malformed bytes -------------------------------------------------------------------------


@pytest.mark.parametrize("error", ERRORS)
def test_every_truncation_raises_the_given_error(error: type[CorruptMessageError]) -> None:
    data = _set(("a", [0, 3]), ("orders", [7]))
    for cut in range(len(data)):
        with pytest.raises(error) as info:
            _read_set(data[:cut], error)
        assert type(info.value) is error
    with pytest.raises(error, match=r"value ends inside x \(needs 8 bytes at 0, has 5\)"):
        FieldReader(b"\x00\x05abc", "value", error).i64("x")
    with pytest.raises(error, match=r"value ends inside s \(needs 5 bytes at 2, has 3\)"):
        FieldReader(b"\x00\x05abc", "value", error).string("s")
    with pytest.raises(error, match="value ends inside u8"):
        FieldReader(b"", "value", error).u8("u8")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # Claims 2**32-1 topics (each at least 6 bytes) with 4 bytes left: refused before
        # looping, not after billions of iterations.
        (b"\xff\xff\xff\xff" + b"\x00" * 4, "assigned topic count=4294967295 cannot fit"),
        (struct.pack(">I", 2) + _str("a") + struct.pack(">I", 0), "topic count=2 cannot fit"),
        (
            struct.pack(">I", 1) + _str("a") + struct.pack(">Ii", 2, 0),
            "partition count=2 cannot fit in the 4 bytes left",
        ),
    ],
)
def test_a_count_larger_than_the_bytes_left_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(DamagedError, match=message):
        _read_set(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_set(("a", [3, 1])), "assigned partitions of a not sorted or repeated"),
        (_set(("a", [1, 1])), "assigned partitions of a not sorted or repeated"),
        (_set(("b", [0]), ("a", [0])), "assigned topics not sorted or repeated"),
        (_set(("a", [0]), ("a", [1])), "assigned topics not sorted or repeated"),
    ],
)
def test_unsorted_or_repeated_partitions_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(DamagedError, match=message):
        _read_set(data)


@pytest.mark.parametrize("name", ["", "bad topic!", ".", "..", "x" * 250, "ü"])
def test_bad_topic_names_are_refused_when_read_and_when_written(name: str) -> None:
    with pytest.raises(DamagedError, match="assigned topic"):
        _read_set(_set((name, [0])))
    with pytest.raises(DamagedError, match="topic"):
        FieldReader(_str(name), "key", DamagedError).topic("topic")
    w = FieldWriter(DamagedError)
    with pytest.raises(DamagedError, match="assigned topic"):
        w.partitions([TP(name, 0)], "assigned")
    with pytest.raises(DamagedError, match="topic"):
        w.topic(name, "topic")


@pytest.mark.parametrize("partition", [-1, MAX_PARTITIONS, 2**31 - 1])
def test_partitions_out_of_range_are_refused_when_read_and_when_written(partition: int) -> None:
    with pytest.raises(DamagedError, match=f"assigned partition={partition} is not in"):
        _read_set(_set(("a", [partition])))
    with pytest.raises(DamagedError, match=f"partition={partition} is not in"):
        FieldWriter(DamagedError).partitions([TP("a", partition)], "assigned")


def test_a_string_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(DamagedError, match="key: id is not UTF-8"):
        FieldReader(b"\x00\x02\xff\xfe", "key", DamagedError).string("id")


def test_bytes_after_the_last_field_are_refused() -> None:
    r = FieldReader(b"\x00\x01\x00", "key", DamagedError)
    assert r.u16("version") == 1
    with pytest.raises(DamagedError, match="key has 1 bytes after its last field"):
        r.end()


def test_a_negative_value_is_refused_where_it_must_not_be() -> None:
    with pytest.raises(DamagedError, match="value: epoch=-1 is negative"):
        FieldReader(struct.pack(">i", -1), "value", DamagedError).non_negative_i32("epoch")


# ---- what the writer refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "value", "kind"),
    [
        ("u8", 256, "uint8"),
        ("u8", -1, "uint8"),
        ("u16", 2**16, "uint16"),
        ("u32", 2**32, "uint32"),
        ("i8", 128, "int8"),
        ("i16", -(2**15) - 1, "int16"),
        ("i32", 2**31, "int32"),
        ("i64", 2**63, "int64"),
    ],
)
def test_a_value_out_of_its_field_range_is_refused(method: str, value: int, kind: str) -> None:
    w = FieldWriter(DamagedError)
    with pytest.raises(DamagedError, match=f"epoch={value} does not fit in {kind}"):
        getattr(w, method)(value, "epoch")


def test_strings_and_records_over_their_limits_are_refused() -> None:
    w = FieldWriter(DamagedError)
    w.string("x" * MAX_STRING_BYTES, "metadata")  # the longest that fits
    with pytest.raises(DamagedError, match=f"metadata is 65536 bytes, at most {MAX_STRING_BYTES}"):
        w.string("x" * (MAX_STRING_BYTES + 1), "metadata")
    with pytest.raises(DamagedError, match="key is 65537 bytes, at most 4096"):
        w.done("key", 4096)
    assert len(w.done("key")) == MAX_STRING_BYTES + 2  # no limit given: none checked


# ---- anything at all -------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_the_given_error(data: bytes) -> None:
    try:
        tps = _read_set(data)
    except DamagedError:
        return
    w = FieldWriter(DamagedError)
    w.partitions(tps, "assigned")
    assert w.done("value") == data  # what it accepts is the one encoding of that set


_names = st.text(alphabet="abcxyz-._0", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=200, deadline=None)
@given(st.frozensets(st.builds(TP, _names, st.integers(0, MAX_PARTITIONS - 1)), max_size=20))
def test_random_sets_round_trip(tps: frozenset[TP]) -> None:
    w = FieldWriter(DamagedError)
    w.partitions(tps, "assigned")
    assert _read_set(w.done("value")) == tps
