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
The batch around the records is :mod:`lograft.protocol.batch_header`'s (parsing, CRC) and
:mod:`lograft.protocol.batch_builder`'s (building); :mod:`lograft.protocol.varints` has the varints.

Decoding is hot (consumers decode every record they read). :func:`decode_records` reads
one- and two-byte varints inline and calls out only for longer ones. :func:`decode_rows`,
the consumer's decoder, builds a batch's ``ConsumerRecord`` tuples in one call of the C
decoder (``lograft.protocol._speedups``) when it is built; otherwise, and for whatever the C decoder
declines, it uses :func:`decode_columns`' Python path, which returns a batch as columns
(offsets, timestamps, keys, values, headers) and decodes the commonest batch, whose records
all have the same key and value lengths and no headers, without a Python loop per record:
one regular expression splits the records and C-level comparisons check every field the
general decoder checks.
"""

# Over 600 lines: the record format's encoder and every decoder path, its hot loops inline.
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add
from typing import NamedTuple, TypeVar, cast

from lograft.protocol.batch_header import (
    ATTR_COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_RECORD_SIZE,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from lograft.protocol.compression import CompressionType, decompress
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.varints import TABLE_SIZE, VARINT_TABLE, encode_varint, read_raw_varint

try:
    from lograft.protocol import _speedups
except ImportError:  # built without a C compiler: the Python decoder below does it all
    _speedups = None  # type: ignore[assignment]

__all__ = [
    "BatchSkip",
    "Header",
    "Record",
    "RecordColumns",
    "check_compressed_records",
    "decode_columns",
    "decode_records",
    "decode_rows",
    "encode_headers",
    "encode_record",
    "iter_records",
    "next_readable_batch",
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


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """A record's headers as they sit in it: their count, then each key and value.

    Raises ``TypeError`` for a key that is not ``str`` or a value that is not bytes or None.
    """
    if not headers:
        return b"\x00"  # no headers: a zero count
    parts = [encode_varint(len(headers))]
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise TypeError(f"header key must be str, got {type(header_key).__name__}")
        encoded_key = header_key.encode("utf-8")
        parts.append(encode_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(b"\x01")
        elif isinstance(header_value, (bytes, bytearray, memoryview)):
            parts.append(encode_varint(len(header_value)))
            parts.append(bytes(header_value))
        else:
            raise TypeError(
                f"header value must be bytes or None, got {type(header_value).__name__}"
            )
    return b"".join(parts)


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
        encode_headers(headers),
    ]
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


# Over 70 lines: the per-record hot path, each varint read inline to save calls.
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
    offset deltas under 8192) and by :func:`~lograft.protocol.varints.read_raw_varint` otherwise.
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


def _batch_records_data(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The (decompressed) bytes of the records of the batch ``header`` describes, checked
    to fit the batch and to hold room for ``recordsCount`` records; see
    :func:`decode_records` for what it raises."""
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
    return data


def _decode_checked(data: bytes, header: BatchHeader) -> list[Record]:
    """:func:`_decode` of a batch's records data, a truncated record as corruption."""
    try:
        return _decode(
            data,
            header.records_count,
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


def decode_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record]:
    """Decode the records of the batch ``header`` describes, decompressing if needed.

    The CRC is not checked here (see :func:`iter_records`). Raises ``CorruptMessageError``
    if the batch does not fit ``buf``, a varint or length runs out of its record, or the
    records do not number ``recordsCount`` and fill the batch exactly; raises
    ``UnsupportedCompressionTypeError`` for an unknown codec.
    """
    return _decode_checked(_batch_records_data(buf, header), header)


class RecordColumns(NamedTuple):
    """The records of one batch as columns: the ``i``-th record is the ``i``-th item of each.

    Columns are lists, tuples or ranges (sliceable, and cheap to ``zip``); a column that
    holds one value for every record (no keys, no headers, one timestamp) is that value
    repeated. Offsets increase through the batch.
    """

    offsets: Sequence[int]
    timestamps: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    headers: Sequence[tuple[Header, ...]]


def decode_columns(buf: bytes | bytearray | memoryview, header: BatchHeader) -> RecordColumns:
    """The records of the batch ``header`` describes, as :class:`RecordColumns`.

    The same records, checks and errors as :func:`decode_records` (the CRC is not checked
    here either), much faster for a batch whose records all have the same key length (or
    null keys), the same value length and no headers, the batches producers commonly send;
    any other batch is decoded by :func:`decode_records`'s loop.
    """
    return _columns(_batch_records_data(buf, header), header)


