"""The broker's log cleaner: compacts the logs of ``cleanup.policy=compact`` topics.

Kafka's ``LogCleaner`` with one cleaner thread. Every round it looks at every hosted
partition whose topic compacts, measures the dirty part of its cleanable range
(:meth:`PartitionLog.cleanable_view`, below the high watermark) and cleans the dirtiest log
whose dirty ratio reached ``min.cleanable.dirty.ratio`` (a log whose first dirty record is
older than ``max.compaction.lag.ms`` comes first, whatever its ratio; a log with nothing
dirty but tombstones past their delete horizon is cleaned too, to drop them). One partition at a
time: the two passes (:func:`replica.log.cleaner.clean_log`) run on a worker thread over
duplicated descriptors while the log keeps serving appends and reads on the event loop;
the swap (:meth:`PartitionLog.commit_cleaning`) runs on the event loop. After a cleaning
the next round starts at once; when nothing is due it waits ``log.cleaner.backoff.ms``.

A log whose segments turn out corrupt is marked uncleanable until the broker restarts, as
Kafka does; other failures are logged and retried next round.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lograft.protocol.errors import CorruptMessageError, KafkaStorageError, LograftError
from lograft.protocol.topic_partition import TopicPartition
from replica.log.cleaner import (
    DEFAULT_MAX_MAP_KEYS,
    CleanableView,
    CleanerStats,
    CleaningAbortedError,
    CleaningInput,
    CleaningResult,
    clean_log,
    remove_staged_files,
)
from replica.log.partition_log import delete_files
from replica.log_manager import LogManager
from replica.partition import Partition

__all__ = ["DEFAULT_BACKOFF_MS", "CleanedPartition", "LogCleaner", "pick_dirtiest"]

log = logging.getLogger(__name__)

DEFAULT_BACKOFF_MS = 15_000
"""Kafka's ``log.cleaner.backoff.ms``."""


@dataclass(frozen=True, slots=True)
class CleanedPartition:
    """What one round cleaned."""

    topic_partition: TopicPartition
    stats: CleanerStats
    duration_ms: int


def _due(view: CleanableView, partition: Partition, now_ms: int) -> tuple[bool, bool]:
    """``(due, forced by max.compaction.lag.ms)`` for a partition's cleanable view."""
    config = partition.log.config
    if view.tombstones_due:
        return True, False
    if view.dirty_bytes <= 0:
        return False, False
    forced = (
        view.first_dirty_timestamp_ms >= 0
        and now_ms - view.first_dirty_timestamp_ms > config.max_compaction_lag_ms
    )
    return forced or view.dirty_ratio >= config.min_cleanable_dirty_ratio, forced


def pick_dirtiest(
    partitions: Mapping[TopicPartition, Partition],
    now_ms: int,
    skip: frozenset[TopicPartition] | set[TopicPartition] = frozenset(),
) -> Partition | None:
    """The compacted partition to clean next, or None: logs past ``max.compaction.lag.ms``
    first, then the highest dirty ratio at or above ``min.cleanable.dirty.ratio``. Failed
    and closed logs are skipped (they cannot be cleaned, and must not starve the others)."""
    best: tuple[bool, float, Partition] | None = None
    for tp, partition in partitions.items():
        if tp in skip or not partition.log.config.compact or partition.log.failed:
            continue
        try:
            view = partition.log.cleanable_view(partition.last_stable_offset, now_ms)
        except LograftError as exc:
            log.error("log cleaner cannot inspect partition=%s error=%s", tp, exc)
            continue
        if view is None:
            continue
        due, forced = _due(view, partition, now_ms)
        if due and (best is None or (forced, view.dirty_ratio) > best[:2]):
            best = (forced, view.dirty_ratio, partition)
    return None if best is None else best[2]


def _producer_last_offsets(partition: Partition) -> dict[int, int]:
    """Producer id -> last offset of its last batch: that batch survives even when empty."""
    return {pid: entry.last_offset for pid, entry in partition.producer_state.entries().items()}


