"""The leader side of one partition: follower progress, high watermark, ISR proposals, acks.

Pure: inputs are follower fetches, local appends and flushes, the controller's committed
ISR and ``now_ms``; outputs are fetch decisions, ISR proposals and produce outcomes. No
clock, socket, thread or disk. Not thread-safe: owned by one partition on the event loop.

Rules (each has a unit test in ``tests/unit/replica/replication/test_replication_state.py``):

* **High watermark** = the minimum, over the *maximal* ISR, of each member's log end
  offset (the leader counts its *durable* end: the flushed offset under
  ``flush.policy=fsync``). It never moves backwards within the epoch, never passes the
  leader's log end offset, and does not advance while the committed ISR is smaller than
  ``min.insync.replicas``. The maximal ISR is the committed ISR plus a pending expansion
  (Kafka's ``maximalIsr``): while a change is in flight the HW waits for everybody who
  is, or may soon be, in the ISR, so any replica the controller may elect holds every
  offset below it.
* **Fetch validation** (KIP-320): a fetch naming an older leader epoch gets
  ``FENCED_LEADER_EPOCH``, a newer one ``UNKNOWN_LEADER_EPOCH``; a fetch whose
  ``last_fetched_epoch`` this leader's log does not end at or beyond ``fetch_offset`` gets
  a diverging epoch (from the leader-epoch cache) and does *not* count as progress.
* **ISR shrink**: a follower not caught up for more than ``replica.lag.time.max.ms`` is
  proposed for removal. **ISR expand**: a follower whose log end offset is >= the HW and
  >= the leader-epoch start offset is proposed for addition, after its fetch. Both are
  proposals (AlterPartition); the ISR changes only in :meth:`LeaderState.on_isr_committed`.
* **acks=all**: refused up front with ``NOT_ENOUGH_REPLICAS`` when the committed ISR is
  below ``min.insync.replicas``; a pending produce completes when the HW passes it, and
  fails with ``NOT_ENOUGH_REPLICAS_AFTER_APPEND`` if the ISR drops below the minimum first.

Each step that changes something the shell must act on returns a
:class:`~replica.replication.leader_outputs.LeaderUpdate`
(the new HW, an AlterPartition to send, whether waiting ``acks=all`` produces must be
judged again, whether held follower fetches may be answered); the shell performs it and
never compares the state before and after. :meth:`LeaderState.check_invariants` states
what holds between steps.

ISR change state (``from`` row -> allowed ``to``)::

    from \\ to        Committed    PendingExpand    PendingShrink
    Committed        [commit]     [propose]        [propose]
    PendingExpand    [commit/fail]   -                -
    PendingShrink    [commit/fail]   -                -

A change outside the table raises :class:`ReplicationInvariantError`.
"""

# Over 600 lines on purpose: one file owns the leader's state machine, its rules and table.
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from lograft.protocol.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    LograftError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from replica.replication.errors import ReplicationInvariantError
from replica.replication.leader_epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from replica.replication.leader_outputs import (
    NO_CHANGE,
    AcksAllStatus,
    DivergingEpoch,
    FetchOutcome,
    LeaderUpdate,
    ServeFrom,
)
from replica.replication.messages import IsrProposal

__all__ = [
    "ISR_TRANSITIONS",
    "FollowerProgress",
    "IsrState",
    "LeaderState",
    "check_current_leader_epoch",
]

# Answers that prove an AlterPartition was not applied at the current partition epoch.
_NOT_APPLIED = (IneligibleReplicaError, UnknownTopicIdError, UnknownTopicOrPartitionError)


def check_current_leader_epoch(
    current_leader_epoch: int | None, leader_epoch: int, who: str
) -> None:
    """KIP-320: a reader that names the leader epoch it follows is served by that leader only.

    Raises ``FENCED_LEADER_EPOCH`` when ``current_leader_epoch`` is older than this leader's
    ``leader_epoch`` (the reader follows a deposed leader) and ``UNKNOWN_LEADER_EPOCH`` when
    it is newer (this leader has not learned of its successor yet); ``None``: not checked.
    ``who`` names the reader in the message.
    """
    if current_leader_epoch is None or current_leader_epoch == leader_epoch:
        return
    if current_leader_epoch < leader_epoch:
        raise FencedLeaderEpochError(f"{who} at epoch {current_leader_epoch} < {leader_epoch}")
    raise UnknownLeaderEpochError(f"{who} at epoch {current_leader_epoch} > {leader_epoch}")


