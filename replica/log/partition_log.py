"""The log of one partition: ordered segments, appends, reads, recovery, retention, flushing.

Kafka's ``LocalLog`` and ``UnifiedLog`` in one class. A partition directory holds segments
(``<20-digit base offset>.log``, ``.index``, ``.timeindex``), a recovery-point checkpoint
(``recovery-point-offset-checkpoint``: offsets below it were fdatasync'ed), the leader-epoch
checkpoint (``leader-epoch-checkpoint``, see below) and, between a clean close and the next
open, a clean-shutdown marker (``.clean_shutdown``). Other files in the directory are left
alone.

Offsets increase from segment to segment: each segment starts at or after the end of the
previous one, and the log start offset is the first segment's base offset (retention
deletes whole segments only). They are contiguous unless the log cleaner compacted the log
(``cleanup.policy=compact``, :mod:`replica.log.cleaner`) or a follower copied a leader
whose log was compacted: then whole batches, or all batches of a segment, are missing, and
every lookup of an offset in such a hole finds the next batch, as in Kafka.

Compaction swaps cleaned segments in with :meth:`PartitionLog.commit_cleaning`; the
``cleaner-swap`` file it writes first makes the swap all or nothing across a crash (see
there), and ``cleaner-offset-checkpoint`` remembers where the dirty part of the log starts.

Recovery at :meth:`PartitionLog.open`: after a clean shutdown, indexes that pass their
sanity checks are trusted. Otherwise every segment from the one holding the recovery point
(at least the active one) is re-validated batch by batch; at the first torn or corrupt
batch the file is truncated and every later segment dropped. A segment whose index is
missing or corrupt is re-validated the same way, wherever it lies.

Leader epochs: :attr:`PartitionLog.leader_epoch_cache` maps each leader epoch to the first
offset it wrote (Kafka's ``LeaderEpochFileCache``), kept in step with appends, truncation and
retention. It is written to ``leader-epoch-checkpoint`` at most once per :meth:`flush` (when
it changed) and on close, never on the append path. The crash rule that makes that lazy
write safe: the checkpoint is written *before* any recovery point that it must cover (in
:meth:`flush`, after the fdatasync and before the flushed offset is published), so after a
crash its entries below the recovery point are right; entries from the first re-validated
segment on are dropped and rebuilt from the batch headers recovery re-reads anyway. A
missing or invalid checkpoint is rebuilt from every batch header (and logged).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from cluster.durable import TMP_SUFFIX, fsync_directory, write_file_atomically
from cluster.errors import (
    CorruptMessageError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from replica.batch_header import (
    BatchHeader,
    assign_offsets,
    parse_header,
    set_log_append_time,
)
from replica.log.cleaner import (
    CleanableView,
    CleaningInput,
    CleaningResult,
    SourceSegment,
    remove_staged_files,
)
from replica.log.config import LogConfig
from replica.log.epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT_TMP_FILE,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
)
from replica.log.offset_index import CorruptIndexError
from replica.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    MAX_SEGMENT_BYTES,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file,
)
from replica.replication.errors import LeaderEpochCheckpointError
from replica.replication.leader_epoch_cache import LeaderEpochCache

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CLEANER_SWAP_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_FILE",
    "AppendResult",
    "PartitionLog",
    "delete_files",
]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
"""The first offset not yet cleaned and the earliest delete horizon of the tombstones in
the cleaned part (Kafka keeps the offsets in one such file per log directory)."""
CLEANER_SWAP_FILE = "cleaner-swap"
"""Written before cleaned segments replace old ones; present only while a swap is done."""
_SWAP_VERSION = 0
_MAX_SWAP_BYTES = 4 * 1024 * 1024
_CHECKPOINT_VERSION = 0
_MAX_CHECKPOINT_BYTES = 64
_LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets given to an append; ``log_append_time_ms`` is -1 unless LogAppendTime.

    ``headers`` are the appended batches' headers as written (offsets and epochs assigned).
    """

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    headers: tuple[BatchHeader, ...] = ()


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


