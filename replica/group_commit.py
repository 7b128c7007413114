"""Group commit: one fdatasync of a partition's log answers every append waiting for it.

A produce under ``flush.policy=fsync`` waits until its records are on disk
(:meth:`GroupCommit.wait_flushed`); appends that arrive while a flush runs wait together
for the next one, so one fdatasync acknowledges many produce requests. A follower's
fetcher flushes what it appended (:meth:`GroupCommit.flush_now`) before it fetches again.

Where the fdatasync runs: on the C fsync thread where the extension is built (decision
0016), so the event loop serves fetches and produces meanwhile; without it, on the loop
while recent flushes were fast and in a worker thread once one was slow (decision 0011),
which needs a moving average of flush times.

State kept here, for one partition on the event loop (not thread-safe): the waiters (each
the offset it needs flushed and its future), the task running the flush loop, and that
moving average. After every flush the partition is told (``on_local_flush``): a leader's
high watermark may move.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Protocol

from lograft.protocol.errors import InvariantError
from lograft.protocol.topic_partition import TopicPartition
from replica.clocks import interval_clock_s
from replica.flush_worker import LoopFlusher, loop_flusher
from replica.log.partition_log import PartitionLog, PendingFlush

__all__ = ["INLINE_FLUSH_MAX_S", "FlushedPartition", "GroupCommit"]

# The flush is the partition's: its failures keep the logger name they always had.
log = logging.getLogger("replica.partition")

INLINE_FLUSH_MAX_S = 0.001
"""A partition whose recent flushes averaged less than this flushes on the event loop; a
slower one in a worker thread (decision 0011)."""
_FLUSH_TIME_WEIGHT = 0.25
"""The weight of the newest flush in the moving average of flush times."""


class FlushedPartition(Protocol):
    """The partition a group commit flushes for: its log (read at each flush, since a test
    may stand a disk model in for it), its name, and what to tell it after a flush."""

    log: PartitionLog
    topic_partition: TopicPartition

    def on_local_flush(self) -> None:
        """The log flushed: a leader's high watermark may move."""


class GroupCommit:
    """The flushes of one partition's log (see the module docstring)."""

    __slots__ = ("_flush_seconds_average", "_partition", "_task", "_waiters")

    def __init__(self, partition: FlushedPartition) -> None:
        self._partition = partition
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        # Unknown until the first flush, which therefore runs in a worker thread.
        self._flush_seconds_average = math.inf

    @property
    def flush_task(self) -> asyncio.Task[None] | None:
        """The task running the flush loop, if one was started (it may be done)."""
        return self._task

    def _idle(self) -> bool:
        return self._task is None or self._task.done()

    async def wait_flushed(self, offset: int) -> None:
        """Return once every offset below ``offset`` is fdatasync'ed (group commit)."""
        if self._flush_covers(offset, self._partition.log.flushed_offset):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, waiter))
        if self._idle():
            self._task = asyncio.create_task(self._flush_loop())
        await waiter

    def _flush_covers(self, offset: int, flushed_offset: int) -> bool:
        """Whether a wait for every offset below ``offset`` to be flushed is over.

        Only what the log still holds can be flushed: records a truncation cut never will,
        and a wait for them would keep the flush loop spinning until the log grew past them
        again (a produce's ack wait then finds its leadership gone and fails)."""
        return min(offset, self._partition.log.log_end_offset) <= flushed_offset

    async def _flush_loop(self) -> None:
        flusher = loop_flusher()
        while self._waiters:
            inline = False
            try:
                flushed_offset, seconds, inline = await self._flush_once(flusher)
            except InvariantError:
                raise  # the node halts (cluster.halt); never handed to a produce's answer
            except Exception as exc:
                log.exception("flush failed partition=%s", self._partition.topic_partition)
                waiters, self._waiters = self._waiters, []
                for _, waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                return
            still_waiting = []
            for offset, waiter in self._waiters:
                if self._flush_covers(offset, flushed_offset):
                    if not waiter.done():
                        waiter.set_result(None)
                elif not waiter.done():  # a cancelled wait (a timed-out produce) is dropped
                    still_waiting.append((offset, waiter))
            self._waiters = still_waiting
            self._note_flush_seconds(seconds)
            self._partition.on_local_flush()
            if inline and self._waiters:
                await asyncio.sleep(0)  # a flush that could not satisfy them: let others run

    async def _flush_once(self, flusher: LoopFlusher | None) -> tuple[int, float, bool]:
        """One flush: the flushed offset, the seconds it took, whether it ran on the loop."""
        pending = self._partition.log.begin_flush(flusher) if flusher is not None else None
        if flusher is not None and pending is not None:
            # The fdatasync runs on the C fsync thread: the loop serves the followers'
            # fetches and the next produces meanwhile (decision 0016).
            flushed_offset, seconds = await self._end_flush(flusher, pending)
            return flushed_offset, seconds, False
        # A fast fdatasync costs less than handing it to a Python thread and back (the
        # queue, the thread's wake-up, the GIL, the loop's wake-up); a slow disk must not
        # stall every other partition and the heartbeats.
        if self._flush_seconds_average < INLINE_FLUSH_MAX_S:
            flushed_offset, seconds = self._timed_flush()
            return flushed_offset, seconds, True
        loop = asyncio.get_running_loop()
        flushed_offset, seconds = await loop.run_in_executor(None, self._timed_flush)
        return flushed_offset, seconds, False

    async def _end_flush(self, flusher: LoopFlusher, pending: PendingFlush) -> tuple[int, float]:
        """Wait for a begun flush's job and publish it: the flushed offset, the seconds."""
        partition_log = self._partition.log
        try:
            error, seconds = await flusher.result(pending.job)
        except BaseException:
            # Cancelled (or a bug): the flush holds the log's flush lock, so end it before
            # the task goes, or the next flush or close of this log would wait forever.
            pending.end_unwaited(partition_log)
            raise
        return partition_log.end_flush(pending, error), seconds

    def _timed_flush(self) -> tuple[int, float]:
        """Flush the log: the new flushed offset, and the seconds the flush took."""
        start = interval_clock_s()
        flushed_offset = self._partition.log.flush()
        return flushed_offset, interval_clock_s() - start

    def _note_flush_seconds(self, seconds: float) -> None:
        average = self._flush_seconds_average
        if average == math.inf:  # the first flush: nothing to average with yet
            self._flush_seconds_average = seconds
        else:
            self._flush_seconds_average = average + _FLUSH_TIME_WEIGHT * (seconds - average)

    async def flush_now(self) -> None:
        """Flush everything appended so far (a follower's fetcher after an append, the
        interval flusher, shutdown).

        The fdatasync runs on the C fsync thread, as a group commit's does
        (:meth:`wait_flushed`): on the loop, the first fdatasync after the disk turned slow
        blocked everything the node does for as long as it took (a follower's loop stalled
        30 s behind one held fsync, and the node was fenced). Without the C extension, on
        a fast disk with no flush under way, it runs at once in the caller's turn of the
        loop (decision 0011); otherwise it waits with the appends of others."""
        partition_log = self._partition.log
        end = partition_log.log_end_offset
        if partition_log.flushed_offset >= end:
            return
        if (
            self._idle()
            and self._flush_seconds_average < INLINE_FLUSH_MAX_S
            and loop_flusher() is None
        ):
            flushed_offset, seconds = self._timed_flush()
            self._note_flush_seconds(seconds)
            self._partition.on_local_flush()
            if flushed_offset >= end:
                return
        await self.wait_flushed(end)
