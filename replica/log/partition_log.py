"""The log of one partition: appends, reads, truncation, retention, flushing, leader epochs.

Kafka's ``UnifiedLog``: :class:`PartitionLog` is the one object the rest of the broker
uses. It holds the log-wide state (the segments with what is flushed of them, the
leader-epoch cache, where the cleaner's dirty part starts, whether the log failed) and its
locking, decides in which order things happen, and leaves the work to one module per
concept:

* :mod:`replica.log.local_log`: the segments list, append, read, roll, truncate, deleting
  old segments, the flushed offset and what a flush must sync (Kafka's ``LocalLog``);
* :mod:`replica.log.log_loader`: opening and recovering the directory, the clean-shutdown
  marker (Kafka's ``LogLoader``);
* :mod:`replica.log.log_checkpoints`: the recovery-point, cleaner-offset and leader-epoch
  checkpoint files, and the order in which a flush writes them;
* :mod:`replica.log.log_epochs`: the leader-epoch cache, kept in step with the log;
* :mod:`replica.log.cleaning_state`: what is dirty, what a cleaning may take;
* :mod:`replica.log.cleaner_swap`: installing cleaned segments, crash-safely.

A partition directory holds segments (``<20-digit base offset>.log``, ``.index``,
``.timeindex``), ``recovery-point-offset-checkpoint`` (offsets below it were fdatasync'ed),
``leader-epoch-checkpoint``, ``cleaner-offset-checkpoint`` and, between a clean close and
the next open, a clean-shutdown marker (``.clean_shutdown``). Other files in the directory
are left alone.

Leader epochs: :attr:`PartitionLog.leader_epoch_cache` maps each leader epoch to the first
offset it wrote (Kafka's ``LeaderEpochFileCache``), kept in step with appends, truncation and
retention. It is written to ``leader-epoch-checkpoint`` at most once per :meth:`flush` (when
it changed) and on close, never on the append path. The crash rule that makes that lazy
write safe: the checkpoint is written *before* any recovery point that it must cover (in
:meth:`flush`, after the fdatasync and before the flushed offset is published), so after a
crash its entries below the recovery point are right; the open rebuilds the rest
(:mod:`replica.log.log_loader`).
"""

# Over 600 lines: Kafka's UnifiedLog: the log-wide state and locking; the work is in other modules.
from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lograft.durable import write_file_atomically
from lograft.protocol.batch_header import BatchHeader
from lograft.protocol.errors import KafkaStorageError
from lograft.protocol.topic_config import LogConfig
from replica.log.cleaner import CleanableView, CleaningInput, CleaningResult
from replica.log.cleaner_swap import CLEANER_SWAP_FILE
from replica.log.cleaning_state import CleaningState
from replica.log.local_log import (
    LocalLog,
    batch_headers_from,
    check_follower_batches,
    check_tiling,
    delete_files,
    segment_runs,
)
from replica.log.log_checkpoints import CLEANER_CHECKPOINT_FILE, RECOVERY_POINT_FILE
from replica.log.log_epochs import LogEpochs
from replica.log.log_loader import CLEAN_SHUTDOWN_FILE, LoadedLog, load_log
from replica.replication.leader_epoch_cache import LeaderEpochCache

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CLEANER_SWAP_FILE",
    "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_FILE",
    "AppendResult",
    "FsyncJobs",
    "LogFailureHandler",
    "PartitionLog",
    "PendingFlush",
    "delete_files",
]

log = logging.getLogger(__name__)

LogFailureHandler = Callable[[Path, BaseException], None]
"""Told of the I/O error that failed a partition's log: its directory and the error."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets given to an append; ``log_append_time_ms`` is -1 unless LogAppendTime.

    ``headers`` are the appended batches' headers as written (offsets and epochs assigned).
    """

    first_offset: int
    last_offset: int
    log_append_time_ms: int
    headers: tuple[BatchHeader, ...] = ()


class FsyncJobs(Protocol):
    """Where :meth:`PartitionLog.begin_flush` sends its fdatasyncs
    (:class:`replica.flush_worker.LoopFlusher`)."""

    def submit(self, fds: list[int]) -> int:
        """Queue a job that fdatasyncs ``fds`` in order and closes them all (it owns them
        from here on); returns the job's id."""
        ...

    def wait(self, job: int) -> int:
        """Block until ``job`` is done; its errno (0: every fdatasync succeeded)."""
        ...


