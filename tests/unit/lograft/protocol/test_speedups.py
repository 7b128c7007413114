"""The C record codec (``lograft.protocol._speedups``) against the Python codec it accelerates.

Each C function must return exactly what the Python code returns for the same input, or
decline (``None``) so that the Python code decides: the C decoder must never accept a batch
the Python decoder rejects, and the C encoder must write the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.client.consumer import ConsumerRecord
from lograft.protocol import batch_builder, record_codec
from lograft.protocol.batch_builder import encode_records
from lograft.protocol.batch_header import parse_header
from lograft.protocol.compression import CompressionType
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.record_codec import (
    _batch_records_data,
    decode_records,
    decode_rows,
    encode_headers,
)
from lograft.protocol.records import LOG_APPEND_TIME, RecordBatchBuilder, encode_batch

try:
    from lograft.protocol import _speedups
except ImportError:  # pragma: no cover - only on a machine without a C compiler
    if os.environ.get("LOGRAFT_REQUIRE_SPEEDUPS"):
        raise
    pytest.skip("lograft.protocol._speedups is not built (no C compiler)", allow_module_level=True)


@contextmanager
def python_codec() -> Iterator[None]:
    """Run the pure-Python encoders and decoder, as on a machine without the extension."""
    saved = record_codec._speedups, batch_builder._speedups
    record_codec._speedups = batch_builder._speedups = None  # type: ignore[assignment]
    try:
        yield
    finally:
        record_codec._speedups, batch_builder._speedups = saved


Rec = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]
record = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=300),
    # Deltas that need one to ten varint bytes, negative ones included.
    st.integers(-10_000, 10_000) | st.integers(-(2**40), 2**40),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
)


def built(records: list[Rec], codec: int = 0, log_append_time: bool = False) -> bytes:
    builder = RecordBatchBuilder(codec, timestamp_type=LOG_APPEND_TIME if log_append_time else 0)
    for key, value, delta, headers in records:
        builder.append(value, key, 2**41 + delta, headers)
    return builder.build()


def rows_both_ways(batch: bytes, start_offset: int) -> list[ConsumerRecord]:
    header = parse_header(batch)
    fast = decode_rows(ConsumerRecord, "t", 3, batch, header, start_offset)
    with python_codec():
        reference = decode_rows(ConsumerRecord, "t", 3, batch, header, start_offset)
    assert fast == reference
    assert all(type(row) is ConsumerRecord for row in fast)
    return fast


@settings(max_examples=300, deadline=None)
@given(
    st.lists(record, min_size=1, max_size=60),
    st.sampled_from([CompressionType.NONE, CompressionType.ZSTD]),
    st.booleans(),
    st.integers(0, 70),
)
def test_decoded_rows_equal_the_python_decoders(
    records: list[Rec], codec: CompressionType, log_append_time: bool, start_offset: int
) -> None:
    rows = rows_both_ways(built(records, codec, log_append_time), start_offset)
    assert [row.offset for row in rows] == list(range(start_offset, len(records)))
    assert [(row.key, row.value) for row in rows] == [(k, v) for k, v, _, _ in records][
        start_offset:
    ]


def test_the_c_decoder_decodes_a_well_formed_batch_itself() -> None:
    # Not a decline that the Python fallback covers: the C result is the answer.
    batch = built([(b"k", b"v", 0, [("h", b"x")]), (None, None, -5, [])])
    header = parse_header(batch)
    data = _batch_records_data(batch, header)
    rows = _speedups.decode_records(
        ConsumerRecord, "t", 0, data, 2, 0, header.base_timestamp, None, 1, 0
    )
    assert rows == [
        ConsumerRecord("t", 0, 0, 2**41, b"k", b"v", (("h", b"x"),)),
        ConsumerRecord("t", 0, 1, 2**41 - 5, None, None, ()),
    ]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(record, min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(-3, 3),
    st.integers(-1, 2),
)
def test_the_c_decoder_rejects_what_the_python_decoder_rejects(
    records: list[Rec],
    mutations: list[tuple[int, int]],
    trim: int,
    count_change: int,
) -> None:
    batch = built(records)
    header = parse_header(batch)
    data = bytearray(_batch_records_data(batch, header))
    for position, byte in mutations:
        data[position % len(data)] = byte
    data = data[: len(data) + trim] if trim < 0 else data + bytes(trim)
    count = len(records) + count_change
    try:
        with python_codec():
            expected = record_codec._decode(
                bytes(data), count, 0, header.base_timestamp, None, header.last_offset_delta
            )
    except (CorruptMessageError, IndexError):
        expected = None
    fast = _speedups.decode_records(
        ConsumerRecord,
        "t",
        0,
        bytes(data),
        count,
        0,
        header.base_timestamp,
        None,
        header.last_offset_delta,
        0,
    )
    if expected is None:
        assert fast is None
    elif fast is not None:
        assert [tuple(row)[2:] for row in fast] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected
        ]


def test_a_non_utf8_header_key_is_left_to_the_python_decoder() -> None:
    batch = built([(None, b"v", 0, [("\u00e9", None)])])
    broken = batch.replace("\u00e9".encode(), b"\xff\xfe")
    header = parse_header(broken)
    data = _batch_records_data(broken, header)
    assert _speedups.decode_records(ConsumerRecord, "t", 0, data, 1, 0, 0, None, 0, 0) is None
    with pytest.raises(CorruptMessageError, match="UTF-8"):
        record_codec._decode_checked(data, header)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(record, min_size=1, max_size=60),
    st.booleans(),
    st.booleans(),
    st.sampled_from([CompressionType.NONE, CompressionType.LZ4]),
)
def test_encoded_batches_equal_the_python_encoders(
    records: list[Rec], with_keys: bool, with_headers: bool, codec: CompressionType
) -> None:
    values = [value for _, value, _, _ in records]
    keys = [key for key, _, _, _ in records] if with_keys else [None] * len(records)
    timestamps = [2**41 + delta for _, _, delta, _ in records]
    headers = [encode_headers(h) for _, _, _, h in records] if with_headers else None
    fast = encode_records(values, keys, timestamps, headers, compression=codec)
    bulk = encode_batch(values, keys if with_keys else None, timestamp_ms=7, compression=codec)
    with python_codec():
        assert fast == encode_records(values, keys, timestamps, headers, compression=codec)
        assert bulk == encode_batch(
            values, keys if with_keys else None, timestamp_ms=7, compression=codec
        )
    # And both decode to the records they were given.
    assert [r.value for r in decode_records(fast, parse_header(fast))] == values


@pytest.mark.parametrize("count", [1, 64, 65, 8192, 8193, 20_000])
def test_bulk_batches_around_varint_boundaries(count: int) -> None:
    values = [b"x" * (i % 200) for i in range(count)]
    fast = encode_batch(values, timestamp_ms=11)
    with python_codec():
        assert fast == encode_batch(values, timestamp_ms=11)
    assert [row.value for row in rows_both_ways(fast, 0)] == values


@pytest.mark.parametrize(
    "values",
    [
        [b"a", bytearray(b"b")],  # another buffer type: the Python encoder copies it
        [b"a", memoryview(b"b")],
    ],
)
def test_other_buffer_types_are_left_to_the_python_encoder(values: list[bytes]) -> None:
    assert _speedups.encode_records(values, None, None, 0, None) is None
    batch = encode_batch(values)
    assert [r.value for r in decode_records(batch, parse_header(batch))] == [b"a", b"b"]


def test_a_value_of_another_type_raises_as_without_the_extension() -> None:
    with pytest.raises(TypeError):
        encode_batch([b"a", "text"])  # type: ignore[list-item]
    with python_codec(), pytest.raises(TypeError):
        encode_batch([b"a", "text"])  # type: ignore[list-item]


def _record(offset_delta: int, key_varint: bytes, value: bytes) -> bytes:
    """One record with a null key written as ``key_varint`` and ``value``."""
    body = b"\x00\x00" + bytes([offset_delta * 2]) + key_varint + bytes([len(value) * 2]) + value
    body += b"\x00"
    return bytes([len(body) * 2]) + body


def test_a_null_key_written_long_is_left_to_the_python_decoder_which_rejects_it() -> None:
    data = _record(0, b"\x81\x00", b"v")  # -1 in two bytes: Kafka writes it in one
    assert _speedups.decode_records(ConsumerRecord, "t", 0, data, 1, 0, 0, None, 0, 0) is None
    with pytest.raises(CorruptMessageError):
        record_codec._decode(data, 1, 0, 0, None, 0)


def test_offsets_out_of_order_are_left_to_the_python_decoder() -> None:
    data = _record(1, b"\x01", b"a") + _record(0, b"\x01", b"b")
    assert _speedups.decode_records(ConsumerRecord, "t", 0, data, 2, 10, 0, None, 1, 11) is None
    assert [r.offset for r in record_codec._decode(data, 2, 10, 0, None, 1)] == [11, 10]


def test_the_c_encoder_takes_only_exact_bytes_and_ints() -> None:
    # Converting anything else may run Python code between the encoder's two passes.
    values = [b"x"]

    class Sneaky:
        def __index__(self) -> int:
            values[0] = b"y" * 1_000_000
            return 0

    class Bytes(bytes):
        pass

    assert _speedups.encode_records(values, None, [Sneaky()], 0, None) is None
    assert values == [b"x"]
    assert _speedups.encode_records([Bytes(b"x")], None, None, 0, None) is None
    assert _speedups.encode_records([b"x"], [Bytes(b"k")], None, 0, None) is None
    assert _speedups.encode_records([b"x"], None, [True], 0, None) is None
