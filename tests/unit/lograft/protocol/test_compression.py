"""Codecs for record sections: round trips, Kafka's framings, corrupt input, bombs."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct
import zlib
from collections.abc import Callable

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
    compress,
    decompress,
)
from lograft.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]
XERIAL_MAGIC = b"\x82SNAPPY\x00"

SAMPLES = {
    "empty": b"",
    "one-byte": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random": os.urandom(5000),
    # larger than one xerial block (32 KiB) and one lz4 block (64 KiB)
    "mixed-large": os.urandom(70_000) + b"\x00" * 200_000,
}


def test_ids_match_kafka() -> None:
    assert [int(c) for c in CompressionType] == [0, 1, 2, 3, 4]
    assert [c.kafka_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_from_name(name: str) -> None:
    assert CompressionType.from_name(name).kafka_name == name


@pytest.mark.parametrize("name", ["", "producer", "GZIP", "brotli", "lz4 ", "uncompressed"])
def test_from_name_rejects_others(name: str) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        CompressionType.from_name(name)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("sample", list(SAMPLES), ids=str)
def test_round_trip(codec: CompressionType, sample: str) -> None:
    data = SAMPLES[sample]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data
    assert decompress(codec, bytearray(packed)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_accepts_buffer_inputs(codec: CompressionType) -> None:
    data = SAMPLES["text"]
    buffer = bytearray(b"pad" + data + b"pad")
    packed = compress(codec, memoryview(buffer)[3:-3])
    assert decompress(codec, packed) == data
    assert compress(codec, bytearray(data)) == compress(codec, data)


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip_property(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 100])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionTypeError):
        decompress(codec, b"data")


# ---- wire formats as Kafka's Java client writes and reads them ---------------------------


def test_gzip_is_plain_gzip() -> None:
    data = SAMPLES["text"]
    packed = compress(CompressionType.GZIP, data)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip.decompress(packed) == data
    assert decompress(CompressionType.GZIP, gzip.compress(data, compresslevel=9)) == data


def test_gzip_concatenated_members() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, packed) == b"first second"


def _xerial_blocks(packed: bytes) -> list[bytes]:
    assert packed[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    blocks, position = [], 16
    while position < len(packed):
        (length,) = struct.unpack_from(">i", packed, position)
        blocks.append(packed[position + 4 : position + 4 + length])
        position += 4 + length
    assert position == len(packed)
    return blocks


def test_snappy_writes_xerial_blocks_of_32k() -> None:
    data = SAMPLES["mixed-large"]
    blocks = _xerial_blocks(compress(CompressionType.SNAPPY, data))
    plain = [snappy.decompress(b) for b in blocks]
    assert b"".join(plain) == data
    assert all(len(p) == 32 * 1024 for p in plain[:-1])
    assert 0 < len(plain[-1]) <= 32 * 1024


def test_snappy_accepts_raw_blocks() -> None:
    data = SAMPLES["text"]
    assert decompress(CompressionType.SNAPPY, snappy.compress(data)) == data


def test_snappy_accepts_little_endian_xerial_version() -> None:
    # Some producers (redpanda among them) write the version fields little-endian.
    data = SAMPLES["text"]
    block = snappy.compress(data)
    packed = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(CompressionType.SNAPPY, packed) == data


def test_snappy_empty_xerial_stream() -> None:
    assert decompress(CompressionType.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""


def test_lz4_frame_as_kafka_writes_it() -> None:
    packed = compress(CompressionType.LZ4, SAMPLES["mixed-large"])
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # independent blocks: Kafka's reader refuses linked blocks
    assert not flg & 0x08  # no content size, as KafkaLZ4BlockOutputStream
    assert (bd >> 4) & 0x07 == 4  # 64 KiB maximum block size
    assert lz4.frame.decompress(packed) == SAMPLES["mixed-large"]


def test_lz4_accepts_frames_with_content_size_and_checksums() -> None:
    data = SAMPLES["text"]
    packed = lz4.frame.compress(data, store_size=True, content_checksum=True, block_linked=False)
    assert decompress(CompressionType.LZ4, packed) == data


def test_zstd_is_a_standard_frame() -> None:
    data = SAMPLES["text"]
    packed = compress(CompressionType.ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(packed) == data


def test_zstd_frames_without_content_size_and_concatenated() -> None:
    writer = zstandard.ZstdCompressor(write_content_size=False)
    packed = writer.compress(b"one ") + writer.compress(b"two")
    assert decompress(CompressionType.ZSTD, packed) == b"one two"


# ---- corrupt input ---------------------------------------------------------------------


def _corruptions(packed: bytes) -> dict[str, bytes]:
    return {
        "empty": b"",
        "truncated-half": packed[: len(packed) // 2],
        "truncated-tail": packed[:-3],
        "trailing-garbage": packed + b"\x00garbage",
        "garbage": b"\x00\x01\x02 this is not compressed data at all \xff\xfe",
    }


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize(
    "corruption",
    ["empty", "truncated-half", "truncated-tail", "trailing-garbage", "garbage"],
)
def test_corrupt_input(codec: CompressionType, corruption: str) -> None:
    packed = compress(codec, SAMPLES["mixed-large"])
    with pytest.raises(CorruptMessageError):
        decompress(codec, _corruptions(packed)[corruption])


def test_corrupt_xerial_block_lengths() -> None:
    header = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    block = snappy.compress(b"payload")
    for bad in (
        header + struct.pack(">i", -1) + block,
        header + struct.pack(">i", len(block) + 10) + block,
        header + b"\x00\x00",
    ):
        with pytest.raises(CorruptMessageError):
            decompress(CompressionType.SNAPPY, bad)


def test_corrupt_gzip_body_fails_its_crc() -> None:
    packed = bytearray(gzip.compress(SAMPLES["random"]))
    packed[-9] ^= 0xFF  # last byte of the deflate stream, before the CRC-32 trailer
    with pytest.raises(CorruptMessageError):
        decompress(CompressionType.GZIP, bytes(packed))


@settings(max_examples=80, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200))
def test_arbitrary_bytes_never_escape_as_other_errors(codec: CompressionType, data: bytes) -> None:
    with contextlib.suppress(CorruptMessageError):
        decompress(codec, data)


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_damaged_data_raises_only_corrupt_message(
    codec: CompressionType, position: int, flip: int
) -> None:
    damaged = bytearray(compress(codec, SAMPLES["text"]))
    damaged[position % len(damaged)] ^= flip
    # Codecs without a content checksum may decode damage into other bytes; what must
    # never happen is an exception of the underlying library's own type.
    with contextlib.suppress(CorruptMessageError):
        decompress(codec, bytes(damaged))


# ---- decompression bombs -----------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_max_size_is_inclusive(codec: CompressionType) -> None:
    data = b"a" * 10_000
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=10_000) == data
    with pytest.raises(CorruptMessageError):
        decompress(codec, packed, max_size=9_999)


_OVER_LIMIT = b"\x00" * (DEFAULT_MAX_DECOMPRESSED_SIZE + 1)

BOMBS: dict[str, tuple[CompressionType, Callable[[], bytes]]] = {
    "gzip": (CompressionType.GZIP, lambda: zlib.compress(_OVER_LIMIT, 9, wbits=31)),
    "gzip-members": (CompressionType.GZIP, lambda: gzip.compress(_OVER_LIMIT[: 1 << 25]) * 3),
    "snappy-xerial": (CompressionType.SNAPPY, lambda: compress(2, _OVER_LIMIT)),
    "lz4": (CompressionType.LZ4, lambda: lz4.frame.compress(_OVER_LIMIT)),
    "zstd-sized": (CompressionType.ZSTD, lambda: zstandard.ZstdCompressor().compress(_OVER_LIMIT)),
    "zstd-unsized": (
        CompressionType.ZSTD,
        lambda: zstandard.ZstdCompressor(write_content_size=False).compress(_OVER_LIMIT),
    ),
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_bombs_over_the_default_limit(bomb: str) -> None:
    codec, make = BOMBS[bomb]
    packed = make()
    assert len(packed) < DEFAULT_MAX_DECOMPRESSED_SIZE // 20  # snappy manages only about 21:1
    with pytest.raises(CorruptMessageError):
        decompress(codec, packed)


def test_raw_snappy_bomb_refused_from_its_preamble() -> None:
    # A raw block that declares 1 GiB but holds almost nothing is refused before decoding.
    preamble = bytearray()
    length = 1 << 30
    while length > 0x7F:
        preamble.append((length & 0x7F) | 0x80)
        length >>= 7
    preamble.append(length)
    with pytest.raises(CorruptMessageError):
        decompress(CompressionType.SNAPPY, bytes(preamble) + b"\x00\x00")


def test_uncompressed_is_bounded_too() -> None:
    with pytest.raises(CorruptMessageError):
        decompress(CompressionType.NONE, b"x" * 11, max_size=10)
