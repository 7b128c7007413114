"""The records inside a Kafka RecordBatch v2, encoded and decoded byte for byte.

The broker never needs this module on its produce path (it validates headers only, see
:mod:`replica.batch_header`); clients, tools and tests do. Each record is::

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

Varints are zigzag-encoded base-128, least significant group first, as protobuf's ``sint``.
With compression, the bytes of all records (not the 61-byte header) are compressed together.

Both directions are hot: producers encode many small records, consumers decode them. The
encoders therefore look small varints up in precomputed tables and assemble a batch with one
``b"".join``; the decoder reads one- and two-byte varints inline and calls out only for
longer ones.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import crc32c as _crc32c

from cluster.errors import CorruptMessageError, UnsupportedCompressionTypeError
from replica.batch_header import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_RECORD_SIZE,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from replica.compression import CompressionType, compress, decompress

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "Record",
    "RecordBatchBuilder",
    "check_compressed_records",
    "decode_records",
    "encode_batch",
    "encode_varlong",
    "iter_records",
    "read_varlong",
]

logger = logging.getLogger(__name__)

CREATE_TIME = 0
"""``timestamp_type``: records carry the producer's timestamps."""
LOG_APPEND_TIME = 1
"""``timestamp_type``: the broker's append time (the batch ``maxTimestamp``) applies."""

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
# Varints

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
_MAX_VARINT_BYTES = 10  # a varlong; a varint never needs more than 5

# Zigzag varints of 0 .. _TABLE_SIZE-1. With 2**14 entries, values under 16 KiB and batches
# of up to 16384 records never leave the tables; the three tables below cost about 3.5 MB
# and 10 ms at import, which the bulk encoder earns back within a few batches.
_TABLE_SIZE = 1 << 14


