"""Building RecordBatch v2 batches: the record-by-record builder and the bulk encoder.

:class:`RecordBatchBuilder` accumulates records one at a time, as a Kafka producer does;
:func:`encode_batch` encodes a whole list of values (and keys) with one timestamp and no
headers, the commonest batch, much faster and to the same bytes. Both frame the records
(:mod:`lograft.protocol.record_codec`) in a 61-byte header
(:mod:`lograft.protocol.batch_header`) with a CRC-32C, compressing them first if asked.

Building is hot: producers encode many small records. :func:`encode_batch` and
:func:`encode_records` encode a whole batch's records in one C call (``lograft.protocol._speedups``)
when the extension is built; their Python encoders, the reference, look small varints up in
precomputed tables and assemble a batch with one ``b"".join``.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from typing import cast

import crc32c as _crc32c

from lograft.protocol.batch_header import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
)
from lograft.protocol.compression import CompressionType, compress
from lograft.protocol.errors import UnsupportedCompressionTypeError
from lograft.protocol.record_codec import encode_record
from lograft.protocol.varints import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    TABLE_SIZE,
    VARINT_TABLE,
    encode_varint,
    zigzag_varint,
)

try:
    from lograft.protocol import _speedups
except ImportError:  # built without a C compiler: the Python encoders below do it all
    _speedups = None  # type: ignore[assignment]

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "RecordBatchBuilder",
    "encode_batch",
    "encode_records",
]

log = logging.getLogger(__name__)

CREATE_TIME = 0
"""``timestamp_type``: records carry the producer's timestamps."""
LOG_APPEND_TIME = 1
"""``timestamp_type``: the broker's append time (the batch ``maxTimestamp``) applies."""

