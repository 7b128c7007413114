"""RecordBatch v2 records: encoding, decoding, iteration over fetched bytes, corrupt input."""

# Over 600 lines: one test per rule of the record format, beside the byte-editing helpers.
from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lograft.protocol.varints as varints
from lograft.protocol.batch_builder import encode_records
from lograft.protocol.batch_header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    assign_offsets,
    batch_crc,
    parse_header,
    validate_batches,
)
from lograft.protocol.compression import CompressionType
from lograft.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError
from lograft.protocol.record_codec import encode_headers
from lograft.protocol.records import (
    LOG_APPEND_TIME,
    Record,
    RecordBatchBuilder,
    decode_records,
    encode_batch,
    iter_records,
)

CODECS = list(CompressionType)
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_BATCH = 1 << 30

Headers = Sequence[tuple[str, bytes | None]]


def decode(batch: bytes) -> list[Record]:
    """Validate a single batch as the broker would, then decode it."""
    (header,) = validate_batches(batch, MAX_BATCH)
    assert batch_crc(batch, header) == header.crc
    return decode_records(batch, header)


def with_crc(batch: bytearray) -> bytes:
    """Recompute the CRC after a test edits bytes it covers."""
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def edit_records(batch: bytes, records: bytes, *, count: int | None = None) -> bytes:
    """Replace the (uncompressed) records of a batch, fixing length, count and CRC."""
    edited = bytearray(batch[:HEADER_SIZE] + records)
    struct.pack_into(">i", edited, 8, len(edited) - 12)
    if count is not None:
        struct.pack_into(">i", edited, 23, count - 1)
        struct.pack_into(">i", edited, 57, count)
    return with_crc(edited)


# ---- varints ---------------------------------------------------------------------------

VARINT_CASES = {
    0: b"\x00",
    -1: b"\x01",
    1: b"\x02",
    63: b"\x7e",
    -64: b"\x7f",
    64: b"\x80\x01",
    -65: b"\x81\x01",
    8191: b"\xfe\x7f",
    8192: b"\x80\x80\x01",
    (1 << 31) - 1: b"\xfe\xff\xff\xff\x0f",
    -(1 << 31): b"\xff\xff\xff\xff\x0f",
    INT64_MAX: b"\xfe" + b"\xff" * 8 + b"\x01",
    INT64_MIN: b"\xff" * 9 + b"\x01",
}


@pytest.mark.parametrize("value", list(VARINT_CASES))
def test_zigzag_varint_bytes(value: int) -> None:
    # The varint primitives, checked against protobuf's sint64 encoding of the same numbers.
    encoded = varints.zigzag_varint(value)
    assert encoded == VARINT_CASES[value]
    raw, end = varints.read_raw_varint(encoded + b"tail", 0)
    assert end == len(encoded)
    assert (raw >> 1) ^ -(raw & 1) == value


def test_varint_table_matches_encoder() -> None:
    table = varints.VARINT_TABLE
    assert all(table[n] == varints.zigzag_varint(n) for n in range(len(table)))


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1])
def test_varint_out_of_range(value: int) -> None:
    with pytest.raises(ValueError):
        varints.zigzag_varint(value)


@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 127, 128, 8191, 8192, 16383, 16384, 70_000])
def test_lengths_around_varint_boundaries(length: int) -> None:
    key = b"k" * length
    value = b"v" * length
    builder = RecordBatchBuilder()
    builder.append(value, key=key, timestamp_ms=0, headers=[("h" * length, value)])
    builder.append(value, timestamp_ms=0)
    batch = builder.build()
    (first, second) = decode(batch)
    assert first == Record(0, 0, key, value, (("h" * length, value),))
    assert second == Record(1, 0, None, value)
    assert encode_batch([value, value], timestamp_ms=0) == _built([value, value], 0)


