"""One partition on this broker: its log, its role, its high watermark, producer state, waiters.

A ``Partition`` is the I/O shell around the pure replication cores: as leader it feeds a
:class:`~replica.replication.LeaderState` with local appends, flushes and follower fetches
and does what it decides (advance the high watermark, answer ``acks=all`` produces, propose
ISR changes); as follower it holds a :class:`~replica.replication.FollowerState`, which
decides what each fetch answer means (:mod:`replica.follower_fetch` performs it here through
:meth:`Partition.append_fetched` and :meth:`Partition.truncate_diverged`), and publishes the
high watermark that core computed once the appended records are flushed. It lives on the
node's event loop and is not thread-safe; its flushes are the group commit's
(:mod:`replica.group_commit`), whose fdatasync runs off the loop.

The high watermark a partition opens with is the broker's checkpointed one
(``replication-offset-checkpoint``), never the log end: records above it may exist on this
replica alone (an ``acks=1`` tail), and a replica elected leader must not publish them
before its in-sync followers hold them.

Durability rule: under ``flush.policy=fsync`` a replica counts an offset towards the high
watermark only once it is fdatasync'ed (the leader through ``durable_end_offset``, a
follower because it flushes before it fetches again), so ``acks=all`` means "on the disk of
every in-sync replica" and no consumer sees a record that a crash could take back.
"""

# Over 600 lines on purpose: produce path, role changes and follower steps share one state.
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from lograft.protocol.batch_header import BatchHeader, iter_headers
from lograft.protocol.control_records import EndTxnMarker, decode_marker, encode_marker_batch
from lograft.protocol.errors import (
    InvalidTxnStateError,
    LograftError,
    NotLeaderOrFollowerError,
)
from lograft.protocol.topic_config import FlushPolicy, LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.group_commit import INLINE_FLUSH_MAX_S, GroupCommit
from replica.log.partition_log import AppendResult, PartitionLog
from replica.partition_waiters import PartitionWaiters
from replica.produce_validation import validate_produced
from replica.producer_snapshots import (
    delete_snapshots_above,
    load_producer_state,
    write_producer_snapshot,
)
from replica.producer_state import AbortedTxn, Duplicate, ProducerStateManager
from replica.replication import (
    FetchDecision,
    FollowerState,
    IsrProposal,
    LeaderEpochCache,
    LeaderState,
    LeaderUpdate,
)

__all__ = [
    "INLINE_FLUSH_MAX_S",  # where it was first defined; replica.group_commit holds it now
    "FetchedBatches",
    "IsrProposer",
    "LeaderAppend",
    "Partition",
    "TopicPartition",
]

log = logging.getLogger(__name__)
replication_log = logging.getLogger("replica.replication")
"""The replication cores' logger, handed to each one this shell builds."""

IsrProposer = Callable[["Partition", IsrProposal], None]
"""Sends a leader's AlterPartition proposal to the controller (the broker's job)."""


@dataclass(frozen=True, slots=True)
class LeaderAppend:
    """What a produce appended: each batch's base offset, and the offset acks wait for.

    ``batch_base_offsets`` holds one entry per produced batch, in order; a retried
    duplicate keeps the offset it was first given. ``required_offset`` is one past the
    last offset of every batch (new or duplicate): acks are answered once it is covered,
    and only while the partition is still led at ``leader_epoch`` (see
    :meth:`Partition.wait_acked`).
    """

    batch_base_offsets: tuple[int, ...]
    required_offset: int
    log_append_time_ms: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchedBatches:
    """Whole, CRC-checked batches a fetch brought from the leader (``headers`` index them)."""

    data: bytearray
    headers: list[BatchHeader]
    received_ms: int


