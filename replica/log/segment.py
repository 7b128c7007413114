"""One log segment: a ``.log`` file of record batches and its two sparse indexes.

Kafka's ``LogSegment``. The files are named by the segment's base offset, zero-padded to 20
digits: ``00000000000000000042.log``, ``.index`` (:class:`OffsetIndex`) and ``.timeindex``
(:class:`TimeIndex`). Batches are appended whole, with one ``os.write`` per append on an
``O_APPEND`` descriptor. Offsets only increase: a batch starts at or after the end of the
one before it (the first one at or after the segment's base offset). They are contiguous
until the log cleaner removes batches of a compacted topic, or a follower copies a leader
whose log was cleaned: then there are holes, as in Kafka, and every lookup here finds "the
first batch ending at or after an offset", which is the next batch when the offset is in a
hole.

The segment never trusts its files: :meth:`LogSegment.load_indexes` checks the indexes and
the log tail and raises ``CorruptIndexError`` when anything disagrees, and
:meth:`LogSegment.recover` walks every batch (structure, CRC-32C, increasing offsets),
truncates at the first bad byte and rebuilds both indexes. The walk itself is
:mod:`replica.log.segment_recovery`'s; which batches get index entries, and the int32 limits
of those entries, are :mod:`replica.log.index_cursor`'s.

Not thread-safe: :class:`replica.log.partition_log.PartitionLog` serialises every call. The
one operation meant for another thread is ``fdatasync`` on the descriptors returned by
:meth:`LogSegment.dup_fds`, which stay valid even if the segment closes its own.
"""