@pytest.mark.parametrize(
    "timestamps",
    [
        [0, 1, -1],
        [-1, -1],
        [1_700_000_000_000, 1_699_999_999_000, 1_700_000_005_000],
        [INT64_MAX, 0],
        [INT64_MIN, -1],
        [-(1 << 62), (1 << 62) - 1],
        [5, 5 + 63, 5 - 64, 5 + 8192],
    ],
)
def test_timestamps(timestamps: list[int]) -> None:
    builder = RecordBatchBuilder()
    for ts in timestamps:
        builder.append(b"v", timestamp_ms=ts)
    batch = builder.build()
    header = parse_header(batch)
    assert header.base_timestamp == timestamps[0]
    assert header.max_timestamp == max(timestamps)
    assert [r.timestamp for r in decode(batch)] == timestamps


def test_timestamp_delta_beyond_64_bits_is_refused() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"first", timestamp_ms=INT64_MIN)
    with pytest.raises(ValueError):
        builder.append(b"second", timestamp_ms=INT64_MAX)
    # the refused record left no trace
    assert builder.record_count == 1
    assert decode(builder.build()) == [Record(0, INT64_MIN, None, b"first")]


@pytest.mark.parametrize("ts", [INT64_MAX + 1, INT64_MIN - 1])
def test_timestamp_outside_64_bits(ts: int) -> None:
    with pytest.raises(ValueError):
        RecordBatchBuilder().append(b"v", timestamp_ms=ts)
    with pytest.raises(ValueError):
        encode_batch([b"v"], timestamp_ms=ts)


# ---- the builder -------------------------------------------------------------------------


def _built(
    values: Sequence[bytes | None],
    timestamp: int,
    keys: Sequence[bytes | None] | None = None,
    **options: int,
) -> bytes:
    builder = RecordBatchBuilder(**options)  # type: ignore[arg-type]
    for i, value in enumerate(values):
        builder.append(value, key=None if keys is None else keys[i], timestamp_ms=timestamp)
    return builder.build()


def test_builder_header_fields() -> None:
    builder = RecordBatchBuilder(
        CompressionType.NONE,
        base_offset=1000,
        producer_id=77,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=9,
        is_transactional=True,
    )
    assert builder.record_count == 0
    assert builder.estimated_size == HEADER_SIZE
    assert builder.append(b"a", timestamp_ms=500) == 0
    assert builder.append(b"b", key=b"k", timestamp_ms=700) == 1
    assert builder.append(None, timestamp_ms=600) == 2
    assert builder.record_count == 3
    batch = builder.build()
    assert builder.estimated_size == len(batch)
    header = parse_header(batch)
    assert header.base_offset == 1000
    assert header.size == len(batch)
    assert header.partition_leader_epoch == 9
    assert header.magic == 2
    assert header.crc == crc32c.crc32c(batch[21:])
    assert header.attributes == ATTR_TRANSACTIONAL
    assert header.last_offset_delta == 2
    assert header.base_timestamp == 500
    assert header.max_timestamp == 700
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 40)
    assert header.records_count == 3
    assert decode(batch) == [
        Record(1000, 500, None, b"a"),
        Record(1001, 700, b"k", b"b"),
        Record(1002, 600, None, None),
    ]


def test_builder_defaults_as_a_java_producer() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"x", timestamp_ms=1)
    header = parse_header(builder.build())
    assert header.base_offset == 0
    assert header.partition_leader_epoch == -1
    assert header.attributes == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_builder_compression_attribute(codec: CompressionType) -> None:
    builder = RecordBatchBuilder(codec)
    for i in range(50):
        builder.append(b"value %d" % i, key=b"key", timestamp_ms=1_000 + i)
    uncompressed_size = builder.estimated_size
    batch = builder.build()
    header = parse_header(batch)
    assert header.compression == codec
    if codec == CompressionType.NONE:
        assert len(batch) == uncompressed_size
    records = decode(batch)
    assert [r.value for r in records] == [b"value %d" % i for i in range(50)]
    assert [r.timestamp for r in records] == [1_000 + i for i in range(50)]


