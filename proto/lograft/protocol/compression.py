"""Compression codecs for RecordBatch v2 record sections, as Kafka writes and reads them.

A compressed batch keeps its 61-byte header in the clear and compresses only the bytes of its
records. The codec id lives in the low three bits of the batch ``attributes``:

===  ======  ==============================================================================
id   name    wire format
===  ======  ==============================================================================
0    none    the records as they are
1    gzip    RFC 1952 gzip (one or more members), as ``java.util.zip.GZIPOutputStream``
2    snappy  xerial "blocking" stream (16-byte header, then length-prefixed raw snappy
             blocks), which is what Java producers write through ``SnappyOutputStream``;
             raw snappy is accepted on decode, as other clients send it
3    lz4     the standard LZ4 frame format with independent blocks (KIP-57)
4    zstd    a standard zstd frame (one or more frames are accepted on decode)
===  ======  ==============================================================================

Decompression is bounded: output larger than ``max_size`` raises ``CorruptMessageError`` before
the whole of it is produced, so a small, hostile batch cannot exhaust memory.

All functions are pure and thread-safe.
"""

from __future__ import annotations

import enum
import logging
import struct
import zlib

import lz4.frame as _lz4frame
import snappy as _snappy
import zstandard as _zstd

from lograft.protocol.errors import CorruptMessageError, UnsupportedCompressionTypeError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "CompressionType",
    "compress",
    "decompress",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024
"""Largest decompressed record section accepted by default (64 MiB)."""


class CompressionType(enum.IntEnum):
    """Codec ids as they appear in the batch attributes, named as Kafka's ``compression.type``."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Map a ``compression.type`` value ("none", "gzip", ...) to its codec.

        Names are matched exactly, as Kafka matches them. Raises
        ``UnsupportedCompressionTypeError`` for any other name; Kafka's broker-side value
        "producer" is not a codec and is rejected here too.
        """
        try:
            return _BY_NAME[name]
        except KeyError:
            raise UnsupportedCompressionTypeError(f"unknown compression.type {name!r}") from None

    @property
    def kafka_name(self) -> str:
        """The ``compression.type`` spelling of this codec."""
        return self.name.lower()


_BY_NAME: dict[str, CompressionType] = {c.name.lower(): c for c in CompressionType}

# Java's GZIPOutputStream writes with Deflater's default level; level 6 is zlib's default
# and the same trade of speed against size.
_GZIP_LEVEL = 6
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer, not a zlib or raw stream
_GZIP_MAGIC = b"\x1f\x8b"