def _columns(data: bytes, header: BatchHeader) -> RecordColumns:
    """:func:`decode_columns` of a batch's (decompressed) records data."""
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    columns = _decode_uniform(
        data, header.records_count, header.base_offset, header.base_timestamp, fixed_timestamp
    )
    if columns is not None:
        return columns
    records = _decode_checked(data, header)
    return RecordColumns(
        [r.offset for r in records],
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


Row = TypeVar("Row", bound=tuple[object, ...])
_new_tuple = tuple.__new__


def decode_rows(
    row_type: type[Row],
    topic: str,
    partition: int,
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    start_offset: int,
) -> list[Row]:
    """The records of the batch ``header`` describes from ``start_offset`` on, as
    ``row_type`` tuples ``(topic, partition, offset, timestamp, key, value, headers)``: the
    consumer's records, built without a Python call per record.

    ``row_type`` is ``tuple`` or a named tuple of those seven fields. The same records,
    checks and errors as :func:`decode_records`. The C decoder (``lograft.protocol._speedups``)
    decodes a batch whole when it is built; anything it declines (a malformed batch, to
    raise the right error) goes through :func:`decode_columns`' Python decoders.
    """
    data = _batch_records_data(buf, header)
    fixed_timestamp = header.max_timestamp if header.is_log_append_time else None
    if _speedups is not None:
        decoded = _speedups.decode_records(
            row_type,
            topic,
            partition,
            data,
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            fixed_timestamp,
            header.last_offset_delta,
            start_offset,
        )
        if decoded is not None:
            return cast("list[Row]", decoded)
    offsets, timestamps, keys, values, headers = _columns(data, header)
    if offsets and offsets[0] < start_offset:
        # The first batch of a fetch may start before the fetch offset.
        if isinstance(offsets, range):
            first = start_offset - offsets[0]
            offsets, timestamps, keys, values, headers = (
                offsets[first:],
                timestamps[first:],
                keys[first:],
                values[first:],
                headers[first:],
            )
        else:
            kept = [i for i, offset in enumerate(offsets) if offset >= start_offset]
            offsets = [offsets[i] for i in kept]
            timestamps = [timestamps[i] for i in kept]
            keys = [keys[i] for i in kept]
            values = [values[i] for i in kept]
            headers = [headers[i] for i in kept]
    rows = zip(repeat(topic), repeat(partition), offsets, timestamps, keys, values, headers)
    return list(map(_new_tuple, repeat(row_type), rows))


# The uniform fast path. Its regular expression describes a whole record of one key and
# value length without headers; ``findall`` returns, per record, its length varint, its
# timestamp and offset delta varints, its key and value. The matches are the batch's
# records exactly when there are ``recordsCount`` of them and their lengths add up to the
# data's (matches never overlap, so they then tile it); each length varint must count what
# its match holds after it, and the offset deltas must be 0, 1, 2, ... (what producers
# write). Anything else goes to the general decoder, which also raises the
# errors, so the fast path never has to.
_VARINT = rb"[\x80-\xff]?[\x00-\x7f]"  # one or two bytes: record lengths under 8 K
_OFFSET_VARINT = rb"[\x80-\xff]{0,2}[\x00-\x7f]"  # up to three: bulk batches of 16 K records
_LONG_VARINT = rb"[\x80-\xff]{0,9}[\x00-\x7f]"  # timestamp deltas: any varlong


def _two_byte_varints() -> dict[bytes, int]:
    """Every one- and two-byte varint (non-canonical ones included) → its raw value."""
    table = {bytes([low]): low for low in range(0x80)}
    for low in range(0x80, 0x100):
        for high in range(0x80):
            table[bytes([low, high])] = (low & 0x7F) | (high << 7)
    return table


_RAW_VARINTS = _two_byte_varints()
# Record lengths: a negative (odd) one maps to -1, which matches no body's length.
_LENGTHS: dict[bytes, int] = {b: raw >> 1 if not raw & 1 else -1 for b, raw in _RAW_VARINTS.items()}
# Timestamp deltas, signed; longer varints are decoded one by one (:func:`_zigzag`).
_DELTAS: dict[bytes, int] = {b: (raw >> 1) ^ -(raw & 1) for b, raw in _RAW_VARINTS.items()}
# The offset delta varints of records 0, 1, 2, ... as producers write them.
_OFFSET_DELTAS: tuple[bytes, ...] = tuple(VARINT_TABLE)
_OFFSET_DELTA_SIZES: tuple[int, ...] = tuple(map(len, VARINT_TABLE))
_ZERO_DELTA = b"\x00"
_PATTERNS: dict[tuple[int, int], re.Pattern[bytes]] = {}
_MAX_PATTERNS = 256


def _zigzag(varint: bytes) -> int:
    """The signed value of a complete varint (the regular expression matched its form)."""
    raw = 0
    for shift, byte in enumerate(varint):
        raw |= (byte & 0x7F) << (7 * shift)
    return (raw >> 1) ^ -(raw & 1)


def _uniform_pattern(key_length: int, value_length: int) -> re.Pattern[bytes]:
    """The record pattern for keys of ``key_length`` bytes (-1: null) and values of
    ``value_length``, compiled once (a few hundred shapes at most are kept)."""
    pattern = _PATTERNS.get((key_length, value_length))
    if pattern is None:
        if key_length < 0:
            key = rb"\x01"
        else:
            key = re.escape(encode_varint(key_length)) + b"(.{%d})" % key_length
        value = re.escape(encode_varint(value_length)) + b"(.{%d})" % value_length
        pattern = re.compile(
            b"(%s)\x00(%s)(%s)%s%s\x00" % (_VARINT, _LONG_VARINT, _OFFSET_VARINT, key, value),
            re.DOTALL,
        )
        if len(_PATTERNS) >= _MAX_PATTERNS:
            _PATTERNS.clear()
        _PATTERNS[(key_length, value_length)] = pattern
    return pattern


def _first_record_shape(data: bytes) -> tuple[int, int] | None:
    """Key length (-1: null) and value length of the first record, if it has no headers
    and a value; else ``None``."""
    try:
        _, pos = read_raw_varint(data, 0)  # length
        _, pos = read_raw_varint(data, pos + 1)  # attributes, timestamp delta
        _, pos = read_raw_varint(data, pos)  # offset delta
        raw, pos = read_raw_varint(data, pos)
        key_length = -1 if raw == 1 else raw >> 1
        if raw & 1 and raw != 1:
            return None
        raw, pos = read_raw_varint(data, pos + max(key_length, 0))
        if raw & 1 or data[pos + (raw >> 1)] != 0:
            return None
    except (IndexError, CorruptMessageError):
        return None
    return key_length, raw >> 1


def _decode_uniform(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
) -> RecordColumns | None:
    """The records as columns if they all have the first record's shape (see above), with
    offset deltas 0, 1, 2, ...; ``None`` otherwise, and for anything malformed."""
    if count > TABLE_SIZE:
        return None
    shape = _first_record_shape(data)
    if shape is None:
        return None
    key_length, value_length = shape
    # The bytes a record's length counts besides its two deltas: attributes, key, value
    # and the header count.
    fixed = (
        2
        + (1 if key_length < 0 else len(encode_varint(key_length)) + key_length)
        + len(encode_varint(value_length))
        + value_length
    )
    offset_sizes = _OFFSET_DELTA_SIZES[:count]
    matches = _uniform_pattern(*shape).findall(data)
    if len(matches) != count:
        return None
    if key_length < 0:
        lengths, deltas, offset_deltas, values = zip(*matches, strict=True)
        keys: Sequence[bytes | None] = [None] * count
    else:
        lengths, deltas, offset_deltas, keys, values = zip(*matches, strict=True)
    if (
        offset_deltas != _OFFSET_DELTAS[:count]
        # Each record's length says what its match holds after the length...
        or list(map(_LENGTHS.__getitem__, lengths))
        != list(map(fixed.__add__, map(add, map(len, deltas), offset_sizes)))
        # ...and the matches add up to the data, so they tile it.
        or sum(map(len, lengths)) + sum(map(len, deltas)) + sum(offset_sizes) + fixed * count
        != len(data)
    ):
        return None
    timestamps: Sequence[int]
    if fixed_timestamp is not None:
        # LogAppendTime: the broker's time in the header replaces each record's own.
        timestamps = [fixed_timestamp] * count
    elif deltas.count(_ZERO_DELTA) == count:
        timestamps = [base_timestamp] * count
    else:
        looked_up = list(map(_DELTAS.get, deltas))
        # Deltas of three bytes or more (4 s or more from the first record) are computed.
        signed: list[int] = (
            list(map(_zigzag, deltas)) if None in looked_up else cast("list[int]", looked_up)
        )
        timestamps = list(map(base_timestamp.__add__, signed))
    return RecordColumns(
        range(base_offset, base_offset + count), timestamps, keys, values, [()] * count
    )


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


def next_readable_batch(
    buf: bytes | bytearray | memoryview,
    position: int,
    start_offset: int = 0,
    skip: BatchSkip | None = None,
) -> tuple[BatchHeader | None, int]:
    """The next batch of concatenated batches (as a Fetch returns them) at or after
    ``position`` that holds records to read from ``start_offset`` on, CRC-checked, and the
    position just past it; ``(None, position)`` at the end.

    Batches that end before ``start_offset`` are passed over, then every batch ``skip`` says
    to (the batches of aborted transactions, for a ``read_committed`` reader), then control
    batches (transaction markers) and empty ones (left by log compaction); a partial batch
    at the end, which a size-limited fetch may return, ends the walk silently (its position
    is the end). Raises ``CorruptMessageError`` for a CRC mismatch or a malformed batch.
    """
    size = len(buf)
    while size - position >= HEADER_SIZE:
        header = parse_header(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptMessageError(
                f"batch length {header.batch_length} at {position} is shorter than a header"
            )
        if position + header.size > size:
            break
        position += header.size
        if header.next_offset <= start_offset:
            continue
        check_stored_batch(buf, header)
        if skip is not None and skip(buf, header):
            continue
        if header.is_control or not header.records_count:
            continue  # a compacted batch may be empty: kept only for its producer's state
        return header, position
    return None, size


def iter_records(
    buf: bytes | bytearray | memoryview, start_offset: int = 0, skip: BatchSkip | None = None
) -> Iterator[Record]:
    """Records of concatenated batches, as a Fetch returns them, from ``start_offset`` on:
    those of each batch :func:`next_readable_batch` finds (its rules, its errors)."""
    position = 0
    while True:
        header, position = next_readable_batch(buf, position, start_offset, skip)
        if header is None:
            return
        for record in decode_records(buf, header):
            if record.offset >= start_offset:
                yield record
