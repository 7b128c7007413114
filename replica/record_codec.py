"""One record of a RecordBatch v2, encoded and decoded byte for byte.

Each record is::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         keyLength varint, key (UTF-8), valueLength varint (-1 = null), value

With compression, the bytes of all records (not the 61-byte header) are compressed together.
The batch around the records is :mod:`replica.batch_header`'s (parsing, CRC) and
:mod:`replica.batch_builder`'s (building); :mod:`replica.varints` has the varints.

Decoding is hot (consumers decode every record they read): it reads one- and two-byte
varints inline and calls out only for longer ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from cluster.errors import CorruptMessageError
from replica.batch_header import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_RECORD_SIZE,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from replica.compression import CompressionType, decompress
from replica.varints import encode_varint, read_raw_varint

__all__ = [
    "BatchSkip",
    "Header",
    "Record",
    "check_compressed_records",
    "decode_records",
    "encode_record",
    "iter_records",
]

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]
"""A record header: a UTF-8 key and a nullable value."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a consumer sees it: its absolute offset, timestamp, key, value, headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


# --------------------------------------------------------------------------------------------
# Encoding


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x01"
    return encode_varint(len(value)) + bytes(value)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> bytes:
    """One record, its length first, as it sits in a batch's (uncompressed) records.

    Raises ``ValueError`` for a delta outside the 64-bit range.
    """
    parts = [
        b"\x00",
        encode_varint(timestamp_delta),
        encode_varint(offset_delta),
        _nullable_bytes(key),
        _nullable_bytes(value),
        encode_varint(len(headers)),
    ]
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts.append(encode_varint(len(encoded_key)))
        parts.append(encoded_key)
        parts.append(_nullable_bytes(header_value))
    body = b"".join(parts)
    return encode_varint(len(body)) + body


# --------------------------------------------------------------------------------------------
# Decoding

# Records are built by setting their slots directly: the frozen dataclass ``__init__``
# routes every field through ``object.__setattr__``, which costs twice as much and slows
# decoding by about a quarter. The result is the same object ``Record(...)`` makes (no
# ``__post_init__`` is skipped); tests compare the two.
_new_object = object.__new__
_set_offset: Callable[[Record, int], None] = Record.__dict__["offset"].__set__
_set_timestamp: Callable[[Record, int], None] = Record.__dict__["timestamp"].__set__
_set_key: Callable[[Record, bytes | None], None] = Record.__dict__["key"].__set__
_set_value: Callable[[Record, bytes | None], None] = Record.__dict__["value"].__set__
_set_headers: Callable[[Record, tuple[Header, ...]], None] = Record.__dict__["headers"].__set__