class Partition:
    """A partition hosted here, as leader or follower (see the module docstring)."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        partition_log: PartitionLog,
        high_watermark: int | None = None,
    ) -> None:
        """Wrap an opened log; loads producer state (disk work: call off the event loop).

        ``high_watermark`` is the checkpointed one (None: no checkpoint holds this
        partition); the partition opens at it, within the log's start and end offsets.
        """
        self.topic_partition = topic_partition
        self.log = partition_log
        self.leader_epoch = 0
        self.producer_state: ProducerStateManager = load_producer_state(partition_log)
        self._leader: LeaderState | None = None
        self._follower: FollowerState | None = None
        self._propose_isr: IsrProposer | None = None
        start = partition_log.log_start_offset
        self._high_watermark = min(
            max(start if high_watermark is None else high_watermark, start),
            partition_log.log_end_offset,
        )
        self._waiters = PartitionWaiters()
        self.group_commit = GroupCommit(self)

    # ---- role -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this broker leads the partition (at :attr:`leader_epoch`)."""
        return self._leader is not None

    def become_leader(
        self,
        *,
        replica_id: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        leader_epoch: int,
        partition_epoch: int,
        now_ms: int,
        propose_isr: IsrProposer | None = None,
    ) -> None:
        """Lead at ``leader_epoch`` (a new epoch), or take a committed ISR change (same epoch).

        ``acks=all`` produces already waiting for the high watermark from an earlier epoch
        of this leadership keep waiting: the records are still in this log and the new
        epoch's high watermark covers them. One still waiting for its flush fails with
        NOT_LEADER_OR_FOLLOWER (:meth:`wait_acked`) and is retried.
        """
        self._propose_isr = propose_isr
        self._follower = None
        current = self._leader
        if current is not None and current.leader_epoch == leader_epoch:
            self._perform(current, current.on_isr_committed(isr, partition_epoch))
            return
        leader = self._leader = LeaderState(
            replica_id=replica_id,
            replicas=replicas,
            isr=isr,
            leader_epoch=leader_epoch,
            partition_epoch=partition_epoch,
            min_insync_replicas=self.log.config.min_insync_replicas,
            epoch_cache=self.log.leader_epoch_cache,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self._high_watermark,
            now_ms=now_ms,
            logger=replication_log,
            durable_end_offset=self.durable_end,
        )
        self.leader_epoch = leader_epoch
        log.info(
            "partition role partition=%s role=leader leader_epoch=%d isr=%s "
            "log_end_offset=%d high_watermark=%d",
            self.topic_partition,
            leader_epoch,
            isr,
            self.log.log_end_offset,
            self._high_watermark,
        )
        self._perform(leader, leader.start_update)

    def update_config(self, config: LogConfig) -> None:
        """Use a changed topic config from now on (the topic's configs were altered).

        The log takes it for its next roll, append and retention check; a leader judges
        ``acks=all`` by the new ``min.insync.replicas`` at once: a lower minimum may commit
        waiting records, a higher one fails waits the ISR can no longer satisfy
        (``NOT_ENOUGH_REPLICAS_AFTER_APPEND``), as if the ISR had shrunk.
        """
        self.log.update_config(config)
        leader = self._leader
        if leader is not None and leader.min_insync_replicas != config.min_insync_replicas:
            self._perform(leader, leader.set_min_insync_replicas(config.min_insync_replicas))

    def lead_alone(self, replica_id: int) -> None:
        """Lead as the only replica (a standalone node, where no controller exists)."""
        self.become_leader(
            replica_id=replica_id,
            replicas=(replica_id,),
            isr=(replica_id,),
            leader_epoch=max(self.log.latest_epoch, 0),
            partition_epoch=0,
            now_ms=0,
        )

    def become_follower(
        self,
        leader_epoch: int,
        *,
        replica_id: int = -1,
        leader_id: int | None = None,
        unclean_leader_election: bool = False,
    ) -> None:
        """Follow ``leader_id`` at ``leader_epoch`` (None: the partition has no leader now).

        A new leader or epoch starts a new :class:`FollowerState` at this partition's high
        watermark; the same leader and epoch again keeps the current one. Produces waiting
        for acks fail with NOT_LEADER_OR_FOLLOWER.
        """
        was_leader = self._leader is not None
        self._leader = None
        self._propose_isr = None
        current = self._follower
        changed = was_leader or leader_epoch != self.leader_epoch
        if leader_id is None:
            self._follower = None
        elif (
            changed
            or current is None
            or current.leader_id != leader_id
            or current.unclean_leader_election != unclean_leader_election
        ):
            self._follower = FollowerState(
                replica_id=replica_id,
                leader_id=leader_id,
                leader_epoch=leader_epoch,
                high_watermark=self._high_watermark,
                logger=replication_log,
                unclean_leader_election=unclean_leader_election,
            )
        self.leader_epoch = leader_epoch
        if changed:
            log.info(
                "partition role partition=%s role=follower leader=%s leader_epoch=%d",
                self.topic_partition,
                leader_id,
                leader_epoch,
            )
        self._waiters.fail_acks(
            NotLeaderOrFollowerError(
                f"{self.topic_partition}: leadership moved (leader epoch {leader_epoch})"
            )
        )
        self._waiters.wake_replicas()
        self._waiters.wake_data()

    def _require_leader(self) -> LeaderState:
        leader = self._leader
        if leader is None:
            raise NotLeaderOrFollowerError(
                f"{self.topic_partition} is led by another broker "
                f"(leader epoch {self.leader_epoch})"
            )
        return leader

    def _require_leading_at(self, leader_epoch: int) -> LeaderState:
        """The leader state, if this broker leads at ``leader_epoch`` still."""
        leader = self._require_leader()
        if leader.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"{self.topic_partition}: leadership moved since the append (leader epoch "
                f"{leader_epoch}, now {leader.leader_epoch})"
            )
        return leader

    # ---- high watermark -------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """Offsets below it are committed and readable by consumers.

        A leader's never moves backwards within its epoch; a follower's is the one its
        :class:`FollowerState` learned from the leader, published once flushed.
        """
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        """One past the last offset in the log."""
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are readable by ``read_committed`` consumers: the high
        watermark, held back by the oldest transaction not yet ended (Kafka's LSO)."""
        return self.producer_state.last_stable_offset(self._high_watermark)

    def aborted_transactions(self, from_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in ``[from_offset, upper_offset)`` (a
        ``read_committed`` fetch answer hands them to the consumer)."""
        self.producer_state.forget_aborted_below(self.log.log_start_offset)
        return self.producer_state.aborted_transactions(from_offset, upper_offset)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """A copy of the log's leader-epoch cache as it is now."""
        return self.log.leader_epoch_cache

    @property
    def durable_end(self) -> int:
        """One past the last offset this replica counts as its own: the flushed offset
        under ``flush.policy=fsync``, the log end under ``interval``. A leader's high
        watermark and a follower's fetch offset never claim more."""
        if self.log.config.flush_policy == FlushPolicy.FSYNC:
            return self.log.flushed_offset
        return self.log.log_end_offset

    def _perform(self, leader: LeaderState, update: LeaderUpdate) -> None:
        """Do what a step of the leader core returned: wake the followers' held fetches,
        send its ISR proposal, publish its high watermark, settle the ``acks=all`` waits it
        may have decided (in the order the produce and fetch paths always woke them)."""
        if update.wake_followers:
            self._waiters.wake_replicas()
        if update.isr_proposal is not None:
            self._send_proposal(update.isr_proposal)
        high_watermark = update.high_watermark
        # The core opens at its durable end, which may lag the checkpointed HW published.
        if high_watermark is not None and high_watermark > self._high_watermark:
            self._high_watermark = high_watermark
            self._waiters.wake_data()
        if update.recheck_acks:
            self._waiters.settle_acks(leader.completed_acks_all)

    # ---- leader: produce ------------------------------------------------------------------

    def append_produced(
        self,
        records: bytes,
        acks: int,
        now_ms: int,
        verified: frozenset[tuple[int, int]] = frozenset(),
    ) -> LeaderAppend:
        """Validate a producer's batches (:func:`~replica.produce_validation.validate_produced`)
        and append them as leader (:meth:`append_as_leader`); raises a typed error and
        appends nothing."""
        buffer = bytearray(records)
        headers = validate_produced(buffer, self.log.config, self.topic_partition)
        return self.append_as_leader(buffer, headers, acks, now_ms, verified)

    def transactions_to_verify(self, records: bytes) -> frozenset[tuple[int, int]]:
        """``(producer id, epoch)`` of each transactional producer whose batches here would
        open a transaction on this partition: the coordinator must confirm the partition
        is in the producer's transaction before :meth:`append_produced` takes them
        (KIP-890). Reads headers only; bytes or sequences the append would refuse give
        nothing to verify (the append refuses them)."""
        try:
            plans = self.producer_state.check_batches(iter_headers(records))
        except LograftError:
            return frozenset()
        return frozenset(
            (plan.producer_id, plan.producer_epoch)
            for plan in plans
            if not isinstance(plan, Duplicate) and plan.starts_transaction
        )

    def append_as_leader(
        self,
        records: bytearray,
        headers: list[BatchHeader],
        acks: int,
        now_ms: int,
        verified: frozenset[tuple[int, int]] = frozenset(),
    ) -> LeaderAppend:
        """Append validated batches as leader; raises a typed error and appends nothing.

        ``acks=-1`` is refused with NOT_ENOUGH_REPLICAS while the ISR is below
        ``min.insync.replicas``. Idempotent batches are checked against the producer state:
        a retried duplicate is not appended again but answered with its first offsets; an
        out-of-order sequence or an old producer epoch fails the whole request. A
        transactional batch that would open its producer's transaction on this partition is
        refused (INVALID_TXN_STATE) unless ``verified`` holds its ``(producer id, epoch)``:
        the transaction coordinator confirmed the partition is in that transaction.
        """
        leader = self._require_leader()
        if acks == -1:
            refused = leader.check_produce_acks_all()
            if refused is not None:
                raise refused
        plans = self.producer_state.check_batches(headers)
        for plan in plans:
            if (
                not isinstance(plan, Duplicate)
                and plan.starts_transaction
                and (plan.producer_id, plan.producer_epoch) not in verified
            ):
                raise InvalidTxnStateError(
                    f"{self.topic_partition}: producer {plan.producer_id} epoch "
                    f"{plan.producer_epoch} has not added this partition to a transaction"
                )
        fresh = [
            h for h, plan in zip(headers, plans, strict=True) if not isinstance(plan, Duplicate)
        ]
        append_time = -1
        fresh_offsets: list[int] = []
        if fresh:
            if len(fresh) < len(headers):
                records, fresh = _select_batches(records, fresh)
            result = self._append_and_publish(leader, records, fresh, now_ms)
            append_time = result.log_append_time_ms
            fresh_offsets = [stamped.base_offset for stamped in result.headers]
        base_offsets = []
        required_offset = 0
        fresh_iter = iter(fresh_offsets)
        for header, plan in zip(headers, plans, strict=True):
            if isinstance(plan, Duplicate):
                base_offsets.append(plan.first_offset)
                required_offset = max(required_offset, plan.last_offset + 1)
                log.info(
                    "duplicate produce answered partition=%s producer_id=%d offset=%d",
                    self.topic_partition,
                    plan.producer_id,
                    plan.first_offset,
                )
            else:
                base = next(fresh_iter)
                base_offsets.append(base)
                required_offset = max(required_offset, base + header.last_offset_delta + 1)
        return LeaderAppend(tuple(base_offsets), required_offset, append_time, leader.leader_epoch)

    def append_as_coordinator(
        self, records: bytearray, headers: list[BatchHeader], now_ms: int
    ) -> int:
        """Append a coordinator's transactional batch for a producer (TxnOffsetCommit) as
        leader; returns the offset acks wait for. Its epoch is checked
        (``ProducerStateManager.check_coordinator_write``), not its sequence."""
        leader = self._require_leader()
        refused = leader.check_produce_acks_all()
        if refused is not None:
            raise refused
        for header in headers:
            self.producer_state.check_coordinator_write(header.producer_id, header.producer_epoch)
        self._append_and_publish(leader, records, headers, now_ms)
        return self.log.log_end_offset

    def append_marker(
        self, producer_id: int, producer_epoch: int, marker: EndTxnMarker, now_ms: int
    ) -> int:
        """Append a transaction marker as leader (WriteTxnMarkers); the offset acks wait for.

        A late duplicate of a marker already written here (its epoch is not above the
        producer's, see ``ProducerStateManager.check_marker``) appends nothing: the
        transaction is already ended on this partition, and the offset returned is the log
        end, so the caller still waits until that earlier marker is replicated (a retry
        after NOT_ENOUGH_REPLICAS_AFTER_APPEND must not pass before it is). Raises
        NOT_ENOUGH_REPLICAS (ISR below ``min.insync.replicas``), NOT_LEADER_OR_FOLLOWER,
        TRANSACTION_COORDINATOR_FENCED, or the log's errors.
        """
        leader = self._require_leader()
        refused = leader.check_produce_acks_all()
        if refused is not None:
            raise refused
        if not self.producer_state.check_marker(producer_id, producer_epoch, marker):
            log.info(
                "stale transaction marker skipped partition=%s producer_id=%d epoch=%d",
                self.topic_partition,
                producer_id,
                producer_epoch,
            )
            return self.log.log_end_offset
        batch = bytearray(encode_marker_batch(marker, producer_id, producer_epoch, now_ms))
        self._append_and_publish(leader, batch, list(iter_headers(batch)), now_ms, marker)
        return self.log.log_end_offset

    def _append_and_publish(
        self,
        leader: LeaderState,
        records: bytearray,
        headers: list[BatchHeader],
        now_ms: int,
        marker: EndTxnMarker | None = None,
    ) -> AppendResult:
        """Append checked batches as leader, record them in the producer state, and let
        followers and the high watermark know (every leader append goes through here)."""
        result = self.log.append(records, headers, leader.leader_epoch, now_ms)
        for header in result.headers:
            self.producer_state.on_appended(header, marker)
        self._perform(leader, leader.on_local_append(self.log.log_end_offset, self.durable_end))
        return result

    def acks_all_waiter(self, required_offset: int, leader_epoch: int) -> asyncio.Future[None]:
        """A future done once the high watermark reaches ``required_offset``, for records
        appended at ``leader_epoch``.

        It fails with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR drops below
        ``min.insync.replicas`` first, NOT_LEADER_OR_FOLLOWER if leadership moves. Raises
        NOT_LEADER_OR_FOLLOWER if it moved already, even back here at a later epoch. A
        cancelled waiter is simply dropped.
        """
        leader = self._require_leading_at(leader_epoch)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        status = leader.completed_acks_all(required_offset)
        if not status.done:
            self._waiters.add_acks(required_offset, waiter)
        elif status.error is not None:
            waiter.set_exception(status.error)
        else:
            waiter.set_result(None)
        return waiter

    def _ack_rule(self, acks: int) -> tuple[bool, bool]:
        """The ack rule, stated once: what a produce waits for before it is answered.

        ``(flush, high_watermark)``: under ``flush.policy=fsync`` the leader's own copy must
        be flushed, whatever ``acks`` (0 included); with ``acks=-1`` the high watermark must
        pass the records as well. Otherwise the answer goes at once, after the append.
        """
        return self.log.config.flush_policy == FlushPolicy.FSYNC, acks == -1

    def needs_ack_wait(self, acks: int) -> bool:
        """Whether :meth:`wait_acked` has anything to wait for (else answer at once)."""
        return any(self._ack_rule(acks))

    async def wait_acked(self, required_offset: int, acks: int, leader_epoch: int) -> None:
        """Return once a produce ending before ``required_offset``, appended while leading
        at ``leader_epoch``, may be answered (:meth:`_ack_rule`); at once when nothing
        needs waiting.

        Raises NOT_LEADER_OR_FOLLOWER once leadership moved after the append, although the
        flush or the high watermark may pass ``required_offset`` later: the log may have
        been truncated meanwhile and those offsets refilled with other records, by another
        leader or by this broker leading again at a later epoch.
        """
        flush, high_watermark = self._ack_rule(acks)
        self._require_leading_at(leader_epoch)  # the handler may have awaited since
        if flush:
            await self.wait_flushed(required_offset)
            self._require_leading_at(leader_epoch)
        if high_watermark:
            await self.acks_all_waiter(required_offset, leader_epoch)

    # ---- leader: followers and the ISR ----------------------------------------------------

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        now_ms: int,
    ) -> FetchDecision:
        """Validate a follower's fetch, record its progress, maybe propose it into the ISR."""
        leader = self._require_leader()
        outcome = leader.on_follower_fetch(
            replica_id, fetch_offset, last_fetched_epoch, now_ms, current_leader_epoch
        )
        self._perform(leader, outcome.update)
        return outcome.decision

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> None:
        """Propose dropping followers that lag; resend a proposal still in flight."""
        leader = self._leader
        if leader is None:
            return
        update = leader.maybe_shrink_isr(now_ms, replica_lag_time_max_ms)
        if update.isr_proposal is not None:
            log.info(
                "proposing isr shrink partition=%s isr=%s new_isr=%s",
                self.topic_partition,
                leader.isr,
                update.isr_proposal.new_isr,
            )
        self._perform(leader, update)

    def pending_isr_proposal(self) -> IsrProposal | None:
        """The AlterPartition proposal in flight while this broker leads, else None."""
        leader = self._leader
        return None if leader is None else leader.pending_proposal

    def resend_pending_proposal(self) -> None:
        """Send the in-flight AlterPartition proposal again (its answer was lost)."""
        leader = self._leader
        if leader is not None and leader.pending_proposal is not None:
            self._send_proposal(leader.pending_proposal)

    def _send_proposal(self, proposal: IsrProposal) -> None:
        if self._propose_isr is not None:
            self._propose_isr(self, proposal)

    def on_isr_committed(
        self, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int
    ) -> None:
        """The controller answered an AlterPartition with the committed ISR."""
        leader = self._leader
        if leader is None or leader.leader_epoch != leader_epoch:
            return
        self._perform(leader, leader.on_isr_committed(isr, partition_epoch))

    def on_isr_change_failed(self, leader_epoch: int, error: LograftError) -> None:
        """The controller refused (or did not answer) an AlterPartition."""
        leader = self._leader
        if leader is not None and leader.leader_epoch == leader_epoch:
            leader.on_alter_partition_failed(error)

    # ---- follower -------------------------------------------------------------------------

    @property
    def follower_state(self) -> FollowerState | None:
        """The follower core while this broker follows a leader, else None."""
        return self._follower

    def append_fetched(self, fetch_offset: int, records: FetchedBatches) -> None:
        """Append what a fetch brought (``FollowerLog``; ``fetch_offset`` is the log end)."""
        self.append_as_follower(records.data, records.headers, records.received_ms)

    def truncate_diverged(self, offset: int) -> None:
        """Truncate a diverged tail as the follower core decided (``FollowerLog``)."""
        self.truncate_to(offset)

    def publish_follower_high_watermark(self) -> None:
        """Take the follower core's high watermark (call once the appended records are
        flushed: a replica counts only what is on its disk)."""
        follower = self._follower
        if follower is not None:
            self._high_watermark = follower.high_watermark

    def append_as_follower(
        self, records: bytearray, headers: list[BatchHeader], now_ms: int
    ) -> None:
        """Append batches fetched from the leader (its offsets and epochs)."""
        result = self.log.append_as_follower(records, headers, now_ms)
        for header in result.headers:
            marker = None
            if header.is_control:
                marker = decode_marker(records[header.position : header.position + header.size])
            self.producer_state.on_appended(header, marker)

    def truncate_to(self, offset: int) -> None:
        """Drop the log (and producer state) at and above ``offset``: a divergent tail."""
        self.log.truncate_to(offset)
        delete_snapshots_above(self.log.directory, self.log.log_end_offset)
        inexact = self.producer_state.truncate_to(self.log.log_end_offset)
        if inexact:
            # Producers whose older batches the cache no longer holds: replay from disk.
            self.producer_state = load_producer_state(self.log)
        self._high_watermark = min(self._high_watermark, self.log.log_end_offset)

    # ---- waiting for data -----------------------------------------------------------------

    def unhost(self) -> None:
        """The partition is going away (deleted, or the node stops): end its role here,
        complete every pending fetch wait and fail the produces waiting for acks; a produce
        still waiting for its flush then fails instead of waiting for a high watermark that
        will never move."""
        self._leader = None
        self._propose_isr = None
        self._follower = None
        self._waiters.wake_data()
        self._waiters.wake_replicas()
        self._waiters.fail_acks(
            NotLeaderOrFollowerError(f"{self.topic_partition} is no longer hosted here")
        )

    def add_data_waiter(self, waiter: asyncio.Future[None], replica: bool = False) -> None:
        """Complete ``waiter`` when a fetch may find more here: new committed data
        (consumers), or any new data or a role change (``replica``: follower fetches). One
        waiter may wait on several partitions: the first of them to move completes it."""
        self._waiters.add_fetch(waiter, replica)

    def discard_waiter(self, waiter: asyncio.Future[None]) -> None:
        """Forget a waiter that was not completed (the fetch returned for another reason)."""
        self._waiters.discard_fetch(waiter)

    # ---- flushing -------------------------------------------------------------------------

    async def wait_flushed(self, offset: int) -> None:
        """Return once every offset below ``offset`` is fdatasync'ed (group commit,
        :meth:`replica.group_commit.GroupCommit.wait_flushed`)."""
        await self.group_commit.wait_flushed(offset)

    def on_local_flush(self) -> None:
        """The log flushed (or, under ``flush.policy=interval``, appended): HW may move."""
        leader = self._leader
        if leader is not None:
            self._perform(leader, leader.on_local_flush(self.durable_end))

    async def flush_now(self) -> None:
        """Flush everything appended so far (a follower's fetcher after an append, the
        interval flusher, shutdown; :meth:`replica.group_commit.GroupCommit.flush_now`)."""
        await self.group_commit.flush_now()

    def write_producer_snapshot(self) -> None:
        """Persist the producer state at the log end (at shutdown; disk work)."""
        if self.producer_state.end_offset == self.log.log_end_offset:
            write_producer_snapshot(self.log.directory, self.producer_state)


def _select_batches(
    records: bytearray, kept: list[BatchHeader]
) -> tuple[bytearray, list[BatchHeader]]:
    """The bytes of ``kept`` batches only, with headers re-positioned (duplicates removed)."""
    out = bytearray()
    headers = []
    for header in kept:
        headers.append(header.moved_to(len(out)))
        out += records[header.position : header.position + header.size]
    return out, headers