class LogCleaner:
    """Cleans compacted partitions of one broker in the background (see the module doc)."""

    def __init__(
        self,
        logs: LogManager,
        now_ms: Callable[[], int],
        *,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
    ) -> None:
        self._logs = logs
        self._now_ms = now_ms
        self._backoff_s = backoff_ms / 1000
        self._max_map_keys = max_map_keys
        self._abort = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._job: asyncio.Future[CleaningResult] | None = None
        self._uncleanable: set[TopicPartition] = set()

    def start(self) -> None:
        """Start the cleaning rounds (on the running event loop)."""
        self._task = asyncio.create_task(self._run(), name="log-cleaner")

    async def stop(self) -> None:
        """Stop; a cleaning in progress is abandoned (its staged files are removed)."""
        self._abort.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        job = self._job
        if job is not None:
            # The worker thread still reads the log's descriptors: wait for it to notice.
            outcome = (await asyncio.gather(job, return_exceptions=True))[0]
            if isinstance(outcome, CleaningResult):
                _discard(outcome)

    async def _run(self) -> None:
        while True:
            try:
                cleaned = await self.clean_once()
            except LograftError as exc:
                log.error("log cleaner round failed error=%s", exc)
                cleaned = None
            except Exception:
                # A bug, not a disk problem: say so loudly and stop cleaning (Kafka's cleaner
                # thread dies the same way); the broker keeps serving.
                log.exception("log cleaner stopped on an unexpected error")
                raise
            if cleaned is None:
                await asyncio.sleep(self._backoff_s)

    # Over 70 lines: one round in order, whose try/finally abandons the cleaning on any exit.
    async def clean_once(self) -> CleanedPartition | None:
        """Clean the dirtiest partition that is due, if any; returns what it did.

        Raises ``KafkaStorageError`` if the swap fails (the log is then failed).
        """
        now_ms = self._now_ms()
        partition = pick_dirtiest(self._logs.partitions, now_ms, self._uncleanable)
        if partition is None:
            return None
        tp = partition.topic_partition
        partition_log = partition.log
        last_offsets = _producer_last_offsets(partition)
        # Below the last stable offset every transaction is decided: aborted ones are
        # removed, committed ones compacted like any other records.
        limit = partition.last_stable_offset
        aborted = [
            (txn.producer_id, txn.first_offset, txn.last_offset)
            for txn in partition.aborted_transactions(0, limit)
        ]
        try:
            cleaning = partition_log.prepare_cleaning(limit, now_ms)
        except KafkaStorageError as exc:
            # Picked again every round otherwise, and no other log would be cleaned.
            self._uncleanable.add(tp)
            log.error("log cleaner cannot read log, not cleaning partition=%s error=%s", tp, exc)
            return None
        if cleaning is None:
            return None
        finished = False
        try:
            loop = asyncio.get_running_loop()
            started = time.monotonic()
            self._job = loop.run_in_executor(
                None, self._work, cleaning, now_ms, last_offsets, aborted
            )
            try:
                # Shielded: a cancelled round must not forget a thread still using descriptors
                # (stop() waits for it).
                result = await asyncio.shield(self._job)
            except CleaningAbortedError:
                partition_log.abandon_cleaning()
                self._job = None
                return None
            except (CorruptMessageError, LograftError, ValueError) as exc:
                partition_log.abandon_cleaning()
                self._job = None
                # Bytes read while a truncation cut the segment are not corruption.
                if (
                    isinstance(exc, CorruptMessageError)
                    and partition_log.generation == cleaning.generation
                ):
                    self._uncleanable.add(tp)
                    log.error(
                        "log cleaner found corrupt data, not cleaning partition=%s error=%s",
                        tp,
                        exc,
                    )
                else:
                    log.error("log cleaning failed partition=%s error=%s", tp, exc)
                return None
            self._job = None
            if self._logs.partitions.get(tp) is not partition:
                _discard(result)
                partition_log.abandon_cleaning()
                return None
            deleted = partition_log.commit_cleaning(result, self._now_ms())
            finished = True
        finally:
            if not finished:
                # Whatever escaped (a bug, a cancelled round): the log must not stay marked
                # as being cleaned, or it would never be cleaned again.
                partition_log.abandon_cleaning()
        if deleted is None:
            return None
        duration_ms = int((time.monotonic() - started) * 1000)
        stats = result.stats
        log.info(
            "cleaned log partition=%s segments_before=%d segments_after=%d bytes_before=%d "
            "bytes_after=%d records_kept=%d records_removed=%d tombstones_removed=%d "
            "unkeyed_removed=%d keys=%d next_dirty_offset=%d duration_ms=%d",
            tp,
            stats.segments_before,
            stats.segments_after,
            stats.bytes_before,
            stats.bytes_after,
            stats.records_kept,
            stats.records_removed,
            stats.tombstones_removed,
            stats.unkeyed_removed,
            stats.map_keys,
            result.next_dirty_offset,
            duration_ms,
        )
        if stats.unkeyed_removed:
            log.warning(
                "log cleaner removed records without a key partition=%s count=%d",
                tp,
                stats.unkeyed_removed,
            )
        await loop.run_in_executor(None, delete_files, deleted)
        await loop.run_in_executor(None, partition_log.persist_cleaner_checkpoint)
        return CleanedPartition(tp, stats, duration_ms)

    def _work(
        self,
        cleaning: CleaningInput,
        now_ms: int,
        producer_last_offsets: dict[int, int],
        aborted: list[tuple[int, int, int]],
    ) -> CleaningResult:
        try:
            return clean_log(
                cleaning,
                now_ms=now_ms,
                producer_last_offsets=producer_last_offsets,
                abort=self._abort,
                max_map_keys=self._max_map_keys,
                aborted_transactions=aborted,
            )
        finally:
            cleaning.close()


def _discard(result: CleaningResult) -> None:
    """Remove the staged files of a cleaning that will not be committed."""
    for group in result.groups:
        if group.new_base is not None:
            try:
                remove_staged_files(result.input.directory, group.new_base)
            except OSError:
                log.exception("removing staged segment failed dir=%s", result.input.directory)
