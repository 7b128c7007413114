"""Byte compatibility with kafka-python 3.0.12, an independent RecordBatch v2 implementation.

Both directions, every codec: batches kafka-python builds decode here to the same records
and pass broker validation; batches built here are read, CRC-checked, by kafka-python; and
for uncompressed batches the bytes are identical given identical inputs.

kafka-python is a test-only dependency.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import pytest

# kafka-python 3.0.12 calls importlib.resources' deprecated legacy functions (read_text,
# open_text) while importing its protocol package; the suite turns warnings into errors, so
# those, and only during this import, are silenced.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"\w+ is deprecated\. Use files\(\)", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from lograft.protocol.batch_header import parse_header, validate_batches
from lograft.protocol.compression import CompressionType, compress, decompress
from lograft.protocol.records import (
    Record,
    RecordBatchBuilder,
    decode_records,
    encode_batch,
    iter_records,
)

CODECS = list(CompressionType)
MAX_BATCH = 1 << 30

RecordInput = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]

# Compressible values, so that kafka-python really compresses: it silently falls back to an
# uncompressed batch when compression does not shrink the records.
INPUTS: list[RecordInput] = [
    (b"key-0", b"value " * 30, 1_700_000_000_000, []),
    (None, b"value " * 30, 1_700_000_000_005, [("trace-id", b"abc"), ("empty", None)]),
    (b"", b"", 1_699_999_999_000, [("", b"")]),
    (b"key-3", None, 1_700_000_000_005, []),
    (None, None, 1_700_000_100_000, [("ключ", b"\x00\xff" * 10)]),
]
INPUTS += [(b"k%d" % i, b"payload " * (i % 13), 1_700_000_000_000 + i * 70, []) for i in range(300)]


def kafka_python_batch(
    inputs: Sequence[RecordInput],
    codec: int = 0,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=MAX_BATCH,
    )
    for offset, (key, value, timestamp, headers) in enumerate(inputs):
        metadata = builder.append(offset, timestamp, key, value, headers)
        assert metadata is not None
    return bytes(builder.build())


def our_batch(inputs: Sequence[RecordInput], codec: int = 0, **options: int | bool) -> bytes:
    builder = RecordBatchBuilder(codec, **options)  # type: ignore[arg-type]
    for key, value, timestamp, headers in inputs:
        builder.append(value, key=key, timestamp_ms=timestamp, headers=headers)
    return builder.build()


def expected_records(inputs: Sequence[RecordInput], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, timestamp, key, value, tuple(headers))
        for i, (key, value, timestamp, headers) in enumerate(inputs)
    ]


def read_with_kafka_python(batch: bytes) -> list[Record]:
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in reader]


# ---- (a) kafka-python writes, lograft reads -------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_kafka_python_batches_decode_here(codec: CompressionType) -> None:
    batch = kafka_python_batch(INPUTS, codec, producer_id=42, producer_epoch=1, base_sequence=7)
    (header,) = validate_batches(batch, MAX_BATCH)
    assert header.compression == codec  # really compressed, no silent fallback
    assert header.records_count == len(INPUTS)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 1, 7)
    assert header.base_timestamp == INPUTS[0][2]
    assert header.max_timestamp == max(ts for _, _, ts, _ in INPUTS)
    assert decode_records(batch, header) == expected_records(INPUTS)
    assert list(iter_records(batch)) == expected_records(INPUTS)
    assert list(iter_records(batch, 300)) == expected_records(INPUTS)[300:]


def test_kafka_python_transactional_batch() -> None:
    batch = kafka_python_batch(
        INPUTS[:3], producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    (header,) = validate_batches(batch, MAX_BATCH)
    assert header.attributes == 0x10
    assert decode_records(batch, header) == expected_records(INPUTS[:3])


def test_many_kafka_python_batches_as_one_fetch() -> None:
    batches = [kafka_python_batch(INPUTS[50 * codec : 50 * codec + 50], codec) for codec in CODECS]
    fetched = b"".join(batches)
    headers = validate_batches(fetched, MAX_BATCH)
    assert [h.compression for h in headers] == [0, 1, 2, 3, 4]
    # kafka-python leaves every baseOffset at 0 (the broker assigns them), so offsets
    # repeat per batch here.
    values = [r.value for r in iter_records(fetched)]
    assert values == [value for _, value, _, _ in INPUTS[:250]]


# ---- (b) lograft writes, kafka-python reads -------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_our_builder_read_by_kafka_python(codec: CompressionType) -> None:
    batch = our_batch(INPUTS, codec, base_offset=500, producer_id=3, producer_epoch=2)
    reader = DefaultRecordBatch(batch)
    assert reader.compression_type == codec
    assert reader.base_offset == 500
    assert (reader.producer_id, reader.producer_epoch) == (3, 2)
    assert reader.first_timestamp == INPUTS[0][2]
    assert reader.max_timestamp == max(ts for _, _, ts, _ in INPUTS)
    assert read_with_kafka_python(batch) == expected_records(INPUTS, 500)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_our_encode_batch_read_by_kafka_python(codec: CompressionType, keyed: bool) -> None:
    values: list[bytes | None] = [b"message %d " % i * 5 for i in range(400)]
    values[7] = None
    values[8] = b""
    values[9] = b"L" * 20_000  # past the encoder's varint tables
    keys: list[bytes | None] | None = (
        [None if i % 3 else b"key-%d" % i for i in range(400)] if keyed else None
    )
    batch = encode_batch(
        values,
        keys,
        timestamp_ms=1_650_000_000_000,
        compression=codec,
        producer_id=8,
        producer_epoch=0,
        base_sequence=100,
    )
    reader = DefaultRecordBatch(batch)
    assert reader.compression_type == codec
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence) == (8, 0, 100)
    expected_keys = keys if keys is not None else [None] * len(values)
    assert read_with_kafka_python(batch) == [
        Record(i, 1_650_000_000_000, k, v)
        for i, (k, v) in enumerate(zip(expected_keys, values, strict=True))
    ]


def test_kafka_python_detects_our_crc() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], timestamp_ms=0))
    batch[-1] ^= 0x01
    assert not DefaultRecordBatch(bytes(batch)).validate_crc()


# ---- (c) identical bytes ---------------------------------------------------------------


@pytest.mark.parametrize(
    "producer",
    [
        {},
        {"producer_id": 1234567, "producer_epoch": 5, "base_sequence": 99},
        {"producer_id": 77, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True},
    ],
    ids=["plain", "idempotent", "transactional"],
)
def test_builder_bytes_equal_kafka_python(producer: dict[str, int | bool]) -> None:
    theirs = kafka_python_batch(INPUTS, **producer)  # type: ignore[arg-type]
    # kafka-python writes partitionLeaderEpoch 0 where a Java producer writes -1.
    ours = our_batch(INPUTS, partition_leader_epoch=0, **producer)
    assert ours == theirs


@pytest.mark.parametrize(
    "inputs",
    [
        [(None, b"v", 5, [])],
        [(b"k", None, -5, [("h", None)])],
        [(None, b"x" * n, 10 + n, []) for n in (0, 63, 64, 8191, 8192, 70_000)],
        [(None, b"v", ts, []) for ts in (0, -(1 << 62), 1 << 62, 1, -1)],
        [(b"k", b"v", 0, [])] * 9000,  # offset deltas with three-byte varints
    ],
    ids=["single", "nulls", "length-boundaries", "extreme-timestamps", "many"],
)
def test_edge_case_bytes_equal_kafka_python(inputs: list[RecordInput]) -> None:
    assert our_batch(inputs, partition_leader_epoch=0) == kafka_python_batch(inputs)


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_encode_batch_bytes_equal_kafka_python(keyed: bool) -> None:
    values: list[bytes | None] = [b"value-%d" % i * (i % 9) for i in range(2000)]
    values[3] = None
    keys: list[bytes | None] | None = (
        [b"key-%d" % i if i % 4 else None for i in range(2000)] if keyed else None
    )
    ours = encode_batch(
        values,
        keys,
        timestamp_ms=1_600_000_000_000,
        producer_id=11,
        producer_epoch=2,
        base_sequence=30,
    )
    theirs = kafka_python_batch(
        [
            (None if keys is None else keys[i], value, 1_600_000_000_000, [])
            for i, value in enumerate(values)
        ],
        producer_id=11,
        producer_epoch=2,
        base_sequence=30,
    )
    # Everything but partitionLeaderEpoch (bytes 12-15, outside the CRC): encode_batch
    # writes -1 as the Java producer does, kafka-python 0.
    assert parse_header(ours).partition_leader_epoch == -1
    assert ours[:12] == theirs[:12]
    assert ours[16:] == theirs[16:]


# ---- codecs on their own ---------------------------------------------------------------

PAYLOAD = b"".join(b"record %d with some repetition; " % i for i in range(5000))

KAFKA_ENCODERS = {
    CompressionType.GZIP: kafka_codec.gzip_encode,
    CompressionType.SNAPPY: kafka_codec.snappy_encode,
    CompressionType.LZ4: kafka_codec.lz4_encode,
    CompressionType.ZSTD: kafka_codec.zstd_encode,
}
KAFKA_DECODERS = {
    CompressionType.GZIP: kafka_codec.gzip_decode,
    CompressionType.SNAPPY: kafka_codec.snappy_decode,
    CompressionType.LZ4: kafka_codec.lz4_decode,
    CompressionType.ZSTD: kafka_codec.zstd_decode,
}


@pytest.mark.parametrize("codec", list(KAFKA_ENCODERS), ids=lambda c: c.kafka_name)
def test_codecs_interoperate(codec: CompressionType) -> None:
    assert decompress(codec, KAFKA_ENCODERS[codec](PAYLOAD)) == PAYLOAD
    assert KAFKA_DECODERS[codec](compress(codec, PAYLOAD)) == PAYLOAD


def test_raw_snappy_from_kafka_python() -> None:
    raw = kafka_codec.snappy_encode(PAYLOAD, xerial_compatible=False)
    assert decompress(CompressionType.SNAPPY, raw) == PAYLOAD


def test_snappy_framing_equals_kafka_python() -> None:
    # Same header, same 32 KiB blocking, same block compressor: the same bytes.
    assert compress(CompressionType.SNAPPY, PAYLOAD) == kafka_codec.snappy_encode(PAYLOAD)