def _encode_varint(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a 64-bit varlong")
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_VARINT: list[bytes] = [_encode_varint(n) for n in range(_TABLE_SIZE)]

# A record of an ``encode_batch`` batch starts with its length, attributes 0 and timestamp
# delta 0; each entry also carries, first, the header count 0 that ends the record before
# it, so that a whole record is four parts: start, offset delta, key and value.
_RECORD_START: list[bytes] = [b"\x00" + _VARINT[n] + b"\x00\x00" for n in range(_TABLE_SIZE)]
# valueLength varint (and the null key before it) of a record without a key.
_NULL_KEY_VALUE_LENGTH: list[bytes] = [b"\x01" + _VARINT[n] for n in range(_TABLE_SIZE)]


def _varint(value: int) -> bytes:
    return _VARINT[value] if 0 <= value < _TABLE_SIZE else _encode_varint(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The raw (still zigzagged) varint at ``pos`` and the position after it.

    Raises ``IndexError`` past the end of ``data``, which callers turn into
    ``CorruptMessageError``.
    """
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * _MAX_VARINT_BYTES:
            raise CorruptMessageError(f"varint longer than {_MAX_VARINT_BYTES} bytes")


def encode_varlong(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer; ``ValueError`` outside that range."""
    return _varint(value)


def read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """The signed zigzag varint at ``pos`` and the position after it.

    ``CorruptMessageError`` if it runs past ``data`` or is longer than 10 bytes.
    """
    try:
        raw, pos = _read_varint(data, pos)
    except IndexError:
        raise CorruptMessageError("varint runs past the record data") from None
    return (raw >> 1) ^ -(raw & 1), pos


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return b"\x01"
    return _varint(len(value)) + bytes(value)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> bytes:
    parts = [
        b"\x00",
        _varint(timestamp_delta),
        _varint(offset_delta),
        _nullable_bytes(key),
        _nullable_bytes(value),
        _varint(len(headers)),
    ]
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts.append(_varint(len(encoded_key)))
        parts.append(encoded_key)
        parts.append(_nullable_bytes(header_value))
    body = b"".join(parts)
    return _varint(len(body)) + body


# --------------------------------------------------------------------------------------------
# Batch framing

# The header splits around the CRC: the CRC covers only what follows it.
_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
_BATCH_LENGTH_BASE = HEADER_SIZE - LOG_OVERHEAD


def _frame(
    records: bytes,
    *,
    count: int,
    compression: int,
    attributes: int,
    base_offset: int,
    partition_leader_epoch: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    """Compress ``records`` if asked and wrap them in a header with a CRC-32C."""
    if compression != CompressionType.NONE:
        records = compress(compression, records)
    tail = _TAIL.pack(
        attributes | compression,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = _crc32c.crc32c(records, _crc32c.crc32c(tail))
    head = _HEAD.pack(base_offset, _BATCH_LENGTH_BASE + len(records), partition_leader_epoch, MAGIC)
    return b"".join((head, _CRC.pack(crc), tail, records))


def _check_codec(compression: int) -> int:
    if not CompressionType.NONE <= compression <= CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError(f"codec id {compression}")
    return int(compression)


def _now_ms() -> int:
    return int(time.time() * 1000)


class RecordBatchBuilder:
    """Accumulates records and builds one RecordBatch v2, as a Kafka producer does.

    The first record's timestamp becomes ``baseTimestamp``; the largest becomes
    ``maxTimestamp``. Offsets are assigned from 0 within the batch (the broker rewrites
    ``baseOffset``). Not thread-safe.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_count",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_parts",
        "_producer_epoch",
        "_producer_id",
        "_size",
    )

    def __init__(
        self,
        compression: int = 0,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        partition_leader_epoch: int = -1,
        timestamp_type: int = 0,
        is_transactional: bool = False,
    ) -> None:
        """Start an empty batch.

        ``compression`` is a codec id (:class:`~replica.compression.CompressionType`);
        ``timestamp_type`` is ``CREATE_TIME`` (0) or ``LOG_APPEND_TIME`` (1). Raises
        ``UnsupportedCompressionTypeError`` or ``ValueError`` for values out of range.
        """
        if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
        self._compression = _check_codec(compression)
        self._attributes = (ATTR_TIMESTAMP_TYPE if timestamp_type else 0) | (
            ATTR_TRANSACTIONAL if is_transactional else 0
        )
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._parts: list[bytes] = []
        self._count = 0
        self._size = HEADER_SIZE
        self._base_timestamp = 0
        self._max_timestamp = 0

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        """Add a record; returns its offset delta (0 for the first record).

        ``timestamp_ms`` defaults to the current wall-clock time. Raises ``ValueError`` if
        the timestamp is outside the 64-bit range or the batch is full (2**31 - 1 records).
        """
        if timestamp_ms is None:
            timestamp_ms = _now_ms()
        if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} does not fit 64 bits")
        offset_delta = self._count
        if offset_delta >= _INT32_MAX:
            raise ValueError("a batch holds at most 2**31 - 1 records")
        base_timestamp = self._base_timestamp if offset_delta else timestamp_ms
        # Encoded before any state changes, so a refused record leaves the builder as it
        # was; a delta outside 64 bits (extreme timestamps only) is refused, not wrapped.
        record = _encode_record(offset_delta, timestamp_ms - base_timestamp, key, value, headers)
        if offset_delta == 0:
            self._base_timestamp = timestamp_ms
            self._max_timestamp = timestamp_ms
        elif timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        self._parts.append(record)
        self._size += len(record)
        self._count = offset_delta + 1
        return offset_delta

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def estimated_size(self) -> int:
        """Size of the batch if built now without compression, header included."""
        return self._size

    def build(self) -> bytes:
        """The complete batch, compressed as configured and with its CRC-32C.

        Raises ``ValueError`` if no record was appended: Kafka has no empty batches.
        """
        if not self._count:
            raise ValueError("cannot build a batch without records")
        return _frame(
            b"".join(self._parts),
            count=self._count,
            compression=self._compression,
            attributes=self._attributes,
            base_offset=self._base_offset,
            partition_leader_epoch=self._partition_leader_epoch,
            base_timestamp=self._base_timestamp,
            max_timestamp=self._max_timestamp,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
        )


def encode_batch(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    *,
    timestamp_ms: int | None = None,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One batch holding ``values`` (and ``keys``, if given) with one timestamp, no headers.

    The bulk path: the same bytes as :class:`RecordBatchBuilder` gives for the same records,
    much faster. ``baseOffset`` is 0 and ``partitionLeaderEpoch`` -1 (the broker sets both).
    Raises ``ValueError`` for an empty ``values`` or a ``keys`` of another length.
    """
    count = len(values)
    if not count:
        raise ValueError("cannot build a batch without records")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    if count > _INT32_MAX:
        raise ValueError("a batch holds at most 2**31 - 1 records")
    compression = _check_codec(compression)
    if timestamp_ms is None:
        timestamp_ms = _now_ms()
    if not _INT64_MIN <= timestamp_ms <= _INT64_MAX:
        raise ValueError(f"timestamp {timestamp_ms} does not fit 64 bits")

    if keys is None and None not in values:
        parts = _unkeyed_parts(cast("Sequence[bytes]", values))
    else:
        parts = _keyed_parts(values, keys)
    parts[0] = parts[0][1:]  # the first record has no record before it to end
    parts.append(b"\x00")  # the last record's header count
    return _frame(
        b"".join(parts),
        count=count,
        compression=compression,
        attributes=0,
        base_offset=0,
        partition_leader_epoch=-1,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def _unkeyed_parts(values: Sequence[bytes]) -> list[bytes]:
    """Record parts of the commonest batch: no keys, no null values."""
    parts: list[bytes] = []
    extend = parts.extend
    varint_table = _VARINT
    start_table = _RECORD_START
    value_length_table = _NULL_KEY_VALUE_LENGTH
    table_size = _TABLE_SIZE
    for offset_delta, value in enumerate(values):
        size = len(value)
        offset_varint = (
            varint_table[offset_delta] if offset_delta < table_size else _varint(offset_delta)
        )
        value_length = value_length_table[size] if size < table_size else b"\x01" + _varint(size)
        # attributes, timestamp delta and header count are one byte each
        body = 3 + len(offset_varint) + len(value_length) + size
        start = start_table[body] if body < table_size else b"\x00" + _varint(body) + b"\x00\x00"
        extend((start, offset_varint, value_length, value))
    return parts


def _keyed_parts(
    values: Sequence[bytes | None], keys: Sequence[bytes | None] | None
) -> list[bytes]:
    """Record parts for any mix of keys and null values."""
    parts: list[bytes] = []
    extend = parts.extend
    if keys is None:
        keys = [None] * len(values)
    for offset_delta, (key, value) in enumerate(zip(keys, values, strict=True)):
        offset_varint = _varint(offset_delta)
        if key is None:
            key_length = b"\x01"
            key = b""
        else:
            key_length = _varint(len(key))
        if value is None:
            value_length = b"\x01"
            value = b""
        else:
            value_length = _varint(len(value))
        body = 3 + len(offset_varint) + len(key_length) + len(key) + len(value_length)
        body += len(value)
        extend((b"\x00", _varint(body), b"\x00\x00", offset_varint))
        extend((key_length, key, value_length, value))
    return parts


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
        raw, pos = _read_varint(data, pos)
        if raw & 1:
            raise CorruptMessageError("negative header key length")
        stop = pos + (raw >> 1)
        if stop > len(data):
            raise CorruptMessageError("header key overruns the record")
        try:
            key = data[pos:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptMessageError(f"header key is not UTF-8: {exc}") from exc
        raw, pos = _read_varint(data, stop)
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
    offset deltas under 8192) and by :func:`_read_varint` otherwise. Lengths are checked
    once per record: a record must end exactly where its length says, which also catches
    any field running past it.
    """
    records: list[Record] = []
    append = records.append
    new = _new_object
    set_offset = _set_offset
    set_timestamp = _set_timestamp
    set_key = _set_key
    set_value = _set_value
    set_headers = _set_headers
    read_varint = _read_varint
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
            raw, position = _read_varint(data, position)
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


def iter_records(buf: bytes | bytearray | memoryview, start_offset: int = 0) -> Iterator[Record]:
    """Records of concatenated batches, as a Fetch returns them, from ``start_offset`` on.

    Batches are CRC-checked before decoding; control batches (transaction markers) are
    skipped; a partial batch at the end, which a size-limited fetch may return, ends the
    iteration silently; empty batches (left by log compaction) are skipped. Raises
    ``CorruptMessageError`` for a CRC mismatch or a malformed batch.
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
        if header.is_control or not header.records_count:
            continue  # a compacted batch may be empty: kept only for its producer's state
        for record in decode_records(buf, header):
            if record.offset >= start_offset:
                yield record
