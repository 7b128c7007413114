"""One partition on this broker: its log, its leader epoch, its high watermark and waiters.

A ``Partition`` lives on the node's event loop and is not thread-safe; only
``PartitionLog.flush`` runs on a worker thread, through the group-commit in ``flush``.

Durability rule: under ``flush.policy=fsync`` a produce is acknowledged only after the
fdatasync that covers it, and the high watermark (what consumers may read) never passes the
flushed offset, so no consumer sees a record that a crash could take back. Under
``flush.policy=interval`` the high watermark is the log end offset.
"""

from __future__ import annotations

import asyncio
import logging

from replica.log.config import FlushPolicy
from replica.log.partition_log import PartitionLog
from replica.topic_partition import TopicPartition

__all__ = ["Partition", "TopicPartition"]

log = logging.getLogger(__name__)


class Partition:
    """A partition led by this broker (replication arrives with its own issue)."""

    def __init__(self, topic_partition: TopicPartition, partition_log: PartitionLog) -> None:
        self.topic_partition = topic_partition
        self.log = partition_log
        self.leader_epoch = 0
        self.is_leader = True
        """Standalone nodes lead every partition; in a quorum the metadata image decides."""
        self._high_watermark = self._durable_end()
        self._data_waiters: set[asyncio.Future[None]] = set()
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._flush_task: asyncio.Task[None] | None = None

    @property
    def high_watermark(self) -> int:
        """Offsets below it are readable by consumers; it never moves backwards."""
        return self._high_watermark

    def _durable_end(self) -> int:
        if self.log.config.flush_policy == FlushPolicy.FSYNC:
            return self.log.flushed_offset
        return self.log.log_end_offset

    def advance_high_watermark(self) -> None:
        """Recompute the high watermark after an append or a flush; wake long-polling fetches."""
        new_high_watermark = self._durable_end()
        if new_high_watermark > self._high_watermark:
            self._high_watermark = new_high_watermark
            self.wake_fetchers()

    def set_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, capped by what this log holds on disk."""
        self._high_watermark = max(
            self._high_watermark, min(leader_high_watermark, self.log.flushed_offset)
        )

    def wake_fetchers(self) -> None:
        """Complete every pending fetch wait on this partition."""
        waiters, self._data_waiters = self._data_waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def data_waiter(self) -> asyncio.Future[None]:
        """A future completed when the high watermark next moves (or the partition goes away)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._data_waiters.add(waiter)
        return waiter

    def discard_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._data_waiters.discard(waiter)

    async def wait_flushed(self, offset: int) -> None:
        """Return once every offset below ``offset`` is fdatasync'ed (group commit).

        Appends that arrive while a flush runs wait together for the next one, so one
        fdatasync acknowledges many produce requests.
        """
        if self.log.flushed_offset >= offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((offset, waiter))
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._flush_loop())
        await waiter

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._flush_waiters:
            try:
                flushed_offset = await loop.run_in_executor(None, self.log.flush)
            except Exception as exc:
                log.exception("flush failed partition=%s", self.topic_partition)
                waiters, self._flush_waiters = self._flush_waiters, []
                for _, waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
                return
            still_waiting = []
            for offset, waiter in self._flush_waiters:
                if offset <= flushed_offset:
                    if not waiter.done():
                        waiter.set_result(None)
                else:
                    still_waiting.append((offset, waiter))
            self._flush_waiters = still_waiting
            self.advance_high_watermark()

    async def flush_now(self) -> None:
        """Flush everything appended so far (used by the interval flusher and on shutdown)."""
        await self.wait_flushed(self.log.log_end_offset)
