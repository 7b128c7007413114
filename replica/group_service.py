"""The shell around the group coordinator: one per ``__consumer_offsets`` partition led here.

For every partition of ``__consumer_offsets`` this broker leads, a
:class:`~replica.group.GroupCoordinator` is loaded by replaying the partition's records
(``COORDINATOR_LOAD_IN_PROGRESS`` meanwhile), for the leader epoch it leads at; it is closed
when leadership moves, and a new one is loaded if the broker leads the partition again at a
newer epoch. Every request first checks, in the same step as its answer, that the broker
still leads the partition at the coordinator's epoch, per its replica and its metadata image
(``NOT_COORDINATOR`` otherwise): the coordinators are closed only when the broker acts on an
image, after it was applied (and after the broker's ``FindCoordinator`` names the new
leader). Every call that changes state returns records; they are appended to
the partition as one batch with ``acks=all`` semantics (on every in-sync replica) *before*
the answer goes out, and calls of one partition run one at a time so the log holds them in
the order the coordinator made them. If an append fails, the coordinator is ahead of its
log: it is dropped and loaded again from the log.

Runs on the node's event loop; the pure coordinator does no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from lograft.protocol.control_records import decode_marker
from lograft.protocol.errors import (
    LograftError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
)
from lograft.protocol.record_codec import decode_records
from lograft.protocol.topic_partition import TopicPartition
from replica.clocks import interval_clock_ms, wall_clock_ms
from replica.coordinator_log import (
    ImageLeaderEpoch,
    append_acks_all,
    append_transactional_acks_all,
    iter_log_batches,
    leader_epoch_here,
    may_answer,
)
from replica.group import (
    CoordinatorState,
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupLoggers,
    GroupRecord,
    partition_for_group,
)
from replica.group.records import decode, encode
from replica.log_manager import LogManager
from replica.partition import Partition

__all__ = ["OFFSETS_TOPIC", "GroupService"]

log = logging.getLogger(__name__)
# The core's loggers, named after its modules as when each made its own: its log lines, and
# whatever filters on those names, are unchanged.
_CORE_LOGGERS = GroupLoggers(
    coordinator=logging.getLogger("replica.group.coordinator"),
    membership=logging.getLogger("replica.group._membership"),
    offsets=logging.getLogger("replica.group._offsets"),
)

OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's internal topic of group state: a group lives on one partition, whose leader is
its coordinator."""
#: The ticker sleeps until the earliest member deadline, but at least this long (a tick that
#: left a deadline due cannot spin) and at most ``MAX_TICK_WAIT_S``.
MIN_TICK_WAIT_S = 0.01
MAX_TICK_WAIT_S = 1.0

T = TypeVar("T")


@dataclass
class _Slot:
    """One ``__consumer_offsets`` partition's coordinator and the lock ordering its writes."""

    coordinator: GroupCoordinator
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loader: asyncio.Task[None] | None = None


