"""The fixed 61-byte header of Kafka's RecordBatch v2, and validation without decoding records.

This is the broker's hot path: a produced batch is checked here (structure, magic, CRC-32C,
record count against offset deltas) and given its offsets by rewriting ``baseOffset`` and
``partitionLeaderEpoch`` in place. Neither of those two fields is covered by the CRC, which
starts at ``attributes``, so assigning offsets never recomputes it. Records stay bytes.

Layout (big-endian)::

    0  baseOffset           int64     35 maxTimestamp     int64
    8  batchLength          int32     43 producerId       int64
    12 partitionLeaderEpoch int32     51 producerEpoch    int16
    16 magic                int8      53 baseSequence     int32
    17 crc                  uint32    57 recordsCount     int32
    21 attributes           int16     61 records...
    23 lastOffsetDelta      int32
    27 baseTimestamp        int64

All functions here are pure and thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from lograft.protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    MessageTooLargeError,
    UnsupportedCompressionTypeError,
)

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CRC_OFFSET",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_RECORD_SIZE",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "BatchHeader",
    "assign_offsets",
    "batch_crc",
    "check_produced_attributes",
    "iter_headers",
    "parse_header",
    "validate_batches",
    "with_producer_fields",
]

HEADER_SIZE = 61
"""Bytes from ``baseOffset`` up to the first record."""
LOG_OVERHEAD = 12
"""``baseOffset`` + ``batchLength``: bytes not counted in ``batchLength``."""
MAGIC = 2
"""The RecordBatch format version (v2), the only one accepted: any other means corrupt."""
CRC_OFFSET = 17
"""Where the CRC-32C starts; it covers ``attributes`` (offset 21) to the end of the batch."""
ATTRIBUTES_OFFSET = 21
LEADER_EPOCH_OFFSET = 12
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
"""Where ``producerId``, ``producerEpoch`` and ``baseSequence`` start (in that order)."""
RECORDS_COUNT_OFFSET = 57
"""Where ``recordsCount`` starts, the header's last field."""
ATTR_COMPRESSION_MASK = 0x07
"""The attribute bits of the codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
ATTR_TIMESTAMP_TYPE = 0x08
"""Attribute bit: the timestamps are LogAppendTime (the broker's clock), not CreateTime."""
ATTR_TRANSACTIONAL = 0x10
"""Attribute bit: part of a transaction (data or its marker); needs a producer id."""
ATTR_CONTROL = 0x20
"""Attribute bit: a control batch, whose records (transaction markers) are not data."""
ATTR_DELETE_HORIZON = 0x40
"""Set by the log cleaner (KIP-534): ``baseTimestamp`` is when the batch's tombstones go."""
MIN_RECORD_SIZE = 7
"""Smallest encoded record: length, attributes, timestamp delta, offset delta, key length,
value length and header count, one byte each."""
MAX_COMPRESSION_CODEC = 4

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength (unchanged), leaderEpoch
_LAST_OFFSET_DELTA = struct.Struct(">i")
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """A parsed RecordBatch v2 header; ``position`` is where the batch starts in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    def moved_to(self, position: int) -> BatchHeader:
        """The same header for the batch lying at ``position`` (cheaper than
        ``dataclasses.replace``, which reflects on the fields every call)."""
        return BatchHeader(
            position,
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        """Part of a transaction: data of a transactional producer, or its marker."""
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)


def parse_header(
    buf: bytes | bytearray | memoryview, position: int = 0, stored_at: int | None = None
) -> BatchHeader:
    """Parse the header at ``position``; raises ``CorruptMessageError`` if it does not fit.

    The header's ``position`` is ``stored_at`` if given (where the batch lies in a file that
    ``buf`` is a chunk of), else ``position``.
    """
    if position < 0 or len(buf) - position < HEADER_SIZE:
        raise CorruptMessageError(
            f"truncated batch header at position {position}: {len(buf) - position} bytes"
        )
    return BatchHeader(
        position if stored_at is None else stored_at, *_HEADER.unpack_from(buf, position)
    )


def batch_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    """CRC-32C over ``attributes`` to the end of the batch, as Kafka computes it."""
    start = header.position + ATTRIBUTES_OFFSET
    return int(_crc32c.crc32c(memoryview(buf)[start : header.position + header.size]))


def _check_batch(
    buf: bytes | bytearray | memoryview, header: BatchHeader, compacted_ok: bool = False
) -> None:
    if header.magic != MAGIC:
        raise CorruptMessageError(f"unsupported magic {header.magic} at {header.position}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptMessageError(f"batch length {header.batch_length} shorter than a header")
    if header.position + header.size > len(buf):
        raise CorruptMessageError(
            f"truncated batch at {header.position}: needs {header.size} bytes, "
            f"{len(buf) - header.position} present"
        )
    if compacted_ok:
        # The log cleaner keeps a batch's offsets but drops records (Kafka's filterTo), so a
        # stored batch may hold fewer records than its offset range, even none (kept empty
        # for its producer's state).
        if header.records_count < 0 or header.last_offset_delta < max(header.records_count - 1, 0):
            raise CorruptMessageError(
                f"batch at {header.position}: {header.records_count} records, "
                f"lastOffsetDelta {header.last_offset_delta}"
            )
    elif header.records_count <= 0:
        raise CorruptMessageError(f"batch at {header.position} has {header.records_count} records")
    elif header.last_offset_delta != header.records_count - 1:
        raise CorruptMessageError(
            f"lastOffsetDelta {header.last_offset_delta} does not match "
            f"recordsCount {header.records_count}"
        )
    if header.compression == 0 and (
        header.size - HEADER_SIZE < header.records_count * MIN_RECORD_SIZE
    ):
        raise CorruptMessageError(
            f"{header.records_count} records cannot fit in {header.size - HEADER_SIZE} bytes"
        )
    if batch_crc(buf, header) != header.crc:
        raise CorruptMessageError(f"CRC mismatch in batch at {header.position}")


def iter_headers(buf: bytes | bytearray | memoryview, start: int = 0) -> Iterator[BatchHeader]:
    """Yield the header of each complete batch from ``start``; stops at a partial tail.

    Structure only: no CRC check. Use it on bytes already validated (the log's own).
    """
    position = start
    end = len(buf)
    while end - position >= LOG_OVERHEAD:
        _, length = _PREFIX.unpack_from(buf, position)
        if length < HEADER_SIZE - LOG_OVERHEAD or position + LOG_OVERHEAD + length > end:
            return
        yield parse_header(buf, position)
        position += LOG_OVERHEAD + length


def validate_batches(
    buf: bytes | bytearray | memoryview,
    max_batch_bytes: int,
) -> list[BatchHeader]:
    """Validate one or more concatenated batches as a producer sent them.

    Checks, for every batch: a complete header, magic 2, a length that fits the buffer, at
    least one record, ``lastOffsetDelta == recordsCount - 1``, a known compression codec, no
    control batch, the size limit and the CRC-32C. The batches must fill ``buf`` exactly.

    Raises ``CorruptMessageError``, ``MessageTooLargeError`` or
    ``UnsupportedCompressionTypeError``; on success returns the headers in order.
    """
    if len(buf) == 0:
        raise CorruptMessageError("empty record set")
    headers: list[BatchHeader] = []
    position = 0
    while position < len(buf):
        header = parse_header(buf, position)
        if header.magic != MAGIC or header.position + header.size > len(buf):
            _check_batch(buf, header)  # a garbage length is corruption, not a size problem
        if header.size > max_batch_bytes:
            raise MessageTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes={max_batch_bytes}"
            )
        _check_batch(buf, header)
        if header.compression > MAX_COMPRESSION_CODEC:
            raise UnsupportedCompressionTypeError(f"codec id {header.compression}")
        if header.is_control:
            raise CorruptMessageError("clients may not produce control batches")
        headers.append(header)
        position += header.size
    return headers


def check_produced_attributes(header: BatchHeader) -> None:
    """Refuse attribute bits a client may not set: raises ``InvalidRecordError``.

    The delete-horizon bit would let a client make the log cleaner drop its tombstones at
    once (``baseTimestamp`` read as a horizon long past). The transactional bit needs a
    producer id: the partition tracks the transaction by it. Batches a follower copies keep
    both: the leader's cleaner set them. Control batches are refused by
    :func:`validate_batches`.
    """
    if header.attributes & ATTR_DELETE_HORIZON:
        raise InvalidRecordError(
            f"batch at {header.position} has attributes 0x{header.attributes:x}: clients may "
            "not set the delete-horizon bit"
        )
    if header.attributes & ATTR_TRANSACTIONAL and header.producer_id < 0:
        raise InvalidRecordError(
            f"batch at {header.position} has attributes 0x{header.attributes:x}: a "
            "transactional batch needs a producer id"
        )


def check_stored_batch(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Validate a batch read back from disk (structure and CRC); raises ``CorruptMessageError``.

    Unlike a produced batch, a stored one may have been compacted: fewer records than
    ``lastOffsetDelta + 1``, or none at all.
    """
    _check_batch(buf, header, compacted_ok=True)


def assign_offsets(
    buf: bytearray,
    headers: list[BatchHeader],
    first_offset: int,
    leader_epoch: int,
) -> int:
    """Give each batch its ``baseOffset`` and ``partitionLeaderEpoch``, in place.

    Returns the next offset after the last batch. The CRC is unaffected (it starts after
    these fields).
    """
    next_offset = first_offset
    for header in headers:
        _BASE_AND_EPOCH.pack_into(
            buf, header.position, next_offset, header.batch_length, leader_epoch
        )
        next_offset += header.last_offset_delta + 1
    return next_offset


def set_log_append_time(buf: bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    """Mark a batch as LogAppendTime with ``timestamp_ms`` as its max timestamp; recomputes CRC."""
    attributes = header.attributes | ATTR_TIMESTAMP_TYPE
    struct.pack_into(">h", buf, header.position + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", buf, header.position + MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = int(
        _crc32c.crc32c(
            memoryview(buf)[header.position + ATTRIBUTES_OFFSET : header.position + header.size]
        )
    )
    struct.pack_into(">I", buf, header.position + CRC_OFFSET, crc)


def with_producer_fields(
    batch: bytes | bytearray | memoryview,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool = False,
) -> bytes:
    """A copy of one RecordBatch v2 with its producer fields set and its CRC-32C redone.

    This is how an idempotent producer stamps a batch it encoded before it knew its producer
    id and sequence; a transactional producer also sets the transactional attribute bit.
    One copy of the batch: the CRC covers ``attributes`` to the end, so it is computed over
    the unchanged bytes around the new fields without building them first.
    ``base_sequence`` is written as given (the caller wraps it at 2**31).
    """
    view = memoryview(batch)
    fields = _PRODUCER_FIELDS.pack(producer_id, producer_epoch, base_sequence)
    head: bytes | memoryview = view[ATTRIBUTES_OFFSET:PRODUCER_ID_OFFSET]
    if transactional:
        attributes = int.from_bytes(head[:2], "big") | ATTR_TRANSACTIONAL
        head = attributes.to_bytes(2, "big") + bytes(head[2:])
    crc = _crc32c.crc32c(head)
    crc = _crc32c.crc32c(fields, crc)
    crc = _crc32c.crc32c(view[RECORDS_COUNT_OFFSET:], crc)
    return b"".join(
        (
            view[:CRC_OFFSET],
            _CRC.pack(crc),
            head,
            fields,
            view[RECORDS_COUNT_OFFSET:],
        )
    )
