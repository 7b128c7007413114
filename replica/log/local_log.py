"""The segments of one partition log: append, read, roll, truncate, delete from the start.

Kafka's ``LocalLog``. Offsets increase from segment to segment: each segment starts at or
after the end of the previous one, and the log start offset is the first segment's base
offset (retention deletes whole segments only). They are contiguous unless the log
cleaner compacted the log (``cleanup.policy=compact``, :mod:`replica.log.cleaner`) or a
follower copied a leader whose log was compacted: then whole batches, or all batches of a
segment, are missing, and every lookup of an offset in such a hole finds the next batch,
as in Kafka.

This class also tracks what is durable, as Kafka's ``LocalLog`` keeps the recovery point:
the flushed offset, and what a flush must sync (segments written since their last
fdatasync, whether the directory changed). As in Kafka, a flush syncs the indexes of a
segment only once it is no longer active (the flush after its roll) or at close: recovery
after a crash rebuilds the indexes of the segment holding the recovery point and of every
later one (:mod:`replica.log.log_loader`), and syncing them on each flush cost each
acknowledged write two more fdatasyncs. A flush takes that under the partition log's
lock (:meth:`LocalLog.start_flush`), syncs without it (:meth:`LocalLog.sync`) and publishes
the result under it again (:meth:`LocalLog.finish_flush`); a truncation meanwhile caps what
it may publish. Leader epochs, checkpoints, the flush lock and failure handling are
:class:`replica.log.partition_log.PartitionLog`'s.

Not thread-safe: the partition log's lock guards every structural change; reads and
lookups run on the event loop, which is the only thread that changes the segment list.
"""

from __future__ import annotations

