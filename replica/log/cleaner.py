"""The log cleaner: compaction of one partition log (``cleanup.policy=compact``).

Kafka's ``Cleaner`` for one log. The log's closed segments below a limit (the high
watermark, the flushed offset, ``min.compaction.lag.ms``; never the active segment) are
the *cleanable* range; the part of it after the last cleaning (the cleaner checkpoint) is
*dirty*. Two passes, as in Kafka:

1. Build ``key -> offset of its latest record`` over the dirty segments (bounded by
   ``max_map_keys``: when a segment would overflow the map, the pass stops before it and
   only the segments mapped so far count as cleaned).
2. Rewrite every segment from the log start to the end of the mapped range, segment group
   by segment group (adjacent segments whose sizes add up to at most ``segment.bytes`` go
   into one), keeping a record unless a later record of its key is in the map.

Each batch is filtered by :func:`replica.log.batch_filter.filter_batch` (offsets never
change; tombstones follow the delete horizon of KIP-534; see there).

The output goes to new segment files named ``<base>.log.cleaned`` (and the two indexes,
built as by appends), fdatasync'ed; :meth:`PartitionLog.commit_cleaning` then swaps them in
(crash-safely, :mod:`replica.log.cleaner_swap`). Nothing here touches the log's in-memory
state: the input holds duplicated descriptors of the source segments, so the cleaning can
run on a worker thread while the log keeps serving appends and reads.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lograft.durable import fsync_directory
from lograft.protocol.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from lograft.protocol.errors import CorruptMessageError, KafkaStorageError
from lograft.protocol.topic_config import LogConfig
from replica.log.batch_filter import (
    DELETE_HORIZON_FLAG,
    FilteredBatch,
    filter_batch,
    keyed_offsets,
)
from replica.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    MAX_SEGMENT_BYTES,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from replica.log.time_index import TimeIndex

__all__ = [
    "DEFAULT_MAX_MAP_KEYS",
    "DELETE_HORIZON_FLAG",
    "AbortedRanges",
    "CleanableView",
    "CleanedGroup",
    "CleanerStats",
    "CleaningAbortedError",
    "CleaningInput",
    "CleaningResult",
    "FilteredBatch",
    "SourceSegment",
    "clean_log",
    "filter_batch",
    "remove_staged_files",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_MAP_KEYS = 1_000_000
"""Keys the offset map of one cleaning may hold (Kafka bounds it by
``log.cleaner.dedupe.buffer.size``); later dirty segments wait for the next cleaning."""

_READ_CHUNK = 1024 * 1024
_WRITE_CHUNK = 1024 * 1024


class CleaningAbortedError(Exception):
    """The cleaning was asked to stop (shutdown); nothing was swapped in."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A closed segment to clean: a duplicated descriptor of its ``.log`` and its extent."""

    base_offset: int
    next_offset: int
    size: int
    fd: int
    index_entries: int


@dataclass(frozen=True, slots=True)
class CleanableView:
    """How dirty a log is: the cleanable range split into its clean and dirty parts.

    ``end_offset`` is the first offset that may not be cleaned (the base offset of the first
    segment that is active, not yet below the limit, or younger than
    ``min.compaction.lag.ms``). ``first_dirty_timestamp_ms`` is the max timestamp of the
    first dirty batch (-1 if unknown): ``max.compaction.lag.ms`` counts from it.
    """

    first_dirty_offset: int
    end_offset: int
    clean_bytes: int
    dirty_bytes: int
    first_dirty_timestamp_ms: int
    tombstones_due: bool = False
    """Nothing is dirty, but tombstones in the cleaned part are past their delete horizon."""

    @property
    def dirty_ratio(self) -> float:
        """Dirty bytes over cleanable bytes (0.0 for an empty range)."""
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True, eq=False)
class CleaningInput:
    """Everything one cleaning reads, snapshotted by ``PartitionLog.prepare_cleaning``.

    ``sources`` are the cleanable segments from the log start on; the dirty ones start at
    ``first_dirty_index``. The descriptors are the caller's to close (:meth:`close`).
    ``generation`` and ``segments`` let the log check at commit time that nothing it holds
    changed underneath (truncation, retention).
    """

    directory: Path
    config: LogConfig
    sources: tuple[SourceSegment, ...]
    first_dirty_index: int
    end_offset: int
    generation: int
    segments: tuple[LogSegment, ...] = field(repr=False)
    _closed: threading.Event = field(default_factory=threading.Event, repr=False)

    def close(self) -> None:
        """Close the duplicated descriptors once (a second close could hit a reused number)."""
        if self._closed.is_set():
            return
        self._closed.set()
        for source in self.sources:
            with contextlib.suppress(OSError):
                os.close(source.fd)


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """Old segments (base offsets) replaced by one cleaned segment, or by none when
    nothing of them was kept (``new_base`` None; never for the group at the log start,
    which keeps the log start offset)."""

    old_bases: tuple[int, ...]
    new_base: int | None


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """What one cleaning did, for its log line."""

    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    unkeyed_removed: int = 0
    empty_batches_kept: int = 0
    map_keys: int = 0