def test_log_append_time_uses_max_timestamp() -> None:
    builder = RecordBatchBuilder(timestamp_type=LOG_APPEND_TIME)
    builder.append(b"a", timestamp_ms=10)
    builder.append(b"b", timestamp_ms=30)
    batch = builder.build()
    header = parse_header(batch)
    assert header.attributes & ATTR_TIMESTAMP_TYPE
    assert [r.timestamp for r in decode(batch)] == [30, 30]


def test_default_timestamp_is_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lograft.protocol.batch_builder.time.time", lambda: 1_700_000_000.1234)
    builder = RecordBatchBuilder()
    builder.append(b"now")
    assert decode(builder.build())[0].timestamp == 1_700_000_000_123
    assert decode(encode_batch([b"now"]))[0].timestamp == 1_700_000_000_123


def test_builder_rejects_bad_settings() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatchBuilder(5)
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()


def test_build_twice_gives_the_same_bytes() -> None:
    builder = RecordBatchBuilder()
    builder.append(b"x", timestamp_ms=1)
    assert builder.build() == builder.build()


# ---- nulls, empties, headers ----------------------------------------------------------


def test_null_and_empty_are_different() -> None:
    builder = RecordBatchBuilder()
    builder.append(None, key=None, timestamp_ms=0)
    builder.append(b"", key=b"", timestamp_ms=0)
    builder.append(b"", key=None, timestamp_ms=0, headers=[("", b""), ("n", None)])
    assert decode(builder.build()) == [
        Record(0, 0, None, None),
        Record(1, 0, b"", b""),
        Record(2, 0, None, b"", (("", b""), ("n", None))),
    ]


def test_headers_keep_order_duplicates_and_unicode() -> None:
    headers = [("trace", b"1"), ("trace", b"2"), ("ключ-🔑", b"\x00\xff"), ("empty", None)]
    builder = RecordBatchBuilder()
    builder.append(b"v", key=b"k", timestamp_ms=5, headers=headers)
    (record,) = decode(builder.build())
    assert record.headers == tuple(headers)


def test_many_headers() -> None:
    headers = [(f"h{i}", bytes([i % 256]) * (i % 7)) for i in range(300)]
    builder = RecordBatchBuilder()
    builder.append(b"v", timestamp_ms=0, headers=headers)
    assert decode(builder.build())[0].headers == tuple(headers)


def test_decoded_records_are_ordinary_records() -> None:
    (record,) = decode(encode_batch([b"v"], [b"k"], timestamp_ms=3))
    expected = Record(0, 3, b"k", b"v")
    assert record == expected
    assert hash(record) == hash(expected)
    assert type(record) is Record
    assert type(record.value) is bytes
    assert repr(record) == repr(expected)
    with pytest.raises(AttributeError):
        record.value = b"other"  # type: ignore[misc]


# ---- encode_batch ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_encode_batch_round_trip(codec: CompressionType) -> None:
    values = [b"value-%d" % i * (i % 5) for i in range(300)]
    batch = encode_batch(
        values,
        timestamp_ms=1_234,
        compression=codec,
        producer_id=5,
        producer_epoch=1,
        base_sequence=17,
    )
    header = parse_header(batch)
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 17)
    assert header.base_timestamp == header.max_timestamp == 1_234
    assert decode(batch) == [Record(i, 1_234, None, v) for i, v in enumerate(values)]


def test_encode_batch_equals_the_builder() -> None:
    values: list[bytes | None] = [b"a", None, b"", b"x" * 200, None]
    keys: list[bytes | None] = [None, b"k", b"", None, b"y" * 100]
    assert encode_batch(values[:1] + values[2:4], timestamp_ms=9) == _built(
        values[:1] + values[2:4], 9
    )
    assert encode_batch(values, timestamp_ms=9) == _built(values, 9)
    assert encode_batch(values, keys, timestamp_ms=9) == _built(values, 9, keys)
    assert encode_batch(
        values, keys, timestamp_ms=9, producer_id=1, producer_epoch=2, base_sequence=3
    ) == _built(values, 9, keys, producer_id=1, producer_epoch=2, base_sequence=3)


