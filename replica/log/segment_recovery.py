"""Reading a segment's ``.log`` file back after a crash: which bytes are whole, good batches.

:meth:`replica.log.segment.LogSegment.recover` runs :func:`scan_segment` over the file,
then truncates it where the good batches end and rebuilds both indexes from the entries the
scan placed (with :class:`~replica.log.index_cursor.IndexCursor`, the rule appends use).
The scan reads the file in large chunks with ``pread``, never trusting a length before it
is checked against the file, and stops at the first batch that is torn, corrupt or out of
order; what a good batch is, is documented on :meth:`LogSegment.recover`.

Not thread-safe: the segment's owner serialises recovery with everything else.
"""

from __future__ import annotations

import dataclasses
import os

from lograft.protocol.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from lograft.protocol.errors import CorruptMessageError
from replica.log.index_cursor import (
    MAX_RELATIVE_OFFSET,
    MAX_SEGMENT_BYTES,
    NO_TIMESTAMP,
    IndexCursor,
)

__all__ = ["RecoveryScan", "SegmentRecovery", "scan_segment"]

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_RECOVERY_CHUNK = 1024 * 1024
"""Bytes read per ``pread``; a bigger batch is re-read whole with one chunk of its size."""


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """Outcome of :meth:`LogSegment.recover`: bytes kept, bytes cut off, and why."""

    valid_bytes: int
    truncated_bytes: int
    reason: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryScan:
    """What :func:`scan_segment` found in a ``.log`` file."""

    file_size: int
    valid_bytes: int
    """Where the good batches end (the file is to be truncated there)."""
    next_offset: int
    """The offset after the last good batch (the base offset if there is none)."""
    cursor: IndexCursor
    """The index entries of the good batches, and their max timestamp."""
    reason: str | None
    """Why the scan stopped before the end of the file (None if it did not)."""


def scan_segment(fd: int, base_offset: int, index_interval_bytes: int) -> RecoveryScan:
    """Walk the batches of the ``.log`` file ``fd`` (of the segment at ``base_offset``) from
    the start, up to the first one that is not good; reads only. Raises ``OSError``."""
    file_size = os.fstat(fd).st_size
    position = 0
    next_offset = base_offset
    cursor = IndexCursor(0, NO_TIMESTAMP, base_offset, NO_TIMESTAMP)
    reason: str | None = None
    wanted = _RECOVERY_CHUNK
    while position < file_size and reason is None:
        length = min(max(wanted, _RECOVERY_CHUNK), file_size - position)
        chunk = os.pread(fd, length, position)
        if len(chunk) != length:
            reason = f"short read: {len(chunk)} of {length} bytes"
            break
        offset_in_chunk = 0
        wanted = 0
        while True:
            absolute = position + offset_in_chunk
            available = len(chunk) - offset_in_chunk
            if available < HEADER_SIZE:
                if available and absolute + available >= file_size:
                    reason = f"torn batch header ({available} bytes)"
                break
            header = parse_header(chunk, offset_in_chunk)
            if header.batch_length < _MIN_BATCH_LENGTH or absolute + header.size > file_size:
                reason = f"torn or invalid batch (batchLength {header.batch_length})"
                break
            if absolute + header.size > MAX_SEGMENT_BYTES:
                reason = "segment would exceed 2 GiB"
                break
            if header.size > available:
                wanted = header.size  # re-read from this batch with a chunk that holds it
                break
            reason = _check_batch(chunk, header, base_offset, next_offset)
            if reason is not None:
                break
            cursor.add(header, absolute, index_interval_bytes)
            next_offset = header.next_offset
            offset_in_chunk += header.size
        if offset_in_chunk == 0 and not wanted and reason is None:
            reason = "no progress"  # unreachable: a chunk holds a header or is the tail
        position += offset_in_chunk
    return RecoveryScan(file_size, position, next_offset, cursor, reason)


def _check_batch(
    chunk: bytes, header: BatchHeader, base_offset: int, expected_offset: int
) -> str | None:
    """Why a batch read back during recovery is not acceptable, or None if it is."""
    if header.base_offset < expected_offset:
        return f"baseOffset {header.base_offset}, expected {expected_offset} or more"
    if header.last_offset_delta < 0 or (header.last_offset - base_offset > MAX_RELATIVE_OFFSET):
        return f"lastOffsetDelta {header.last_offset_delta} out of range"
    try:
        check_stored_batch(chunk, header)
    except CorruptMessageError as exc:
        return exc.message
    return None