class GroupService:
    """Coordinators for the ``__consumer_offsets`` partitions this broker leads."""

    def __init__(
        self,
        logs: LogManager,
        partition_counts: Callable[[], Mapping[str, int]],
        config: GroupCoordinatorConfig | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        interval_clock_ms: Callable[[], int] = interval_clock_ms,
        image_leader_epoch: ImageLeaderEpoch | None = None,
    ) -> None:
        """``now_ms`` stamps what the coordinator appends; ``interval_clock_ms`` (monotonic)
        times member sessions and rebalances (see :mod:`replica.clocks`).
        ``image_leader_epoch``: where the broker's metadata image has it lead a partition
        (without it, the replicas' roles alone say which partitions are led here)."""
        self._logs = logs
        self._image_leader_epoch = image_leader_epoch
        self._partition_counts = partition_counts
        self._config = config or GroupCoordinatorConfig()
        self._now_ms = now_ms
        self._interval_clock_ms = interval_clock_ms
        self._slots: dict[int, _Slot] = {}
        self._ticker: asyncio.Task[None] | None = None
        #: Set when a member deadline comes sooner than the ticker's wake-up (``_wake_at_ms``).
        self._deadlines_changed = asyncio.Event()
        self._wake_at_ms: int | None = None
        self._updates: set[asyncio.Task[None]] = set()

    # ---- leadership ------------------------------------------------------------------------

    def start(self) -> None:
        """Start expiring members (session and rebalance timeouts)."""
        self._ticker = asyncio.create_task(self._tick_loop(), name="group-coordinator-tick")

    async def stop(self) -> None:
        """Close every coordinator; stop the ticker."""
        tasks = [t for t in [self._ticker, *(s.loader for s in self._slots.values())] if t]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for index in list(self._slots):
            self._unload(index)

    def sync(self) -> None:
        """Load coordinators for offsets partitions led here (again, if the leader epoch
        moved); close the others."""
        led = {
            tp.partition: partition.leader_epoch
            for tp, partition in self._logs.partitions.items()
            if tp.topic == OFFSETS_TOPIC and partition.is_leader
        }
        for index, slot in list(self._slots.items()):
            if led.get(index) != slot.coordinator.leader_epoch:
                self._unload(index)
        for index, epoch in led.items():
            if index not in self._slots:
                slot = _Slot(
                    GroupCoordinator(
                        random.Random(),
                        self._config,
                        loggers=_CORE_LOGGERS,
                        partition=index,
                        leader_epoch=epoch,
                    )
                )
                self._slots[index] = slot
                slot.loader = asyncio.create_task(
                    self._load(index, slot), name=f"group-load-{index}"
                )

    def on_topics_changed(self) -> None:
        """Topic metadata changed: active coordinators recompute affected assignments."""
        for index, slot in list(self._slots.items()):
            if slot.coordinator.state is CoordinatorState.ACTIVE:
                task = asyncio.create_task(
                    self._apply(index, lambda c: c.on_topic_metadata(self._partition_counts()))
                )
                self._updates.add(task)
                task.add_done_callback(self._updates.discard)

    def _unload(self, index: int) -> None:
        slot = self._slots.pop(index)
        if slot.loader is not None:
            slot.loader.cancel()
        if slot.coordinator.state is not CoordinatorState.CLOSED:
            slot.coordinator.close()

    async def _load(self, index: int, slot: _Slot) -> None:
        partition = self._logs.partitions.get(TopicPartition(OFFSETS_TOPIC, index))
        if partition is None:
            return
        async with slot.lock:
            try:
                count = self._replay(partition, slot.coordinator)
                records = slot.coordinator.complete_load(
                    self._partition_counts(), self._interval_clock_ms()
                )
                self._wake_ticker_if_sooner(slot)
                await self._append(partition, records)
            except (LograftError, TimeoutError) as exc:
                log.error("group coordinator load failed partition=%d error=%r", index, exc)
                if self._slots.get(index) is slot:
                    self._unload(index)  # the next sync loads it again
                return
        log.info("group coordinator ready partition=%d records=%d", index, count)

    @staticmethod
    def _replay(partition: Partition, coordinator: GroupCoordinator) -> int:
        count = 0
        for header, data in iter_log_batches(partition):
            if header.is_control:
                marker = decode_marker(
                    memoryview(data)[header.position : header.position + header.size]
                )
                if marker is not None:
                    coordinator.complete_transaction(header.producer_id, marker.committed)
                continue
            if not header.records_count:
                continue
            records = [
                decode(r.key, r.value) for r in decode_records(data, header) if r.key is not None
            ]
            count += len(records)
            if header.is_transactional:
                coordinator.replay_transactional(header.producer_id, records)
            else:
                coordinator.replay(records)
        return count

    # ---- requests --------------------------------------------------------------------------

    def _slot_for(self, group_id: str) -> tuple[int, _Slot]:
        """The group's coordinator, if it may answer now (:meth:`_check_leadership`)."""
        count = self._partition_counts().get(OFFSETS_TOPIC, 0)
        if count <= 0:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC} does not exist yet")
        index = partition_for_group(group_id, count)
        slot = self._slots.get(index)
        if slot is None:
            raise NotCoordinatorError(
                f"this broker does not lead {OFFSETS_TOPIC}-{index}, which holds group {group_id!r}"
            )
        self._check_leadership(index, slot)
        return index, slot

    def _check_leadership(self, index: int, slot: _Slot) -> None:
        """Raise unless ``slot``'s coordinator may answer now: it is still the one of
        partition ``index`` and the broker still leads the partition at its leader epoch.
        Call it in the same step as the coordinator's answer (no ``await`` in between)."""
        if self._slots.get(index) is not slot:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{index} moved")
        partition = self._logs.partitions.get(TopicPartition(OFFSETS_TOPIC, index))
        slot.coordinator.check_leadership(leader_epoch_here(partition, self._image_leader_epoch))

    async def call(
        self,
        group_id: str,
        action: Callable[[GroupCoordinator], T],
        records_of: Callable[[T], tuple[GroupRecord, ...]],
        producer: tuple[int, int] | None = None,
    ) -> T:
        """Run ``action`` on the group's coordinator and persist its records before returning.

        ``producer`` (id, epoch): a ``TxnOffsetCommit``; the records are written as a
        transactional batch of that producer (pending until its transaction's marker), and
        a fenced producer is refused before the coordinator takes its offsets. Raises the
        coordinator's typed error, ``NOT_COORDINATOR`` when this broker does not lead the
        group's partition, or the append's error (the coordinator is then reloaded).
        """
        index, slot = self._slot_for(group_id)
        async with slot.lock:
            self._check_leadership(index, slot)  # again: the lock may have been waited for
            if producer is not None:
                partition = self._logs.partitions.get(TopicPartition(OFFSETS_TOPIC, index))
                if partition is not None:
                    partition.producer_state.check_coordinator_write(*producer)
            result = action(slot.coordinator)
            self._wake_ticker_if_sooner(slot)
            records = records_of(result)
            if producer is None:
                await self._persist(index, slot, records)
            elif records:
                producer_id, producer_epoch = producer
                await self._persist_with(
                    index,
                    slot,
                    lambda partition: append_transactional_acks_all(
                        partition,
                        [encode(r) for r in records],
                        producer_id,
                        producer_epoch,
                        self._now_ms(),
                    ),
                )
            return result

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition holding ``group_id``."""
        count = self.offsets_partition_count()
        if count <= 0:
            raise NotCoordinatorError(f"{OFFSETS_TOPIC} does not exist yet")
        return TopicPartition(OFFSETS_TOPIC, partition_for_group(group_id, count))

    async def on_transaction_marker(self, index: int, producer_id: int, committed: bool) -> None:
        """A transaction marker of ``producer_id`` was written to ``__consumer_offsets``
        partition ``index`` (led here): its pending offsets are committed or dropped. A
        coordinator still loading reads the marker from the log instead."""
        slot = self._slots.get(index)
        if slot is None:
            return
        async with slot.lock:
            if self._slots.get(index) is slot and slot.coordinator.state is CoordinatorState.ACTIVE:
                ended = slot.coordinator.complete_transaction(producer_id, committed)
                if ended:
                    log.info(
                        "transactional offsets ended partition=%d producer_id=%d committed=%s "
                        "offsets=%d",
                        index,
                        producer_id,
                        committed,
                        ended,
                    )

    def read(self, group_id: str, action: Callable[[GroupCoordinator], T]) -> T:
        """Run a read-only ``action`` on the group's coordinator (if it may answer now)."""
        _, slot = self._slot_for(group_id)
        return action(slot.coordinator)

    def offsets_partition_count(self) -> int:
        """Partitions of ``__consumer_offsets`` (0 until it exists)."""
        return self._partition_counts().get(OFFSETS_TOPIC, 0)

    def all_coordinators(self) -> list[GroupCoordinator]:
        """The coordinators of this broker that may answer now (for ListGroups).

        ``COORDINATOR_LOAD_IN_PROGRESS`` while one is still loading, as Kafka answers: a
        listing without that partition's groups would look complete but is not. Those of
        partitions this broker no longer leads are left out.
        """
        slots = may_answer(sorted(self._slots.items()), self._check_leadership, OFFSETS_TOPIC)
        return [slot.coordinator for slot in slots]

    async def _apply(
        self, index: int, action: Callable[[GroupCoordinator], tuple[GroupRecord, ...]]
    ) -> None:
        slot = self._slots.get(index)
        if slot is None:
            return
        async with slot.lock:
            try:
                self._check_leadership(index, slot)
            except LograftError:
                return  # not (or no longer) this broker's to change
            try:
                records = action(slot.coordinator)
                self._wake_ticker_if_sooner(slot)
                await self._persist(index, slot, records)
            except LograftError as exc:
                log.warning("group coordinator update failed partition=%d error=%s", index, exc)

    async def _persist(self, index: int, slot: _Slot, records: tuple[GroupRecord, ...]) -> None:
        if not records:
            return
        await self._persist_with(index, slot, lambda partition: self._append(partition, records))

    async def _persist_with(
        self, index: int, slot: _Slot, append: Callable[[Partition], Awaitable[None]]
    ) -> None:
        partition = self._logs.partitions.get(TopicPartition(OFFSETS_TOPIC, index))
        try:
            if partition is None:
                raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{index} is no longer hosted here")
            await append(partition)
        except (LograftError, TimeoutError) as exc:
            # The coordinator is ahead of its log: drop it; the next sync reloads from the log.
            log.error("group records not persisted partition=%d error=%r", index, exc)
            if self._slots.get(index) is slot:
                self._unload(index)
                self.sync()
            if isinstance(exc, NotLeaderOrFollowerError):
                # The leadership ended under the write: the client asks FindCoordinator again.
                raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{index}: {exc.message}") from exc
            if isinstance(exc, LograftError):
                raise
            raise NotCoordinatorError(f"{OFFSETS_TOPIC}-{index}: write timed out") from exc

    async def _append(self, partition: Partition, records: tuple[GroupRecord, ...]) -> None:
        await append_acks_all(partition, [encode(r) for r in records], self._now_ms())

    # ---- expiry ----------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        """Expire members when their deadlines come; sleep until the earliest one."""
        while True:
            now = self._interval_clock_ms()
            for index, slot in list(self._slots.items()):
                deadline = self._deadline_of(slot)
                if deadline is not None and deadline <= now:
                    await self._apply(index, _ticker(now))
            self._deadlines_changed.clear()  # what the ticks changed is read just below
            deadlines = [d for d in map(self._deadline_of, self._slots.values()) if d is not None]
            now = self._interval_clock_ms()
            wait_s = MAX_TICK_WAIT_S
            if deadlines:
                wait_s = min(wait_s, max(MIN_TICK_WAIT_S, (min(deadlines) - now) / 1000))
            self._wake_at_ms = now + int(wait_s * 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._deadlines_changed.wait()

    def _wake_ticker_if_sooner(self, slot: _Slot) -> None:
        """A coordinator changed: wake the ticker if its deadline now comes before the
        ticker would wake (a member joined, a rebalance began); heartbeats and commits,
        which only move deadlines later, leave it asleep."""
        deadline = self._deadline_of(slot)
        if deadline is not None and (self._wake_at_ms is None or deadline < self._wake_at_ms):
            self._deadlines_changed.set()

    @staticmethod
    def _deadline_of(slot: _Slot) -> int | None:
        if slot.coordinator.state is not CoordinatorState.ACTIVE:
            return None
        return slot.coordinator.next_deadline_ms()


def _ticker(now: int) -> Callable[[GroupCoordinator], tuple[GroupRecord, ...]]:
    def tick(coordinator: GroupCoordinator) -> tuple[GroupRecord, ...]:
        result = coordinator.tick(now)
        for expired in result.expired:
            log.info(
                "group member expired group=%s member_id=%s reason=%s",
                expired.group_id,
                expired.member_id,
                expired.reason,
            )
        return result.records

    return tick