def test_encode_batch_beyond_the_varint_tables() -> None:
    # More records than the offset-delta table and values longer than the length table.
    count = varints.TABLE_SIZE + 100
    values = [b"%d" % i for i in range(count)]
    values[5] = b"L" * (varints.TABLE_SIZE + 1)
    records = decode(encode_batch(values, timestamp_ms=0))
    assert [r.value for r in records] == values
    assert records[-1].offset == count - 1
    keys: list[bytes | None] = [b"k"] * count
    keyed = decode(encode_batch(values, keys, timestamp_ms=0))
    assert [(r.key, r.value) for r in keyed] == list(zip(keys, values, strict=True))


def test_encode_batch_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([b"a", b"b"], [b"k"])
    with pytest.raises(UnsupportedCompressionTypeError):
        encode_batch([b"a"], compression=9)


# ---- iter_records over fetched bytes --------------------------------------------------


def _log(*batches: bytes) -> bytes:
    """Concatenate batches and give them consecutive offsets, as a partition log would."""
    buf = bytearray(b"".join(batches))
    assign_offsets(buf, validate_batches(buf, MAX_BATCH), 100, 7)
    return bytes(buf)


def test_iter_records_across_batches() -> None:
    log = _log(
        encode_batch([b"a", b"b"], timestamp_ms=1),
        encode_batch([b"c"], [b"k"], timestamp_ms=2, compression=CompressionType.GZIP),
        encode_batch([b"d", b"e", b"f"], timestamp_ms=3, compression=CompressionType.ZSTD),
    )
    records = list(iter_records(log))
    assert [(r.offset, r.value) for r in records] == [
        (100, b"a"),
        (101, b"b"),
        (102, b"c"),
        (103, b"d"),
        (104, b"e"),
        (105, b"f"),
    ]
    assert records[2] == Record(102, 2, b"k", b"c")
    assert [r.offset for r in iter_records(memoryview(log), 104)] == [104, 105]
    assert [r.offset for r in iter_records(bytearray(log), 101)] == list(range(101, 106))
    assert list(iter_records(log, 106)) == []


def test_iter_records_stops_at_a_partial_tail() -> None:
    first = encode_batch([b"a", b"b"], timestamp_ms=1)
    log = _log(first, encode_batch([b"c" * 50, b"d"], timestamp_ms=1))
    for cut in range(len(first), len(log)):
        assert [r.value for r in iter_records(log[:cut])] == [b"a", b"b"], cut
    assert list(iter_records(b"")) == []
    assert list(iter_records(log[:11])) == []


def test_iter_records_crc_mismatch() -> None:
    log = bytearray(_log(encode_batch([b"a"], timestamp_ms=1), encode_batch([b"b"])))
    log[-1] ^= 0x01
    records = iter_records(bytes(log))
    assert next(records).value == b"a"
    with pytest.raises(CorruptMessageError):
        next(records)


def test_iter_records_skips_control_batches() -> None:
    control = bytearray(encode_batch([b"\x00\x00\x00\x01"], [b"\x00\x00\x00\x01"]))
    struct.pack_into(">h", control, 21, ATTR_CONTROL | ATTR_TRANSACTIONAL)
    data = encode_batch([b"before"]) + with_crc(control) + encode_batch([b"after"])
    assert [r.value for r in iter_records(data)] == [b"before", b"after"]


def test_iter_records_rejects_a_length_shorter_than_a_header() -> None:
    broken = bytearray(encode_batch([b"a"]))
    struct.pack_into(">i", broken, 8, 10)
    with pytest.raises(CorruptMessageError):
        list(iter_records(bytes(broken)))


