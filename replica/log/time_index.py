"""The sparse time index of one log segment: max timestamp so far -> offset.

Kafka's ``TimeIndex``. At the same points where the offset index gets an entry, the
segment adds ``(max timestamp so far, offset of the batch that first reached it)`` if the
maximum grew since the last entry, and it adds one final entry when the segment stops being
active (roll, close). Timestamps and offsets are therefore both strictly increasing, and
for an entry ``(t, o)`` every batch before ``o`` has a max timestamp below ``t``: the first
batch with a timestamp >= T lies after the last entry whose timestamp is < T. The last
entry gives the segment's max timestamp after a clean restart without a scan.

On disk: big-endian ``int64 timestamp, int32 relative offset`` pairs (12 bytes), appended.
In memory: two ``array`` columns.

Not thread-safe: the owning segment serialises access.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from pathlib import Path

from replica.log.offset_index import CorruptIndexError, IndexFile

__all__ = ["TimeIndex"]

_ENTRY = struct.Struct(">qi")
_INT32_MAX = 2**31 - 1


class TimeIndex:
    """Sparse map from timestamps to offsets; see the module docstring for the invariant."""

    ENTRY_SIZE = _ENTRY.size

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = IndexFile(path, self.ENTRY_SIZE)
        self._timestamps: array[int] = array("q")
        self._relative_offsets: array[int] = array("i")

    @property
    def file(self) -> IndexFile:
        """The underlying file."""
        return self._file

    @property
    def entries(self) -> int:
        """Number of entries."""
        return len(self._timestamps)

    def create(self) -> None:
        """Start an empty index file for a new segment."""
        self._file.create()
        self._timestamps = array("q")
        self._relative_offsets = array("i")

    def load(self, max_entries: int) -> None:
        """Read the file and check it; raises ``CorruptIndexError`` (the caller rebuilds).

        Checks: size a multiple of 12 and at most ``max_entries`` entries, timestamps and
        offsets strictly increasing, offsets non-negative. The segment checks that the last
        offset lies inside the log.
        """
        data = self._file.read(max_entries)
        timestamps: array[int] = array("q")
        relative_offsets: array[int] = array("i")
        previous_timestamp: int | None = None
        previous_offset = -1
        for timestamp, relative_offset in _ENTRY.iter_unpack(data):
            if relative_offset <= previous_offset or (
                previous_timestamp is not None and timestamp <= previous_timestamp
            ):
                raise CorruptIndexError(
                    f"time index {self._file.path.name} is not monotonic at offset "
                    f"{self.base_offset + relative_offset}"
                )
            timestamps.append(timestamp)
            relative_offsets.append(relative_offset)
            previous_timestamp, previous_offset = timestamp, relative_offset
        self._timestamps = timestamps
        self._relative_offsets = relative_offsets

    def last_entry(self) -> tuple[int, int] | None:
        """The last ``(timestamp, offset)``, or None if empty."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def entry_before(self, timestamp: int) -> tuple[int, int] | None:
        """The last ``(timestamp, offset)`` whose timestamp is < ``timestamp``, or None."""
        index = bisect_left(self._timestamps, timestamp) - 1
        if index < 0:
            return None
        return self._timestamps[index], self.base_offset + self._relative_offsets[index]

    def append(self, entries: list[tuple[int, int]]) -> None:
        """Append ``(timestamp, offset)`` entries with one write.

        Raises ``ValueError`` if an entry does not increase in both fields and ``OSError``
        if the write fails, in which case nothing is appended.
        """
        if not entries:
            return
        last = self.last_entry()
        previous_timestamp = None if last is None else last[0]
        previous_offset = -1 if last is None else last[1] - self.base_offset
        packed = bytearray()
        for timestamp, offset in entries:
            relative_offset = offset - self.base_offset
            if not (previous_offset < relative_offset <= _INT32_MAX) or (
                previous_timestamp is not None and timestamp <= previous_timestamp
            ):
                raise ValueError(
                    f"time index entry ({timestamp}, {offset}) does not follow "
                    f"({previous_timestamp}, {self.base_offset + previous_offset})"
                )
            packed += _ENTRY.pack(timestamp, relative_offset)
            previous_timestamp, previous_offset = timestamp, relative_offset
        self._file.append(bytes(packed), self.entries)
        for timestamp, offset in entries:
            self._timestamps.append(timestamp)
            self._relative_offsets.append(offset - self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        self.truncate_entries(bisect_left(self._relative_offsets, offset - self.base_offset))

    def truncate_entries(self, keep: int) -> None:
        """Keep only the first ``keep`` entries (used to undo a failed append)."""
        if keep >= self.entries:
            return
        self._file.truncate(keep)
        del self._timestamps[keep:]
        del self._relative_offsets[keep:]

    def rebuild(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry (after scanning the log) and rewrite the file."""
        self._file.rewrite(
            b"".join(
                _ENTRY.pack(timestamp, offset - self.base_offset) for timestamp, offset in entries
            )
        )
        self._timestamps = array("q", [entry[0] for entry in entries])
        self._relative_offsets = array("i", [entry[1] - self.base_offset for entry in entries])

    def is_full(self, max_index_bytes: int) -> bool:
        """True once the index holds ``segment.index.bytes`` worth of entries."""
        return self.entries >= max(1, max_index_bytes // self.ENTRY_SIZE)