def _read_checkpoint_values(
    directory: Path, name: str, what: str, minimums: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The numbers of checkpoint file ``name`` (a version line, then one number a line, each
    at least its minimum), or None if the file is missing or not valid."""
    path = directory / name
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        if len(data) > _MAX_CHECKPOINT_BYTES:
            raise ValueError(f"{len(data)} bytes")
        version, *lines, trailer = data.decode("ascii").split("\n")
        values = tuple(int(line) for line in lines)
        if (
            int(version) != _CHECKPOINT_VERSION
            or trailer
            or len(values) != len(minimums)
            or any(value < minimum for value, minimum in zip(values, minimums, strict=True))
        ):
            raise ValueError(f"unexpected content {data!r}")
        return values
    except ValueError as exc:
        log.warning("ignoring invalid %s checkpoint dir=%s reason=%s", what, directory, exc)
        return None


def _encode_checkpoint(*values: int) -> bytes:
    return "".join(f"{value}\n" for value in (_CHECKPOINT_VERSION, *values)).encode("ascii")


def _read_checkpoint(directory: Path) -> int | None:
    """The recovery point, or None if the file is missing or not valid (then: recover all)."""
    values = _read_checkpoint_values(directory, RECOVERY_POINT_FILE, "recovery", (0,))
    return None if values is None else values[0]


def _read_cleaner_checkpoint(directory: Path) -> tuple[int, int] | None:
    """``(first dirty offset, tombstone horizon ms)``, or None if missing or not valid (then
    the whole log counts as dirty, which costs work, not data)."""
    values = _read_checkpoint_values(directory, CLEANER_CHECKPOINT_FILE, "cleaner", (0, -1))
    return None if values is None else (values[0], values[1])


def _encode_swap(old_bases: list[int], new_bases: list[int]) -> bytes:
    return (
        f"{_SWAP_VERSION}\n{','.join(map(str, old_bases))}\n{','.join(map(str, new_bases))}\n"
    ).encode("ascii")


def _read_swap(directory: Path) -> tuple[list[int], list[int]] | None:
    """``(old bases, new bases)`` of a committed cleaner swap, or None if there is none.

    The file is written atomically, so one that does not parse is damage, not a torn write:
    ``KafkaStorageError`` (which of old and new segments are valid is then unknown).
    """
    try:
        with open(directory / CLEANER_SWAP_FILE, "rb") as handle:
            data = handle.read(_MAX_SWAP_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        if len(data) > _MAX_SWAP_BYTES:
            raise ValueError(f"{len(data)} bytes")
        version, old_text, new_text, trailer = data.decode("ascii").split("\n")
        if int(version) != _SWAP_VERSION or trailer:
            raise ValueError("unexpected layout")
        old_bases = [int(item) for item in old_text.split(",") if item]
        new_bases = [int(item) for item in new_text.split(",") if item]
        if not old_bases or min(old_bases + new_bases) < 0 or not set(new_bases) <= set(old_bases):
            raise ValueError("bases out of range")
    except ValueError as exc:
        raise KafkaStorageError(
            f"invalid {CLEANER_SWAP_FILE} in dir={directory}: {exc}; cannot tell old segments "
            "from cleaned ones"
        ) from exc
    return old_bases, new_bases


def _install_cleaned(directory: Path, base_offset: int) -> None:
    """Rename a staged (``.cleaned``) segment over its final names; the ``.log`` goes last,
    so a staged ``.log`` still present means this base offset is not done yet."""
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        staged = segment_file(directory, base_offset, suffix + CLEANED_SUFFIX)
        if staged.exists():
            os.replace(staged, segment_file(directory, base_offset, suffix))


def _finish_cleaner_swap(directory: Path) -> bool:
    """At open: complete a committed swap, drop staged files of one that never committed.

    With ``cleaner-swap`` present the cleaned segments are committed: each old segment
    without a cleaned successor is removed, each staged segment still present is renamed
    over the old one of its base offset, then the swap file goes. Without it, staged
    (``.cleaned``) files are leftovers of an interrupted cleaning and are removed: the old
    segments are intact. Returns True if it changed the directory (already fsync'ed).
    """
    swap = _read_swap(directory)
    changed = False
    if swap is not None:
        old_bases, new_bases = swap
        for base_offset in old_bases:
            if base_offset not in new_bases:
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    segment_file(directory, base_offset, suffix).unlink(missing_ok=True)
        for base_offset in new_bases:
            _install_cleaned(directory, base_offset)
        fsync_directory(directory)
        (directory / CLEANER_SWAP_FILE).unlink()
        changed = True
        log.info(
            "finished interrupted cleaner swap dir=%s old_segments=%d new_segments=%d",
            directory,
            len(old_bases),
            len(new_bases),
        )
    for entry in os.scandir(directory):
        if entry.name.endswith(CLEANED_SUFFIX) and parse_segment_file_name(
            entry.name[: -len(CLEANED_SUFFIX)]
        ):
            (directory / entry.name).unlink(missing_ok=True)
            changed = True
    if changed:
        fsync_directory(directory)
    return changed


def _segment_runs(
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
            [replace(header, position=header.position - first) for header in headers[start:index]],
        )
        start = index


def _scan_directory(directory: Path) -> list[int]:
    """Base offsets of the segments on disk; removes leftovers of deletes and temp files."""
    logs: set[int] = set()
    indexes: dict[int, list[Path]] = {}
    for entry in os.scandir(directory):
        name = entry.name
        path = directory / name
        if not entry.is_file(follow_symlinks=False):
            continue
        if name.endswith(DELETED_SUFFIX) and parse_segment_file_name(name[: -len(DELETED_SUFFIX)]):
            path.unlink(missing_ok=True)  # retention renamed it; the unlink never ran
            continue
        if name in (
            RECOVERY_POINT_FILE + TMP_SUFFIX,
            CLEANER_CHECKPOINT_FILE + TMP_SUFFIX,
            CLEANER_SWAP_FILE + TMP_SUFFIX,
            CLEAN_SHUTDOWN_FILE + TMP_SUFFIX,
            LEADER_EPOCH_CHECKPOINT_TMP_FILE,
        ):
            path.unlink(missing_ok=True)
            continue
        parsed = parse_segment_file_name(name)
        if parsed is None:
            continue
        base_offset, suffix = parsed
        if suffix == LOG_SUFFIX:
            logs.add(base_offset)
        else:
            indexes.setdefault(base_offset, []).append(path)
    for base_offset, paths in indexes.items():
        if base_offset not in logs:
            for path in paths:
                log.info("removing orphan index dir=%s file=%s", directory, path.name)
                path.unlink(missing_ok=True)
    return sorted(logs)


def _check_tiling(records: bytearray, headers: list[BatchHeader]) -> None:
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


def _load_epoch_cache(
    directory: Path, segments: list[LogSegment], rescan_from: int
) -> tuple[LeaderEpochCache, bool]:
    """The leader-epoch cache matching the recovered ``segments``, and whether to persist it.

    Trusts the checkpoint below ``segments[rescan_from]`` (the first segment recovery
    re-validated; ``len(segments)`` after a clean shutdown) and rebuilds the rest from batch
    headers: the lazy checkpoint write guarantees only the part below the recovery point
    (see the module docstring). A missing or invalid checkpoint means a full rebuild. Raises
    ``OSError`` or ``KafkaStorageError`` if files cannot be read.
    """
    log_start_offset = segments[0].base_offset
    log_end_offset = segments[-1].next_offset
    reason = "missing"
    try:
        stored = read_epoch_checkpoint(directory)
    except LeaderEpochCheckpointError as exc:
        stored, reason = None, exc.message
    if stored is None:
        # A brand-new (or emptied) log has nothing to rebuild: not worth a warning.
        if reason != "missing" or log_end_offset > log_start_offset:
            log.warning(
                "rebuilding leader-epoch cache from batch headers dir=%s reason=%r",
                directory,
                reason,
            )
        cache = LeaderEpochCache()
        rescan_from = 0
    else:
        cache = LeaderEpochCache(stored.entries)
    # Start first: on an empty log the end truncation then drops the collapsed entry.
    cache.truncate_from_start(log_start_offset)
    if rescan_from < len(segments):
        cache.truncate_from_end(segments[rescan_from].base_offset)
        for segment in segments[rescan_from:]:
            for header in segment.batch_headers():
                if header.partition_leader_epoch >= 0:  # -1: written without an epoch
                    cache.assign(header.partition_leader_epoch, header.base_offset)
    cache.truncate_from_end(log_end_offset)
    return cache, stored is None or cache != stored


class PartitionLog:
    """The segmented, append-only log of one partition.

    Thread-safety: every method except :meth:`flush` must be called from one thread (the
    event loop). :meth:`flush` is thread-safe and may run on a worker thread while that
    thread keeps calling :meth:`append`, :meth:`read` and the rest. A ``threading.Lock``
    guards the segment list and all structural changes (append, roll, truncation,
    retention, close); ``flush`` holds it only to snapshot what to sync (duplicated
    descriptors, the target offset) and to publish the result, never during ``fdatasync``.
    Concurrent flushes are serialised by a second lock. Properties may be read from any
    thread; each returns a value that was true at some instant.

    Failure: an I/O error that leaves the files in doubt (a failed ``fdatasync``, an append
    that cannot be undone) marks the log failed, and every later write or flush raises
    ``KafkaStorageError`` (Kafka takes the log directory offline). Reads keep working.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        flushed_offset: int,
        checkpoint_offset: int,
        epoch_cache: LeaderEpochCache | None = None,
        epoch_cache_persisted: bool = False,
    ) -> None:
        """Use :meth:`open`."""
        self._directory = directory
        self._config = config
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]
        self._size_bytes = sum(segment.size for segment in segments)
        self._flushed_offset = flushed_offset
        self._checkpoint_offset = checkpoint_offset
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._dirty: dict[int, LogSegment] = {}
        """Segments written since their last fdatasync, by base offset."""
        self._directory_dirty = False
        """Files were created, renamed or removed since the last directory fsync."""
        self._flush_cap = sys.maxsize
        """Lowest truncation point since the running flush took its snapshot."""
        self._failed = False
        self._closed = False
        self._epoch_cache = LeaderEpochCache() if epoch_cache is None else epoch_cache
        self._epoch_version = 0
        """Bumped on every change of the epoch cache; compared with the version on disk."""
        self._epoch_written_version = 0 if epoch_cache_persisted else -1
        self._generation = 0
        """Bumped by every truncation and retention deletion: a cleaning prepared before
        must not be committed after."""
        self._cleaning = False
        """A cleaning was prepared and not yet committed or abandoned."""
        cleaner_checkpoint = _read_cleaner_checkpoint(directory) or (0, -1)
        self._first_dirty_offset, self._tombstone_horizon_ms = cleaner_checkpoint
        """Where the part of the log not yet cleaned starts (clamped to the log on use), and
        when tombstones in the cleaned part may go (-1: none there)."""
        self._cleaner_checkpoint_persisted = cleaner_checkpoint

    # ---- opening and recovery -------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, recovering it as needed.

        Raises ``KafkaStorageError`` if the directory cannot be read or written.
        """
        segments: list[LogSegment] = []
        try:
            if not directory.is_dir():
                directory.mkdir(parents=True)
                # The new directory entry is durable only once its parent is synced.
                fsync_directory(directory.parent)
            return cls._load(directory, config, now_ms, segments)
        except BaseException as exc:
            for segment in segments:
                try:
                    segment.close()
                except OSError:
                    log.exception("closing segment failed dir=%s", directory)
            if isinstance(exc, OSError):
                raise KafkaStorageError(f"cannot open log dir={directory}: {exc}") from exc
            raise

    @classmethod
    def _load(
        cls, directory: Path, config: LogConfig, now_ms: int, segments: list[LogSegment]
    ) -> PartitionLog:
        clean_marker = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_marker.exists()
        checkpoint = _read_checkpoint(directory)
        recovery_point = 0 if checkpoint is None else checkpoint
        # Cleaned segments were fdatasync'ed with their indexes before the swap committed;
        # loading checks those indexes like any others.
        _finish_cleaner_swap(directory)
        bases = _scan_directory(directory)
        for base_offset in bases:
            segments.append(LogSegment.open_existing(directory, base_offset, now_ms))
        directory_dirty = False
        if not segments:
            segments.append(LogSegment.create(directory, 0))
            bases = [0]
            directory_dirty = True
        if clean:
            recover_from = len(segments)
        else:
            recover_from = min(max(bisect_right(bases, recovery_point) - 1, 0), len(segments) - 1)

        kept: list[LogSegment] = []
        recovered: dict[int, LogSegment] = {}  # by base offset: these need an fdatasync
        dropped: list[LogSegment] = []
        for index, segment in enumerate(segments):
            # A gap is a hole compaction left; an overlap means the files do not belong
            # together (the rest goes, as after a torn write).
            if kept and segment.base_offset < kept[-1].next_offset:
                dropped = segments[index:]
                log.warning(
                    "segments overlap, dropping the rest dir=%s segment=%s "
                    "expected_base_offset=%d bytes_dropped=%d segments_dropped=%d",
                    directory,
                    segment.log_path.name,
                    kept[-1].next_offset,
                    sum(later.size for later in dropped),
                    len(dropped),
                )
                break
            kept.append(segment)
            if index < recover_from:
                try:
                    segment.load_indexes()
                    continue
                except CorruptIndexError as exc:
                    log.warning(
                        "rebuilding index dir=%s segment=%s reason=%r",
                        directory,
                        segment.log_path.name,
                        str(exc),
                    )
            result = segment.recover(config.index_interval_bytes)
            recovered[segment.base_offset] = segment
            if result.truncated_bytes:
                dropped = segments[index + 1 :]
                log.warning(
                    "truncated corrupt log tail dir=%s segment=%s position=%d "
                    "bytes_dropped=%d segments_dropped=%d reason=%r",
                    directory,
                    segment.log_path.name,
                    result.valid_bytes,
                    result.truncated_bytes + sum(later.size for later in dropped),
                    len(dropped),
                    result.reason,
                )
                break
        for segment in reversed(dropped):
            segment.delete_files()
            directory_dirty = True
        del segments[len(kept) :]

        # Segments that stopped being active get their final time-index entry (a rebuilt
        # index lacks it); the active one gets it on roll or close.
        for segment in kept[:-1]:
            if segment.seal():
                recovered[segment.base_offset] = segment
        log_end_offset = kept[-1].next_offset
        if clean:
            flushed_offset = log_end_offset
        else:
            flushed_offset = max(kept[0].base_offset, min(recovery_point, log_end_offset))
        if clean:
            # The marker must be gone for good before anything new is written: a crash
            # later would otherwise make the next open trust unflushed files.
            clean_marker.unlink()
            directory_dirty = True
        if directory_dirty:
            fsync_directory(directory)

        epoch_cache, epoch_cache_changed = _load_epoch_cache(
            directory, kept, min(recover_from, len(kept))
        )
        partition_log = cls(
            directory,
            config,
            kept,
            flushed_offset,
            recovery_point,
            epoch_cache,
            epoch_cache_persisted=not epoch_cache_changed,
        )
        partition_log._dirty.update(recovered)
        if recovery_point > log_end_offset and checkpoint is not None:
            # Data below the old recovery point is gone; a stale, higher recovery point
            # would let the next recovery skip segments written from now on.
            partition_log._persist_recovery_point(force=True)
        if partition_log._first_dirty_offset > log_end_offset:
            # Records the cleaner had seen are gone (a lost tail): what is written from now
            # on must count as dirty, so start over rather than trust the stale value.
            log.warning(
                "cleaner checkpoint above the log end, resetting dir=%s first_dirty_offset=%d "
                "log_end_offset=%d",
                directory,
                partition_log._first_dirty_offset,
                log_end_offset,
            )
            partition_log._first_dirty_offset = kept[0].base_offset
            partition_log._tombstone_horizon_ms = -1
            partition_log.persist_cleaner_checkpoint()
        log.info(
            "opened log dir=%s clean=%s segments=%d log_start_offset=%d log_end_offset=%d "
            "recovered_segments=%d latest_leader_epoch=%d",
            directory,
            clean,
            len(kept),
            kept[0].base_offset,
            log_end_offset,
            len(recovered),
            epoch_cache.latest_epoch,
        )
        return partition_log

    # ---- properties -----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition directory."""
        return self._directory

    @property
    def config(self) -> LogConfig:
        """The current configuration."""
        return self._config

    @property
    def log_start_offset(self) -> int:
        """The first offset in the log (base offset of the oldest segment)."""
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments' ``.log`` files."""
        return self._size_bytes

    @property
    def flushed_offset(self) -> int:
        """Offsets below this one were fdatasync'ed."""
        return self._flushed_offset

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """A copy of the leader-epoch cache (epoch -> first offset), in step with the log.

        A copy, so that nobody can change the cache behind the log's back (it would go
        unpersisted); it is small (one entry per leader epoch in the log).
        """
        with self._lock:
            return LeaderEpochCache(self._epoch_cache.entries)

    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the last batch (``UNDEFINED_EPOCH``, -1, if the log is empty):
        what a follower sends as ``last_fetched_epoch``."""
        with self._lock:
            return self._epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for a follower's diverging-epoch check (KIP-101/KIP-279).

        The largest epoch <= ``epoch`` this log has and the offset where it ends (the log
        end offset for the latest epoch); ``(-1, -1)`` if unknown. See
        :meth:`LeaderEpochCache.end_offset_for`.
        """
        with self._lock:
            answer = self._epoch_cache.end_offset_for(epoch, self.log_end_offset)
        return answer.epoch, answer.end_offset

    def batch_headers(self, from_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch that ends at or after ``from_offset``, oldest first.

        Reads headers only (no CRC check: the log validated its bytes at open or append), to
        rebuild state kept beside the log, such as producer state. Must not run while the
        log is being written to (it walks a snapshot of the segment list).
        """
        with self._lock:
            segments = list(self._segments)
        for index, segment in enumerate(segments):
            if index + 1 < len(segments) and segments[index + 1].base_offset <= from_offset:
                continue
            for header in segment.batch_headers():
                if header.last_offset >= from_offset:
                    yield header

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from the next operation on (rolls, indexes, retention)."""
        with self._lock:
            self._config = config

    # ---- writing --------------------------------------------------------------------------

    def append(
        self,
        records: bytearray,
        headers: list[BatchHeader],
        leader_epoch: int,
        now_ms: int,
    ) -> AppendResult:
        """Append batches already checked by ``validate_batches`` (which gave ``headers``).

        Assigns offsets from :attr:`log_end_offset` and the leader epoch in place, stamps
        LogAppendTime if configured, rolls first if needed (a batch never spans segments)
        and writes the whole buffer with one write. Does not fsync. All or nothing: raises
        ``KafkaStorageError`` and appends nothing if the write fails. A new ``leader_epoch``
        starts a leader-epoch cache entry at the first offset. An epoch below the log's
        latest one (the caller should have fenced that leader) is logged and, as in Kafka,
        replaces the newer cache entries, so that the cache still matches the batches.
        """
        _check_tiling(records, headers)
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} is negative")
        with self._lock:
            self._check_writable()
            latest_epoch = self._epoch_cache.latest_epoch
            if leader_epoch < latest_epoch:
                log.warning(
                    "leader append with an epoch older than the log's dir=%s leader_epoch=%d "
                    "latest_epoch=%d",
                    self._directory,
                    leader_epoch,
                    latest_epoch,
                )
            config = self._config
            first_offset = self._segments[-1].next_offset
            assign_offsets(records, headers, first_offset, leader_epoch)
            log_append_time_ms = -1
            if config.message_timestamp_type == _LOG_APPEND_TIME:
                for header in headers:
                    set_log_append_time(records, header, now_ms)
                log_append_time_ms = now_ms
            # Re-read the headers: offsets and perhaps timestamps changed in place.
            stamped = [parse_header(records, header.position) for header in headers]
            self._write_locked(records, stamped, now_ms)
            self._assign_epoch_locked(leader_epoch, first_offset)
        return AppendResult(
            first_offset, stamped[-1].last_offset, log_append_time_ms, tuple(stamped)
        )

    def append_as_follower(
        self, records: bytearray, headers: list[BatchHeader], now_ms: int
    ) -> AppendResult:
        """Append batches fetched from the leader, keeping their offsets and leader epochs.

        ``headers`` come from ``validate_batches``-style validation by the caller. The first
        batch must start at or after :attr:`log_end_offset`, each next batch at or after the
        end of the previous one (later, where the leader's log was compacted), and
        ``partitionLeaderEpoch`` must be set (>= 0) and never go below the previous
        batch's (nor the log's latest epoch); otherwise ``CorruptMessageError`` is raised and
        nothing is appended. Timestamps are kept as the leader wrote them (no LogAppendTime
        stamping: the leader did it), so ``log_append_time_ms`` is -1. Rolling, indexing,
        size accounting and durability (no fsync) are those of :meth:`append`; each batch
        whose epoch is new starts a leader-epoch cache entry at its base offset.

        A batch whose offsets lie more than 2**31 - 1 past the active segment's base offset
        (a hole a compacted leader left) starts a new segment at its own base offset
        (Kafka's KAFKA-6264); batches of one call that such a hole separates are written as
        separate appends, so a failed write may leave the earlier ones appended (a valid
        prefix: the fetcher goes on from the log end).
        """
        _check_tiling(records, headers)
        with self._lock:
            self._check_writable()
            first_offset = self._segments[-1].next_offset
            expected_offset = first_offset
            previous_epoch = self._epoch_cache.latest_epoch
            for header in headers:
                epoch = header.partition_leader_epoch
                if header.base_offset < expected_offset:
                    raise CorruptMessageError(
                        f"follower append to {self._directory.name}: batch at position "
                        f"{header.position} has baseOffset {header.base_offset}, expected "
                        f"{expected_offset} or more"
                    )
                if epoch < 0 or epoch < previous_epoch:
                    raise CorruptMessageError(
                        f"follower append to {self._directory.name}: batch at offset "
                        f"{header.base_offset} has partitionLeaderEpoch {epoch}, after epoch "
                        f"{previous_epoch}"
                    )
                expected_offset = header.next_offset
                previous_epoch = epoch
            for run_records, run_headers in _segment_runs(records, headers):
                self._write_locked(run_records, run_headers, now_ms)
                for header in run_headers:
                    self._assign_epoch_locked(header.partition_leader_epoch, header.base_offset)
        return AppendResult(first_offset, headers[-1].last_offset, -1, tuple(headers))

    def _write_locked(self, records: bytearray, headers: list[BatchHeader], now_ms: int) -> None:
        """The write path shared by both appends: roll if due, write, account; lock held.

        ``headers`` must carry the final offsets. All or nothing (see :meth:`append`).
        """
        active = self._segments[-1]
        if self._should_roll(active, len(records), headers[-1].last_offset, now_ms):
            # At the first batch, not the log end: a follower's batch may start past a hole.
            active = self._roll(now_ms, headers[0].base_offset)
        try:
            active.append(records, headers, self._config.index_interval_bytes, now_ms)
        except KafkaStorageError:
            self._failed = self._failed or active.damaged
            log.exception("append failed dir=%s offset=%d", self._directory, headers[0].base_offset)
            raise
        self._size_bytes += len(records)
        self._dirty[active.base_offset] = active

    def _assign_epoch_locked(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` has data from ``start_offset`` on; cheap when not new."""
        if self._epoch_cache.assign(epoch, start_offset):
            self._epoch_version += 1
            log.info(
                "new leader epoch dir=%s epoch=%d start_offset=%d",
                self._directory,
                epoch,
                start_offset,
            )

    def _should_roll(self, active: LogSegment, size: int, last_offset: int, now_ms: int) -> bool:
        # Even an empty segment: its indexes cannot hold offsets that far from its base (a
        # new follower of a compacted log may get such a batch first).
        if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            return True
        if active.is_empty:
            return False
        config = self._config
        return (
            active.size + size > min(config.segment_bytes, MAX_SEGMENT_BYTES)
            or active.is_index_full(config.segment_index_bytes)
            or self._segment_ms_elapsed(active, now_ms)
        )

    def _segment_ms_elapsed(self, active: LogSegment, now_ms: int) -> bool:
        first_append_ms = active.first_append_ms
        return (
            first_append_ms is not None and now_ms - first_append_ms >= self._config.max_segment_ms
        )

    def _roll(self, now_ms: int, base_offset: int = -1) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default and minimum: the log end
        offset); the caller holds the lock."""
        previous = self._segments[-1]
        base_offset = max(base_offset, previous.next_offset)
        try:
            if previous.seal():
                self._dirty[previous.base_offset] = previous
            segment = LogSegment.create(self._directory, base_offset)
        except OSError as exc:
            raise KafkaStorageError(
                f"rolling log dir={self._directory} at offset {base_offset} failed: {exc}"
            ) from exc
        self._segments.append(segment)
        self._bases.append(base_offset)
        self._directory_dirty = True
        log.info(
            "rolled segment dir=%s base_offset=%d previous_size_bytes=%d now_ms=%d",
            self._directory,
            base_offset,
            previous.size,
            now_ms,
        )
        return segment

    def roll_if_due(self, now_ms: int) -> bool:
        """Roll if the active segment is non-empty and ``segment.ms`` (for a compacted log at
        most ``max.compaction.lag.ms``, so the cleaner may reach it) has passed since its
        first append. Returns True if it rolled."""
        with self._lock:
            self._check_writable()
            active = self._segments[-1]
            if active.is_empty or not self._segment_ms_elapsed(active, now_ms):
                return False
            self._roll(now_ms)
            return True

    def truncate_to(self, offset: int) -> None:
        """Remove every record at and above ``offset`` (a follower's divergent tail).

        Whole batches go: if ``offset`` falls inside a batch, the log ends at that batch's
        base offset; if it falls in a hole of a compacted log, the log ends where the batch
        before the hole ends. An offset below the log start empties the log, which restarts at
        ``offset``. If the persisted recovery point lies above the new end, it is lowered
        (synchronously) before returning, so the next recovery re-checks what is written
        from now on; so is the first dirty offset in ``cleaner-offset-checkpoint``, so that
        records written from now on are never taken for cleaned ones after a restart.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_writable()
            if offset >= self.log_end_offset:
                return
            emptied = offset < self._segments[0].base_offset
            try:
                removed_bytes, removed_segments = self._truncate_locked(offset)
            except (OSError, KafkaStorageError) as exc:
                self._failed = True
                raise KafkaStorageError(
                    f"truncating log dir={self._directory} to {offset} failed: {exc}"
                ) from exc
            log_end_offset = self.log_end_offset
            self._generation += 1
            first_dirty_lowered = self._first_dirty_offset > log_end_offset
            self._first_dirty_offset = min(self._first_dirty_offset, log_end_offset)
            # The end, not ``offset``: it may lie below ``offset`` (whole batches go). An
            # emptied log restarting at ``offset`` keeps no history (Kafka clears the cache).
            if emptied:
                removed_epochs = self._epoch_cache.entries
                self._epoch_cache.clear()
            else:
                removed_epochs = self._epoch_cache.truncate_from_end(log_end_offset)
            if removed_epochs:
                self._epoch_version += 1
            self._flushed_offset = min(self._flushed_offset, log_end_offset)
            self._flush_cap = min(self._flush_cap, log_end_offset)
            self._directory_dirty = True
        log.info(
            "truncated log dir=%s offset=%d log_end_offset=%d bytes_removed=%d "
            "segments_removed=%d leader_epochs_removed=%s",
            self._directory,
            offset,
            log_end_offset,
            removed_bytes,
            removed_segments,
            [(entry.epoch, entry.start_offset) for entry in removed_epochs],
        )
        self._persist_recovery_point(force=False)
        if first_dirty_lowered:
            # A stale, higher value on disk would, once the log grows past it again, make
            # the next open treat the new records (a tombstone, say) as already cleaned.
            self.persist_cleaner_checkpoint()

    def _truncate_locked(self, offset: int) -> tuple[int, int]:
        segments = self._segments
        if offset < segments[0].base_offset:
            # Kafka's truncateFullyAndStartAt. The new segment is created before the old ones
            # go: if a crash interrupts, the open finds it first and drops the rest.
            fresh = LogSegment.create(self._directory, offset)
            doomed = list(segments)
            segments[:] = [fresh]
            self._bases[:] = [offset]
        else:
            index = bisect_right(self._bases, offset) - 1
            doomed = segments[index + 1 :]
            del segments[index + 1 :]
            del self._bases[index + 1 :]
        removed_bytes = sum(segment.size for segment in doomed)
        for segment in reversed(doomed):
            self._dirty.pop(segment.base_offset, None)
            segment.delete_files()
        active = segments[-1]
        removed_bytes += active.truncate_to(offset)
        self._dirty[active.base_offset] = active
        self._size_bytes = sum(segment.size for segment in segments)
        return removed_bytes, len(doomed)

    def _check_writable(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log dir={self._directory} is closed")
        if self._failed:
            raise KafkaStorageError(f"log dir={self._directory} failed on an earlier I/O error")

    # ---- reading --------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Raw bytes of whole batches, starting with the batch that holds ``fetch_offset``.

        Up to ``max_bytes``, but always at least one whole batch; no batch whose base offset
        is >= ``max_offset`` (the high watermark; None means the log end). Returns b"" at
        the log end or at ``max_offset``. Raises ``OffsetOutOfRangeError`` below the log
        start or above the log end. Reads from one segment per call, like Kafka; the cost
        is one bisect, one index bisect and about one index interval of header walking.
        """
        if self._closed:
            raise KafkaStorageError(f"log dir={self._directory} is closed")
        segments = self._segments
        log_start_offset = segments[0].base_offset
        log_end_offset = segments[-1].next_offset
        if fetch_offset < log_start_offset or fetch_offset > log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {fetch_offset} is outside [{log_start_offset}, {log_end_offset}] "
                f"in {self._directory.name}"
            )
        limit = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
        if fetch_offset >= limit:
            return b""
        index = bisect_right(self._bases, fetch_offset) - 1
        while index < len(segments):
            segment = segments[index]
            data = segment.read(fetch_offset, max_bytes, limit)
            if data or fetch_offset < segment.next_offset:
                return data
            index += 1  # fetch_offset is this segment's end: the data starts in the next
        return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch with max timestamp >=
        ``timestamp_ms``, or None. The caller finds the record inside the batch.

        Checks each segment's max timestamp in memory, then uses the time index and a
        bounded header walk inside the first segment that can hold the answer.
        """
        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                header = segment.find_timestamp(timestamp_ms)
                if header is not None:
                    return header.base_offset, header.max_timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch holding the log's largest
        timestamp (Kafka's MAX_TIMESTAMP lookup), or None if the log is empty."""
        best: tuple[int, int] | None = None
        for segment in self._segments:
            if segment.is_empty:
                continue
            if best is None or segment.max_timestamp > best[1]:
                best = (segment.offset_of_max_timestamp, segment.max_timestamp)
        return best

    # ---- retention ------------------------------------------------------------------------

    def enforce_retention(self, now_ms: int, high_watermark: int | None = None) -> list[Path]:
        """Delete old segments per ``retention.ms`` and ``retention.bytes``.

        From the oldest segment on, never the active one, and never one holding offsets at
        or above ``high_watermark`` (records not yet committed or not yet durable, as Kafka
        requires): a segment goes while its max timestamp is more than ``retention.ms``
        before ``now_ms``, then while the log minus that segment is still at least
        ``retention.bytes``. The log start offset moves to
        the first remaining segment. Files are only renamed to ``*.deleted`` here; pass the
        returned paths to :func:`delete_files` on a worker thread. Only with ``delete`` in
        ``cleanup.policy``: a ``compact``-only log keeps every segment (the cleaner shrinks
        it). An empty closed segment (all its batches compacted away) counts as expired.
        """
        with self._lock:
            self._check_writable()
            config = self._config
            if not config.delete:
                return []
            segments = self._segments
            limit = len(segments) - 1
            if high_watermark is not None:
                # Segment i may go only if the next one starts at or below the watermark.
                limit = bisect_right(self._bases, high_watermark) - 1
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
                remaining = self._size_bytes - sum(s.size for s in segments[:count])
                while count < limit and remaining - segments[count].size >= config.retention_bytes:
                    remaining -= segments[count].size
                    count += 1
            paths: list[Path] = []
            if count:
                self._generation += 1
            for position in range(count):
                segment = segments[0]
                try:
                    paths.extend(segment.rename_to_deleted())
                except OSError as exc:
                    self._failed = True
                    raise KafkaStorageError(
                        f"deleting {segment.log_path} failed: {exc}; renamed already: "
                        f"{[str(path) for path in paths]}"
                    ) from exc
                finally:
                    self._directory_dirty = True
                del segments[0]
                del self._bases[0]
                self._size_bytes -= segment.size
                self._dirty.pop(segment.base_offset, None)
                # Deleted data needs no flushing: offsets below the start count as flushed.
                self._flushed_offset = max(self._flushed_offset, segments[0].base_offset)
                # Per segment, so that a failed rename later in the loop leaves it in step.
                if self._epoch_cache.truncate_from_start(segments[0].base_offset):
                    self._epoch_version += 1
                log.info(
                    "deleted segment dir=%s base_offset=%d reason=%s size_bytes=%d "
                    "log_start_offset=%d",
                    self._directory,
                    segment.base_offset,
                    "retention.ms" if position < expired_by_time else "retention.bytes",
                    segment.size,
                    segments[0].base_offset,
                )
            return paths

    # ---- compaction -----------------------------------------------------------------------

    @property
    def failed(self) -> bool:
        """True once an I/O error left the files in doubt, or the log was closed or deleted:
        writes, flushes and cleanings raise ``KafkaStorageError`` from then on."""
        return self._failed or self._closed

    @property
    def generation(self) -> int:
        """Bumped by every truncation and retention deletion (a prepared cleaning compares
        it: what it read may have changed underneath)."""
        return self._generation

    @property
    def first_dirty_offset(self) -> int:
        """Where the part of the log not cleaned yet starts (the log start if never)."""
        with self._lock:
            return self._first_dirty_locked()

    def _first_dirty_locked(self) -> int:
        return max(self.log_start_offset, min(self._first_dirty_offset, self.log_end_offset))

    def _cleanable_locked(self, limit_offset: int, now_ms: int) -> tuple[int, int] | None:
        """``(first dirty segment index, first uncleanable segment index)`` or None.

        Cleanable: closed segments wholly below ``limit_offset`` and the flushed offset, and
        (with ``min.compaction.lag.ms``) whose newest record is old enough; the first one
        that is not ends the range. Dirty: from the segment holding the first dirty offset.
        With nothing dirty but tombstones past their delete horizon in the cleaned part, the
        range is all clean (the first dirty index is its end): a cleaning drops them.
        """
        segments = self._segments
        config = self._config
        limit = min(limit_offset, self._flushed_offset)
        youngest_ms = now_ms - config.min_compaction_lag_ms
        end_index = 0
        while end_index < len(segments) - 1:
            if segments[end_index + 1].base_offset > limit:
                break
            if config.min_compaction_lag_ms > 0 and segments[end_index].max_timestamp > youngest_ms:
                break
            end_index += 1
        first_dirty_index = max(0, bisect_right(self._bases, self._first_dirty_locked()) - 1)
        if first_dirty_index < end_index:
            return first_dirty_index, end_index
        if end_index and 0 <= self._tombstone_horizon_ms <= now_ms:
            return end_index, end_index
        return None

    def cleanable_view(self, limit_offset: int, now_ms: int) -> CleanableView | None:
        """How dirty the cleanable part of the log is, or None if nothing dirty is cleanable.

        ``limit_offset`` is the high watermark: nothing at or above it is cleaned (it may
        still be truncated away). Reads at most one batch header (for the timestamp of the
        first dirty batch).
        """
        with self._lock:
            found = self._cleanable_locked(limit_offset, now_ms)
            if found is None:
                return None
            first_dirty_index, end_index = found
            segments = self._segments
            first_dirty = self._first_dirty_locked()
            header = segments[first_dirty_index].find_batch(first_dirty)
            return CleanableView(
                tombstones_due=first_dirty_index == end_index,
                first_dirty_offset=first_dirty,
                end_offset=segments[end_index].base_offset,
                clean_bytes=sum(segment.size for segment in segments[:first_dirty_index]),
                dirty_bytes=sum(segment.size for segment in segments[first_dirty_index:end_index]),
                first_dirty_timestamp_ms=-1 if header is None else header.max_timestamp,
            )

    def prepare_cleaning(self, limit_offset: int, now_ms: int) -> CleaningInput | None:
        """Snapshot the cleanable segments for :func:`replica.log.cleaner.clean_log`.

        Returns None if nothing dirty is cleanable or a cleaning is already prepared.
        Duplicates each source segment's descriptor (the caller closes them with
        ``CleaningInput.close``); finish with :meth:`commit_cleaning` or
        :meth:`abandon_cleaning`. Raises ``KafkaStorageError``.
        """
        with self._lock:
            self._check_writable()
            if self._cleaning:
                return None
            found = self._cleanable_locked(limit_offset, now_ms)
            if found is None:
                return None
            first_dirty_index, end_index = found
            segments = tuple(self._segments[:end_index])
            sources: list[SourceSegment] = []
            try:
                for segment in segments:
                    sources.append(
                        SourceSegment(
                            segment.base_offset,
                            segment.next_offset,
                            segment.size,
                            segment.dup_log_fd(),
                            segment.offset_index.entries,
                        )
                    )
            except OSError as exc:
                for source in sources:
                    os.close(source.fd)
                raise KafkaStorageError(f"cannot read log dir={self._directory}: {exc}") from exc
            self._cleaning = True
            return CleaningInput(
                directory=self._directory,
                config=self._config,
                sources=tuple(sources),
                first_dirty_index=first_dirty_index,
                end_offset=self._segments[end_index].base_offset,
                generation=self._generation,
                segments=segments,
            )

    def abandon_cleaning(self) -> None:
        """Forget a prepared cleaning that failed or stopped (its staged files are gone)."""
        with self._lock:
            self._cleaning = False

    def commit_cleaning(self, result: CleaningResult, now_ms: int) -> list[Path] | None:
        """Swap cleaned segments in for the old ones; returns old files to delete (pass them
        to :func:`delete_files` on a worker thread).

        Event-loop thread only (it replaces segments that reads use without the lock).
        If the log changed since :meth:`prepare_cleaning` (truncation, retention, close),
        the staged files are removed, nothing changes and None is returned. Otherwise,
        crash-safely:

        1. ``cleaner-swap`` (old and new base offsets) is written atomically and synced:
           the commit point. Before it, a crash leaves the old segments (staged
           ``.cleaned`` files are removed at open).
        2. The old segments' files are renamed to ``*.deleted`` and each staged segment's
           files renamed to their final names (the ``.log`` last); the directory is synced.
        3. ``cleaner-swap`` is removed and the directory synced.

        After a crash between 1 and 3, :meth:`open` redoes step 2 from the swap file (each
        rename is idempotent), so the log holds the new segments, never a mix. The staged
        segments were fdatasync'ed by the cleaner with their indexes. Offsets, the log
        start offset and the leader-epoch cache do not change. Raises
        ``KafkaStorageError`` (the log is then failed if the swap may be half done).
        """
        cleaning = result.input
        replaced = cleaning.segments[: result.cleaned_sources]
        new_bases = [group.new_base for group in result.groups if group.new_base is not None]
        with self._lock:
            self._cleaning = False
            current = self._segments
            unchanged = (
                not self._closed
                and not self._failed
                and self._generation == cleaning.generation
                and len(current) > len(replaced)
                and all(a is b for a, b in zip(current, replaced, strict=False))
            )
            if not unchanged:
                log.info(
                    "log cleaning abandoned, the log changed meanwhile dir=%s", self._directory
                )
                self._remove_staged(new_bases)
                return None
            missing = [
                base_offset
                for base_offset in new_bases
                if not segment_file(
                    self._directory, base_offset, LOG_SUFFIX + CLEANED_SUFFIX
                ).exists()
            ]
            if missing:
                # Committing would make the open after a crash drop these ranges for good;
                # before the commit nothing is lost (the old segments stay).
                self._remove_staged(new_bases)
                raise KafkaStorageError(
                    f"cleaner swap of dir={self._directory} not committed: staged segments "
                    f"{missing} are missing"
                )
            swap_path = self._directory / CLEANER_SWAP_FILE
            try:
                write_file_atomically(
                    swap_path, _encode_swap([s.base_offset for s in replaced], new_bases)
                )
            except OSError as exc:
                self._remove_staged(new_bases)
                raise KafkaStorageError(
                    f"cleaner swap of dir={self._directory} failed before commit: {exc}"
                ) from exc
            deleted: list[Path] = []
            fresh: list[LogSegment] = []
            try:
                for segment in replaced:
                    deleted.extend(segment.rename_files_to_deleted())
                for base_offset in new_bases:
                    _install_cleaned(self._directory, base_offset)
                fsync_directory(self._directory)
                old_by_base = {segment.base_offset: segment for segment in replaced}
                for group in result.groups:
                    if group.new_base is None:
                        continue
                    segment = self._open_cleaned(group.new_base, now_ms)
                    fresh.append(segment)
                    # Kafka keeps the replaced segments' last-modified time: retention of
                    # records without timestamps must not restart at the cleaning.
                    modified = [
                        old.last_modified_ms
                        for base_offset in group.old_bases
                        if (old := old_by_base.get(base_offset)) is not None
                        and old.last_modified_ms is not None
                    ]
                    if modified:
                        segment.last_modified_ms = max(modified)
                swap_path.unlink()
                fsync_directory(self._directory)
            except (OSError, KafkaStorageError) as exc:
                for segment in fresh:
                    segment.close()
                self._failed = True
                raise KafkaStorageError(
                    f"cleaner swap of dir={self._directory} failed after commit: {exc}; the "
                    "next open finishes it"
                ) from exc
            for segment in replaced:
                self._dirty.pop(segment.base_offset, None)
            self._segments[: len(replaced)] = fresh
            self._bases[:] = [segment.base_offset for segment in self._segments]
            self._size_bytes = sum(segment.size for segment in self._segments)
            # Never backwards: a cleaning of tombstones only ends where the range ends.
            self._first_dirty_offset = max(self._first_dirty_offset, result.next_dirty_offset)
            self._tombstone_horizon_ms = result.tombstone_horizon_ms
            for segment in replaced:
                try:
                    segment.close()
                except OSError:
                    log.exception("closing replaced segment failed dir=%s", self._directory)
        return deleted

    def _remove_staged(self, bases: list[int]) -> None:
        for base_offset in bases:
            try:
                remove_staged_files(self._directory, base_offset)
            except OSError:
                log.exception("removing staged segment failed dir=%s", self._directory)

    def _open_cleaned(self, base_offset: int, now_ms: int) -> LogSegment:
        segment = LogSegment.open_existing(self._directory, base_offset, now_ms)
        try:
            try:
                segment.load_indexes()
            except CorruptIndexError as exc:
                # The cleaner wrote them moments ago; rebuilding is the cure all the same.
                log.warning(
                    "rebuilding index of cleaned segment dir=%s reason=%r",
                    self._directory,
                    str(exc),
                )
                segment.recover(self._config.index_interval_bytes)
        except BaseException:
            segment.close()
            raise
        return segment

    def persist_cleaner_checkpoint(self) -> None:
        """Write the first dirty offset and the tombstone horizon to
        ``cleaner-offset-checkpoint`` if they changed.

        Thread-safe; run it off the event loop. Raises ``KafkaStorageError``. Losing it
        costs only work: the next cleaning then treats more of the log as dirty.
        """
        with self._checkpoint_lock:
            with self._lock:
                checkpoint = (self._first_dirty_offset, self._tombstone_horizon_ms)
                if checkpoint == self._cleaner_checkpoint_persisted:
                    return
            self._write_checkpoint(
                CLEANER_CHECKPOINT_FILE, "cleaner checkpoint", _encode_checkpoint(*checkpoint)
            )
            self._cleaner_checkpoint_persisted = checkpoint

    # ---- durability -----------------------------------------------------------------------

    def flush(self) -> int:
        """fdatasync every segment and index written since the last flush; thread-safe.

        Returns the new :attr:`flushed_offset`. Persists the recovery point when it moves
        into another segment (recovery always re-checks the segment holding it, so a
        finer-grained checkpoint would buy nothing and cost two more fsyncs per flush), and
        before it the leader-epoch checkpoint if the cache changed (so appends never write
        it). Raises ``KafkaStorageError`` if a sync fails; the log is then failed.
        """
        with self._flush_lock:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        with self._lock:
            if self._closed:
                return self._flushed_offset
            self._check_writable()
            target = self.log_end_offset
            fds: list[int] = []
            try:
                for segment in self._dirty.values():
                    fds.extend(segment.dup_fds())
            except OSError as exc:
                for fd in fds:
                    os.close(fd)
                raise KafkaStorageError(f"flush of dir={self._directory} failed: {exc}") from exc
            self._dirty.clear()
            directory_dirty, self._directory_dirty = self._directory_dirty, False
            self._flush_cap = target
        try:
            for fd in fds:
                os.fdatasync(fd)
            if directory_dirty:
                fsync_directory(self._directory)
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages: retrying
            # could "succeed" without the data. Give up on this log, as Kafka does.
            with self._lock:
                self._failed = True
            log.error("fdatasync failed dir=%s error=%s", self._directory, exc)
            raise KafkaStorageError(f"flush of dir={self._directory} failed: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
        # Before the flushed offset is published: every recovery point persisted from it
        # (here, or by a truncation on another thread) must find the epoch checkpoint
        # already covering its offsets, or a crash would lose epoch entries.
        self._persist_epoch_checkpoint()
        with self._lock:
            flushed = min(target, self._flush_cap)
            self._flush_cap = sys.maxsize
            if flushed > self._flushed_offset:
                self._flushed_offset = flushed
            flushed = self._flushed_offset
        self._persist_recovery_point(force=False)
        return flushed

    def _segment_index(self, offset: int) -> int:
        return bisect_right(self._bases, offset) - 1

    def _persist_recovery_point(self, force: bool) -> None:
        """Write the flushed offset as the recovery point if recovery would need it.

        Needed when it moved to another segment, or went down (truncation). The value is
        read under the main lock while holding the checkpoint lock, so the last write
        always carries the latest value.
        """
        with self._checkpoint_lock:
            with self._lock:
                offset = self._flushed_offset
                if offset == self._checkpoint_offset:
                    return
                if (
                    not force
                    and offset > self._checkpoint_offset
                    and self._segment_index(offset) == self._segment_index(self._checkpoint_offset)
                ):
                    return
            self._write_checkpoint(
                RECOVERY_POINT_FILE, "recovery point", _encode_checkpoint(offset)
            )
            self._checkpoint_offset = offset

    def _write_checkpoint(self, name: str, what: str, data: bytes) -> None:
        """Replace checkpoint file ``name`` atomically; ``KafkaStorageError`` if that fails."""
        try:
            write_file_atomically(self._directory / name, data)
        except OSError as exc:
            raise KafkaStorageError(
                f"writing {what} of dir={self._directory} failed: {exc}"
            ) from exc

    def _persist_epoch_checkpoint(self) -> None:
        """Write ``leader-epoch-checkpoint`` if the cache changed since the last write.

        The text is taken under the main lock while holding the checkpoint lock, so the last
        write always carries the latest cache. Raises ``KafkaStorageError``.
        """
        with self._checkpoint_lock:
            with self._lock:
                version = self._epoch_version
                if version == self._epoch_written_version:
                    return
                text = self._epoch_cache.encode()
            try:
                write_epoch_checkpoint(self._directory, text)
            except OSError as exc:
                raise KafkaStorageError(
                    f"writing leader-epoch checkpoint of dir={self._directory} failed: {exc}"
                ) from exc
            self._epoch_written_version = version

    def close(self) -> None:
        """Flush, persist the exact recovery point and the cleaner checkpoint, write the
        clean-shutdown marker, close.

        Idempotent. A failed log is closed without the marker, so the next open recovers.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                failed = self._failed
                if not failed:
                    try:
                        if self._segments[-1].seal():
                            self._dirty[self._segments[-1].base_offset] = self._segments[-1]
                    except OSError as exc:
                        self._failed = failed = True
                        log.error(
                            "sealing active segment failed dir=%s error=%s", self._directory, exc
                        )
            try:
                if not failed:
                    self._flush_locked()
                    self._persist_recovery_point(force=True)
                    self.persist_cleaner_checkpoint()
                    write_file_atomically(self._directory / CLEAN_SHUTDOWN_FILE, b"")
            finally:
                with self._lock:
                    self._closed = True
                    self._close_segments()
        log.info(
            "closed log dir=%s clean=%s log_end_offset=%d",
            self._directory,
            not failed,
            self.log_end_offset,
        )

    def _close_segments(self) -> None:
        for segment in self._segments:
            try:
                segment.close()
            except OSError:
                log.exception("closing segment failed dir=%s segment=%s", self._directory, segment)

    def delete(self) -> None:
        """Close every descriptor (without flushing) and remove the partition directory."""
        with self._flush_lock, self._lock:
            self._closed = True
            self._close_segments()
        try:
            shutil.rmtree(self._directory)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError(f"deleting log dir={self._directory} failed: {exc}") from exc
        log.info("deleted log dir=%s", self._directory)

    def __repr__(self) -> str:
        return (
            f"PartitionLog(directory={str(self._directory)!r}, "
            f"log_start_offset={self.log_start_offset}, log_end_offset={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )
