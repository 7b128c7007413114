"""Opening a partition directory: what :meth:`PartitionLog.open` finds and recovers.

Kafka's ``LogLoader``. In order: an interrupted cleaner swap is finished
(:func:`replica.log.cleaner_swap.finish_cleaner_swap`); the directory is scanned
(leftovers of deletes, temp files and orphan indexes are removed; other files are left
alone); the segments are opened and, as needed, recovered; the leader-epoch cache and the
checkpoints are read.

Recovery: after a clean shutdown (the ``.clean_shutdown`` marker, written by the close
and removed here before anything new is written), indexes that pass their sanity checks
are trusted. Otherwise every segment from the one holding the recovery point (at least
the active one; also the one before it if the point is exactly its end, since a segment's
indexes are synced only after its roll) is re-validated batch by batch; at the first torn
or corrupt batch the file is truncated and every later segment dropped. A segment whose
index is missing or corrupt is re-validated the same way, wherever it lies. Segments that
overlap the one before them do not belong with it: they are dropped too, as after a torn
write.

Leader epochs: the ``leader-epoch-checkpoint`` is written lazily (at most once per flush,
before any recovery point that must cover it), so after a crash only its entries below
the recovery point are right: the entries from the first re-validated segment on are
dropped and rebuilt from the batch headers recovery re-reads anyway. A missing or invalid
checkpoint is rebuilt from every batch header (and logged).

Checkpoints that point past the recovered log end are lowered before anything new is
written: a stale recovery point would let the next recovery skip segments written from
now on, and a stale first dirty offset would make the cleaner take new records for
cleaned ones.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from lograft.durable import TMP_SUFFIX, create_directories, fsync_directory
from lograft.protocol.errors import KafkaStorageError
from lograft.protocol.topic_config import LogConfig
from replica.log.cleaner_swap import CLEANER_SWAP_FILE, finish_cleaner_swap
from replica.log.epoch_checkpoint import LEADER_EPOCH_CHECKPOINT_TMP_FILE, read_epoch_checkpoint
from replica.log.log_checkpoints import (
    CLEANER_CHECKPOINT_FILE,
    RECOVERY_POINT_FILE,
    LogCheckpoints,
    read_cleaner_checkpoint,
    read_recovery_point,
)
from replica.log.offset_index import CorruptIndexError
from replica.log.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment, parse_segment_file_name
from replica.replication.errors import LeaderEpochCheckpointError
from replica.replication.leader_epoch_cache import LeaderEpochCache

__all__ = ["CLEAN_SHUTDOWN_FILE", "LoadedLog", "load_log"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
"""Written by the close, removed by the next open: while it is there, indexes that pass
their sanity checks are trusted."""


@dataclass(frozen=True, slots=True, eq=False)
class LoadedLog:
    """What the open found: the segments (oldest first, never empty) and the log's state.

    ``recovered`` are the segments recovery rewrote (by base offset): they need an
    fdatasync. ``checkpoints`` know what the checkpoint files hold, already lowered where
    they pointed past the recovered log.
    """

    segments: list[LogSegment] = field(repr=False)
    recovered: dict[int, LogSegment] = field(repr=False)
    flushed_offset: int
    checkpoints: LogCheckpoints
    epoch_cache: LeaderEpochCache
    cleaner_checkpoint: tuple[int, int]
    """``(first dirty offset, tombstone horizon ms)``; ``(0, -1)`` if none was stored."""


def load_log(directory: Path, config: LogConfig, now_ms: int) -> LoadedLog:
    """Open (creating if needed) the segments in ``directory``, recovering them as needed.

    Raises ``KafkaStorageError`` if the directory cannot be read or written; the segments
    opened so far are closed again on any failure.
    """
    segments: list[LogSegment] = []
    try:
        if not directory.is_dir():
            # The new directory entries are durable only once their parents are synced.
            create_directories(directory)
        return _load(directory, config, now_ms, segments)
    except BaseException as exc:
        _close_segments(directory, segments)
        if isinstance(exc, OSError):
            raise KafkaStorageError(f"cannot open log dir={directory}: {exc}") from exc
        raise


def _close_segments(directory: Path, segments: list[LogSegment]) -> None:
    """Close every segment; failures are logged, not raised (the files stay as they are)."""
    for segment in segments:
        try:
            segment.close()
        except OSError:
            log.exception("closing segment failed dir=%s", directory)


def _load(directory: Path, config: LogConfig, now_ms: int, segments: list[LogSegment]) -> LoadedLog:
    clean_marker = directory / CLEAN_SHUTDOWN_FILE
    clean = clean_marker.exists()
    checkpoint = read_recovery_point(directory)
    recovery_point = 0 if checkpoint is None else checkpoint
    # Cleaned segments were fdatasync'ed with their indexes before the swap committed;
    # loading checks those indexes like any others.
    finish_cleaner_swap(directory)
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
        # The segment holding the recovery point, and the one before it when the point is
        # exactly its end: a flush that began before that segment rolled synced its records
        # but not its indexes (synced only once a segment is no longer active, see
        # replica.log.local_log), and may have published its end as the recovery point.
        recover_from = min(max(bisect_left(bases, recovery_point) - 1, 0), len(segments) - 1)

    kept, recovered, dropped_any = _recover_segments(directory, config, segments, recover_from)
    if dropped_any:
        directory_dirty = True

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

    epoch_cache, checkpoints, cleaner_checkpoint = _open_checkpoints(
        directory, kept, min(recover_from, len(kept)), recovery_point, checkpoint, flushed_offset
    )
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
    return LoadedLog(
        segments=kept,
        recovered=recovered,
        flushed_offset=flushed_offset,
        checkpoints=checkpoints,
        epoch_cache=epoch_cache,
        cleaner_checkpoint=cleaner_checkpoint,
    )


def _recover_segments(
    directory: Path, config: LogConfig, segments: list[LogSegment], recover_from: int
) -> tuple[list[LogSegment], dict[int, LogSegment], bool]:
    """Check ``segments`` in order, recovering each from ``recover_from`` on.

    Keeps them up to the first overlap or torn tail; deletes the files of the rest and
    drops them from ``segments``. Returns the kept segments, the recovered ones by base
    offset (these need an fdatasync) and whether any segment was deleted.
    """
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
    del segments[len(kept) :]
    return kept, recovered, bool(dropped)


def _open_checkpoints(
    directory: Path,
    kept: list[LogSegment],
    rescan_from: int,
    recovery_point: int,
    checkpoint: int | None,
    flushed_offset: int,
) -> tuple[LeaderEpochCache, LogCheckpoints, tuple[int, int]]:
    """The leader-epoch cache and the checkpoints of the loaded ``kept`` segments.

    Rewrites a recovery point or cleaner checkpoint left above the log end by a lost tail.
    """
    log_end_offset = kept[-1].next_offset
    epoch_cache, epoch_cache_changed = _load_epoch_cache(directory, kept, rescan_from)
    cleaner_checkpoint = read_cleaner_checkpoint(directory) or (0, -1)
    checkpoints = LogCheckpoints(
        directory, recovery_point, cleaner_checkpoint, epoch_cache_persisted=not epoch_cache_changed
    )
    if recovery_point > log_end_offset and checkpoint is not None:
        # Data below the old recovery point is gone; a stale, higher recovery point
        # would let the next recovery skip segments written from now on.
        checkpoints.write_recovery_point(flushed_offset)
    if cleaner_checkpoint[0] > log_end_offset:
        # Records the cleaner had seen are gone (a lost tail): what is written from now
        # on must count as dirty, so start over rather than trust the stale value.
        log.warning(
            "cleaner checkpoint above the log end, resetting dir=%s first_dirty_offset=%d "
            "log_end_offset=%d",
            directory,
            cleaner_checkpoint[0],
            log_end_offset,
        )
        cleaner_checkpoint = (kept[0].base_offset, -1)
        checkpoints.write_cleaner_checkpoint(cleaner_checkpoint)
    return epoch_cache, checkpoints, cleaner_checkpoint


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
