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
"""

from __future__ import annotations

import logging
import os

from cluster.errors import KafkaStorageError
from replica.log.cleaner import CleanableView, CleaningInput, CleaningResult, SourceSegment
from replica.log.local_log import LocalLog

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

    def _cleanable(
        self, local: LocalLog, flushed_offset: int, limit_offset: int, now_ms: int
    ) -> tuple[int, int] | None:
        """``(first dirty segment index, first uncleanable segment index)`` or None (see
        the module docstring)."""
        segments = local.segments
        config = local.config
        limit = min(limit_offset, flushed_offset)
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

    def view(
        self, local: LocalLog, flushed_offset: int, limit_offset: int, now_ms: int
    ) -> CleanableView | None:
        """How dirty the cleanable range is; see :meth:`PartitionLog.cleanable_view`."""
        found = self._cleanable(local, flushed_offset, limit_offset, now_ms)
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
        flushed_offset: int,
        limit_offset: int,
        now_ms: int,
        generation: int,
    ) -> CleaningInput | None:
        """Snapshot the cleanable segments; see :meth:`PartitionLog.prepare_cleaning`."""
        if self.prepared:
            return None
        found = self._cleanable(local, flushed_offset, limit_offset, now_ms)
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