import logging
import os
import sys
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from lograft.durable import fsync_directory
from lograft.protocol.batch_header import (
    BatchHeader,
    assign_offsets,
    parse_header,
    set_log_append_time,
)
from lograft.protocol.errors import (
    CorruptMessageError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from lograft.protocol.topic_config import LogConfig
from replica.log.segment import MAX_RELATIVE_OFFSET, MAX_SEGMENT_BYTES, LogSegment

__all__ = [
    "LocalLog",
    "batch_headers_from",
    "check_follower_batches",
    "check_tiling",
    "delete_files",
    "segment_runs",
]

log = logging.getLogger(__name__)

_LOG_APPEND_TIME = "LogAppendTime"


def delete_files(paths: list[Path]) -> None:
    """Unlink files returned by :meth:`PartitionLog.enforce_retention` (run on a thread).

    Missing files are fine (a restart may have removed them); any other failure is raised
    as ``KafkaStorageError`` after trying every path.
    """
    failures = []
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            failures.append(f"{path}: {exc}")
    if failures:
        raise KafkaStorageError("could not delete " + "; ".join(failures))


def check_tiling(records: bytearray, headers: list[BatchHeader]) -> None:
    """The headers must describe ``records`` exactly, batch after batch, and fit a segment."""
    position = 0
    for header in headers:
        if header.position != position:
            raise ValueError(f"headers do not tile the records at position {position}")
        position += header.size
    if not headers or position != len(records):
        raise ValueError("headers do not cover the records exactly")
    if len(records) > MAX_SEGMENT_BYTES:
        raise RecordListTooLargeError(f"{len(records)} bytes cannot fit in one segment")


def check_follower_batches(
    name: str, headers: list[BatchHeader], log_end_offset: int, latest_epoch: int
) -> None:
    """Batches fetched from the leader must continue log ``name`` (offsets from
    ``log_end_offset`` on, holes allowed) with leader epochs that are set and never go below
    ``latest_epoch`` nor the previous batch's; raises ``CorruptMessageError`` otherwise."""
    expected_offset = log_end_offset
    previous_epoch = latest_epoch
    for header in headers:
        epoch = header.partition_leader_epoch
        if header.base_offset < expected_offset:
            raise CorruptMessageError(
                f"follower append to {name}: batch at position "
                f"{header.position} has baseOffset {header.base_offset}, expected "
                f"{expected_offset} or more"
            )
        if epoch < 0 or epoch < previous_epoch:
            raise CorruptMessageError(
                f"follower append to {name}: batch at offset "
                f"{header.base_offset} has partitionLeaderEpoch {epoch}, after epoch "
                f"{previous_epoch}"
            )
        expected_offset = header.next_offset
        previous_epoch = epoch


def batch_headers_from(segments: list[LogSegment], from_offset: int) -> Iterator[BatchHeader]:
    """Headers of every batch of ``segments`` (a snapshot of a log's list) that ends at or
    after ``from_offset``, oldest first; see :meth:`PartitionLog.batch_headers`."""
    for index, segment in enumerate(segments):
        if index + 1 < len(segments) and segments[index + 1].base_offset <= from_offset:
            continue
        for header in segment.batch_headers():
            if header.last_offset >= from_offset:
                yield header


def segment_runs(
    records: bytearray, headers: list[BatchHeader]
) -> Iterator[tuple[bytearray, list[BatchHeader]]]:
    """Split tiled batches where one segment could not hold them all: each run's offsets lie
    within ``MAX_RELATIVE_OFFSET`` of its first batch's base offset. Positions are rebased
    to each run's buffer; a single run is the input itself."""
    start = 0
    for index in range(1, len(headers) + 1):
        if (
            index < len(headers)
            and headers[index].last_offset - headers[start].base_offset <= MAX_RELATIVE_OFFSET
        ):
            continue
        if start == 0 and index == len(headers):
            yield records, headers
            return
        first = headers[start].position
        end = headers[index - 1].position + headers[index - 1].size
        yield (
            records[first:end],
            [header.moved_to(header.position - first) for header in headers[start:index]],
        )
        start = index


class LocalLog:
    """The ordered segments of one partition directory (never empty; the last is active).

    Not thread-safe; see the module docstring.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        dirty: dict[int, LogSegment],
        flushed_offset: int,
    ) -> None:
        """Take over ``segments`` as opened; ``dirty`` are those not yet fdatasync'ed, and
        offsets below ``flushed_offset`` are known to be durable."""
        self.directory = directory
        self.config = config
        """The current configuration (rolls, indexes, retention)."""
        self.segments = segments
        self.bases = [segment.base_offset for segment in segments]
        """The segments' base offsets, for bisecting."""
        self.size_bytes = sum(segment.size for segment in segments)
        """Bytes of all segments' ``.log`` files."""
        self.dirty: dict[int, LogSegment] = dict(dirty)
        """Segments written since their last fdatasync, by base offset."""
        self.directory_dirty = False
        """Files were created, renamed or removed since the last directory fsync."""
        self.flushed_offset = flushed_offset
        """Offsets below this one were fdatasync'ed (Kafka's recovery point)."""
        self.flush_cap = sys.maxsize
        """Lowest truncation point since the running flush took its snapshot."""

    @property
    def log_start_offset(self) -> int:
        """The base offset of the oldest segment."""
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self.segments[-1].next_offset

    def segment_index(self, offset: int) -> int:
        """The index of the segment that would hold ``offset`` (-1 below the log start)."""
        return bisect_right(self.bases, offset) - 1

    # ---- writing --------------------------------------------------------------------------

    def stamp(
        self, records: bytearray, headers: list[BatchHeader], leader_epoch: int, now_ms: int
    ) -> tuple[list[BatchHeader], int]:
        """Give a leader's batches their offsets from the log end and ``leader_epoch``, in
        place, and LogAppendTime ``now_ms`` if configured.

        Returns the headers as stamped and the append time (-1 unless LogAppendTime).
        """
        assign_offsets(records, headers, self.log_end_offset, leader_epoch)
        log_append_time_ms = -1
        if self.config.message_timestamp_type == _LOG_APPEND_TIME:
            for header in headers:
                set_log_append_time(records, header, now_ms)
            log_append_time_ms = now_ms
        # Re-read the headers: offsets and perhaps timestamps changed in place.
        return [parse_header(records, header.position) for header in headers], log_append_time_ms

    def write(self, records: bytearray, headers: list[BatchHeader], now_ms: int) -> None:
        """Roll if due, write whole batches to the active segment, account for them.

        ``headers`` must carry the final offsets. All or nothing: raises
        ``KafkaStorageError`` and writes nothing if the write fails (the active segment's
        ``damaged`` says whether even the undo failed).
        """
        active = self.segments[-1]
        if self._should_roll(active, len(records), headers[-1].last_offset, now_ms):
            # At the first batch, not the log end: a follower's batch may start past a hole.
            active = self.roll(now_ms, headers[0].base_offset)
        try:
            active.append(records, headers, self.config.index_interval_bytes, now_ms)
        except KafkaStorageError:
            log.exception("append failed dir=%s offset=%d", self.directory, headers[0].base_offset)
            raise
        self.size_bytes += len(records)
        self.dirty[active.base_offset] = active

    def _should_roll(self, active: LogSegment, size: int, last_offset: int, now_ms: int) -> bool:
        # Even an empty segment: its indexes cannot hold offsets that far from its base (a
        # new follower of a compacted log may get such a batch first).
        if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if active.is_empty:
            return False
        config = self.config
        return (
            active.size + size > min(config.segment_bytes, MAX_SEGMENT_BYTES)
            or active.is_index_full(config.segment_index_bytes)
            or self._segment_ms_elapsed(active, now_ms)
        )

    def _segment_ms_elapsed(self, active: LogSegment, now_ms: int) -> bool:
        first_append_ms = active.first_append_ms
        return (
            first_append_ms is not None and now_ms - first_append_ms >= self.config.max_segment_ms
        )

    def roll(self, now_ms: int, base_offset: int = -1) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default and minimum: the log end
        offset). Raises ``KafkaStorageError``."""
        previous = self.segments[-1]
        base_offset = max(base_offset, previous.next_offset)
        try:
            previous.seal()
            # Dirty even if the seal wrote nothing: its indexes were not synced while it
            # was active, and the next flush syncs them whole.
            self.dirty[previous.base_offset] = previous
            segment = LogSegment.create(self.directory, base_offset)
        except OSError as exc:
            raise KafkaStorageError(
                f"rolling log dir={self.directory} at offset {base_offset} failed: {exc}"
            ) from exc
        self.segments.append(segment)
        self.bases.append(base_offset)
        self.directory_dirty = True
        log.info(
            "rolled segment dir=%s base_offset=%d previous_size_bytes=%d now_ms=%d",
            self.directory,
            base_offset,
            previous.size,
            now_ms,
        )
        return segment

    def roll_if_due(self, now_ms: int) -> bool:
        """Roll if the active segment is non-empty and ``segment.ms`` has passed since its
        first append. Returns True if it rolled."""
        active = self.segments[-1]
        if active.is_empty or not self._segment_ms_elapsed(active, now_ms):
            return False
        self.roll(now_ms)
        return True

    def truncate_to(self, offset: int) -> tuple[int, int]:
        """Remove whole batches at and above ``offset``; below the log start, empty the log
        and restart it at ``offset``. Returns ``(bytes removed, segments removed)``. The
        flushed offset, and what a running flush may publish, come down to the new end.

        Raises ``OSError`` or ``KafkaStorageError``; the files are then in doubt.
        """
        segments = self.segments
        if offset < segments[0].base_offset:
            # Kafka's truncateFullyAndStartAt. The new segment is created before the old ones
            # go: if a crash interrupts, the open finds it first and drops the rest.
            fresh = LogSegment.create(self.directory, offset)
            doomed = list(segments)
            segments[:] = [fresh]
            self.bases[:] = [offset]
        else:
            index = bisect_right(self.bases, offset) - 1
            doomed = segments[index + 1 :]
            del segments[index + 1 :]
            del self.bases[index + 1 :]
        removed_bytes = sum(segment.size for segment in doomed)
        for segment in reversed(doomed):
            self.dirty.pop(segment.base_offset, None)
            segment.delete_files()
        active = segments[-1]
        removed_bytes += active.truncate_to(offset)
        self.dirty[active.base_offset] = active
        self.size_bytes = sum(segment.size for segment in segments)
        self.directory_dirty = True
        # The end, not ``offset``: it may lie below ``offset`` (whole batches go).
        log_end_offset = self.log_end_offset
        self.flushed_offset = min(self.flushed_offset, log_end_offset)
        self.flush_cap = min(self.flush_cap, log_end_offset)
        return removed_bytes, len(doomed)

    def seal_active(self) -> None:
        """Give the active segment its final time-index entry and mark it for a whole sync
        (at close, whose flush syncs the active segment's indexes too); raises
        ``OSError``."""
        active = self.segments[-1]
        active.seal()
        self.dirty[active.base_offset] = active

    # ---- reading --------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        """Raw bytes of whole batches from the batch holding ``fetch_offset``; see
        :meth:`PartitionLog.read`."""
        segments = self.segments
        log_start_offset = segments[0].base_offset
        log_end_offset = segments[-1].next_offset
        if fetch_offset < log_start_offset or fetch_offset > log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{log_start_offset}, {log_end_offset}] "
                f"in {self.directory.name}"
            )
        limit = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
        if fetch_offset >= limit:
            return b""
        index = bisect_right(self.bases, fetch_offset) - 1
        while index < len(segments):
            segment = segments[index]
            data = segment.read(fetch_offset, max_bytes, limit)
            if data or fetch_offset < segment.next_offset:
                return data
            index += 1  # fetch_offset is this segment's end: the data starts in the next
        return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch with max timestamp >=
        ``timestamp_ms``, or None; see :meth:`PartitionLog.offset_for_timestamp`."""
        for segment in self.segments:
            if segment.max_timestamp >= timestamp_ms:
                header = segment.find_timestamp(timestamp_ms)
                if header is not None:
                    return header.base_offset, header.max_timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch holding the largest
        timestamp, or None if the log is empty."""
        best: tuple[int, int] | None = None
        for segment in self.segments:
            if segment.is_empty:
                continue
            if best is None or segment.max_timestamp > best[1]:
                best = (segment.offset_of_max_timestamp, segment.max_timestamp)
        return best

    # ---- deleting from the start ----------------------------------------------------------

    def expired_segments(self, now_ms: int, high_watermark: int | None) -> tuple[int, int]:
        """``(segments to delete from the start, how many of them by time)`` per
        ``retention.ms`` and ``retention.bytes``; see :meth:`PartitionLog.enforce_retention`.
        """
        config = self.config
        segments = self.segments
        limit = len(segments) - 1
        if high_watermark is not None:
            # Segment i may go only if the next one starts at or below the watermark.
            limit = bisect_right(self.bases, high_watermark) - 1
            limit = max(0, min(limit, len(segments) - 1))
        count = 0
        if config.retention_ms >= 0:
            while count < limit:
                timestamp = segments[count].retention_timestamp_ms
                if segments[count].is_empty:
                    pass
                elif timestamp is None or now_ms - timestamp <= config.retention_ms:
                    break
                count += 1
        expired_by_time = count
        if config.retention_bytes >= 0:
            remaining = self.size_bytes - sum(s.size for s in segments[:count])
            while count < limit and remaining - segments[count].size >= config.retention_bytes:
                remaining -= segments[count].size
                count += 1
        return count, expired_by_time

    def delete_oldest(self, renamed: list[Path], reason: str) -> None:
        """Rename the oldest segment's files to ``*.deleted`` (appended to ``renamed``), drop
        it from the log and log why (``reason``). Raises ``KafkaStorageError``; the segment
        then stays in the log."""
        segment = self.segments[0]
        try:
            renamed.extend(segment.rename_to_deleted())
        except OSError as exc:
            raise KafkaStorageError(
                f"deleting {segment.log_path} failed: {exc}; renamed "
                f"already: {[str(path) for path in renamed]}"
            ) from exc
        finally:
            self.directory_dirty = True
        del self.segments[0]
        del self.bases[0]
        self.size_bytes -= segment.size
        self.dirty.pop(segment.base_offset, None)
        log_start_offset = self.log_start_offset
        # Deleted data needs no flushing: offsets below the start count as flushed.
        self.flushed_offset = max(self.flushed_offset, log_start_offset)
        log.info(
            "deleted segment dir=%s base_offset=%d reason=%s size_bytes=%d log_start_offset=%d",
            self.directory,
            segment.base_offset,
            reason,
            segment.size,
            log_start_offset,
        )

    def replace_oldest(self, replaced: int, fresh: list[LogSegment]) -> None:
        """Put ``fresh`` (cleaned segments, already on disk) in place of the oldest
        ``replaced`` segments."""
        for segment in self.segments[:replaced]:
            self.dirty.pop(segment.base_offset, None)
        self.segments[:replaced] = fresh
        self.bases[:] = [segment.base_offset for segment in self.segments]
        self.size_bytes = sum(segment.size for segment in self.segments)

    # ---- flushing -------------------------------------------------------------------------

    def start_flush(self, *, active_indexes: bool = False) -> tuple[int, list[int], bool]:
        """``(target offset, descriptors, directory changed)`` for a flush starting now (see
        :meth:`take_unflushed`); what it may publish is capped from here on (see
        :meth:`finish_flush`). Raises ``OSError``; nothing is taken then."""
        target = self.log_end_offset
        fds, directory_dirty = self.take_unflushed(active_indexes=active_indexes)
        self.flush_cap = target
        return target, fds, directory_dirty

    def sync(self, fds: list[int], directory_dirty: bool) -> None:
        """fdatasync and close ``fds``, then fsync the directory if ``directory_dirty``.

        Touches no state of the log: runs on a flusher thread without the partition log's
        lock. Raises ``OSError``; the descriptors are closed all the same.
        """
        try:
            for fd in fds:
                os.fdatasync(fd)
            if directory_dirty:
                fsync_directory(self.directory)
        finally:
            for fd in fds:
                os.close(fd)

    def finish_flush(self, target: int) -> int:
        """Publish a flush that synced everything below ``target``; returns the flushed
        offset. A truncation while it ran lowered the cap: what it synced above the new end
        is gone, and what was written there since is not synced."""
        flushed = min(target, self.flush_cap)
        self.flush_cap = sys.maxsize
        if flushed > self.flushed_offset:
            self.flushed_offset = flushed
        return self.flushed_offset

    def take_unflushed(self, *, active_indexes: bool = False) -> tuple[list[int], bool]:
        """Duplicated descriptors of every segment written since the last call (to
        fdatasync and close), and whether the directory changed since then. Of the active
        segment only the ``.log`` unless ``active_indexes`` (see the module).

        Raises ``OSError``; nothing is taken then.
        """
        fds: list[int] = []
        active = self.segments[-1]
        try:
            for segment in self.dirty.values():
                if segment is active and not active_indexes:
                    fds.append(segment.dup_log_fd())
                else:
                    fds.extend(segment.dup_fds())
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        self.dirty.clear()
        directory_dirty, self.directory_dirty = self.directory_dirty, False
        return fds, directory_dirty

    # ---- files ----------------------------------------------------------------------------

    def close_segments(self) -> None:
        """Close every segment's descriptors; failures are logged, not raised."""
        for segment in self.segments:
            try:
                segment.close()
            except OSError:
                log.exception("closing segment failed dir=%s segment=%s", self.directory, segment)
