"""The cleaner's bookkeeping for one partition log: what is dirty, what may be cleaned.

Kafka keeps this in ``LogCleanerManager`` (the cleaner checkpoint, ``cleanableOffsets``,
the in-progress state). Here it lives beside the log it describes:
:class:`replica.log.partition_log.PartitionLog` holds one :class:`CleaningState` and
guards it with its own lock.

The *cleanable* range is the closed segments wholly below the limit (the high watermark)
and the flushed offset and, with ``min.compaction.lag.ms``, whose newest record is old
enough; the first segment that is not ends the range. Its *dirty* part starts at the
segment holding the first dirty offset (the end of the last cleaning, persisted in
``cleaner-offset-checkpoint``). With nothing dirty but tombstones past their delete horizon
in the cleaned part, the range is all clean and still worth a cleaning: it drops them.

A finished cleaning goes in through :mod:`replica.log.cleaner_swap` in two steps:
:meth:`CleaningState.start_swap` checks that the log still holds the segments the cleaning
read and writes the commit point; :meth:`CleaningState.finish_swap` installs the cleaned
segments in the log and moves the dirty range on. A failure after the commit point leaves
the swap half done (the next open finishes it), so the log must then be failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from lograft.protocol.errors import KafkaStorageError
from replica.log.cleaner import CleanableView, CleaningInput, CleaningResult, SourceSegment
from replica.log.cleaner_swap import commit_swap, install_swap, remove_staged
from replica.log.local_log import LocalLog
from replica.log.segment import LogSegment

__all__ = ["CleaningState"]

log = logging.getLogger(__name__)


class CleaningState:
    """Where the part of a log not yet cleaned starts, when tombstones in the cleaned part
    may go, and whether a cleaning is prepared.

    Not thread-safe: the partition log's lock guards every call.
    """

    def __init__(self, checkpoint: tuple[int, int]) -> None:
        """Start from ``(first dirty offset, tombstone horizon ms)`` as stored."""
        self.first_dirty_offset, self.tombstone_horizon_ms = checkpoint
        """Where the part of the log not yet cleaned starts (clamped to the log on use), and
        when tombstones in the cleaned part may go (-1: none there)."""
        self.prepared = False
        """A cleaning was prepared and not yet committed or abandoned."""

    @property
    def checkpoint(self) -> tuple[int, int]:
        """``(first dirty offset, tombstone horizon ms)``, as ``cleaner-offset-checkpoint``
        stores them."""
        return self.first_dirty_offset, self.tombstone_horizon_ms

    def first_dirty(self, local: LocalLog) -> int:
        """The first dirty offset, clamped to the log (the log start if never cleaned)."""
        return max(local.log_start_offset, min(self.first_dirty_offset, local.log_end_offset))

    def restart(self, log_start_offset: int) -> None:
        """Count the whole log as dirty again (records the cleaner had seen are gone)."""
        self.first_dirty_offset = log_start_offset
        self.tombstone_horizon_ms = -1

    def truncated(self, log_end_offset: int) -> bool:
        """The log now ends at ``log_end_offset``; returns True if the first dirty offset
        had to come down to it (the checkpoint on disk is then stale)."""
        lowered = self.first_dirty_offset > log_end_offset
        self.first_dirty_offset = min(self.first_dirty_offset, log_end_offset)
        return lowered

    def committed(self, result: CleaningResult) -> None:
        """A cleaning was swapped in: the dirty part now starts where it ended."""
        # Never backwards: a cleaning of tombstones only ends where the range ends.
        self.first_dirty_offset = max(self.first_dirty_offset, result.next_dirty_offset)
        self.tombstone_horizon_ms = result.tombstone_horizon_ms

    def _cleanable(self, local: LocalLog, limit_offset: int, now_ms: int) -> tuple[int, int] | None:
        """``(first dirty segment index, first uncleanable segment index)`` or None (see
        the module docstring)."""
        segments = local.segments
        config = local.config
        limit = min(limit_offset, local.flushed_offset)
        youngest_ms = now_ms - config.min_compaction_lag_ms
        end_index = 0
        while end_index < len(segments) - 1:
            if segments[end_index + 1].base_offset > limit:
                break
            if config.min_compaction_lag_ms > 0 and segments[end_index].max_timestamp > youngest_ms:
                break
            end_index += 1
        first_dirty_index = max(0, local.segment_index(self.first_dirty(local)))
        if first_dirty_index < end_index:
            return first_dirty_index, end_index
        if end_index and 0 <= self.tombstone_horizon_ms <= now_ms:
            return end_index, end_index
        return None

    def view(self, local: LocalLog, limit_offset: int, now_ms: int) -> CleanableView | None:
        """How dirty the cleanable range is; see :meth:`PartitionLog.cleanable_view`."""
        found = self._cleanable(local, limit_offset, now_ms)
        if found is None:
            return None
        first_dirty_index, end_index = found
        segments = local.segments
        first_dirty = self.first_dirty(local)
        header = segments[first_dirty_index].find_batch(first_dirty)
        return CleanableView(
            tombstones_due=first_dirty_index == end_index,
            first_dirty_offset=first_dirty,
            end_offset=segments[end_index].base_offset,
            clean_bytes=sum(segment.size for segment in segments[:first_dirty_index]),
            dirty_bytes=sum(segment.size for segment in segments[first_dirty_index:end_index]),
            first_dirty_timestamp_ms=-1 if header is None else header.max_timestamp,
        )

    def prepare(
        self,
        local: LocalLog,
        limit_offset: int,
        now_ms: int,
        generation: int,
    ) -> CleaningInput | None:
        """Snapshot the cleanable segments; see :meth:`PartitionLog.prepare_cleaning`."""
        if self.prepared:
            return None
        found = self._cleanable(local, limit_offset, now_ms)
        if found is None:
            return None
        first_dirty_index, end_index = found
        segments = tuple(local.segments[:end_index])
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
            raise KafkaStorageError(f"cannot read log dir={local.directory}: {exc}") from exc
        self.prepared = True
        return CleaningInput(
            directory=local.directory,
            config=local.config,
            sources=tuple(sources),
            first_dirty_index=first_dirty_index,
            end_offset=local.segments[end_index].base_offset,
            generation=generation,
            segments=segments,
        )

    def start_swap(
        self, local: LocalLog, result: CleaningResult, generation: int | None
    ) -> Sequence[LogSegment] | None:
        """Commit to swapping ``result`` in for the segments it cleaned, which it returns.

        ``generation`` is the log's (None if the log is closed or failed). If it changed
        since the cleaning was prepared, or the log no longer starts with the segments the
        cleaning read, the staged files are removed and None is returned. Otherwise
        ``cleaner-swap`` is written (the commit point). Raises ``KafkaStorageError`` before
        the commit point; the log is then as it was.
        """
        cleaning = result.input
        replaced = cleaning.segments[: result.cleaned_sources]
        new_bases = [group.new_base for group in result.groups if group.new_base is not None]
        current = local.segments
        unchanged = (
            generation == cleaning.generation
            and len(current) > len(replaced)
            and all(a is b for a, b in zip(current, replaced, strict=False))
        )
        if not unchanged:
            log.info("log cleaning abandoned, the log changed meanwhile dir=%s", local.directory)
            remove_staged(local.directory, new_bases)
            return None
        commit_swap(local.directory, [segment.base_offset for segment in replaced], new_bases)
        return replaced

    def finish_swap(
        self,
        local: LocalLog,
        result: CleaningResult,
        replaced: Sequence[LogSegment],
        now_ms: int,
    ) -> list[Path]:
        """After :meth:`start_swap`: install the cleaned segments in place of ``replaced``,
        move the dirty range on, close the old segments; returns their files (``*.deleted``).

        Raises ``OSError`` or ``KafkaStorageError``; the swap may then be half done.
        """
        deleted, fresh = install_swap(
            local.directory, local.config.index_interval_bytes, replaced, result.groups, now_ms
        )
        local.replace_oldest(len(replaced), fresh)
        self.committed(result)
        for segment in replaced:
            try:
                segment.close()
            except OSError:
                log.exception("closing replaced segment failed dir=%s", local.directory)
        return deleted
