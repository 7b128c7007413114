"""The shell around the transaction coordinator: one per ``__transaction_state`` partition
led here.

For every partition of ``__transaction_state`` this broker leads, a
:class:`~replica.txn.TransactionCoordinator` is loaded by replaying the partition's records
(``COORDINATOR_LOAD_IN_PROGRESS`` meanwhile), with the partition's leader epoch as its
coordinator epoch; it is dropped when leadership moves. As with the group coordinator, every
request first checks, in the same step as its answer, that the broker still leads the
partition at that epoch, per its replica and its metadata image (``NOT_COORDINATOR``
otherwise), and each call's records are appended ``acks=all`` *before* the answer goes
out and before its marker jobs start, calls of one partition run one at a time, and a failed
append drops the coordinator so that it is loaded again from the log.

Marker jobs (a decided transaction's commit or abort markers) run as tasks: the
:class:`TxnPeers` send them to each partition's leader, retriable failures are retried
against the new leader, and once every partition holds its marker the core completes the
transaction. A job stops when its coordinator is dropped; the next leader of the partition
restarts it from the log (``complete_load``).

Runs on the node's event loop; the pure coordinator does no I/O.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from lograft.protocol.errors import (
    LograftError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition
from replica.clocks import wall_clock_ms
from replica.coordinator_log import (
    ImageLeaderEpoch,
    append_acks_all,
    iter_log_records,
    leader_epoch_here,
    may_answer,
)
from replica.log_manager import LogManager
from replica.partition import Partition
from replica.txn import (
    DEFAULT_MAX_TIMEOUT_MS,
    MarkerJob,
    Outcome,
    TransactionCoordinator,
    decode_record,
    encode_record,
    partition_for_transactional_id,
)
from replica.txn.coordinator import DEFAULT_ID_EXPIRATION_MS

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TransactionService",
    "TxnPeers",
    "TxnServiceConfig",
]

log = logging.getLogger(__name__)
# The core's logger, named after its module as when it made its own: its log lines, and
# whatever filters on that name, are unchanged.
_CORE_LOGGER = logging.getLogger("replica.txn.coordinator")

TRANSACTION_STATE_TOPIC = "__transaction_state"
"""Kafka's internal topic of transaction state: a transactional id lives on one partition,
whose leader is its coordinator."""
TICK_INTERVAL_S = 1.0
"""How often open transactions are checked against their timeout (Kafka checks every 10 s:
``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
EXPIRE_INTERVAL_S = 3600.0
"""How often idle transactional ids are forgotten (Kafka's
``transaction.remove.expired.transaction.cleanup.interval.ms``)."""
MARKER_RETRY_BACKOFF_S = (0.05, 1.0)
"""First and largest pause between attempts of a marker job whose partitions failed."""

T = TypeVar("T")


class TxnPeers(Protocol):
    """What the transaction service asks of the rest of the cluster (the node provides it)."""

    async def next_producer_id(self) -> int:
        """A new producer id (from the controller's blocks)."""
        ...

    async def write_markers(
        self, job: MarkerJob, partitions: frozenset[TopicPartition]
    ) -> Mapping[TopicPartition, LograftError | None]:
        """Send the job's marker to the leaders of ``partitions``; each one's outcome."""
        ...

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """Ask the id's coordinator (wherever it runs) whether ``tp`` is in the producer's
        open transaction; raises its refusal (KIP-890)."""
        ...


@dataclass(frozen=True, slots=True)
class TxnServiceConfig:
    """The broker's transaction settings (Kafka's names in the node config)."""

    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    """``transaction.max.timeout.ms``."""
    two_phase_enabled: bool = True
    """``transaction.two.phase.commit.enable`` (KIP-939)."""
    id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS
    """``transactional.id.expiration.ms``."""


@dataclass
class _Slot:
    """One ``__transaction_state`` partition's coordinator and the lock ordering its writes."""

    coordinator: TransactionCoordinator
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loader: asyncio.Task[None] | None = None
    jobs: set[asyncio.Task[None]] = field(default_factory=set)


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class TransactionService:
    """Coordinators for the ``__transaction_state`` partitions this broker leads."""

    def __init__(
        self,
        logs: LogManager,
        partition_counts: Callable[[], Mapping[str, int]],
        peers: TxnPeers,
        config: TxnServiceConfig | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        image_leader_epoch: ImageLeaderEpoch | None = None,
    ) -> None:
        """``now_ms`` is the wall clock: transaction start times are persisted and compared
        by whichever broker coordinates next, so a per-process monotonic clock will not do.
        ``image_leader_epoch``: where the broker's metadata image has it lead a partition
        (without it, the replicas' roles alone say which partitions are led here)."""
        self._logs = logs
        self._image_leader_epoch = image_leader_epoch
        self._partition_counts = partition_counts
        self._peers = peers
        self._config = config or TxnServiceConfig()
        self._now_ms = now_ms
        self._slots: dict[int, _Slot] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._coordinating = asyncio.Event()
        """Set while this broker leads a ``__transaction_state`` partition: only then has
        the ticker anything to time out, and an idle broker's ticker does not wake."""

    # ---- leadership ------------------------------------------------------------------------

    def start(self) -> None:
        """Start aborting timed-out transactions and forgetting idle ids."""
        self._ticker = asyncio.create_task(self._tick_loop(), name="txn-coordinator-tick")

    async def stop(self) -> None:
        """Drop every coordinator (their marker jobs stop); stop the ticker."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        tasks = [t for s in self._slots.values() for t in (s.loader, *s.jobs) if t is not None]
        for index in list(self._slots):
            self._unload(index)
        await asyncio.gather(*tasks, return_exceptions=True)

    def sync(self) -> None:
        """Load coordinators for ``__transaction_state`` partitions led here (again, if the
        leader epoch moved); drop the others."""
        led = {
            tp.partition: partition.leader_epoch
            for tp, partition in self._logs.partitions.items()
            if tp.topic == TRANSACTION_STATE_TOPIC and partition.is_leader
        }
        for index, slot in list(self._slots.items()):
            if led.get(index) != slot.coordinator.coordinator_epoch:
                self._unload(index)
        for index, epoch in led.items():
            if index not in self._slots:
                coordinator = TransactionCoordinator(
                    index,
                    epoch,
                    max_timeout_ms=self._config.max_timeout_ms,
                    two_phase_enabled=self._config.two_phase_enabled,
                    id_expiration_ms=self._config.id_expiration_ms,
                    logger=_CORE_LOGGER,
                )
                slot = self._slots[index] = _Slot(coordinator)
                slot.loader = asyncio.create_task(self._load(index, slot), name=f"txn-load-{index}")
        if self._slots:
            self._coordinating.set()

    def _unload(self, index: int) -> None:
        slot = self._slots.pop(index)
        for task in (slot.loader, *slot.jobs):
            if task is not None:
                task.cancel()
        if not self._slots:
            self._coordinating.clear()

    async def _load(self, index: int, slot: _Slot) -> None:
        partition = self._state_partition(index)
        if partition is None:
            return
        async with slot.lock:
            count = 0
            try:
                for record in iter_log_records(partition):
                    if record.key is not None:
                        slot.coordinator.replay(decode_record(record.key, record.value))
                        count += 1
            except LograftError as exc:
                log.error("transaction coordinator load failed partition=%d error=%r", index, exc)
                if self._slots.get(index) is slot:
                    self._unload(index)  # the next sync loads it again
                return
            jobs = slot.coordinator.complete_load()
        for job in jobs:
            self._start_job(index, slot, job)
        log.info(
            "transaction coordinator ready partition=%d coordinator_epoch=%d records=%d "
            "restarted_marker_jobs=%d",
            index,
            slot.coordinator.coordinator_epoch,
            count,
            len(jobs),
        )

    def _state_partition(self, index: int) -> Partition | None:
        return self._logs.partitions.get(TopicPartition(TRANSACTION_STATE_TOPIC, index))

    # ---- requests --------------------------------------------------------------------------

    def _slot_for(self, transactional_id: str) -> tuple[int, _Slot]:
        """The id's coordinator, if it may answer now (:meth:`_check_leadership`)."""
        count = self._partition_counts().get(TRANSACTION_STATE_TOPIC, 0)
        if count <= 0:
            raise NotCoordinatorError(f"{TRANSACTION_STATE_TOPIC} does not exist yet")
        index = partition_for_transactional_id(transactional_id, count)
        slot = self._slots.get(index)
        if slot is None:
            raise NotCoordinatorError(
                f"this broker does not lead {TRANSACTION_STATE_TOPIC}-{index}, which holds "
                f"transactional id {transactional_id!r}"
            )
        self._check_leadership(index, slot)
        return index, slot

    def _check_leadership(self, index: int, slot: _Slot) -> None:
        """Raise unless ``slot``'s coordinator may answer now: it is still the one of
        partition ``index`` and the broker still leads the partition at its coordinator
        epoch. Call it in the same step as the coordinator's answer (no ``await`` between)."""
        if self._slots.get(index) is not slot:
            raise NotCoordinatorError(f"{TRANSACTION_STATE_TOPIC}-{index} moved")
        slot.coordinator.check_leadership(
            leader_epoch_here(self._state_partition(index), self._image_leader_epoch)
        )

    async def call(
        self, transactional_id: str, action: Callable[[TransactionCoordinator], Outcome[T]]
    ) -> T:
        """Run ``action`` on the id's coordinator, persist its records, start its marker
        jobs, and return its result (or raise its error, after persisting).

        Raises the coordinator's typed error, ``NOT_COORDINATOR`` when this broker does not
        lead the id's partition, or the append's error (the coordinator is then reloaded).

        The decision runs in a task of its own that keeps the coordinator's lock until its
        records are written and its marker jobs started, even when the caller gives up (gRPC
        cancels a handler whose client's deadline passed): the coordinator changes its state
        in memory before the write, so a request cancelled while ``acks=all`` waited for a
        slow ISR left an ``EndTxn``'s ``PREPARE_COMMIT`` in memory and in the log with no
        marker job (the transaction hung, and its id answered ``CONCURRENT_TRANSACTIONS``,
        until the partition's leadership moved), and let the next request decide on state
        not yet written.
        """
        index, slot = self._slot_for(transactional_id)
        decision = asyncio.ensure_future(self._decide(index, slot, action))
        decision.add_done_callback(_retrieved)  # a caller that gave up does not read it
        outcome = await asyncio.shield(decision)
        if outcome.error is not None:
            raise outcome.error
        return outcome.result

    async def _decide(
        self,
        index: int,
        slot: _Slot,
        action: Callable[[TransactionCoordinator], Outcome[T]],
    ) -> Outcome[T]:
        async with slot.lock:
            self._check_leadership(index, slot)  # again: the lock may have been waited for
            outcome = action(slot.coordinator)
            await self._persist(index, slot, outcome)
        return outcome

    def read(self, transactional_id: str, action: Callable[[TransactionCoordinator], T]) -> T:
        """Run a read-only ``action`` on the id's coordinator (if it may answer now)."""
        _, slot = self._slot_for(transactional_id)
        return action(slot.coordinator)

    def all_coordinators(self) -> list[TransactionCoordinator]:
        """The coordinators of this broker that may answer now (ListTransactions); raises
        ``COORDINATOR_LOAD_IN_PROGRESS`` while one is loading, as Kafka answers. Those of
        partitions this broker no longer leads are left out."""
        slots = may_answer(
            sorted(self._slots.items()), self._check_leadership, TRANSACTION_STATE_TOPIC
        )
        return [slot.coordinator for slot in slots]

    async def new_producer_id(self) -> int:
        """A producer id for the core to hand out (drawn before the call: the core is sync)."""
        return await self._peers.next_producer_id()

    async def verify_remote(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """KIP-890 for a partition leader: the coordinator of ``transactional_id`` must
        confirm ``tp`` is in the producer's open transaction; raises its refusal."""
        await self._peers.verify(transactional_id, producer_id, producer_epoch, tp)

    async def _persist(self, index: int, slot: _Slot, outcome: Outcome[Any]) -> None:
        if outcome.records:
            partition = self._state_partition(index)
            try:
                if partition is None:
                    raise NotCoordinatorError(
                        f"{TRANSACTION_STATE_TOPIC}-{index} is no longer hosted here"
                    )
                await append_acks_all(
                    partition, [encode_record(r) for r in outcome.records], self._now_ms()
                )
            except (LograftError, TimeoutError) as exc:
                # The coordinator is ahead of its log: drop it; sync loads it from the log.
                log.error("transaction records not persisted partition=%d error=%r", index, exc)
                if self._slots.get(index) is slot:
                    self._unload(index)
                    self.sync()
                if isinstance(exc, NotLeaderOrFollowerError):
                    # The leadership ended under the write: the client asks FindCoordinator
                    # again.
                    raise NotCoordinatorError(
                        f"{TRANSACTION_STATE_TOPIC}-{index}: {exc.message}"
                    ) from exc
                if isinstance(exc, LograftError):
                    raise
                raise NotCoordinatorError(
                    f"{TRANSACTION_STATE_TOPIC}-{index}: write timed out"
                ) from exc
        for job in outcome.markers:
            self._start_job(index, slot, job)

    # ---- markers ---------------------------------------------------------------------------

    def _start_job(self, index: int, slot: _Slot, job: MarkerJob) -> None:
        task = asyncio.create_task(
            self._run_job(index, slot, job), name=f"txn-markers-{job.transactional_id}"
        )
        slot.jobs.add(task)
        task.add_done_callback(slot.jobs.discard)

    async def _run_job(self, index: int, slot: _Slot, job: MarkerJob) -> None:
        remaining = job.partitions
        backoff = MARKER_RETRY_BACKOFF_S[0]
        while remaining:
            outcomes = await self._peers.write_markers(job, remaining)
            failed = set()
            for tp in remaining:
                error = outcomes.get(tp)
                if error is None and tp in outcomes:
                    continue
                if isinstance(error, UnknownTopicOrPartitionError):
                    # Kafka drops markers for a deleted topic: nothing is left to end there.
                    log.warning("marker dropped, partition gone partition=%s", tp)
                    continue
                if isinstance(error, TransactionCoordinatorFencedError):
                    # A newer coordinator of this transactional id wrote there: it owns the
                    # job now (its load restarted it); this one stops.
                    log.warning(
                        "marker job fenced transactional_id=%s partition=%s",
                        job.transactional_id,
                        tp,
                    )
                    return
                failed.add(tp)
                if error is not None and not error.retriable:
                    log.error(
                        "marker refused transactional_id=%s partition=%s error=%s",
                        job.transactional_id,
                        tp,
                        error,
                    )
            remaining = frozenset(failed)
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_S[1])
        while not await self._complete_job(index, slot, job):
            # The coordinator may not answer now, yet its partition has not moved: the
            # broker's lease lapsed for a moment (a controller failover). Giving up here
            # would leave the transaction preparing, its id answered CONCURRENT_TRANSACTIONS,
            # until the partition moves; no other coordinator would restart the job.
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MARKER_RETRY_BACKOFF_S[1])

    async def _complete_job(self, index: int, slot: _Slot, job: MarkerJob) -> bool:
        """Record a job's markers as written; False to try again later. True also once
        the partition moved (its next coordinator restarts the job from the log) or the
        completion could not be persisted."""
        async with slot.lock:
            if self._slots.get(index) is not slot:
                return True  # the partition's next coordinator restarts the job from the log
            try:
                self._check_leadership(index, slot)
            except LograftError:
                return False
            outcome = slot.coordinator.markers_written(
                job.transactional_id, job.producer_id, job.producer_epoch, self._now_ms()
            )
            try:
                await self._persist(index, slot, outcome)
            except LograftError as exc:
                log.warning(
                    "transaction completion not persisted transactional_id=%s error=%s",
                    job.transactional_id,
                    exc,
                )
                return True
        log.info(
            "transaction completed transactional_id=%s producer_id=%d epoch=%d committed=%s "
            "partitions=%d",
            job.transactional_id,
            job.producer_id,
            job.producer_epoch,
            job.committed,
            len(job.partitions),
        )
        return True

    # ---- timeouts --------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        since_expiry = 0.0
        while True:
            await self._coordinating.wait()
            await asyncio.sleep(TICK_INTERVAL_S)
            since_expiry += TICK_INTERVAL_S
            expire = since_expiry >= EXPIRE_INTERVAL_S
            if expire:
                since_expiry = 0.0
            for index, slot in list(self._slots.items()):
                if slot.coordinator.loading:
                    continue
                await self._apply(index, slot, lambda c: c.tick(self._now_ms()))
                if expire:
                    await self._apply(index, slot, lambda c: c.expire_ids(self._now_ms()))

    async def _apply(
        self,
        index: int,
        slot: _Slot,
        action: Callable[[TransactionCoordinator], Outcome[tuple[str, ...]]],
    ) -> None:
        async with slot.lock:
            try:
                self._check_leadership(index, slot)
            except LograftError:
                return  # not (or no longer) this broker's to change
            try:
                await self._persist(index, slot, action(slot.coordinator))
            except LograftError as exc:
                log.warning(
                    "transaction coordinator update failed partition=%d error=%s", index, exc
                )
