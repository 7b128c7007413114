"""The sparse offset index of one log segment: relative offset -> file position.

Kafka's ``OffsetIndex``: every ``index.interval.bytes`` of log, the segment records the base
offset of the batch it is about to write (relative to the segment's base offset) and the
batch's byte position in the ``.log`` file. A lookup finds the greatest entry at or below an
offset, and the reader walks batch headers forward from there, so a lookup costs one bisect
plus at most about ``index.interval.bytes`` of header walking.

On disk the index is a flat file of big-endian ``int32 relative offset, int32 position``
pairs, appended with ``os.write``. In memory the entries live in two ``array`` columns, so
lookups never touch the file. Kafka memory-maps a preallocated file instead; an append-only
file keeps its size exact, which makes the sanity check on load (size a multiple of the
entry size) meaningful.

``IndexFile`` is the file handling shared with :mod:`replica.log.time_index`.

Not thread-safe: the owning segment serialises access. ``IndexFile.dup_fd`` exists so that a
flusher thread can ``fdatasync`` a duplicate descriptor while the owner keeps writing or
closes the original.
"""

from __future__ import annotations

import logging
import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from lograft.protocol.batch_header import HEADER_SIZE

__all__ = ["CorruptIndexError", "IndexFile", "OffsetIndex", "write_all"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


class CorruptIndexError(Exception):
    """An index file is missing or failed its sanity check; the segment rebuilds it.

    Never leaves the storage layer: a corrupt index is repaired from the log, not reported.
    """


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write ``data`` to ``fd``; one ``os.write`` unless the kernel accepts less."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"os.write wrote {written} bytes")
        view = view[written:]


class IndexFile:
    """An append-only file of fixed-size entries, opened lazily for writing.

    Segments loaded from disk only read their index files; the descriptor is opened on the
    first write (append, truncate, rebuild), which keeps loaded segments at one descriptor.
    """

    def __init__(self, path: Path, entry_size: int) -> None:
        self._path = path
        self._entry_size = entry_size
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """Where the file is now (it moves when the segment is deleted)."""
        return self._path

    def create(self) -> None:
        """Create the file empty (truncating a stale one) and keep it open for appends."""
        self.close()
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def read(self, max_entries: int) -> bytes:
        """Return the whole file; ``CorruptIndexError`` if missing, oversized or misaligned."""
        try:
            size = os.stat(self._path).st_size
        except FileNotFoundError:
            raise CorruptIndexError(f"index file {self._path.name} is missing") from None
        if size % self._entry_size:
            raise CorruptIndexError(
                f"index file {self._path.name} size {size} is not a multiple of {self._entry_size}"
            )
        if size > max_entries * self._entry_size:
            raise CorruptIndexError(
                f"index file {self._path.name} has {size // self._entry_size} entries, "
                f"more than the log can hold ({max_entries})"
            )
        with open(self._path, "rb") as handle:
            data = handle.read(size + 1)
        if len(data) != size:
            raise CorruptIndexError(f"index file {self._path.name} changed while being read")
        return data

    def _writable_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, data: bytes, entries_before: int) -> None:
        """Append packed entries; on failure cut the file back to ``entries_before`` entries."""
        fd = self._writable_fd()
        try:
            write_all(fd, data)
        except OSError:
            os.ftruncate(fd, entries_before * self._entry_size)
            raise

    def truncate(self, entries: int) -> None:
        """Keep the first ``entries`` entries."""
        os.ftruncate(self._writable_fd(), entries * self._entry_size)

    def rewrite(self, data: bytes) -> None:
        """Replace the whole content (an index rebuilt from the log)."""
        fd = self._writable_fd()
        os.ftruncate(fd, 0)
        write_all(fd, data)

    def dup_fd(self) -> int | None:
        """A duplicate descriptor for ``fdatasync`` on another thread, or None if not open."""
        return None if self._fd is None else os.dup(self._fd)

    def rename(self, path: Path) -> None:
        """Move the file (open descriptors stay valid)."""
        os.rename(self._path, path)
        self._path = path

    def unlink(self) -> None:
        """Remove the file if it exists."""
        self._path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the write descriptor if open."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _int32_columns(data: bytes) -> tuple[array[int], array[int]]:
    """Split big-endian (int32, int32) pairs into two columns."""
    flat = array("i")
    flat.frombytes(data)
    if sys.byteorder == "little":
        flat.byteswap()
    return flat[0::2], flat[1::2]