# Over 600 lines: Kafka's LogSegment: one class owning a segment's log file and both indexes.
from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from lograft.protocol.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_headers,
    parse_header,
)
from lograft.protocol.errors import CorruptMessageError, KafkaStorageError
from replica.log.index_cursor import (
    MAX_RELATIVE_OFFSET,
    MAX_SEGMENT_BYTES,
    NO_TIMESTAMP,
    IndexCursor,
)
from replica.log.offset_index import CorruptIndexError, OffsetIndex, write_all
from replica.log.segment_recovery import SegmentRecovery, scan_segment
from replica.log.time_index import TimeIndex

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_RELATIVE_OFFSET",
    "MAX_SEGMENT_BYTES",
    "NO_TIMESTAMP",
    "TIME_INDEX_SUFFIX",
    "LogSegment",
    "SegmentRecovery",
    "parse_segment_file_name",
    "segment_file",
]

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
"""A segment's record batches: ``<base offset, 20 digits>.log``."""
INDEX_SUFFIX = ".index"
"""A segment's sparse offset index (:class:`OffsetIndex`)."""
TIME_INDEX_SUFFIX = ".timeindex"
"""A segment's sparse time index (:class:`TimeIndex`)."""
DELETED_SUFFIX = ".deleted"
"""Appended to the files of a segment being deleted; they are unlinked later, and an open
that finds one (the unlink never ran) unlinks it."""
CLEANED_SUFFIX = ".cleaned"
"""Appended to the file names of a segment the log cleaner is still writing."""
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_WALK_CHUNK = 16 * 1024
"""Bytes read per ``pread`` when walking headers; about one index interval of small batches."""
_MAX_TAIL_BATCHES = 512
"""Bound on the batches the unindexed tail keeps in memory (when ``index.interval.bytes`` is
large or the batches tiny); past it the oldest half is forgotten and reads walk for them."""
_FILE_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    """The path of a segment file: 20-digit zero-padded base offset plus ``suffix``."""
    return directory / f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``(base_offset, suffix)`` for a segment file name, or None for any other name."""
    match = _FILE_NAME.match(name)
    if match is None:
        return None
    base_offset = int(match.group(1))
    if base_offset >= 2**63:
        return None
    return base_offset, match.group(2)


class LogSegment:
    """A ``.log`` file with its offset and time indexes; see the module docstring.

    Create one with :meth:`create` (new, empty) or :meth:`open_existing` followed by
    :meth:`load_indexes` or :meth:`recover`. Not thread-safe.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        size: int,
        now_ms: int | None,
        staging_suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        self._log_path = segment_file(directory, base_offset, LOG_SUFFIX + staging_suffix)
        self._fd = fd
        self._size = size
        self.offset_index = OffsetIndex(
            segment_file(directory, base_offset, INDEX_SUFFIX + staging_suffix), base_offset
        )
        self.time_index = TimeIndex(
            segment_file(directory, base_offset, TIME_INDEX_SUFFIX + staging_suffix), base_offset
        )
        self._next_offset = base_offset
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        self._tail_batches: list[tuple[int, BatchHeader]] = []
        """The batches appended since the last offset-index entry (that batch included), as
        (position in the file, header): the log's end, where followers and consumers read,
        is found without walking the file. Any batch before the first of them ends before
        its base offset, so an offset from there on is answered here."""
        self.first_append_ms: int | None = now_ms if size else None
        """When the first batch was appended (``now_ms`` at open for a loaded segment):
        ``segment.ms`` counts from here."""
        self.last_modified_ms: int | None = now_ms if size else None
        """``now_ms`` of the last append; retention's fallback when batches carry no
        timestamps (Kafka uses the file's mtime, which would mean reading a clock)."""
        self.damaged = False
        """True if a failed append could not be undone: the files no longer match memory."""
        self._closed = False

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, staging_suffix: str = "") -> LogSegment:
        """Create a new, empty segment; fails if its ``.log`` file already exists.

        ``staging_suffix`` (:data:`CLEANED_SUFFIX`) names the files ``<base>.log.cleaned``
        etc.: a segment the cleaner writes and the log later renames into place.
        """
        path = segment_file(directory, base_offset, LOG_SUFFIX + staging_suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        segment = cls(directory, base_offset, fd, 0, None, staging_suffix)
        try:
            segment.offset_index.create()
            segment.time_index.create()
        except OSError:
            segment.delete_files()
            raise
        return segment

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, now_ms: int) -> LogSegment:
        """Open a segment found on disk. Call :meth:`load_indexes` or :meth:`recover` next."""
        path = segment_file(directory, base_offset, LOG_SUFFIX)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        return cls(directory, base_offset, fd, size, now_ms)

    # ---- state ----------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        """The ``.log`` file."""
        return self._log_path

    @property
    def size(self) -> int:
        """Bytes of whole batches in the ``.log`` file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """The offset after the last batch (the base offset if empty)."""
        return self._next_offset

    @property
    def is_empty(self) -> bool:
        """True if the segment holds no batch."""
        return self._size == 0

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp, or ``NO_TIMESTAMP``."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Base offset of the first batch carrying :attr:`max_timestamp`."""
        return self._offset_of_max_timestamp

    @property
    def retention_timestamp_ms(self) -> int | None:
        """The time retention.ms compares with: the max timestamp, else the last append."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return self.last_modified_ms

    def is_index_full(self, segment_index_bytes: int) -> bool:
        """True when either index reached ``segment.index.bytes``."""
        return self.offset_index.is_full(segment_index_bytes) or self.time_index.is_full(
            segment_index_bytes
        )

    # ---- loading and recovery -------------------------------------------------------------

    def load_indexes(self) -> None:
        """Load both indexes and check them against the log tail.

        Raises ``CorruptIndexError`` if an index file is missing, misaligned, not monotonic or
        points outside the log, if the batch at the last index entry does not start at its
        offset, if the batches after it go backwards or do not end exactly at the end of the
        file, or if the file is larger than a
        segment may be. Only the tail after the last entry is read, so this is cheap.
        """
        if self._size > MAX_SEGMENT_BYTES:
            raise CorruptIndexError(f"{self._log_path.name} is {self._size} bytes, over 2 GiB")
        max_entries = self._size // HEADER_SIZE + 1
        self.offset_index.load(self._size, max_entries)
        self.time_index.load(max_entries)
        self._scan_tail()

    def _scan_tail(self) -> None:
        """Derive next offset and max timestamp from the last index entries plus a short walk."""
        last_entry = self.offset_index.last_entry()
        next_offset, position = last_entry if last_entry is not None else (self.base_offset, 0)
        last_time_entry = self.time_index.last_entry()
        max_timestamp, offset_of_max = (
            last_time_entry if last_time_entry is not None else (NO_TIMESTAMP, self.base_offset)
        )
        try:
            for header in self._walk(position):
                # The indexed batch starts exactly at its entry; later ones may skip a hole.
                if header.base_offset < next_offset or (
                    header.position == position
                    and last_entry is not None
                    and header.base_offset != next_offset
                ):
                    raise CorruptIndexError(
                        f"{self._log_path.name}: batch at position {header.position} has "
                        f"baseOffset {header.base_offset}, expected {next_offset}"
                        f"{'' if header.position == position else ' or more'}"
                    )
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.base_offset
                next_offset = header.next_offset
        except CorruptMessageError as exc:
            raise CorruptIndexError(f"{self._log_path.name}: {exc.message}") from exc
        if last_time_entry is not None and last_time_entry[1] >= next_offset:
            raise CorruptIndexError(
                f"{self._log_path.name}: time index offset {last_time_entry[1]} is past the "
                f"log end {next_offset}"
            )
        if next_offset - 1 - self.base_offset > MAX_RELATIVE_OFFSET:
            raise CorruptIndexError(f"{self._log_path.name}: offsets overflow the index")
        self._next_offset = next_offset
        self._max_timestamp = max_timestamp
        self._offset_of_max_timestamp = offset_of_max
        self._bytes_since_index_entry = self._size - position

    def recover(self, index_interval_bytes: int) -> SegmentRecovery:
        """Validate every batch from the start, truncate at the first bad one, rebuild indexes.

        A batch is good if its header is whole, its length fits the file, its base offset is
        at or after the end of the previous batch (the first one: the segment's base
        offset; holes are what compaction leaves), its offsets
        and position fit the int32 indexes and :func:`check_stored_batch` accepts it (magic,
        lengths, record count, CRC-32C). Raises ``OSError`` on I/O failure.
        """
        scan = scan_segment(self._fd, self.base_offset, index_interval_bytes)
        position, next_offset, cursor = scan.valid_bytes, scan.next_offset, scan.cursor
        truncated = scan.file_size - position
        if truncated:
            os.ftruncate(self._fd, position)
        self._size = position
        self._tail_batches.clear()
        self.offset_index.rebuild(cursor.offset_entries)
        self.time_index.rebuild(cursor.time_entries)
        self._next_offset = next_offset
        self._max_timestamp = cursor.max_timestamp
        self._offset_of_max_timestamp = cursor.offset_of_max_timestamp
        self._bytes_since_index_entry = cursor.bytes_since_entry
        if not position:
            self.first_append_ms = self.last_modified_ms = None
        return SegmentRecovery(position, truncated, scan.reason if truncated else None)

    # ---- writing --------------------------------------------------------------------------

    def append(
        self,
        records: bytes | bytearray,
        headers: Sequence[BatchHeader],
        index_interval_bytes: int,
        now_ms: int,
    ) -> None:
        """Write whole batches (offsets already assigned) and their index entries.

        ``headers`` give positions inside ``records``. All or nothing: on failure the file and
        indexes are cut back and ``KafkaStorageError`` is raised; if even that fails,
        :attr:`damaged` is set.
        """
        position = self._size
        last_time_entry = self.time_index.last_entry()
        cursor = IndexCursor(
            self._bytes_since_index_entry,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            NO_TIMESTAMP if last_time_entry is None else last_time_entry[0],
        )
        tail: list[tuple[int, BatchHeader]] = []
        indexed = False
        for header in headers:
            entries = len(cursor.offset_entries)
            cursor.add(header, position + header.position, index_interval_bytes)
            if len(cursor.offset_entries) != entries:
                indexed = True  # the tail now starts at this batch
                tail.clear()
            tail.append((position + header.position, header))
        offset_entries_before = self.offset_index.entries
        time_entries_before = self.time_index.entries
        try:
            write_all(self._fd, records)
            self.offset_index.append(cursor.offset_entries)
            self.time_index.append(cursor.time_entries)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, position)
                self.offset_index.truncate_entries(offset_entries_before)
                self.time_index.truncate_entries(time_entries_before)
            except OSError as undo_exc:
                self.damaged = True
                raise KafkaStorageError(
                    f"append to {self._log_path} failed ({exc}) and could not be undone "
                    f"({undo_exc})"
                ) from exc
            raise KafkaStorageError(f"append to {self._log_path} failed: {exc}") from exc
        self._size = position + len(records)
        self._remember_tail(tail, restart=indexed)
        self._next_offset = headers[-1].next_offset
        self._max_timestamp = cursor.max_timestamp
        self._offset_of_max_timestamp = cursor.offset_of_max_timestamp
        self._bytes_since_index_entry = cursor.bytes_since_entry
        if self.first_append_ms is None:
            self.first_append_ms = now_ms
        self.last_modified_ms = now_ms

    def _remember_tail(self, batches: list[tuple[int, BatchHeader]], restart: bool) -> None:
        if restart:
            self._tail_batches.clear()
        self._tail_batches.extend(batches)
        if len(self._tail_batches) > _MAX_TAIL_BATCHES:
            del self._tail_batches[: _MAX_TAIL_BATCHES // 2]

    def seal(self) -> bool:
        """Add the final time-index entry (max timestamp) when the segment stops being active.

        Kafka does this on roll and close so that the last time-index entry always holds the
        segment's max timestamp. Returns True if it wrote. Raises ``OSError``.
        """
        last = self.time_index.last_entry()
        if self._max_timestamp > (NO_TIMESTAMP if last is None else last[0]):
            self.time_index.append([(self._max_timestamp, self._offset_of_max_timestamp)])
            return True
        return False

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns the bytes removed.

        Batches are removed whole, so if ``offset`` falls inside a batch, the segment ends at
        that batch's base offset. Raises ``KafkaStorageError``.
        """
        if offset >= self._next_offset:
            return 0
        header = self.find_batch(offset)
        if header is None:  # unreachable while offset < next_offset
            return 0
        try:
            self.offset_index.truncate_to(header.base_offset)
            self.time_index.truncate_to(header.base_offset)
            os.ftruncate(self._fd, header.position)
        except OSError as exc:
            self.damaged = True
            raise KafkaStorageError(f"truncating {self._log_path} failed: {exc}") from exc
        removed = self._size - header.position
        self._size = header.position
        self._tail_batches.clear()
        try:
            self._scan_tail()
        except CorruptIndexError as exc:
            raise KafkaStorageError(f"{self._log_path} is inconsistent after truncation") from exc
        if not self._size:
            self.first_append_ms = self.last_modified_ms = None
        return removed

    # ---- reading --------------------------------------------------------------------------

    def _walk(self, position: int) -> Iterator[BatchHeader]:
        """Yield batch headers (absolute positions) from ``position`` to the end of the log.

        Reads chunks with ``pread`` and needs only each header, never a whole batch. Raises
        ``CorruptMessageError`` on a header whose length does not fit the log and
        ``OSError`` on I/O failure.
        """
        end = self._size
        while position < end:
            chunk = os.pread(self._fd, min(_WALK_CHUNK, end - position), position)
            if len(chunk) < HEADER_SIZE:
                raise CorruptMessageError(
                    f"truncated batch header at position {position} of {self._log_path.name}"
                )
            offset_in_chunk = 0
            while len(chunk) - offset_in_chunk >= HEADER_SIZE:
                absolute = position + offset_in_chunk
                header = parse_header(chunk, offset_in_chunk, stored_at=absolute)
                if header.batch_length < _MIN_BATCH_LENGTH or absolute + header.size > end:
                    raise CorruptMessageError(
                        f"invalid batchLength {header.batch_length} at position {absolute} "
                        f"of {self._log_path.name}"
                    )
                yield header
                offset_in_chunk += header.size
            position += offset_in_chunk

    def batch_headers(self) -> Iterator[BatchHeader]:
        """Yield the header of every batch, oldest first, without reading whole batches.

        No CRC check: for bytes the segment already validated (at open or append), e.g. to
        rebuild the leader-epoch cache. Raises ``KafkaStorageError`` if the log is
        inconsistent or cannot be read.
        """
        try:
            yield from self._walk(0)
        except (CorruptMessageError, OSError) as exc:
            raise KafkaStorageError(f"reading headers of {self._log_path} failed: {exc}") from exc

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The header of the first batch whose last offset is >= ``offset``, or None.

        At the log's end, one bisect of the batches appended since the last index entry;
        elsewhere one index bisect, then a header walk of about one index interval. Raises
        ``KafkaStorageError`` if the log or index is inconsistent.
        """
        if self._tail_batches and offset >= self._tail_batches[0][1].base_offset:
            found = bisect.bisect_left(
                self._tail_batches, offset, key=lambda batch: batch[1].last_offset
            )
            if found == len(self._tail_batches):
                return None
            position, header = self._tail_batches[found]
            return header if header.position == position else header.moved_to(position)
        entry_offset, position = self.offset_index.lookup(offset)
        try:
            for header in self._walk(position):
                # Position 0 without an entry gives the segment's base offset; compaction
                # may have removed the batches there, so the first one can start later.
                if header.position == position and (
                    header.base_offset < entry_offset
                    or (header.base_offset != entry_offset and position != 0)
                ):
                    raise CorruptMessageError(
                        f"index entry ({entry_offset}, {position}) points to baseOffset "
                        f"{header.base_offset}"
                    )
                if header.last_offset >= offset:
                    return header
        except (CorruptMessageError, OSError) as exc:
            raise KafkaStorageError(f"reading {self._log_path} failed: {exc}") from exc
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        Always returns the first batch whole even if it exceeds ``max_bytes``; never returns
        a batch whose base offset is >= ``max_offset``. One ``pread`` for the data.
        """
        header = self.find_batch(offset)
        if header is None or header.base_offset >= max_offset:
            return b""
        length = min(max(max_bytes, header.size), self._size - header.position)
        try:
            data = os.pread(self._fd, length, header.position)
        except OSError as exc:
            raise KafkaStorageError(f"reading {self._log_path} failed: {exc}") from exc
        if len(data) < header.size:
            raise KafkaStorageError(
                f"short read of {self._log_path} at position {header.position}: "
                f"{len(data)} of {header.size} bytes"
            )
        end = 0
        for batch in iter_headers(data):
            if batch.base_offset >= max_offset:
                break
            end = batch.position + batch.size
        return data if end == len(data) else data[:end]

    def find_timestamp(self, timestamp_ms: int) -> BatchHeader | None:
        """The first batch whose max timestamp is >= ``timestamp_ms``, or None.

        The time index gives the last entry below the target; every batch before its offset
        is older, so the walk starts at that entry's position in the offset index.
        """
        if self._max_timestamp < timestamp_ms:
            return None
        entry = self.time_index.entry_before(timestamp_ms)
        position = 0 if entry is None else self.offset_index.lookup(entry[1])[1]
        try:
            for header in self._walk(position):
                if header.max_timestamp >= timestamp_ms:
                    return header
        except (CorruptMessageError, OSError) as exc:
            raise KafkaStorageError(f"reading {self._log_path} failed: {exc}") from exc
        return None

    # ---- files ----------------------------------------------------------------------------

    def dup_fds(self) -> list[int]:
        """Duplicates of every open descriptor, for ``fdatasync`` on a flusher thread.

        The caller closes them. Duplicates keep the files open even if this segment is
        closed or deleted meanwhile, so a flush never syncs a reused descriptor number.
        """
        fds = [os.dup(self._fd)]
        try:
            for index_file in (self.offset_index.file, self.time_index.file):
                fd = index_file.dup_fd()
                if fd is not None:
                    fds.append(fd)
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def dup_log_fd(self) -> int:
        """A duplicate descriptor of the ``.log`` file, for the log cleaner's reads on another
        thread (valid even if the segment is closed, renamed or deleted meanwhile)."""
        return os.dup(self._fd)

    def close(self) -> None:
        """Close every descriptor; idempotent."""
        if self._closed:
            return
        self._closed = True
        os.close(self._fd)
        self.offset_index.file.close()
        self.time_index.file.close()

    def rename_to_deleted(self) -> list[Path]:
        """Rename the files to ``*.deleted`` and close; returns the new paths.

        The ``.log`` file goes first: once it is renamed the segment is gone for a restart,
        and index files left behind are orphans that the next open removes. Raises
        ``OSError`` only if the ``.log`` rename fails, in which case nothing changed.
        """
        renamed = self.rename_files_to_deleted()
        self.close()
        return renamed

    def rename_files_to_deleted(self) -> list[Path]:
        """:meth:`rename_to_deleted` without closing: the descriptors keep serving reads
        until the caller closes the segment (the log cleaner's swap)."""
        log_target = self._log_path.with_name(self._log_path.name + DELETED_SUFFIX)
        os.rename(self._log_path, log_target)
        self._log_path = log_target
        renamed = [log_target]
        for index_file in (self.offset_index.file, self.time_index.file):
            if not index_file.path.exists():
                continue  # never written (an empty segment's index may not exist)
            target = index_file.path.with_name(index_file.path.name + DELETED_SUFFIX)
            try:
                index_file.rename(target)
            except OSError as exc:
                log.warning("could not rename index file=%s error=%s", index_file.path, exc)
                continue
            renamed.append(target)
        return renamed

    def delete_files(self) -> None:
        """Close and unlink the files now (``.log`` first, for the reason above)."""
        self.close()
        self._log_path.unlink(missing_ok=True)
        self.offset_index.file.unlink()
        self.time_index.file.unlink()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self._next_offset}, "
            f"size={self._size})"
        )