def _read_headers(data: bytes, pos: int, count_raw: int) -> tuple[tuple[Header, ...], int]:
    """Decode ``headerCount`` (raw ``count_raw``) headers from ``pos``."""
    if count_raw & 1:
        raise CorruptMessageError("negative header count")
    headers: list[Header] = []
    for _ in range(count_raw >> 1):
        raw, pos = read_raw_varint(data, pos)
        if raw & 1:
            raise CorruptMessageError("negative header key length")
        stop = pos + (raw >> 1)
        if stop > len(data):
            raise CorruptMessageError("header key overruns the record")
        try:
            key = data[pos:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptMessageError(f"header key is not UTF-8: {exc}") from exc
        raw, pos = read_raw_varint(data, stop)
        if raw == 1:
            headers.append((key, None))
            continue
        if raw & 1:
            raise CorruptMessageError("invalid header value length")
        stop = pos + (raw >> 1)
        headers.append((key, data[pos:stop]))
        pos = stop
    return tuple(headers), pos


def _decode(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    last_offset_delta: int,
) -> list[Record]:
    """Decode ``count`` records that fill ``data`` exactly.

    Each varint is read inline when it is one or two bytes long (lengths under 8 KiB,
    offset deltas under 8192) and by :func:`~replica.varints.read_raw_varint` otherwise.
    Lengths are checked once per record: a record must end exactly where its length says,
    which also catches any field running past it.
    """
    records: list[Record] = []
    append = records.append
    new = _new_object
    set_offset = _set_offset
    set_timestamp = _set_timestamp
    set_key = _set_key
    set_value = _set_value
    set_headers = _set_headers
    read_varint = read_raw_varint
    max_offset_raw = last_offset_delta << 1
    pos = 0
    for _ in range(count):
        # length
        raw = data[pos]
        if raw < 0x80:
            pos += 1
        else:
            second = data[pos + 1]
            if second < 0x80:
                raw += (second << 7) - 0x80
                pos += 2
            else:
                raw, pos = read_varint(data, pos)
        if raw & 1:
            raise CorruptMessageError(f"negative record length at {pos}")
        end = pos + (raw >> 1)
        # attributes (unused), then timestamp delta: almost always 0, a single byte
        raw = data[pos + 1]
        if raw < 0x80:
            pos += 2
        else:
            raw, pos = read_varint(data, pos + 1)
        timestamp = base_timestamp + ((raw >> 1) ^ -(raw & 1))
        # offset delta
        raw = data[pos]
        if raw < 0x80:
            pos += 1
        else:
            second = data[pos + 1]
            if second < 0x80:
                raw += (second << 7) - 0x80
                pos += 2
            else:
                raw, pos = read_varint(data, pos)
        if raw & 1 or raw > max_offset_raw:
            raise CorruptMessageError(f"offset delta out of the batch at {pos}")
        offset = base_offset + (raw >> 1)
        # key; raw 1 is length -1, null
        raw = data[pos]
        if raw == 1:
            key = None
            pos += 1
        else:
            if raw < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    raw += (second << 7) - 0x80
                    pos += 2
                else:
                    raw, pos = read_varint(data, pos)
            if raw & 1:
                raise CorruptMessageError(f"invalid key length at {pos}")
            stop = pos + (raw >> 1)
            key = data[pos:stop]
            pos = stop
        # value
        raw = data[pos]
        if raw == 1:
            value = None
            pos += 1
        else:
            if raw < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    raw += (second << 7) - 0x80
                    pos += 2
                else:
                    raw, pos = read_varint(data, pos)
            if raw & 1:
                raise CorruptMessageError(f"invalid value length at {pos}")
            stop = pos + (raw >> 1)
            value = data[pos:stop]
            pos = stop
        # headers
        raw = data[pos]
        if raw == 0:
            headers: tuple[Header, ...] = ()
            pos += 1
        else:
            if raw >= 0x80:
                raw, pos = read_varint(data, pos)
            else:
                pos += 1
            headers, pos = _read_headers(data, pos, raw)
        if pos != end:
            raise CorruptMessageError(f"record ends at {pos} but its length says {end}")
        record = new(Record)
        set_offset(record, offset)
        set_timestamp(record, timestamp)
        set_key(record, key)
        set_value(record, value)
        set_headers(record, headers)
        append(record)
    if pos != len(data):
        raise CorruptMessageError(f"{len(data) - pos} bytes after the last of {count} records")
    if fixed_timestamp is not None:
        # LogAppendTime: the broker's time in the header replaces each record's own.
        for record in records:
            set_timestamp(record, fixed_timestamp)
    return records


def decode_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record]:
    """Decode the records of the batch ``header`` describes, decompressing if needed.

    The CRC is not checked here (see :func:`iter_records`). Raises ``CorruptMessageError``
    if the batch does not fit ``buf``, a varint or length runs out of its record, or the
    records do not number ``recordsCount`` and fill the batch exactly; raises
    ``UnsupportedCompressionTypeError`` for an unknown codec.
    """
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > len(buf):
        raise CorruptMessageError(
            f"batch at {header.position} of {header.size} bytes does not fit {len(buf)} bytes"
        )
    count = header.records_count
    if count <= 0 or header.last_offset_delta < count - 1:
        raise CorruptMessageError(
            f"batch at {header.position}: {count} records, lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    codec = header.attributes & ATTR_COMPRESSION_MASK
    if codec == CompressionType.NONE:
        data = bytes(memoryview(buf)[start:end])
    else:
        data = decompress(codec, memoryview(buf)[start:end])
    if len(data) < count * MIN_RECORD_SIZE:
        raise CorruptMessageError(f"{count} records cannot fit in {len(data)} bytes")
    try:
        return _decode(
            data,
            count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if header.is_log_append_time else None,
            header.last_offset_delta,
        )
    except IndexError:
        # Reading a byte past the end is how a truncated last record shows itself.
        raise CorruptMessageError(
            f"records of the batch at {header.position} run past its end"
        ) from None


def check_compressed_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Check that a compressed batch holds exactly ``recordsCount`` records.

    The broker cannot see the record count of a compressed batch in its size, so a batch
    could claim two billion records in a hundred bytes and move the log end offset by as
    much. This decompresses (bounded, as everywhere) and walks the record lengths without
    decoding the records, as Kafka's validator does for compressed batches. Raises
    ``CorruptMessageError``.
    """
    start = header.position + HEADER_SIZE
    data = decompress(header.compression, memoryview(buf)[start : header.position + header.size])
    position = 0
    count = 0
    end = len(data)
    try:
        while position < end:
            raw, position = read_raw_varint(data, position)
            if raw & 1:
                raise CorruptMessageError(f"negative record length in batch at {header.position}")
            position += raw >> 1
            count += 1
            if count > header.records_count:
                break
    except IndexError:
        raise CorruptMessageError(f"truncated record in batch at {header.position}") from None
    if count != header.records_count or position != end:
        raise CorruptMessageError(
            f"batch at {header.position} claims {header.records_count} records; "
            f"its compressed payload holds {count}"
        )


BatchSkip = Callable[[bytes | bytearray | memoryview, BatchHeader], bool]
"""Called for every whole batch in order, control batches included: True skips it."""


def iter_records(
    buf: bytes | bytearray | memoryview, start_offset: int = 0, skip: BatchSkip | None = None
) -> Iterator[Record]:
    """Records of concatenated batches, as a Fetch returns them, from ``start_offset`` on.

    Batches are CRC-checked before decoding; control batches (transaction markers) are
    skipped, and so is every batch ``skip`` says to (the batches of aborted transactions,
    for a ``read_committed`` reader); a partial batch at the end, which a size-limited fetch
    may return, ends the iteration silently; empty batches (left by log compaction) are
    skipped. Raises ``CorruptMessageError`` for a CRC mismatch or a malformed batch.
    """
    position = 0
    size = len(buf)
    while size - position >= LOG_OVERHEAD:
        header_end = position + HEADER_SIZE
        if header_end > size:
            return
        header = parse_header(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptMessageError(
                f"batch length {header.batch_length} at {position} is shorter than a header"
            )
        if position + header.size > size:
            return
        position += header.size
        if header.next_offset <= start_offset:
            continue
        check_stored_batch(buf, header)
        if skip is not None and skip(buf, header):
            continue
        if header.is_control or not header.records_count:
            continue  # a compacted batch may be empty: kept only for its producer's state
        for record in decode_records(buf, header):
            if record.offset >= start_offset:
                yield record
