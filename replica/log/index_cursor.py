"""Where a segment's index entries go, and what an index entry can address.

Both indexes of a segment (:class:`~replica.log.offset_index.OffsetIndex`,
:class:`~replica.log.time_index.TimeIndex`) store int32 values relative to the segment:
an offset minus the base offset, and a byte position. That bounds a segment
(:data:`MAX_SEGMENT_BYTES`, :data:`MAX_RELATIVE_OFFSET`). :class:`IndexCursor` applies
Kafka's rule for which batches get entries; appends
(:meth:`replica.log.segment.LogSegment.append`) and recovery
(:mod:`replica.log.segment_recovery`) both use it, so a recovered segment gets exactly the
entries its appends wrote.
"""

from __future__ import annotations

from lograft.protocol.batch_header import BatchHeader

__all__ = ["MAX_RELATIVE_OFFSET", "MAX_SEGMENT_BYTES", "NO_TIMESTAMP", "IndexCursor"]

NO_TIMESTAMP = -1
"""Kafka's "no timestamp"; also the max timestamp of an empty segment."""
MAX_SEGMENT_BYTES = 2**31 - 1
"""Index positions are int32, so a segment never grows past this."""
MAX_RELATIVE_OFFSET = 2**31 - 1
"""Index offsets are int32 relative to the base offset."""


class IndexCursor:
    """Decides where index entries go while batches are appended or scanned.

    Kafka's rule: before a batch is written, if at least ``index.interval.bytes`` were
    written since the last entry, the batch gets an offset-index entry, and the time index
    gets ``(max timestamp so far, its offset)`` if that maximum grew since its last entry.

    Not thread-safe; one cursor serves one append or one scan.
    """

    __slots__ = (
        "bytes_since_entry",
        "last_time_entry",
        "max_timestamp",
        "offset_entries",
        "offset_of_max_timestamp",
        "time_entries",
    )

    def __init__(
        self,
        bytes_since_entry: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        last_time_entry: int,
    ) -> None:
        """Continue from a segment's state: bytes written since its last offset-index
        entry, its max timestamp (and that batch's offset) and the timestamp of its last
        time-index entry."""
        self.bytes_since_entry = bytes_since_entry
        self.max_timestamp = max_timestamp
        self.offset_of_max_timestamp = offset_of_max_timestamp
        self.last_time_entry = last_time_entry
        self.offset_entries: list[tuple[int, int]] = []
        """New ``(offset, position)`` entries, in order."""
        self.time_entries: list[tuple[int, int]] = []
        """New ``(timestamp, offset)`` entries, in order."""

    def add(self, header: BatchHeader, position: int, interval_bytes: int) -> None:
        """Account for the batch ``header`` written at ``position`` of the segment."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.base_offset
        if self.bytes_since_entry >= interval_bytes:
            self.offset_entries.append((header.base_offset, position))
            if self.max_timestamp > self.last_time_entry:
                self.time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))
                self.last_time_entry = self.max_timestamp
            self.bytes_since_entry = 0
        self.bytes_since_entry += header.size