@dataclass(frozen=True, slots=True)
class PendingFlush:
    """A flush begun by :meth:`PartitionLog.begin_flush`: the log end it covers, whether
    the directory needs an fsync after the job, and the job syncing its descriptors."""

    target: int
    directory_dirty: bool
    worker: FsyncJobs
    job: int

    def end_unwaited(self, partition_log: PartitionLog) -> None:
        """End this flush for a caller that cannot await it (a close, a cancelled flush
        task): block until the job is done (at most one fdatasync), then publish it. If
        even the job's outcome is lost (a bug), the log fails rather than trust it, and
        the flush lock is released either way. A failed sync has failed the log: whoever
        flushes it next learns that."""
        try:
            error = self.worker.wait(self.job)
        except Exception:
            log.exception("fsync job outcome lost job=%d", self.job)
            error = errno.EIO
        with contextlib.suppress(KafkaStorageError):
            partition_log.end_flush(self, error)


class PartitionLog:
    """The segmented, append-only log of one partition.

    Thread-safety: every method except :meth:`flush` must be called from one thread (the
    event loop). :meth:`flush` is thread-safe and may run on a worker thread while that
    thread keeps calling :meth:`append`, :meth:`read` and the rest. A ``threading.Lock``
    guards the segment list and all structural changes (append, roll, truncation,
    retention, close); ``flush`` holds it only to snapshot what to sync (duplicated
    descriptors, the target offset) and to publish the result, never during ``fdatasync``.
    Concurrent flushes are serialised by a second lock, checkpoint writes by a third
    (:attr:`LogCheckpoints.lock`, taken before the main lock). Properties may be read from
    any thread; each returns a value that was true at some instant.

    Failure: an I/O error that leaves the files in doubt (a failed ``fdatasync``, an append
    that cannot be undone) marks the log failed, and every later write or flush raises
    ``KafkaStorageError`` (Kafka takes the log directory offline). Reads keep working. The
    first such error is also handed to ``on_failure`` (see :meth:`open`).
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        loaded: LoadedLog,
        on_failure: LogFailureHandler | None = None,
    ) -> None:
        """Use :meth:`open`."""
        self._directory = directory
        self._on_failure = on_failure
        self._local = LocalLog(
            directory, config, loaded.segments, loaded.recovered, loaded.flushed_offset
        )
        """The segments, and what is flushed of them."""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._checkpoints = loaded.checkpoints
        self._failed = False
        self._closed = False
        self._pending_flush: PendingFlush | None = None
        """A flush begun by :meth:`begin_flush` and not ended yet (it holds the flush lock)."""
        self._epochs = LogEpochs(directory, loaded.epoch_cache)
        self._generation = 0
        """Bumped by every truncation and retention deletion: a cleaning prepared before
        must not be committed after."""
        self._cleaning = CleaningState(loaded.cleaner_checkpoint)

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        now_ms: int,
        on_failure: LogFailureHandler | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``, recovering it as needed
        (see :mod:`replica.log.log_loader`).

        ``on_failure(directory, error)`` is called once, with the log's lock held and from
        whichever thread met it, by the first I/O error that marks the log failed (not by
        one during :meth:`close`): the node halts there, as Kafka stops a broker whose log
        directory went offline. Raises ``KafkaStorageError`` if the directory cannot be read
        or written.
        """
        return cls(directory, config, load_log(directory, config, now_ms), on_failure)

    # ---- properties -----------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition directory."""
        return self._directory

    @property
    def config(self) -> LogConfig:
        """The current configuration."""
        return self._local.config

    @property
    def log_start_offset(self) -> int:
        """The first offset in the log (base offset of the oldest segment)."""
        return self._local.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._local.log_end_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments' ``.log`` files."""
        return self._local.size_bytes

    @property
    def flushed_offset(self) -> int:
        """Offsets below this one were fdatasync'ed."""
        return self._local.flushed_offset

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """A copy of the leader-epoch cache (epoch -> first offset), in step with the log.

        A copy, so that nobody can change the cache behind the log's back (it would go
        unpersisted); it is small (one entry per leader epoch in the log).
        """
        with self._lock:
            return self._epochs.cache.copy()

    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the last batch (``UNDEFINED_EPOCH``, -1, if the log is empty):
        what a follower sends as ``last_fetched_epoch``."""
        with self._lock:
            return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end offset)`` for a follower's diverging-epoch check (KIP-101/KIP-279).

        The largest epoch <= ``epoch`` this log has and the offset where it ends (the log
        end offset for the latest epoch); ``(-1, -1)`` if unknown. See
        :meth:`LeaderEpochCache.end_offset_for`.
        """
        with self._lock:
            answer = self._epochs.cache.end_offset_for(epoch, self.log_end_offset)
        return answer.epoch, answer.end_offset

    def batch_headers(self, from_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch that ends at or after ``from_offset``, oldest first.

        Reads headers only (no CRC check: the log validated its bytes at open or append), to
        rebuild state kept beside the log, such as producer state. Must not run while the
        log is being written to (it walks a snapshot of the segment list).
        """
        with self._lock:
            segments = list(self._local.segments)
        yield from batch_headers_from(segments, from_offset)

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from the next operation on (rolls, indexes, retention)."""
        with self._lock:
            self._local.config = config

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
        check_tiling(records, headers)
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} is negative")
        with self._lock:
            self._check_writable()
            self._epochs.check_leader_append(leader_epoch)
            first_offset = self._local.log_end_offset
            stamped, log_append_time_ms = self._local.stamp(records, headers, leader_epoch, now_ms)
            self._write_locked(records, stamped, now_ms)
            self._epochs.assign(leader_epoch, first_offset)
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
        check_tiling(records, headers)
        with self._lock:
            self._check_writable()
            first_offset = self._local.log_end_offset
            check_follower_batches(
                self._directory.name, headers, first_offset, self._epochs.latest_epoch
            )
            for run_records, run_headers in segment_runs(records, headers):
                self._write_locked(run_records, run_headers, now_ms)
                for header in run_headers:
                    self._epochs.assign(header.partition_leader_epoch, header.base_offset)
        return AppendResult(first_offset, headers[-1].last_offset, -1, tuple(headers))

    def _write_locked(self, records: bytearray, headers: list[BatchHeader], now_ms: int) -> None:
        """The write path shared by both appends; the lock is held. See :meth:`append`."""
        try:
            self._local.write(records, headers, now_ms)
        except KafkaStorageError as exc:
            # The segment written to is the active one, even if the write rolled first.
            if self._local.segments[-1].damaged:
                self._mark_failed(exc)
            raise

    def roll_if_due(self, now_ms: int) -> bool:
        """Roll if the active segment is non-empty and ``segment.ms`` (for a compacted log at
        most ``max.compaction.lag.ms``, so the cleaner may reach it) has passed since its
        first append. Returns True if it rolled."""
        with self._lock:
            self._check_writable()
            return self._local.roll_if_due(now_ms)

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
            emptied = offset < self.log_start_offset
            try:
                removed_bytes, removed_segments = self._local.truncate_to(offset)
            except (OSError, KafkaStorageError) as exc:
                self._mark_failed(exc)
                raise KafkaStorageError(
                    f"truncating log dir={self._directory} to {offset} failed: {exc}"
                ) from exc
            # The end, not ``offset``: it may lie below ``offset`` (whole batches go).
            log_end_offset = self.log_end_offset
            self._generation += 1
            first_dirty_lowered = self._cleaning.truncated(log_end_offset)
            removed_epochs = self._epochs.truncated(log_end_offset, emptied)
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
        self._checkpoints.persist_recovery_point(self._lock, self._local, force=False)
        if first_dirty_lowered:
            # A stale, higher value on disk would, once the log grows past it again, make
            # the next open treat the new records (a tombstone, say) as already cleaned.
            self.persist_cleaner_checkpoint()

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
        return self._local.read(fetch_offset, max_bytes, max_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch with max timestamp >=
        ``timestamp_ms``, or None. The caller finds the record inside the batch.

        Checks each segment's max timestamp in memory, then uses the time index and a
        bounded header walk inside the first segment that can hold the answer.
        """
        return self._local.offset_for_timestamp(timestamp_ms)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """``(base offset, max timestamp)`` of the first batch holding the log's largest
        timestamp (Kafka's MAX_TIMESTAMP lookup), or None if the log is empty."""
        return self._local.max_timestamp_offset()

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
            if not self._local.config.delete:
                return []
            count, expired_by_time = self._local.expired_segments(now_ms, high_watermark)
            paths: list[Path] = []
            if count:
                self._generation += 1
            for position in range(count):
                reason = "retention.ms" if position < expired_by_time else "retention.bytes"
                try:
                    self._local.delete_oldest(paths, reason)
                except KafkaStorageError as exc:
                    self._mark_failed(exc)
                    raise
                # Per segment, so that a failed rename later in the loop leaves it in step.
                self._epochs.start_moved(self.log_start_offset)
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
            return self._cleaning.first_dirty(self._local)

    def cleanable_view(self, limit_offset: int, now_ms: int) -> CleanableView | None:
        """How dirty the cleanable part of the log is, or None if nothing dirty is cleanable
        (see :mod:`replica.log.cleaning_state`).

        ``limit_offset`` is the high watermark: nothing at or above it is cleaned (it may
        still be truncated away). Reads at most one batch header (for the timestamp of the
        first dirty batch).
        """
        with self._lock:
            return self._cleaning.view(self._local, limit_offset, now_ms)

    def prepare_cleaning(self, limit_offset: int, now_ms: int) -> CleaningInput | None:
        """Snapshot the cleanable segments for :func:`replica.log.cleaner.clean_log`.

        Returns None if nothing dirty is cleanable or a cleaning is already prepared.
        Duplicates each source segment's descriptor (the caller closes them with
        ``CleaningInput.close``); finish with :meth:`commit_cleaning` or
        :meth:`abandon_cleaning`. Raises ``KafkaStorageError``.
        """
        with self._lock:
            self._check_writable()
            return self._cleaning.prepare(self._local, limit_offset, now_ms, self._generation)

    def abandon_cleaning(self) -> None:
        """Forget a prepared cleaning that failed or stopped (its staged files are gone)."""
        with self._lock:
            self._cleaning.prepared = False

    def commit_cleaning(self, result: CleaningResult, now_ms: int) -> list[Path] | None:
        """Swap cleaned segments in for the old ones; returns old files to delete (pass them
        to :func:`delete_files` on a worker thread).

        Event-loop thread only (it replaces segments that reads use without the lock).
        If the log changed since :meth:`prepare_cleaning` (truncation, retention, close),
        the staged files are removed, nothing changes and None is returned. Otherwise the
        swap is crash-safe, through the ``cleaner-swap`` file (see
        :mod:`replica.log.cleaner_swap`). Offsets, the log start offset and the leader-epoch
        cache do not change. Raises ``KafkaStorageError`` (the log is then failed if the
        swap may be half done).
        """
        with self._lock:
            self._cleaning.prepared = False
            generation = None if self.failed else self._generation
            replaced = self._cleaning.start_swap(self._local, result, generation)
            if replaced is None:
                return None
            try:
                return self._cleaning.finish_swap(self._local, result, replaced, now_ms)
            except (OSError, KafkaStorageError) as exc:
                self._mark_failed(exc)
                raise KafkaStorageError(
                    f"cleaner swap of dir={self._directory} failed after commit: {exc}; the "
                    "next open finishes it"
                ) from exc

    def persist_cleaner_checkpoint(self) -> None:
        """Write the first dirty offset and the tombstone horizon to
        ``cleaner-offset-checkpoint`` if they changed.

        Thread-safe; run it off the event loop. Raises ``KafkaStorageError``. Losing it
        costs only work: the next cleaning then treats more of the log as dirty.
        """
        self._checkpoints.persist_cleaner_checkpoint(self._lock, self._cleaning)

    # ---- durability -----------------------------------------------------------------------

    def flush(self) -> int:
        """fdatasync every segment written since the last flush, and the indexes of those no
        longer active (see :mod:`replica.log.local_log`); thread-safe.

        Returns the new :attr:`flushed_offset`. Persists the recovery point when it moves
        into another segment (recovery always re-checks the segment holding it, so a
        finer-grained checkpoint would buy nothing and cost two more fsyncs per flush), and
        before it the leader-epoch checkpoint if the cache changed (so appends never write
        it). Raises ``KafkaStorageError`` if a sync fails; the log is then failed.
        """
        with self._flush_lock:
            return self._flush_locked()

    def _flush_locked(self, *, active_indexes: bool = False) -> int:
        local = self._local
        with self._lock:
            if self._closed:
                return local.flushed_offset
            target, fds, directory_dirty = self._start_flush_locked(active_indexes)
        self._sync(fds, directory_dirty)
        return self._publish_flush(target)

    def _start_flush_locked(self, active_indexes: bool) -> tuple[int, list[int], bool]:
        self._check_writable()
        try:
            return self._local.start_flush(active_indexes=active_indexes)
        except OSError as exc:
            raise KafkaStorageError(f"flush of dir={self._directory} failed: {exc}") from exc

    def _sync(self, fds: list[int], directory_dirty: bool) -> None:
        try:
            self._local.sync(fds, directory_dirty)
        except OSError as exc:
            raise self._sync_failed(exc) from exc

    def _sync_failed(self, exc: OSError) -> KafkaStorageError:
        # After a failed fsync the kernel may have dropped the dirty pages: retrying could
        # "succeed" without the data. Give up on this log, as Kafka does.
        log.error("fdatasync failed dir=%s error=%s", self._directory, exc)
        with self._lock:
            self._mark_failed(exc)
        return KafkaStorageError(f"flush of dir={self._directory} failed: {exc}")

    def _mark_failed(self, error: BaseException) -> None:
        """The lock is held: mark the log failed and, the first time, tell ``on_failure``."""
        first = not self._failed and not self._closed
        self._failed = True
        if first and self._on_failure is not None:
            self._on_failure(self._directory, error)

    def _publish_flush(self, target: int) -> int:
        # Before the flushed offset is published: every recovery point persisted from it
        # (here, or by a truncation on another thread) must find the epoch checkpoint
        # already covering its offsets, or a crash would lose epoch entries.
        self._checkpoints.persist_epoch_cache(self._lock, self._epochs)
        with self._lock:
            flushed = self._local.finish_flush(target)
        self._checkpoints.persist_recovery_point(self._lock, self._local, force=False)
        return flushed

    def begin_flush(self, worker: FsyncJobs) -> PendingFlush | None:
        """Start a flush whose fdatasyncs run on ``worker`` (its thread, not the caller's);
        :meth:`end_flush` publishes it once the worker's job is done.

        None if another flush is under way (then :meth:`flush` waits for it) or the log is
        closed. Until :meth:`end_flush`, this flush holds the flush lock: other flushes
        wait for it, and :meth:`close` and :meth:`delete` first wait for the job and end
        the flush themselves. Raises ``KafkaStorageError`` as :meth:`flush` does.
        """
        if not self._flush_lock.acquire(blocking=False):
            return None
        pending = None
        try:
            with self._lock:
                if self._closed:
                    return None
                target, fds, directory_dirty = self._start_flush_locked(False)
            try:
                job = worker.submit(fds)
            except Exception:
                # The descriptors were never handed over: sync them here, as flush() would.
                log.exception("fsync worker refused a flush dir=%s", self._directory)
                self._sync(fds, directory_dirty)
                self._publish_flush(target)
                return None
            pending = PendingFlush(target, directory_dirty, worker, job)
            with self._lock:
                self._pending_flush = pending
            return pending
        finally:
            if pending is None:  # nothing under way holds the lock
                self._flush_lock.release()

    def end_flush(self, pending: PendingFlush, error: int) -> int:
        """Publish a flush begun by :meth:`begin_flush` whose job ended with ``error`` (an
        errno, 0 if every fdatasync succeeded); returns the flushed offset. Idempotent: a
        flush that :meth:`close` or :meth:`delete` already ended is left alone. Raises
        ``KafkaStorageError`` (and fails the log) if the job failed."""
        with self._lock:
            if self._pending_flush is not pending:
                return self._local.flushed_offset
            self._pending_flush = None
        try:
            if error:
                raise self._sync_failed(OSError(error, os.strerror(error)))
            self._sync([], pending.directory_dirty)
            return self._publish_flush(pending.target)
        finally:
            self._flush_lock.release()

    def _settle_pending_flush(self) -> None:
        """Wait for a begun flush's job (at most one fdatasync) and end it: close and delete
        take the flush lock, which it holds."""
        with self._lock:
            pending = self._pending_flush
        if pending is not None:
            # A failed sync fails the log: it then closes without the clean-shutdown marker.
            pending.end_unwaited(self)

    def close(self) -> None:
        """Flush, persist the exact recovery point and the cleaner checkpoint, write the
        clean-shutdown marker, close.

        Idempotent. A failed log is closed without the marker, so the next open recovers.
        """
        self._settle_pending_flush()
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                failed = self._failed
                if not failed:
                    try:
                        self._local.seal_active()
                    except OSError as exc:
                        self._failed = failed = True
                        log.error(
                            "sealing active segment failed dir=%s error=%s", self._directory, exc
                        )
            try:
                if not failed:
                    # The clean-shutdown marker makes the next open trust every index.
                    self._flush_locked(active_indexes=True)
                    self._checkpoints.persist_recovery_point(self._lock, self._local, force=True)
                    self.persist_cleaner_checkpoint()
                    write_file_atomically(self._directory / CLEAN_SHUTDOWN_FILE, b"")
            finally:
                with self._lock:
                    self._closed = True
                    self._local.close_segments()
        log.info(
            "closed log dir=%s clean=%s log_end_offset=%d",
            self._directory,
            not failed,
            self.log_end_offset,
        )

    def delete(self) -> None:
        """Close every descriptor (without flushing) and remove the partition directory."""
        self._settle_pending_flush()
        with self._flush_lock, self._lock:
            self._closed = True
            self._local.close_segments()
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
            f"segments={len(self._local.segments)})"
        )