# A record of an ``encode_batch`` batch starts with its length, attributes 0 and timestamp
# delta 0; each entry also carries, first, the header count 0 that ends the record before
# it, so that a whole record is four parts: start, offset delta, key and value.
_RECORD_START: list[bytes] = [b"\x00" + VARINT_TABLE[n] + b"\x00\x00" for n in range(TABLE_SIZE)]
# valueLength varint (and the null key before it) of a record without a key.
_NULL_KEY_VALUE_LENGTH: list[bytes] = [b"\x01" + VARINT_TABLE[n] for n in range(TABLE_SIZE)]


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
        is_control: bool = False,
    ) -> None:
        """Start an empty batch.

        ``compression`` is a codec id (:class:`~lograft.protocol.compression.CompressionType`);
        ``timestamp_type`` is ``CREATE_TIME`` (0) or ``LOG_APPEND_TIME`` (1). Raises
        ``UnsupportedCompressionTypeError`` or ``ValueError`` for values out of range.
        """
        if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
        self._compression = _check_codec(compression)
        self._attributes = (
            (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
            | (ATTR_TRANSACTIONAL if is_transactional else 0)
            | (ATTR_CONTROL if is_control else 0)
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
        if not INT64_MIN <= timestamp_ms <= INT64_MAX:
            raise ValueError(f"timestamp {timestamp_ms} does not fit 64 bits")
        offset_delta = self._count
        if offset_delta >= INT32_MAX:
            raise ValueError("a batch holds at most 2**31 - 1 records")
        base_timestamp = self._base_timestamp if offset_delta else timestamp_ms
        # Encoded before any state changes, so a refused record leaves the builder as it
        # was; a delta outside 64 bits (extreme timestamps only) is refused, not wrapped.
        record = encode_record(offset_delta, timestamp_ms - base_timestamp, key, value, headers)
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
    if count > INT32_MAX:
        raise ValueError("a batch holds at most 2**31 - 1 records")
    compression = _check_codec(compression)
    if timestamp_ms is None:
        timestamp_ms = _now_ms()
    if not INT64_MIN <= timestamp_ms <= INT64_MAX:
        raise ValueError(f"timestamp {timestamp_ms} does not fit 64 bits")

    records = None
    if _speedups is not None:
        records = _speedups.encode_records(values, keys, None, timestamp_ms, None)
    if records is None:
        if keys is None and None not in values:
            parts = _unkeyed_parts(cast("Sequence[bytes]", values))
        else:
            parts = _keyed_parts(values, keys)
        parts[0] = parts[0][1:]  # the first record has no record before it to end
        parts.append(b"\x00")  # the last record's header count
        records = b"".join(parts)
    return _frame(
        records,
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
    varint_table = VARINT_TABLE
    start_table = _RECORD_START
    value_length_table = _NULL_KEY_VALUE_LENGTH
    table_size = TABLE_SIZE
    for offset_delta, value in enumerate(values):
        size = len(value)
        offset_varint = (
            varint_table[offset_delta] if offset_delta < table_size else encode_varint(offset_delta)
        )
        value_length = (
            value_length_table[size] if size < table_size else b"\x01" + encode_varint(size)
        )
        # attributes, timestamp delta and header count are one byte each
        body = 3 + len(offset_varint) + len(value_length) + size
        start = (
            start_table[body] if body < table_size else b"\x00" + encode_varint(body) + b"\x00\x00"
        )
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
        offset_varint = encode_varint(offset_delta)
        if key is None:
            key_length = b"\x01"
            key = b""
        else:
            key_length = encode_varint(len(key))
        if value is None:
            value_length = b"\x01"
            value = b""
        else:
            value_length = encode_varint(len(value))
        body = 3 + len(offset_varint) + len(key_length) + len(key) + len(value_length)
        body += len(value)
        extend((b"\x00", encode_varint(body), b"\x00\x00", offset_varint))
        extend((key_length, key, value_length, value))
    return parts


def encode_records(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes] | None,
    *,
    compression: int = 0,
) -> bytes:
    """One batch of records sent one at a time: the producer's open batch, encoded at once.

    ``keys`` and ``timestamps`` run alongside ``values``; ``headers`` holds each record's
    :func:`lograft.protocol.record_codec.encode_headers` bytes, or is None when no record has any.
    The first timestamp is the batch's base, the largest its maximum; timestamps must be
    non-negative 64-bit integers (``Producer.send`` checks), so every delta fits a varlong.
    The same bytes as :class:`RecordBatchBuilder` gives for the same records, several times
    faster: the varints come from tables, in one loop without a call per record.
    """
    count = len(values)
    if not count:
        raise ValueError("cannot build a batch without records")
    if count > INT32_MAX:
        raise ValueError("a batch holds at most 2**31 - 1 records")
    base_timestamp = timestamps[0]
    records = None
    if _speedups is not None:
        records = _speedups.encode_records(values, keys, timestamps, base_timestamp, headers)
    if records is None:
        if headers is None and keys.count(None) == count and None not in values:
            parts = _unkeyed_timed_parts(
                cast("Sequence[bytes]", values), timestamps, base_timestamp
            )
        else:
            parts = _any_record_parts(values, keys, timestamps, headers, base_timestamp)
        records = b"".join(parts)
    return _frame(
        records,
        count=count,
        compression=_check_codec(compression),
        attributes=0,
        base_offset=0,
        partition_leader_epoch=-1,
        base_timestamp=base_timestamp,
        max_timestamp=max(timestamps),
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
    )


def _unkeyed_timed_parts(
    values: Sequence[bytes], timestamps: Sequence[int], base_timestamp: int
) -> list[bytes]:
    """Record parts of the commonest open batch: no keys, no headers, no null values."""
    parts: list[bytes] = []
    extend = parts.extend
    table = VARINT_TABLE
    table_size = TABLE_SIZE
    value_length_table = _NULL_KEY_VALUE_LENGTH
    zero = b"\x00"  # the attributes byte, and the header count
    for offset_delta, (value, timestamp) in enumerate(zip(values, timestamps, strict=True)):
        size = len(value)
        delta = timestamp - base_timestamp
        timestamp_varint = table[delta] if 0 <= delta < table_size else zigzag_varint(delta)
        offset_varint = (
            table[offset_delta] if offset_delta < table_size else encode_varint(offset_delta)
        )
        value_length = (
            value_length_table[size] if size < table_size else b"\x01" + encode_varint(size)
        )
        body = 2 + len(timestamp_varint) + len(offset_varint) + len(value_length) + size
        length = table[body] if body < table_size else encode_varint(body)
        extend((length, zero, timestamp_varint, offset_varint, value_length, value, zero))
    return parts


def _any_record_parts(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[bytes] | None,
    base_timestamp: int,
) -> list[bytes]:
    """Record parts for any mix of keys, null values and headers."""
    count = len(values)
    parts: list[bytes] = []
    extend = parts.extend
    table = VARINT_TABLE
    table_size = TABLE_SIZE
    zero = b"\x00"  # the attributes byte, and the header count of a record without headers
    for offset_delta in range(count):
        value = values[offset_delta]
        key = keys[offset_delta]
        delta = timestamps[offset_delta] - base_timestamp
        timestamp_varint = table[delta] if 0 <= delta < table_size else zigzag_varint(delta)
        offset_varint = (
            table[offset_delta] if offset_delta < table_size else encode_varint(offset_delta)
        )
        if key is None:
            key_length = b"\x01"
            key = b""
        else:
            key_length = table[len(key)] if len(key) < table_size else encode_varint(len(key))
        if value is None:
            value_length = b"\x01"
            value = b""
        else:
            size = len(value)
            value_length = table[size] if size < table_size else encode_varint(size)
        header_bytes = zero if headers is None else headers[offset_delta]
        body = (
            1
            + len(timestamp_varint)
            + len(offset_varint)
            + len(key_length)
            + len(key)
            + len(value_length)
            + len(value)
            + len(header_bytes)
        )
        extend((table[body] if body < table_size else encode_varint(body), zero))
        extend((timestamp_varint, offset_varint, key_length, key, value_length, value))
        parts.append(header_bytes)
    return parts