def test_iter_records_rejects_other_magic() -> None:
    broken = bytearray(encode_batch([b"a"]))
    broken[16] = 1
    with pytest.raises(CorruptMessageError):
        list(iter_records(bytes(broken)))


# ---- corrupt records -------------------------------------------------------------------

GOOD = encode_batch([b"hello", b"world"], [b"k1", None], timestamp_ms=1_000)
GOOD_RECORDS = GOOD[HEADER_SIZE:]


def _record(body: bytes) -> bytes:
    return varints.zigzag_varint(len(body)) + body


# name -> (records section, recordsCount); headers and CRC are made valid around them
CORRUPT_RECORDS: dict[str, tuple[bytes, int]] = {
    "truncated": (GOOD_RECORDS[:-1], 2),
    "trailing-byte": (GOOD_RECORDS + b"\x00", 2),
    "count-too-small": (GOOD_RECORDS, 1),
    "count-too-large": (GOOD_RECORDS, 3),
    "negative-length": (b"\x03" + GOOD_RECORDS[1:], 2),
    "length-too-long": (bytes([GOOD_RECORDS[0] + 2]) + GOOD_RECORDS[1:], 2),
    "length-too-short": (bytes([GOOD_RECORDS[0] - 2]) + GOOD_RECORDS[1:], 2),
    "empty-record": (b"\x00" * 7, 1),
    # hand-made single records: attributes, timestampDelta, offsetDelta, key, value, headers
    "overlong-varint": (_record(b"\x00" + b"\xff" * 11 + b"\x00"), 1),
    "key-overruns": (_record(b"\x00\x00\x00\x7ekkk\x01\x00"), 1),
    "negative-key-length": (_record(b"\x00\x00\x00\x03kk\x01\x00"), 1),
    "negative-value-length": (_record(b"\x00\x00\x00\x01\x05vv\x00"), 1),
    "offset-delta-beyond-batch": (_record(b"\x00\x00\x04\x01\x01\x00"), 1),
    "negative-offset-delta": (_record(b"\x00\x00\x01\x01\x01\x00"), 1),
    "negative-header-count": (_record(b"\x00\x00\x00\x01\x01\x01"), 1),
    "negative-header-key-length": (_record(b"\x00\x00\x00\x01\x01\x02\x01\x01"), 1),
    "header-key-not-utf8": (_record(b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"), 1),
    "header-value-overruns": (_record(b"\x00\x00\x00\x01\x01\x02\x02h\x20v"), 1),
    "invalid-header-value-length": (_record(b"\x00\x00\x00\x01\x01\x02\x02h\x03vv"), 1),
    "missing-header": (_record(b"\x00\x00\x00\x01\x01\x04\x02h\x02v"), 1),
}


@pytest.mark.parametrize("case", list(CORRUPT_RECORDS))
def test_corrupt_records(case: str) -> None:
    records, count = CORRUPT_RECORDS[case]
    batch = edit_records(GOOD, records, count=count)
    (header,) = validate_batches(batch, MAX_BATCH)  # header and CRC are fine
    with pytest.raises(CorruptMessageError):
        decode_records(batch, header)
    with pytest.raises(CorruptMessageError):
        list(iter_records(batch))


def test_well_formed_hand_made_record() -> None:
    # The shape of the hand-made corrupt records above, made valid, so that each of them
    # fails for the reason it names.
    batch = edit_records(GOOD, _record(b"\x00\x00\x00\x01\x01\x02\x02h\x02v"), count=1)
    assert decode(batch) == [Record(0, 1_000, None, None, (("h", b"v"),))]


@pytest.mark.parametrize("codec", [c for c in CODECS if c != CompressionType.NONE])
def test_corrupt_compressed_records(codec: CompressionType) -> None:
    batch = bytearray(encode_batch([b"a" * 100] * 10, timestamp_ms=0, compression=codec))
    del batch[-4:]
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    batch_bytes = with_crc(batch)
    (header,) = validate_batches(batch_bytes, MAX_BATCH)
    with pytest.raises(CorruptMessageError):
        decode_records(batch_bytes, header)


def test_unknown_codec_in_a_stored_batch() -> None:
    batch = bytearray(encode_batch([b"a"]))
    struct.pack_into(">h", batch, 21, 6)
    fixed = with_crc(batch)
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_records(fixed, parse_header(fixed))


def test_decode_records_checks_the_batch_fits() -> None:
    batch = encode_batch([b"a", b"b"])
    header = parse_header(batch)
    with pytest.raises(CorruptMessageError):
        decode_records(batch[:-1], header)


def test_decode_records_at_a_position() -> None:
    log = _log(encode_batch([b"a"]), encode_batch([b"b", b"c"], timestamp_ms=4))
    second = validate_batches(log, MAX_BATCH)[1]
    assert decode_records(log, second) == [Record(101, 4, None, b"b"), Record(102, 4, None, b"c")]


# ---- properties ----------------------------------------------------------------------------

nullable_bytes = st.none() | st.binary(max_size=300)
headers_strategy = st.lists(st.tuples(st.text(max_size=20), nullable_bytes), max_size=4).map(tuple)
timestamps = st.integers(min_value=-(1 << 62), max_value=(1 << 62) - 1)  # deltas fit 64 bits
record_inputs = st.tuples(nullable_bytes, nullable_bytes, timestamps, headers_strategy)


@settings(max_examples=150, deadline=None)
@given(
    inputs=st.lists(record_inputs, min_size=1, max_size=40),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=1 << 40),
)
def test_builder_round_trip_property(
    inputs: list[tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]],
    codec: CompressionType,
    base_offset: int,
) -> None:
    builder = RecordBatchBuilder(codec, base_offset=base_offset)
    for value, key, ts, headers in inputs:
        builder.append(value, key=key, timestamp_ms=ts, headers=headers)
    batch = builder.build()
    expected = [
        Record(base_offset + i, ts, key, value, headers)
        for i, (value, key, ts, headers) in enumerate(inputs)
    ]
    assert decode(batch) == expected
    assert list(iter_records(batch)) == expected
    if codec == CompressionType.NONE:
        assert builder.estimated_size == len(batch)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(nullable_bytes, min_size=1, max_size=60),
    keyed=st.booleans(),
    data=st.data(),
    ts=st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    codec=st.sampled_from(CODECS),
)
def test_encode_batch_round_trip_property(
    values: list[bytes | None],
    keyed: bool,
    data: st.DataObject,
    ts: int,
    codec: CompressionType,
) -> None:
    keys = (
        data.draw(st.lists(nullable_bytes, min_size=len(values), max_size=len(values)))
        if keyed
        else None
    )
    batch = encode_batch(values, keys, timestamp_ms=ts, compression=codec)
    expected_keys = keys if keys is not None else [None] * len(values)
    assert decode(batch) == [
        Record(i, ts, k, v) for i, (k, v) in enumerate(zip(expected_keys, values, strict=True))
    ]
    if codec == CompressionType.NONE:
        assert batch == _built(values, ts, keys)