class IsrState(enum.Enum):
    """Whether an AlterPartition proposal is in flight."""

    COMMITTED = "Committed"
    PENDING_EXPAND = "PendingExpand"
    PENDING_SHRINK = "PendingShrink"


#: The table above as data.
ISR_TRANSITIONS: dict[IsrState, frozenset[IsrState]] = {
    IsrState.COMMITTED: frozenset(IsrState),
    IsrState.PENDING_EXPAND: frozenset({IsrState.COMMITTED}),
    IsrState.PENDING_SHRINK: frozenset({IsrState.COMMITTED}),
}


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ``ReplicaState``).

    ``log_end_offset`` is -1 until the follower's first valid fetch in this epoch. It is
    what the latest fetch reported, which may be less than an earlier one did (a delayed
    or repeated fetch, a follower whose disk lost its tail); ``highest_log_end_offset`` is
    the most any fetch of this epoch reported.
    """

    log_end_offset: int
    last_caught_up_time_ms: int
    last_fetch_time_ms: int
    last_fetch_leader_log_end_offset: int
    highest_log_end_offset: int = -1


class LeaderState:
    """The leader of one partition at one leader epoch (see the module docstring).

    A new leader epoch is a new ``LeaderState``. Creating one assigns ``leader_epoch`` in
    the leader-epoch cache at the current log end offset (Kafka's ``makeLeader``); the
    caller persists the cache, and performs :attr:`start_update`. ``logger`` is the
    shell's (named ``replica.replication``): the core logs its role and ISR changes there.
    """

    __slots__ = (
        "_checked_high_watermark",
        "_durable_end_offset",
        "_high_watermark",
        "_isr",
        "_isr_state",
        "_log",
        "_log_end_offset",
        "_partition_epoch",
        "_pending_isr",
        "_progress",
        "epoch_cache",
        "leader_epoch",
        "leader_epoch_start_offset",
        "min_insync_replicas",
        "replica_id",
        "replicas",
        "start_update",
    )

    def __init__(
        self,
        *,
        replica_id: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        leader_epoch: int,
        partition_epoch: int,
        min_insync_replicas: int,
        epoch_cache: LeaderEpochCache,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        logger: logging.Logger,
        durable_end_offset: int | None = None,
    ) -> None:
        if min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, not {min_insync_replicas}")
        if len(set(replicas)) != len(replicas) or replica_id not in replicas:
            raise ReplicationInvariantError(
                f"replica={replica_id} leads with replicas {replicas} that do not hold it once"
            )
        self._log = logger
        self.replica_id = replica_id
        self.replicas = replicas
        self.leader_epoch = leader_epoch
        self.min_insync_replicas = min_insync_replicas
        self.epoch_cache = epoch_cache
        self._isr = self._validate_isr(isr)
        self._partition_epoch = partition_epoch
        self._isr_state = IsrState.COMMITTED
        self._pending_isr: tuple[int, ...] = ()
        if epoch_cache.latest_epoch > leader_epoch:
            raise ReplicationInvariantError(
                f"replica={replica_id} leads epoch {leader_epoch} but its log has epoch "
                f"{epoch_cache.latest_epoch}"
            )
        epoch_cache.assign(leader_epoch, log_end_offset)
        self.leader_epoch_start_offset = log_end_offset
        self._log_end_offset = log_end_offset
        self._durable_end_offset = (
            log_end_offset if durable_end_offset is None else durable_end_offset
        )
        self._high_watermark = min(high_watermark, self._durable_end_offset)
        # Kafka resets followers on becoming leader: ISR members count as caught up now.
        self._progress = {
            r: FollowerProgress(-1, now_ms if r in self._isr else 0, now_ms, -1)
            for r in replicas
            if r != replica_id
        }
        # Kafka's makeLeader: an ISR of one (or followers already known) may commit at once.
        self._maybe_advance_high_watermark()
        self._checked_high_watermark = self._high_watermark
        self.start_update = LeaderUpdate(
            high_watermark=self._high_watermark, recheck_acks=True, wake_followers=True
        )
        """What becoming leader changed: the HW it opens with, the ``acks=all`` produces
        still waiting from an earlier epoch of this leadership to judge again, and the
        follower fetches held for the previous role to wake."""
        logger.info(
            "partition leader start replica=%d leader_epoch=%d partition_epoch=%d isr=%s "
            "log_end_offset=%d high_watermark=%d",
            replica_id,
            leader_epoch,
            partition_epoch,
            self._isr,
            log_end_offset,
            self._high_watermark,
        )

    # --- reading ---------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """Offsets below it are committed: consumers may read them, acks=all may answer."""
        return self._high_watermark

    @property
    def isr(self) -> tuple[int, ...]:
        """The ISR the controller committed, in replica order."""
        return self._isr

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus a pending expansion: whom the HW waits for."""
        if self._isr_state is IsrState.PENDING_EXPAND:
            return self._pending_isr
        return self._isr

    @property
    def isr_state(self) -> IsrState:
        """Whether an ISR change is in flight."""
        return self._isr_state

    @property
    def partition_epoch(self) -> int:
        """The partition epoch of the committed ISR."""
        return self._partition_epoch

    @property
    def log_end_offset(self) -> int:
        """The leader's log end offset, as last told."""
        return self._log_end_offset

    @property
    def durable_end_offset(self) -> int:
        """The leader's own contribution to the HW (flushed offset, or log end offset)."""
        return self._durable_end_offset

    def progress(self, replica_id: int) -> FollowerProgress:
        """A copy of what the leader knows about follower ``replica_id``."""
        p = self._progress[replica_id]
        return FollowerProgress(
            p.log_end_offset,
            p.last_caught_up_time_ms,
            p.last_fetch_time_ms,
            p.last_fetch_leader_log_end_offset,
            p.highest_log_end_offset,
        )

    # --- local log -------------------------------------------------------------------------

    def on_local_append(
        self, log_end_offset: int, durable_end_offset: int | None = None
    ) -> LeaderUpdate:
        """The leader appended; ``durable_end_offset`` defaults to the log end offset.

        Pass the flushed offset as ``durable_end_offset`` under ``flush.policy=fsync`` (and
        call :meth:`on_local_flush` later). The update wakes the followers if the log grew
        and carries the HW if it advanced.
        """
        if log_end_offset < self._log_end_offset:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} leader log end went back "
                f"{self._log_end_offset} -> {log_end_offset}"
            )
        grew = log_end_offset > self._log_end_offset
        self._log_end_offset = log_end_offset
        durable = log_end_offset if durable_end_offset is None else durable_end_offset
        self._check_durable(durable)
        self._durable_end_offset = max(self._durable_end_offset, durable)
        return self._hw_update(wake_followers=grew)

    def on_local_flush(self, durable_end_offset: int) -> LeaderUpdate:
        """Everything below ``durable_end_offset`` is on the leader's disk; HW may advance.

        A flush that makes nothing new durable changes nothing (a follower that just became
        leader may report one below what this state was opened with).
        """
        self._check_durable(durable_end_offset)
        if durable_end_offset <= self._durable_end_offset:
            return NO_CHANGE
        self._durable_end_offset = durable_end_offset
        return self._hw_update()

    def set_min_insync_replicas(self, min_insync_replicas: int) -> LeaderUpdate:
        """Take a changed ``min.insync.replicas`` (the topic config was altered live).

        A lower minimum may let the HW move at once; ``acks=all`` produces already waiting
        are judged again by the new minimum (the update's ``recheck_acks``).
        """
        if min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, not {min_insync_replicas}")
        changed = min_insync_replicas != self.min_insync_replicas
        self.min_insync_replicas = min_insync_replicas
        return self._hw_update(recheck_acks=changed)

    def _check_durable(self, durable_end_offset: int) -> None:
        if durable_end_offset > self._log_end_offset:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} flushed {durable_end_offset} beyond log end "
                f"{self._log_end_offset}"
            )

    # --- follower fetches ------------------------------------------------------------------

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        now_ms: int,
        current_leader_epoch: int | None = None,
    ) -> FetchOutcome:
        """Validate a follower's fetch and record its progress (KIP-320 on the leader).

        Raises ``NOT_LEADER_OR_FOLLOWER`` for a replica not assigned to this partition,
        ``FENCED_LEADER_EPOCH`` / ``UNKNOWN_LEADER_EPOCH`` when ``current_leader_epoch`` is
        older / newer than this leader's, and ``OFFSET_OUT_OF_RANGE`` for a fetch offset
        beyond the log end with no epoch to check it against. A diverging fetch returns
        :class:`DivergingEpoch` and records nothing; a valid one updates the follower's log
        end offset and caught-up time, may advance the HW, may propose the follower back
        into the ISR (:meth:`is_caught_up`), and returns :class:`ServeFrom`.
        """
        progress = self._progress.get(replica_id)
        if progress is None:
            raise NotLeaderOrFollowerError(
                f"replica {replica_id} is not a follower of this partition (replicas "
                f"{self.replicas}, leader {self.replica_id})"
            )
        check_current_leader_epoch(
            current_leader_epoch, self.leader_epoch, f"fetch from replica {replica_id}"
        )
        if last_fetched_epoch != UNDEFINED_EPOCH:
            end = self.epoch_cache.end_offset_for(last_fetched_epoch, self._log_end_offset)
            if end.epoch < last_fetched_epoch or end.end_offset < fetch_offset:
                return FetchOutcome(DivergingEpoch(end, self._high_watermark))
        if fetch_offset < 0 or fetch_offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} of replica {replica_id} outside "
                f"[0, {self._log_end_offset}]"
            )
        # Kafka's ReplicaState.updateFetchState: caught up if it reached the leader's end as
        # of now, or as of its previous fetch (then it was caught up at that time).
        if fetch_offset >= self._log_end_offset:
            progress.last_caught_up_time_ms = max(progress.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_log_end_offset >= 0:
            progress.last_caught_up_time_ms = max(
                progress.last_caught_up_time_ms, progress.last_fetch_time_ms
            )
        progress.last_fetch_leader_log_end_offset = self._log_end_offset
        progress.last_fetch_time_ms = now_ms
        progress.log_end_offset = fetch_offset
        progress.highest_log_end_offset = max(progress.highest_log_end_offset, fetch_offset)
        advanced = self._maybe_advance_high_watermark()
        update = LeaderUpdate(
            high_watermark=self._high_watermark if advanced else None,
            isr_proposal=self._maybe_expand_isr(replica_id),
            recheck_acks=advanced,
        )
        return FetchOutcome(ServeFrom(fetch_offset, self._high_watermark), update)

    # --- high watermark --------------------------------------------------------------------

    def _maybe_advance_high_watermark(self) -> bool:
        if len(self._isr) < self.min_insync_replicas:
            return False
        candidate = self._durable_end_offset
        for r in self.maximal_isr:
            if r != self.replica_id:
                candidate = min(candidate, self._progress[r].log_end_offset)
        if candidate <= self._high_watermark:
            return False
        if candidate > self._log_end_offset:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} high watermark {candidate} beyond log end "
                f"{self._log_end_offset}"
            )
        self._high_watermark = candidate
        return True

    def _hw_update(
        self, *, recheck_acks: bool = False, wake_followers: bool = False
    ) -> LeaderUpdate:
        """Advance the HW if it may; the update naming it, with the shell's other tasks."""
        if self._maybe_advance_high_watermark():
            return LeaderUpdate(
                high_watermark=self._high_watermark,
                recheck_acks=True,
                wake_followers=wake_followers,
            )
        if recheck_acks or wake_followers:
            return LeaderUpdate(recheck_acks=recheck_acks, wake_followers=wake_followers)
        return NO_CHANGE

    # --- ISR -------------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> LeaderUpdate:
        """Propose dropping followers not caught up for ``replica_lag_time_max_ms``.

        The update's ``isr_proposal`` is None when nobody lags or a change is already in
        flight. The leader itself is never dropped. The ISR may shrink below
        ``min.insync.replicas`` (acks=all then fails), as in Kafka.
        """
        if self._isr_state is not IsrState.COMMITTED:
            return NO_CHANGE
        lagging = {
            r
            for r in self._isr
            if r != self.replica_id
            and now_ms - self._progress[r].last_caught_up_time_ms > replica_lag_time_max_ms
        }
        if not lagging:
            return NO_CHANGE
        new_isr = tuple(r for r in self._isr if r not in lagging)
        self._transition_isr_state(IsrState.PENDING_SHRINK, new_isr)
        return LeaderUpdate(
            isr_proposal=IsrProposal(new_isr, self.leader_epoch, self._partition_epoch)
        )

    def is_caught_up(self, replica_id: int) -> bool:
        """Kafka's ``isFollowerInSync``: its log end >= the HW and >= the epoch start."""
        progress = self._progress.get(replica_id)
        if progress is None:
            return False
        leo = progress.log_end_offset
        return leo >= self._high_watermark and leo >= self.leader_epoch_start_offset

    def _maybe_expand_isr(self, replica_id: int) -> IsrProposal | None:
        """Propose adding ``replica_id`` back if it is caught up (after its valid fetch).

        None if it is already in the (maximal) ISR, not caught up, or a change is in flight.
        """
        if (
            self._isr_state is not IsrState.COMMITTED
            or replica_id in self._isr
            or not self.is_caught_up(replica_id)
        ):
            return None
        members = set(self._isr) | {replica_id}
        new_isr = tuple(r for r in self.replicas if r in members)
        self._transition_isr_state(IsrState.PENDING_EXPAND, new_isr)
        return IsrProposal(new_isr, self.leader_epoch, self._partition_epoch)

    def on_isr_committed(self, isr: tuple[int, ...], partition_epoch: int) -> LeaderUpdate:
        """The controller committed ``isr`` at ``partition_epoch`` (for this leader epoch).

        From the AlterPartition response or from the metadata log, whichever comes first;
        an answer with a partition epoch not newer than the current one is stale and
        changes nothing. Otherwise it clears any in-flight proposal and may advance the HW;
        the update names the ISR taken and asks for the ``acks=all`` waits to be judged.
        """
        if partition_epoch <= self._partition_epoch:
            return NO_CHANGE
        new_isr = self._validate_isr(isr)
        self._transition_isr_state(IsrState.COMMITTED, ())
        for r in set(new_isr) - set(self._isr):
            if r != self.replica_id:
                progress = self._progress[r]
                progress.last_caught_up_time_ms = max(
                    progress.last_caught_up_time_ms, progress.last_fetch_time_ms
                )
        self._log.info(
            "partition isr committed replica=%d leader_epoch=%d partition_epoch=%d isr=%s "
            "previous_isr=%s",
            self.replica_id,
            self.leader_epoch,
            partition_epoch,
            new_isr,
            self._isr,
        )
        self._isr = new_isr
        self._partition_epoch = partition_epoch
        advanced = self._maybe_advance_high_watermark()
        return LeaderUpdate(
            high_watermark=self._high_watermark if advanced else None,
            isr_committed=new_isr,
            recheck_acks=True,
        )

    @property
    def pending_proposal(self) -> IsrProposal | None:
        """The AlterPartition request in flight, if any (the shell may resend it)."""
        if self._isr_state is IsrState.COMMITTED:
            return None
        return IsrProposal(self._pending_isr, self.leader_epoch, self._partition_epoch)

    def on_alter_partition_failed(self, error: LograftError) -> bool:
        """The AlterPartition call failed; returns whether the proposal was forgotten.

        Only an answer that says the proposal was *not applied* at the current partition
        epoch (``INELIGIBLE_REPLICA``, an unknown topic or partition) forgets it; a later
        shrink or expand proposes again (Kafka's ``handleAlterPartitionError``). Any other
        failure leaves it in flight, so the HW keeps waiting for the maximal ISR:
        ``INVALID_UPDATE_VERSION``, ``FENCED_LEADER_EPOCH`` and ``NOT_CONTROLLER`` say the
        partition changed meanwhile (perhaps by this very proposal, answered before and
        resent), and the metadata log will bring the new state; a timeout or a lost
        connection says nothing about whether the controller applied it, so the shell
        sends it again. Forgetting such a proposal would let the HW pass a follower that
        the controller may still add to the ISR (a late copy of the request), which an
        election could then make leader without records below the HW.
        """
        if self._isr_state is IsrState.COMMITTED:
            return False
        if not isinstance(error, _NOT_APPLIED):
            return False
        self._log.info(
            "partition isr change failed replica=%d leader_epoch=%d proposed=%s error=%s",
            self.replica_id,
            self.leader_epoch,
            self._pending_isr,
            error.error_name,
        )
        self._transition_isr_state(IsrState.COMMITTED, ())
        return True

    # --- acks=all --------------------------------------------------------------------------

    def check_produce_acks_all(self) -> NotEnoughReplicasError | None:
        """Admission of an ``acks=all`` produce: ``NOT_ENOUGH_REPLICAS`` if the ISR is small."""
        if len(self._isr) < self.min_insync_replicas:
            return NotEnoughReplicasError(
                f"isr {self._isr} has {len(self._isr)} replicas < min.insync.replicas="
                f"{self.min_insync_replicas}"
            )
        return None

    def completed_acks_all(self, required_offset: int) -> AcksAllStatus:
        """Whether an appended ``acks=all`` batch ending before ``required_offset`` is done.

        Done when the HW reached ``required_offset``; failed with
        ``NOT_ENOUGH_REPLICAS_AFTER_APPEND`` if, still waiting, the ISR is below
        ``min.insync.replicas``; otherwise keep waiting.
        """
        if self._high_watermark >= required_offset:
            return AcksAllStatus(True)
        if len(self._isr) < self.min_insync_replicas:
            return AcksAllStatus(
                True,
                NotEnoughReplicasAfterAppendError(
                    f"isr {self._isr} shrank below min.insync.replicas="
                    f"{self.min_insync_replicas} before offset {required_offset} was replicated"
                ),
            )
        return AcksAllStatus(False)

    # --- invariants ------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise :class:`ReplicationInvariantError` if what holds between steps does not.

        The HW is at most the durable end, which is at most the log end; it has not gone
        back since the last check; every ISR member that fetched in this epoch reported a
        log end of at least the HW at some fetch (its latest fetch may report less: a
        delayed or repeated fetch, or a lost tail, which the leader records as told) and
        none beyond the leader's log end; the leader is in its committed ISR and in a
        proposed one, and a proposal is in flight exactly when the ISR state says so. A
        simulation calls this after every event.
        """
        hw = self._high_watermark
        broken = []
        if not hw <= self._durable_end_offset <= self._log_end_offset:
            broken.append(
                f"high watermark {hw} <= durable end {self._durable_end_offset} <= log end "
                f"{self._log_end_offset} does not hold"
            )
        if hw < self._checked_high_watermark:
            broken.append(f"high watermark went back {self._checked_high_watermark} -> {hw}")
        for r, progress in self._progress.items():
            highest = progress.highest_log_end_offset
            if r in self._isr and 0 <= highest < hw:
                broken.append(f"isr member {r} reported at most {highest}, below the HW {hw}")
            if highest > self._log_end_offset:
                broken.append(f"follower {r} reported {highest}, beyond the log end")
        if self.replica_id not in self._isr:
            broken.append(f"leader not in its isr {self._isr}")
        pending = self._isr_state is not IsrState.COMMITTED
        if pending != bool(self._pending_isr) or (
            pending and self.replica_id not in self._pending_isr
        ):
            broken.append(f"isr state {self._isr_state.value} with proposal {self._pending_isr}")
        if broken:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} leader_epoch={self.leader_epoch}: " + "; ".join(broken)
            )
        self._checked_high_watermark = hw

    # --- helpers ---------------------------------------------------------------------------

    def _validate_isr(self, isr: tuple[int, ...]) -> tuple[int, ...]:
        members = set(isr)
        if (
            not isr
            or len(members) != len(isr)
            or not members <= set(self.replicas)
            or self.replica_id not in members
        ):
            raise ReplicationInvariantError(
                f"replica={self.replica_id} leader_epoch={self.leader_epoch} invalid isr {isr} "
                f"for replicas {self.replicas}"
            )
        return tuple(r for r in self.replicas if r in members)

    def _transition_isr_state(self, to: IsrState, pending: tuple[int, ...]) -> None:
        if to not in ISR_TRANSITIONS[self._isr_state]:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} illegal isr state change "
                f"{self._isr_state.value} -> {to.value}"
            )
        self._isr_state = to
        self._pending_isr = pending

    def __repr__(self) -> str:
        return (
            f"LeaderState(replica={self.replica_id}, leader_epoch={self.leader_epoch}, "
            f"partition_epoch={self._partition_epoch}, isr={self._isr}, "
            f"isr_state={self._isr_state.value}, hw={self._high_watermark}, "
            f"leo={self._log_end_offset})"
        )