@dataclass(frozen=True, slots=True, eq=False)
class CleaningResult:
    """Cleaned segments written beside the log, waiting for ``PartitionLog.commit_cleaning``.

    They replace ``input.sources[:cleaned_sources]``; afterwards the dirty part of the log
    starts at ``next_dirty_offset``. A cleaning without dirty segments (only tombstones
    past their horizon to drop) has an empty offset map.
    """

    input: CleaningInput
    groups: tuple[CleanedGroup, ...]
    cleaned_sources: int
    next_dirty_offset: int
    stats: CleanerStats
    tombstone_horizon_ms: int = -1
    """The earliest delete horizon of the tombstones left in the cleaned segments (-1:
    none): a cleaning from then on can drop them, even if nothing new is dirty."""


# ---- reading the sources ------------------------------------------------------------------


def _batches(source: SourceSegment, abort: threading.Event | None) -> Iterator[bytes]:
    """Each batch of ``source`` (bytes exactly), CRC-checked; reads about 1 MiB at a time."""
    position = 0
    while position < source.size:
        if abort is not None and abort.is_set():
            raise CleaningAbortedError("log cleaner stopping")
        length = min(_READ_CHUNK, source.size - position)
        chunk = os.pread(source.fd, length, position)
        offset = 0
        while len(chunk) - offset >= HEADER_SIZE:
            header = parse_header(chunk, offset)
            if (
                header.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or position + offset + header.size > source.size
            ):
                raise CorruptMessageError(
                    f"batch length {header.batch_length} at {position + offset} does not fit "
                    f"segment {source.base_offset}"
                )
            if offset + header.size > len(chunk):
                if offset == 0:
                    # A batch larger than a chunk: read it whole.
                    chunk = os.pread(source.fd, header.size, position)
                    if len(chunk) != header.size:
                        raise CorruptMessageError(f"short read of the batch at {position}")
                    continue
                break
            batch = bytes(chunk[offset : offset + header.size])
            check_stored_batch(batch, parse_header(batch))
            yield batch
            offset += header.size
        if offset == 0:
            raise CorruptMessageError(f"torn batch at position {position} of {source.base_offset}")
        position += offset


_MAX_OFFSET = 2**63 - 1


class AbortedRanges:
    """Which transactional batches belong to aborted transactions: per producer, the
    ranges from a transaction's first offset to its abort marker."""

    __slots__ = ("_by_producer",)

    def __init__(self, aborted: Iterable[tuple[int, int, int]] = ()) -> None:
        """``aborted``: ``(producer id, first offset, marker offset)`` of each."""
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for producer_id, first, last in aborted:
            self._by_producer.setdefault(producer_id, []).append((first, last))
        for ranges in self._by_producer.values():
            ranges.sort()

    def holds(self, header: BatchHeader) -> bool:
        """Whether ``header``'s batch is data of an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._by_producer.get(header.producer_id)
        if not ranges:
            return False
        index = bisect.bisect_right(ranges, (header.base_offset, _MAX_OFFSET)) - 1
        return index >= 0 and ranges[index][0] <= header.base_offset <= ranges[index][1]


class _MarkerTracker:
    """Whether anything of each producer's current transaction is left in the cleaned
    log, batch by batch in offset order: its marker may go only if nothing is (a replay
    would otherwise find the transaction open, with no marker to end it)."""

    __slots__ = ("_retained",)

    def __init__(self) -> None:
        self._retained: dict[int, bool] = {}

    def on_data(self, header: BatchHeader, retained: bool) -> None:
        """A transactional data batch was kept (``retained``, even empty) or dropped."""
        self._retained[header.producer_id] = (
            self._retained.get(header.producer_id, False) or retained
        )

    def removable(self, header: BatchHeader) -> bool:
        """A marker of ``header``'s producer ends its transaction: may the marker go?"""
        return not self._retained.pop(header.producer_id, False)