# xerial snappy-java stream header: marker byte -126, "SNAPPY", NUL, then version and
# minimum compatible version as big-endian int32s. Only the first 8 bytes identify the
# stream; some producers write version and compat little-endian, so those are ignored.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)
# snappy-java's SnappyOutputStream default block size; each block is compressed alone.
_XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# A zstd block of up to 128 KiB can be stored as a 4-byte RLE block, so that is the worst
# expansion per input byte; feeding input in steps sized by it bounds the output.
_ZSTD_MAX_RATIO = 32 * 1024
_ZSTD_MIN_STEP = 256


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a record section with codec id ``codec`` (see :class:`CompressionType`).

    The output is what a Java producer would write for the same codec. Raises
    ``UnsupportedCompressionTypeError`` for an unknown codec id.
    """
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip_compress(data)
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec == CompressionType.LZ4:
        # Kafka's reader (KafkaLZ4BlockInputStream) rejects linked blocks; 64 KiB blocks and
        # no content size match what KafkaLZ4BlockOutputStream writes.
        return bytes(
            _lz4frame.compress(
                data,
                block_size=_lz4frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec == CompressionType.ZSTD:
        return bytes(_zstd.ZstdCompressor().compress(data))
    raise UnsupportedCompressionTypeError(f"codec id {codec}")


def decompress(
    codec: int,
    data: bytes | bytearray | memoryview,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """Decompress a record section written with codec id ``codec``.

    Raises ``CorruptMessageError`` if the input is not valid for the codec, is truncated, has
    trailing garbage, or decompresses to more than ``max_size`` bytes; raises
    ``UnsupportedCompressionTypeError`` for an unknown codec id.
    """
    if codec == CompressionType.NONE:
        if len(data) > max_size:
            raise _too_large(codec, max_size)
        return bytes(data)
    try:
        if codec == CompressionType.GZIP:
            return _gzip_decompress(data, max_size)
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == CompressionType.LZ4:
            return _lz4_decompress(data, max_size)
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(data, max_size)
    # Each library signals bad input with its own exception type; all mean the same here.
    except (zlib.error, RuntimeError, _zstd.ZstdError, _snappy.UncompressError) as exc:
        logger.debug("codec %d rejected %d input bytes: %s", codec, len(data), exc)
        raise CorruptMessageError(f"invalid {_codec_name(codec)} data: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"codec id {codec}")


def _codec_name(codec: int) -> str:
    try:
        return CompressionType(codec).kafka_name
    except ValueError:
        return f"codec {codec}"


def _too_large(codec: int, max_size: int) -> CorruptMessageError:
    return CorruptMessageError(f"{_codec_name(codec)} data decompresses to over {max_size} bytes")


def _gzip_compress(data: bytes | bytearray | memoryview) -> bytes:
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # GZIPInputStream reads concatenated members, so a batch may hold several.
    out: list[bytes] = []
    produced = 0
    pending: bytes | bytearray | memoryview = data
    while True:
        member = zlib.decompressobj(_GZIP_WBITS)
        # Asking for one byte more than the budget tells "too large" from "exactly full".
        chunk = member.decompress(pending, max_size - produced + 1)
        produced += len(chunk)
        if produced > max_size:
            raise _too_large(CompressionType.GZIP, max_size)
        out.append(chunk)
        if not member.eof:
            raise CorruptMessageError("truncated gzip data")
        pending = member.unused_data
        if not pending:
            return b"".join(out)
        if pending[:2] != _GZIP_MAGIC:
            raise CorruptMessageError(f"{len(pending)} trailing bytes after gzip data")


def _snappy_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    pack = _BLOCK_LENGTH.pack
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = _snappy.compress(view[start : start + _XERIAL_BLOCK_SIZE])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy_length(block: bytes | bytearray | memoryview) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    result = 0
    for shift, byte in zip(range(0, 35, 7), block, strict=False):
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
    raise CorruptMessageError("invalid snappy length preamble")


def _snappy_block(block: bytes | bytearray | memoryview, budget: int) -> bytes:
    # The preamble is read first so an oversized block is refused before any allocation.
    if _raw_snappy_length(block) > budget:
        raise _too_large(CompressionType.SNAPPY, budget)
    return bytes(_snappy.decompress(block))


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) < _XERIAL_HEADER_SIZE or view[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _snappy_block(view, max_size)
    out: list[bytes] = []
    produced = 0
    position = _XERIAL_HEADER_SIZE
    end = len(view)
    while position < end:
        if end - position < _BLOCK_LENGTH.size:
            raise CorruptMessageError("truncated xerial snappy block length")
        (length,) = _BLOCK_LENGTH.unpack_from(view, position)
        position += _BLOCK_LENGTH.size
        if length < 0 or position + length > end:
            raise CorruptMessageError(f"xerial snappy block of {length} bytes overruns data")
        block = _snappy_block(view[position : position + length], max_size - produced)
        produced += len(block)
        out.append(block)
        position += length
    return b"".join(out)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out: list[bytes] = []
    produced = 0
    pending: bytes | bytearray | memoryview = data
    while True:
        frame = _lz4frame.LZ4FrameDecompressor()
        # Asking for one byte more than the budget tells "too large" from "exactly full".
        chunk = frame.decompress(pending, max_length=max_size - produced + 1)
        produced += len(chunk)
        if produced > max_size:
            raise _too_large(CompressionType.LZ4, max_size)
        out.append(chunk)
        if not frame.eof:
            raise CorruptMessageError("truncated lz4 frame")
        pending = frame.unused_data
        if not pending:
            return b"".join(out)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # Neither one-shot decompress (it trusts the declared content size) nor the stream
    # reader (it ends silently on truncated input) is safe here, so frames are fed to a
    # decompression object in steps no larger than the remaining budget could need: one
    # input byte yields at most _ZSTD_MAX_RATIO output bytes.
    view = memoryview(data)
    out: list[bytes] = []
    produced = 0
    position = 0
    end = len(view)
    context = _zstd.ZstdDecompressor()
    while True:
        frame = context.decompressobj()
        while not frame.eof:
            if position >= end:
                raise CorruptMessageError("truncated zstd frame")
            step = max(_ZSTD_MIN_STEP, (max_size - produced) // _ZSTD_MAX_RATIO + 1)
            piece = view[position : position + step]
            position += len(piece)
            chunk = frame.decompress(piece)
            produced += len(chunk)
            if produced > max_size:
                raise _too_large(CompressionType.ZSTD, max_size)
            out.append(chunk)
        # Bytes fed past the end of this frame start the next one (Kafka's reader, like
        # zstd's, reads concatenated frames).
        position -= len(frame.unused_data)
        if position >= end:
            return b"".join(out)