@settings(max_examples=300, deadline=None)
@given(
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
    codec=st.sampled_from([CompressionType.NONE, CompressionType.SNAPPY]),
)
def test_damaged_records_raise_only_corrupt_message(
    position: int, flip: int, codec: CompressionType
) -> None:
    builder = RecordBatchBuilder(codec)
    builder.append(b"value" * 20, key=b"key", timestamp_ms=5, headers=[("h", b"v")])
    builder.append(None, timestamp_ms=-70, headers=[("n", None)])
    builder.append(b"x" * 300, key=b"", timestamp_ms=9000)
    original = builder.build()
    damaged = bytearray(original)
    damaged[HEADER_SIZE + position % (len(damaged) - HEADER_SIZE)] ^= flip
    fixed = with_crc(damaged)  # past the CRC, so only the record decoder can notice
    with contextlib.suppress(CorruptMessageError):
        decoded = decode_records(fixed, parse_header(fixed))
        assert len(decoded) == 3


def _forge_count(batch: bytes, count: int) -> bytes:
    """Rewrite recordsCount and lastOffsetDelta, then fix the CRC so only the count lies."""
    import struct

    import crc32c

    forged = bytearray(batch)
    struct.pack_into(">i", forged, 23, count - 1)
    struct.pack_into(">i", forged, 57, count)
    struct.pack_into(">I", forged, 17, crc32c.crc32c(bytes(forged[21:])))
    return bytes(forged)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_record_count_is_checked(codec: int) -> None:
    from lograft.protocol.batch_header import parse_header, validate_batches
    from lograft.protocol.errors import CorruptMessageError
    from lograft.protocol.records import check_compressed_records

    batch = encode_batch([b"one", b"two", b"three"], compression=codec)
    check_compressed_records(batch, parse_header(batch))
    for lie in (2**31 - 1, 4, 2):
        forged = _forge_count(batch, lie)
        (header,) = validate_batches(forged, 1 << 20)  # the header alone looks fine
        with pytest.raises(CorruptMessageError):
            check_compressed_records(forged, header)