def _pack_int32_pairs(pairs: list[tuple[int, int]]) -> bytes:
    flat = array("i", [value for pair in pairs for value in pair])
    if sys.byteorder == "little":
        flat.byteswap()
    return flat.tobytes()


class OffsetIndex:
    """Sparse map from offsets to ``.log`` file positions of batch starts.

    Entries are ``(offset, position)`` with both strictly increasing; offsets are stored
    relative to ``base_offset`` as int32, positions as int32 (segments stay below 2 GiB).
    """

    ENTRY_SIZE = 8

    def __init__(self, path: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = IndexFile(path, self.ENTRY_SIZE)
        self._relative_offsets: array[int] = array("i")
        self._positions: array[int] = array("i")

    @property
    def file(self) -> IndexFile:
        """The underlying file."""
        return self._file

    @property
    def entries(self) -> int:
        """Number of entries."""
        return len(self._positions)

    def create(self) -> None:
        """Start an empty index file for a new segment."""
        self._file.create()
        self._relative_offsets = array("i")
        self._positions = array("i")

    def load(self, log_size: int, max_entries: int) -> None:
        """Read the file and check it; raises ``CorruptIndexError`` (the caller rebuilds).

        Checks: size a multiple of 8 and at most ``max_entries`` entries, offsets and
        positions strictly increasing and non-negative, and the last position leaves room
        for a batch header inside a log of ``log_size`` bytes.
        """
        data = self._file.read(max_entries)
        relative_offsets, positions = _int32_columns(data)
        previous_offset = previous_position = -1
        for relative_offset, position in zip(relative_offsets, positions, strict=True):
            if relative_offset <= previous_offset or position <= previous_position:
                raise CorruptIndexError(
                    f"index {self._file.path.name} is not monotonic at offset "
                    f"{self.base_offset + relative_offset}"
                )
            previous_offset, previous_position = relative_offset, position
        if positions and positions[-1] + HEADER_SIZE > log_size:
            raise CorruptIndexError(
                f"index {self._file.path.name} points to position {positions[-1]} "
                f"beyond the log's {log_size} bytes"
            )
        self._relative_offsets = relative_offsets
        self._positions = positions

    def last_entry(self) -> tuple[int, int] | None:
        """The last ``(offset, position)``, or None if empty."""
        if not self._positions:
            return None
        return self.base_offset + self._relative_offsets[-1], self._positions[-1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The greatest entry with offset <= ``offset``; ``(base_offset, 0)`` if none."""
        index = bisect_right(self._relative_offsets, offset - self.base_offset) - 1
        if index < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[index], self._positions[index]

    def append(self, entries: list[tuple[int, int]]) -> None:
        """Append ``(offset, position)`` entries, written to the file with one write.

        Raises ``ValueError`` if an entry does not increase (a broken invariant of the
        caller) and ``OSError`` if the write fails, in which case nothing is appended.
        """
        if not entries:
            return
        previous_offset = self._relative_offsets[-1] if self._relative_offsets else -1
        previous_position = self._positions[-1] if self._positions else -1
        pairs = []
        for offset, position in entries:
            relative_offset = offset - self.base_offset
            if not (previous_offset < relative_offset <= _INT32_MAX) or not (
                previous_position < position <= _INT32_MAX
            ):
                raise ValueError(
                    f"offset index entry ({offset}, {position}) does not follow "
                    f"({self.base_offset + previous_offset}, {previous_position})"
                )
            pairs.append((relative_offset, position))
            previous_offset, previous_position = relative_offset, position
        self._file.append(_pack_int32_pairs(pairs), self.entries)
        for relative_offset, position in pairs:
            self._relative_offsets.append(relative_offset)
            self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        self.truncate_entries(keep)

    def truncate_entries(self, keep: int) -> None:
        """Keep only the first ``keep`` entries (used to undo a failed append)."""
        if keep >= self.entries:
            return
        self._file.truncate(keep)
        del self._relative_offsets[keep:]
        del self._positions[keep:]

    def rebuild(self, entries: list[tuple[int, int]]) -> None:
        """Replace every entry (after scanning the log) and rewrite the file."""
        pairs = [(offset - self.base_offset, position) for offset, position in entries]
        self._file.rewrite(_pack_int32_pairs(pairs))
        self._relative_offsets = array("i", [pair[0] for pair in pairs])
        self._positions = array("i", [pair[1] for pair in pairs])

    def is_full(self, max_index_bytes: int) -> bool:
        """True once the index holds ``segment.index.bytes`` worth of entries."""
        return self.entries >= max(1, max_index_bytes // self.ENTRY_SIZE)