def _map_segment(
    source: SourceSegment, abort: threading.Event | None, aborted: AbortedRanges
) -> dict[bytes, int]:
    """``key -> latest offset`` within one segment (aborted transactions' records left out:
    they must not make an older committed record of their key look superseded)."""
    keys: dict[bytes, int] = {}
    for batch in _batches(source, abort):
        header = parse_header(batch)
        if header.is_control or not header.records_count or aborted.holds(header):
            continue
        for key, offset in keyed_offsets(batch, header):
            keys[key] = offset
    return keys


def _groups(sources: tuple[SourceSegment, ...], config: LogConfig) -> list[list[SourceSegment]]:
    """Adjacent segments cleaned into one: by size, index size and relative offsets."""
    max_bytes = min(config.segment_bytes, MAX_SEGMENT_BYTES)
    max_entries = max(1, config.segment_index_bytes // TimeIndex.ENTRY_SIZE)
    groups: list[list[SourceSegment]] = []
    size = entries = 0
    for source in sources:
        if groups:
            base = groups[-1][0].base_offset
            if (
                size + source.size <= max_bytes
                and entries + source.index_entries <= max_entries
                and source.next_offset - 1 - base <= MAX_RELATIVE_OFFSET
            ):
                groups[-1].append(source)
                size += source.size
                entries += source.index_entries
                continue
        groups.append([source])
        size, entries = source.size, source.index_entries
    return groups


def remove_staged_files(directory: Path, base_offset: int) -> None:
    """Unlink the ``.cleaned`` files of one base offset, if any."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        segment_file(directory, base_offset, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)


# ---- one cleaning -------------------------------------------------------------------------


class _Counters:
    __slots__ = ("empty", "horizon", "kept", "removed", "tombstones", "unkeyed")

    def __init__(self) -> None:
        self.kept = self.removed = self.tombstones = self.unkeyed = self.empty = 0
        self.horizon = -1


# Over 70 lines: map, then write each group; the failure path removes what was staged.
def clean_log(
    cleaning: CleaningInput,
    *,
    now_ms: int,
    producer_last_offsets: Mapping[int, int],
    abort: threading.Event | None = None,
    max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
    aborted_transactions: Iterable[tuple[int, int, int]] = (),
) -> CleaningResult:
    """Write the cleaned segments of ``cleaning`` as ``.cleaned`` files (fdatasync'ed).

    ``producer_last_offsets`` maps each producer id to the last offset of its last batch in
    the log: that batch survives even when empty. ``aborted_transactions`` holds
    ``(producer id, first offset, abort marker offset)`` of the aborted transactions: their
    records are removed. The cleaning must end at or below the last stable offset, where
    every transactional batch is decided (the rest are committed). Runs on any thread;
    touches only the source descriptors and new ``.cleaned`` files. Raises
    ``CorruptMessageError`` for a corrupt source batch, ``KafkaStorageError`` for an I/O
    error and ``CleaningAbortedError`` when ``abort`` is set; staged files are removed then.
    """
    sources = cleaning.sources
    dirty = sources[cleaning.first_dirty_index :]
    if not sources:
        raise ValueError("nothing to clean")
    offset_map: dict[bytes, int] = {}
    aborted = AbortedRanges(aborted_transactions)
    markers = _MarkerTracker()
    mapped = 0
    try:
        for source in dirty:
            keys = _map_segment(source, abort, aborted)
            if mapped and len(offset_map) + len(keys) > max_map_keys:
                break
            offset_map.update(keys)
            mapped += 1
    except OSError as exc:
        raise KafkaStorageError(f"log cleaner read of {cleaning.directory} failed: {exc}") from exc
    cleaned_count = cleaning.first_dirty_index + mapped
    to_clean = sources[:cleaned_count]
    next_dirty_offset = (
        cleaning.end_offset if cleaned_count == len(sources) else sources[cleaned_count].base_offset
    )
    config = cleaning.config
    counters = _Counters()
    groups: list[CleanedGroup] = []
    staged: list[int] = []
    bytes_after = 0
    try:
        for index, group in enumerate(_groups(to_clean, config)):
            base = group[0].base_offset
            remove_staged_files(cleaning.directory, base)
            staged.append(base)
            size = _write_group(
                cleaning,
                group,
                offset_map,
                producer_last_offsets,
                aborted,
                markers,
                now_ms,
                abort,
                counters,
            )
            old_bases = tuple(source.base_offset for source in group)
            if size == 0 and index > 0:
                remove_staged_files(cleaning.directory, base)
                groups.append(CleanedGroup(old_bases, None))
            else:
                groups.append(CleanedGroup(old_bases, base))
            bytes_after += size
        fsync_directory(cleaning.directory)
    except BaseException as exc:
        for base in staged:
            try:
                remove_staged_files(cleaning.directory, base)
            except OSError:
                log.exception(
                    "removing staged file failed dir=%s base=%d", cleaning.directory, base
                )
        if isinstance(exc, OSError):
            raise KafkaStorageError(
                f"log cleaner write in {cleaning.directory} failed: {exc}"
            ) from exc
        raise
    stats = CleanerStats(
        segments_before=len(to_clean),
        segments_after=sum(1 for group in groups if group.new_base is not None),
        bytes_before=sum(source.size for source in to_clean),
        bytes_after=bytes_after,
        records_kept=counters.kept,
        records_removed=counters.removed + counters.tombstones + counters.unkeyed,
        tombstones_removed=counters.tombstones,
        unkeyed_removed=counters.unkeyed,
        empty_batches_kept=counters.empty,
        map_keys=len(offset_map),
    )
    return CleaningResult(
        cleaning, tuple(groups), cleaned_count, next_dirty_offset, stats, counters.horizon
    )


# Over 70 lines: the per-batch filter loop, inline with its buffered writes and counters.
def _write_group(
    cleaning: CleaningInput,
    group: list[SourceSegment],
    offset_map: Mapping[bytes, int],
    producer_last_offsets: Mapping[int, int],
    aborted: AbortedRanges,
    markers: _MarkerTracker,
    now_ms: int,
    abort: threading.Event | None,
    counters: _Counters,
) -> int:
    """Filter ``group`` into one staged segment; returns its size. Raises ``OSError``."""
    config = cleaning.config
    segment = LogSegment.create(cleaning.directory, group[0].base_offset, CLEANED_SUFFIX)
    try:
        buffer = bytearray()

        def flush_buffer() -> None:
            headers = []
            position = 0
            while position < len(buffer):
                header = parse_header(buffer, position)
                headers.append(header)
                position += header.size
            segment.append(buffer, headers, config.index_interval_bytes, now_ms)
            buffer.clear()

        for source in group:
            for batch in _batches(source, abort):
                header = parse_header(batch)
                retain_if_empty = (
                    header.producer_id >= 0
                    and producer_last_offsets.get(header.producer_id) == header.last_offset
                )
                result = filter_batch(
                    batch,
                    offset_map,
                    now_ms,
                    config.delete_retention_ms,
                    retain_if_empty,
                    aborted=aborted.holds(header),
                    marker_removable=header.is_control and markers.removable(header),
                )
                if header.is_transactional and not header.is_control:
                    markers.on_data(header, retained=result.data is not None)
                counters.kept += result.kept
                counters.removed += result.removed
                counters.tombstones += result.tombstones_removed
                counters.unkeyed += result.unkeyed_removed
                if result.tombstone_horizon_ms >= 0 and (
                    counters.horizon < 0 or result.tombstone_horizon_ms < counters.horizon
                ):
                    counters.horizon = result.tombstone_horizon_ms
                if result.data is None:
                    continue
                if not result.kept and header.records_count:
                    counters.empty += 1
                buffer += result.data
                if len(buffer) >= _WRITE_CHUNK:
                    flush_buffer()
        if buffer:
            flush_buffer()
        segment.seal()
        fds = segment.dup_fds()
        try:
            for fd in fds:
                os.fdatasync(fd)
        finally:
            for fd in fds:
                os.close(fd)
        return segment.size
    finally:
        segment.close()