# ---- encode_records (the producer's open batch) -------------------------------------------

_record_strategy = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.integers(min_value=0, max_value=INT64_MAX),
    st.lists(
        st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_record_strategy, min_size=1, max_size=40),
    codec=st.sampled_from(CODECS),
)
def test_encode_records_equals_the_builder(
    records: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    codec: CompressionType,
) -> None:
    """The producer's deferred encoding gives the bytes records appended one by one give."""
    builder = RecordBatchBuilder(codec)
    for value, key, ts, headers in records:
        builder.append(value, key=key, timestamp_ms=ts, headers=headers)
    with_headers = any(headers for *_, headers in records)
    encoded = encode_records(
        [value for value, *_ in records],
        [key for _, key, *_ in records],
        [ts for _, _, ts, _ in records],
        [encode_headers(headers) for *_, headers in records] if with_headers else None,
        compression=codec,
    )
    assert encoded == builder.build()


def test_encode_records_beyond_the_varint_tables() -> None:
    """Offsets, lengths and deltas past the lookup tables are encoded, not looked up."""
    count = varints.TABLE_SIZE + 2
    values = [b"v"] * (count - 1) + [b"x" * (varints.TABLE_SIZE + 5)]
    timestamps = [1_000 + i * 10 for i in range(count)]
    batch = encode_records(values, [None] * count, timestamps, None)
    decoded = decode(batch)
    assert [r.offset for r in decoded] == list(range(count))
    assert [r.timestamp for r in decoded] == timestamps
    assert decoded[-1].value == values[-1]


def test_encode_headers_refuses_what_is_not_a_header() -> None:
    with pytest.raises(TypeError, match="header key"):
        encode_headers([(b"k", b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="header value"):
        encode_headers([("k", "v")])  # type: ignore[list-item]


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300), min_size=1, max_size=60),
    start=st.integers(min_value=0, max_value=INT64_MAX - 2**40),
    steps=st.lists(st.integers(min_value=-5, max_value=2**33), min_size=60, max_size=60),
)
def test_encode_records_without_keys_equals_the_builder(
    values: list[bytes], start: int, steps: list[int]
) -> None:
    """The unkeyed fast path (no keys, headers or null values) gives the builder's bytes."""
    timestamps = [max(0, start + step) for step in steps[: len(values)]]
    builder = RecordBatchBuilder()
    for value, ts in zip(values, timestamps, strict=True):
        builder.append(value, timestamp_ms=ts)
    encoded = encode_records(values, [None] * len(values), timestamps, None)
    assert encoded == builder.build()
