"""The pure replication cores, one test per rule (issue 4; KIP-101, KIP-279, KIP-320).

The KIP-101 tests replay the two failure scenarios of the KIP ("Scenario 1: High
Watermark Truncation followed by Immediate Leader Election" and "Scenario 2: Replica
Divergence on Restoring after Multiple Hard Failures") through the leader and follower
cores and check that nothing committed is lost and the logs converge.
"""

# Over 600 lines on purpose: one test per rule of the three replication cores, in one place.
from __future__ import annotations

import logging

import pytest

from lograft.protocol.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from replica.replication import (
    NO_CHANGE,
    UNDEFINED_EPOCH,
    AppendRecords,
    AwaitMetadata,
    BackOff,
    DivergingEpoch,
    EpochEndOffset,
    EpochEntry,
    FetchOutcome,
    FetchResponse,
    FollowerState,
    Ignore,
    IsrProposal,
    IsrState,
    LeaderEpochCache,
    LeaderEpochCheckpointError,
    LeaderState,
    LeaderUpdate,
    ReplicationInvariantError,
    ServeFrom,
    TruncateTo,
)

LAG_MS = 100
LOG = logging.getLogger("replica.replication")


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def leader(
    *,
    isr: tuple[int, ...] = (1, 2, 3),
    min_insync: int = 2,
    epoch: int = 5,
    log_end: int = 10,
    hw: int = 0,
    epochs: LeaderEpochCache | None = None,
) -> LeaderState:
    return LeaderState(
        replica_id=1,
        replicas=(1, 2, 3),
        isr=isr,
        leader_epoch=epoch,
        partition_epoch=7,
        min_insync_replicas=min_insync,
        epoch_cache=epochs if epochs is not None else cache((0, 0)),
        log_end_offset=log_end,
        high_watermark=hw,
        now_ms=0,
        logger=LOG,
    )


def fetch(state: LeaderState, replica_id: int, offset: int, now_ms: int = 0) -> FetchOutcome:
    outcome = state.on_follower_fetch(replica_id, offset, state.leader_epoch, now_ms)
    state.check_invariants()
    return outcome


# --- leader-epoch cache --------------------------------------------------------------------


class TestLeaderEpochCache:
    def test_assign_keeps_first_start_of_an_epoch(self) -> None:
        c = LeaderEpochCache()
        assert c.assign(0, 0)
        assert not c.assign(0, 5)
        assert c.assign(2, 5)
        assert c.entries == [EpochEntry(0, 0), EpochEntry(2, 5)]
        assert c.latest_epoch == 2

    def test_assign_drops_conflicting_entries(self) -> None:
        c = cache((0, 0), (1, 4), (2, 4 + 3))
        c.assign(3, 4)  # epochs 1 and 2 wrote nothing the caller kept
        assert c.entries == [EpochEntry(0, 0), EpochEntry(3, 4)]
        c = cache((0, 0), (1, 4))
        c.assign(1, 2)  # the same epoch starting earlier moves its start
        assert c.entries == [EpochEntry(0, 0), EpochEntry(1, 2)]

    def test_a_copy_is_equal_and_changes_apart_from_its_original(self) -> None:
        original = cache((0, 0), (2, 5))
        duplicate = original.copy()
        assert duplicate == original
        duplicate.assign(3, 9)
        original.truncate_from_end(3)
        assert original.entries == [EpochEntry(0, 0)]
        assert duplicate.entries == [EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(3, 9)]

    def test_end_offset_for_latest_epoch_is_log_end(self) -> None:
        assert cache((0, 0), (2, 5)).end_offset_for(2, 9) == EpochEndOffset(2, 9)

    def test_end_offset_for_older_epoch_is_next_start(self) -> None:
        assert cache((0, 0), (2, 5), (4, 8)).end_offset_for(2, 9) == EpochEndOffset(2, 8)

    def test_end_offset_for_missing_epoch_names_largest_below_kip_279(self) -> None:
        assert cache((0, 0), (2, 5), (4, 8)).end_offset_for(3, 9) == EpochEndOffset(2, 8)

    def test_end_offset_for_epoch_below_first(self) -> None:
        assert cache((3, 4), (5, 6)).end_offset_for(1, 9) == EpochEndOffset(1, 4)

    def test_end_offset_undefined(self) -> None:
        undefined = EpochEndOffset(UNDEFINED_EPOCH, -1)
        assert cache((0, 0)).end_offset_for(UNDEFINED_EPOCH, 3) == undefined
        assert LeaderEpochCache().end_offset_for(0, 3) == undefined
        assert cache((0, 0), (2, 5)).end_offset_for(3, 9) == undefined
        assert undefined.is_undefined

    def test_truncate_from_end(self) -> None:
        c = cache((0, 0), (2, 5), (4, 8))
        assert c.truncate_from_end(8) == [EpochEntry(4, 8)]
        assert c.truncate_from_end(6) == []
        assert c.entries == [EpochEntry(0, 0), EpochEntry(2, 5)]
        c.truncate_from_end(0)
        assert c.entries == []

    def test_truncate_from_start_moves_covering_epoch(self) -> None:
        c = cache((0, 0), (2, 5), (4, 8))
        c.truncate_from_start(6)
        assert c.entries == [EpochEntry(2, 6), EpochEntry(4, 8)]
        c.truncate_from_start(8)
        assert c.entries == [EpochEntry(4, 8)]
        c.truncate_from_start(3)  # below the first entry: nothing to do
        assert c.entries == [EpochEntry(4, 8)]

    def test_epoch_for_offset(self) -> None:
        c = cache((1, 2), (3, 5))
        assert [c.epoch_for_offset(o) for o in (0, 2, 4, 5, 99)] == [-1, 1, 1, 3, 3]
        assert c.start_offset_of(3) == 5 and c.start_offset_of(2) is None

    def test_checkpoint_round_trip(self) -> None:
        c = cache((0, 0), (2, 5), (4, 8))
        assert c.encode() == "0\n3\n0 0\n2 5\n4 8\n"
        assert LeaderEpochCache.decode(c.encode()) == c
        assert LeaderEpochCache.decode(LeaderEpochCache().encode()) == LeaderEpochCache()

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "0\n",
            "0\n1\n0 0",  # no final newline
            "1\n0\n",  # version
            "0\n2\n0 0\n",  # count
            "0\n1\n0\n",  # one field
            "0\n1\n0 x\n",
            "0\n1\n-1 0\n",
            "0\n2\n2 0\n1 5\n",  # epochs out of order
            "0\n2\n1 5\n2 5\n",  # start offsets not increasing
            "0\n1\n0 0\n\n",
            "\x00\xff garbage",
        ],
    )
    def test_checkpoint_garbage_is_a_typed_error(self, text: str) -> None:
        with pytest.raises(LeaderEpochCheckpointError):
            LeaderEpochCache.decode(text)

    def test_out_of_order_entries_raise(self) -> None:
        with pytest.raises(ReplicationInvariantError):
            cache((2, 0), (1, 5))


# --- high watermark ------------------------------------------------------------------------


class TestHighWatermark:
    def test_hw_is_min_log_end_over_isr(self) -> None:
        state = leader()
        fetch(state, 2, 7)
        assert state.high_watermark == 0  # replica 3 has not fetched yet: unknown
        fetch(state, 3, 4)
        assert state.high_watermark == 4
        fetch(state, 3, 10)
        assert state.high_watermark == 7
        fetch(state, 2, 10)
        assert state.high_watermark == 10

    def test_hw_counts_only_the_leaders_durable_end(self) -> None:
        state = leader(log_end=10)
        state.on_local_append(15, durable_end_offset=10)
        fetch(state, 2, 15)
        fetch(state, 3, 15)
        assert state.high_watermark == 10
        assert state.on_local_flush(15) == LeaderUpdate(high_watermark=15, recheck_acks=True)
        assert state.high_watermark == 15

    def test_hw_ignores_replicas_outside_isr(self) -> None:
        state = leader(isr=(1, 2))
        fetch(state, 2, 10)
        assert state.high_watermark == 10
        fetch(state, 3, 0)
        assert state.high_watermark == 10

    def test_hw_never_moves_backwards(self) -> None:
        state = leader()
        fetch(state, 2, 10)
        fetch(state, 3, 10)
        assert state.high_watermark == 10
        fetch(state, 3, 6)  # a follower lost its tail (say, a disk replaced)
        assert state.high_watermark == 10
        assert state.on_isr_committed((1, 2), 8).isr_committed == (1, 2)
        assert state.high_watermark == 10

    def test_new_leader_hw_starts_below_its_log_end(self) -> None:
        assert leader(log_end=10, hw=12).high_watermark == 10

    def test_hw_held_while_isr_below_min_insync(self) -> None:
        state = leader(isr=(1, 2), min_insync=2)
        fetch(state, 2, 5)
        assert state.high_watermark == 5
        state.on_isr_committed((1,), 8)
        state.on_local_append(12)
        assert state.high_watermark == 5  # the leader alone may not commit
        assert fetch(state, 2, 12).update.isr_proposal == IsrProposal((1, 2), 5, 8)
        assert state.high_watermark == 5
        assert state.on_isr_committed((1, 2), 9).high_watermark == 12

    def test_hw_waits_for_pending_expansion(self) -> None:
        state = leader(isr=(1, 2), log_end=10)
        fetch(state, 2, 10)
        assert fetch(state, 3, 10).update.isr_proposal is not None
        assert state.maximal_isr == (1, 2, 3)
        state.on_local_append(20)
        fetch(state, 2, 20)
        assert state.high_watermark == 10  # 3 may be in the ISR already: wait for it
        fetch(state, 3, 20)
        assert state.high_watermark == 20

    def test_hw_waits_for_member_of_pending_shrink(self) -> None:
        state = leader(log_end=10)
        fetch(state, 2, 10)
        fetch(state, 3, 10)
        state.on_local_append(20)
        fetch(state, 2, 20, now_ms=150)
        assert state.maybe_shrink_isr(150, LAG_MS).isr_proposal == IsrProposal((1, 2), 5, 7)
        assert state.isr == (1, 2, 3)
        assert state.high_watermark == 10  # not committed yet: 3 still counts
        assert state.on_isr_committed((1, 2), 8) == LeaderUpdate(
            high_watermark=20, isr_committed=(1, 2), recheck_acks=True
        )


# --- fetch validation and divergence -------------------------------------------------------


class TestFetch:
    def test_valid_fetch_serves_from_offset(self) -> None:
        state = leader()
        assert fetch(state, 2, 3) == FetchOutcome(ServeFrom(3, 0))
        assert state.progress(2).log_end_offset == 3

    def test_epoch_fencing_kip_320(self) -> None:
        state = leader(epoch=5)
        with pytest.raises(FencedLeaderEpochError):
            state.on_follower_fetch(2, 0, 0, 0, current_leader_epoch=4)
        with pytest.raises(UnknownLeaderEpochError):
            state.on_follower_fetch(2, 0, 0, 0, current_leader_epoch=6)
        with pytest.raises(NotLeaderOrFollowerError):
            state.on_follower_fetch(9, 0, 0, 0)
        with pytest.raises(OffsetOutOfRangeError):
            state.on_follower_fetch(2, 11, UNDEFINED_EPOCH, 0)

    def test_diverging_epoch_is_not_progress(self) -> None:
        state = leader(epoch=3, log_end=6, epochs=cache((0, 0), (2, 4)))
        outcome = state.on_follower_fetch(2, 5, 1, 0)
        assert outcome == FetchOutcome(DivergingEpoch(EpochEndOffset(0, 4), 0))
        assert state.progress(2).log_end_offset == -1

    def test_fetch_beyond_leader_end_in_its_epoch_diverges(self) -> None:
        state = leader(epoch=3, log_end=6, epochs=cache((0, 0)))
        decision = state.on_follower_fetch(2, 8, 3, 0).decision
        assert decision == DivergingEpoch(EpochEndOffset(3, 6), 0)

    def test_kip_101_scenario_1_hw_truncation_then_leader_election(self) -> None:
        # A (1) leads epoch 0 with m1, m2; B (2) has both but learned HW 1 only. B restarts:
        # it keeps m2 (no truncation to the HW) and becomes leader in epoch 1; A follows.
        b_cache = cache((0, 0))
        b_follower = FollowerState(
            replica_id=2, leader_id=1, leader_epoch=0, high_watermark=1, logger=LOG
        )
        request = b_follower.fetch_request(2, b_cache)
        assert (request.fetch_offset, request.last_fetched_epoch) == (2, 0)
        a_leader = leader(isr=(1, 2), epoch=0, log_end=2, hw=2, epochs=cache((0, 0)))
        assert a_leader.on_follower_fetch(2, 2, 0, 0, 0).decision == ServeFrom(2, 2)
        # A dies; B leads epoch 1 with both records; A comes back and follows B.
        b_leader = LeaderState(
            replica_id=2,
            replicas=(1, 2),
            isr=(1, 2),
            leader_epoch=1,
            partition_epoch=1,
            min_insync_replicas=1,
            epoch_cache=b_cache,
            log_end_offset=2,
            high_watermark=1,
            now_ms=0,
            logger=LOG,
        )
        assert b_cache.entries == [EpochEntry(0, 0), EpochEntry(1, 2)]
        assert b_leader.on_follower_fetch(1, 2, 0, 0, 1).decision == ServeFrom(2, 2)  # m2 kept

    def test_kip_101_scenario_2_divergence_after_both_crash(self) -> None:
        # A (1) has m1, m2 in epoch 0; B (2) has m1. Both crash; B comes back first and
        # leads epoch 1, writing m3 at offset 1. A returns and follows B.
        b_cache = cache((0, 0))
        b_leader = LeaderState(
            replica_id=2,
            replicas=(1, 2),
            isr=(2,),
            leader_epoch=1,
            partition_epoch=1,
            min_insync_replicas=1,
            epoch_cache=b_cache,
            log_end_offset=1,
            high_watermark=0,
            now_ms=0,
            logger=LOG,
        )
        b_leader.on_local_append(2)  # m3 at offset 1, epoch 1
        a_cache = cache((0, 0))
        a = FollowerState(replica_id=1, leader_id=2, leader_epoch=1, high_watermark=0, logger=LOG)
        request = a.fetch_request(2, a_cache)
        decision = b_leader.on_follower_fetch(
            1, request.fetch_offset, request.last_fetched_epoch, 0, 1
        ).decision
        assert isinstance(decision, DivergingEpoch)
        assert decision == DivergingEpoch(EpochEndOffset(0, 1), 2)
        response: FetchResponse[bytes] = FetchResponse(1, 2, 2, b"", 2, decision.diverging)
        action = a.on_fetch_response(response, 2, a_cache)
        assert action == TruncateTo(1, 0, 1, complete=True)
        a_cache.truncate_from_end(1)
        request = a.fetch_request(1, a_cache)
        again = b_leader.on_follower_fetch(1, 1, request.last_fetched_epoch, 0, 1)
        assert again.decision == ServeFrom(1, 2)  # A now copies m3: the logs agree

    def test_kip_279_follower_walks_back_epochs(self) -> None:
        # Leader: epochs 0@0, 1@3, 3@7. Follower: 0@0, 2@4 with log end 6.
        state = leader(epoch=3, log_end=9, epochs=cache((0, 0), (1, 3), (3, 7)))
        follower = FollowerState(
            replica_id=2, leader_id=1, leader_epoch=3, high_watermark=0, logger=LOG
        )
        follower_cache = cache((0, 0), (2, 4))
        decision = state.on_follower_fetch(2, 6, 2, 0, 3).decision
        assert decision == DivergingEpoch(EpochEndOffset(1, 7), 0)
        assert isinstance(decision, DivergingEpoch)
        response: FetchResponse[bytes] = FetchResponse(3, 6, 0, b"", 6, decision.diverging)
        # The follower never had epoch 1: truncate to where its epoch 0 ends, ask again.
        assert follower.on_fetch_response(response, 6, follower_cache) == TruncateTo(
            4, 1, 7, complete=False
        )


# --- ISR -----------------------------------------------------------------------------------


class TestIsr:
    def test_shrink_after_lag_time_only(self) -> None:
        state = leader()
        fetch(state, 2, 10, now_ms=50)
        fetch(state, 3, 4, now_ms=50)
        # ISR members count as caught up when the leader starts (t=0); 3 never reached
        # the leader's end since, so it lags from t=100 on.
        assert state.maybe_shrink_isr(100, LAG_MS).isr_proposal is None
        fetch(state, 2, 10, now_ms=101)
        assert state.maybe_shrink_isr(101, LAG_MS).isr_proposal == IsrProposal((1, 2), 5, 7)
        assert state.isr == (1, 2, 3)  # a proposal, not a change
        assert state.maybe_shrink_isr(500, LAG_MS).isr_proposal is None  # one change in flight

    def test_caught_up_at_previous_fetch(self) -> None:
        state = leader(log_end=10)
        fetch(state, 2, 10, now_ms=10)
        state.on_local_append(20)
        fetch(state, 2, 10, now_ms=90)  # reached the end the leader had at its last fetch
        assert state.progress(2).last_caught_up_time_ms == 10
        state.on_local_append(30)
        fetch(state, 2, 20, now_ms=95)  # reached the end (20) the leader had at t=90
        assert state.progress(2).last_caught_up_time_ms == 90

    def test_expand_when_caught_up(self) -> None:
        state = leader(isr=(1, 2), log_end=10, hw=0)
        fetch(state, 2, 10)
        assert state.high_watermark == 10
        assert fetch(state, 3, 9).update.isr_proposal is None
        assert fetch(state, 3, 10).update.isr_proposal == IsrProposal((1, 2, 3), 5, 7)
        states = [state.isr_state]
        assert state.on_isr_committed((1, 2, 3), 8).isr_committed == (1, 2, 3)
        states.append(state.isr_state)
        assert states == [IsrState.PENDING_EXPAND, IsrState.COMMITTED]
        assert state.isr == (1, 2, 3)

    def test_expand_needs_the_leader_epoch_start_offset(self) -> None:
        state = leader(isr=(1,), min_insync=1, log_end=10, hw=3)
        assert state.leader_epoch_start_offset == 10
        # >= HW 3, but not yet at the epoch start: may lack old commits
        assert fetch(state, 3, 5).update.isr_proposal is None
        assert state.high_watermark == 10
        assert fetch(state, 3, 10).update.isr_proposal is not None

    def test_stale_commit_ignored_and_invalid_isr_raises(self) -> None:
        state = leader()
        assert state.on_isr_committed((1, 2), 7) == LeaderUpdate()
        assert state.isr == (1, 2, 3)
        with pytest.raises(ReplicationInvariantError):
            state.on_isr_committed((2, 3), 8)

    def test_failed_alter_partition(self) -> None:
        state = leader(isr=(1, 2))
        proposal = fetch(state, 3, 10).update.isr_proposal
        fetch(state, 2, 10)
        assert proposal is not None and state.pending_proposal == proposal
        # INVALID_UPDATE_VERSION: maybe our own proposal, answered before: wait for metadata.
        assert not state.on_alter_partition_failed(InvalidUpdateVersionError("stale"))
        before = state.maximal_isr
        assert state.on_alter_partition_failed(IneligibleReplicaError("fenced"))
        assert (before, state.maximal_isr) == ((1, 2, 3), (1, 2))
        assert state.pending_proposal is None


# --- acks=all ------------------------------------------------------------------------------


class TestAcksAll:
    def test_admission_refused_below_min_insync(self) -> None:
        state = leader(isr=(1, 2), min_insync=2)
        assert state.check_produce_acks_all() is None
        state.on_isr_committed((1,), 8)
        assert isinstance(state.check_produce_acks_all(), NotEnoughReplicasError)

    def test_completes_when_hw_passes(self) -> None:
        state = leader(isr=(1, 2))
        state.on_local_append(12)
        assert not state.completed_acks_all(12).done
        fetch(state, 2, 12)
        status = state.completed_acks_all(12)
        assert status.done and status.error is None

    def test_not_enough_replicas_after_append(self) -> None:
        state = leader(isr=(1, 2))
        state.on_local_append(12)
        state.on_isr_committed((1,), 8)
        status = state.completed_acks_all(12)
        assert status.done and isinstance(status.error, NotEnoughReplicasAfterAppendError)


# --- follower ------------------------------------------------------------------------------


class TestFollower:
    CACHE = cache((0, 0), (5, 3))

    def follower(self, hw: int = 0) -> FollowerState:
        return FollowerState(
            replica_id=2, leader_id=1, leader_epoch=5, high_watermark=hw, logger=LOG
        )

    def test_fetch_request(self) -> None:
        request = self.follower().fetch_request(7, self.CACHE)
        assert (request.replica_id, request.current_leader_epoch) == (2, 5)
        assert (request.fetch_offset, request.last_fetched_epoch) == (7, 5)

    def test_append_and_hw_is_min_of_leader_hw_and_log_end(self) -> None:
        f = self.follower()
        action = f.on_fetch_response(FetchResponse(5, 7, 20, b"xy", 9), 7, self.CACHE)
        assert action == AppendRecords(7, b"xy", 9, 9)
        action = f.on_fetch_response(FetchResponse(5, 9, 8, b"", 9), 9, self.CACHE)
        assert action == AppendRecords(9, b"", 9, 8) and f.high_watermark == 8

    def test_stale_answers_are_ignored(self) -> None:
        f = self.follower()
        assert isinstance(
            f.on_fetch_response(FetchResponse(4, 7, 0, b"", 7), 7, self.CACHE), Ignore
        )
        assert isinstance(
            f.on_fetch_response(FetchResponse(5, 6, 0, b"z", 7), 7, self.CACHE), Ignore
        )

    def test_errors(self) -> None:
        f = self.follower()
        fenced = FetchResponse(5, 7, 0, b"", 7, None, FencedLeaderEpochError("old"))
        not_leader = FetchResponse(5, 7, 0, b"", 7, None, NotLeaderOrFollowerError("x"))
        unknown = FetchResponse(5, 7, 0, b"", 7, None, UnknownLeaderEpochError("new"))
        assert isinstance(f.on_fetch_response(fenced, 7, self.CACHE), AwaitMetadata)
        assert isinstance(f.on_fetch_response(not_leader, 7, self.CACHE), AwaitMetadata)
        assert isinstance(f.on_fetch_response(unknown, 7, self.CACHE), BackOff)

    def test_undefined_answer_truncates_to_hw(self) -> None:
        f = self.follower(hw=4)
        response = FetchResponse(5, 7, 0, b"", 7, EpochEndOffset(UNDEFINED_EPOCH, -1))
        assert f.on_fetch_response(response, 7, self.CACHE) == TruncateTo(4, -1, -1, complete=True)

    def test_truncation_below_hw_raises(self) -> None:
        f = self.follower(hw=6)
        response = FetchResponse(5, 7, 0, b"", 7, EpochEndOffset(0, 2))
        with pytest.raises(ReplicationInvariantError):
            f.on_fetch_response(response, 7, self.CACHE)

    def test_truncation_below_hw_goes_ahead_only_with_unclean_election(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        f = FollowerState(
            replica_id=2,
            leader_id=1,
            leader_epoch=5,
            high_watermark=6,
            logger=LOG,
            unclean_leader_election=True,
        )
        response = FetchResponse(5, 7, 0, b"", 7, EpochEndOffset(0, 2))
        with caplog.at_level("ERROR", logger="replica.replication"):
            action = f.on_fetch_response(response, 7, self.CACHE)
        assert action == TruncateTo(2, 0, 2, complete=True)
        assert f.high_watermark == 2
        assert "offset=2 high_watermark=6" in caplog.text

    def test_a_log_that_truncated_whole_batches_below_hw_breaks_the_invariant(self) -> None:
        f = self.follower(hw=6)
        f.on_truncated(6)  # at the high watermark: fine
        with pytest.raises(ReplicationInvariantError):
            f.on_truncated(5)


# --- what each step returns, and the invariants between steps ------------------------------


class TestLeaderUpdates:
    def test_becoming_leader_publishes_its_hw_and_wakes_followers(self) -> None:
        state = leader(isr=(1,), min_insync=1, log_end=10, hw=4)
        assert state.start_update == LeaderUpdate(
            high_watermark=10, recheck_acks=True, wake_followers=True
        )

    def test_an_append_wakes_the_followers_and_names_an_advanced_hw(self) -> None:
        state = leader(isr=(1,), min_insync=1, log_end=10)
        assert state.on_local_append(12) == LeaderUpdate(
            high_watermark=12, recheck_acks=True, wake_followers=True
        )
        assert state.on_local_append(14, durable_end_offset=12) == LeaderUpdate(wake_followers=True)
        assert state.on_local_append(14, durable_end_offset=12) == NO_CHANGE

    def test_a_flush_adding_nothing_durable_changes_nothing(self) -> None:
        state = leader(isr=(1,), min_insync=1, log_end=10)
        assert state.on_local_flush(10) == NO_CHANGE
        assert state.on_local_flush(3) == NO_CHANGE  # below what it was opened with

    def test_a_fetch_that_advances_the_hw_says_so(self) -> None:
        state = leader(isr=(1, 2), log_end=10)
        assert fetch(state, 2, 10) == FetchOutcome(
            ServeFrom(10, 10), LeaderUpdate(high_watermark=10, recheck_acks=True)
        )
        assert fetch(state, 2, 10).update == NO_CHANGE

    def test_a_changed_min_insync_asks_for_the_acks_to_be_judged(self) -> None:
        state = leader(isr=(1,), min_insync=2, log_end=10)
        assert state.set_min_insync_replicas(1) == LeaderUpdate(
            high_watermark=10, recheck_acks=True
        )
        assert state.set_min_insync_replicas(3) == LeaderUpdate(recheck_acks=True)
        assert state.set_min_insync_replicas(3) == NO_CHANGE


class TestInvariants:
    def test_a_leader_keeps_them_through_its_steps(self) -> None:
        state = leader(isr=(1, 2), log_end=10)
        state.check_invariants()
        fetch(state, 2, 10)
        fetch(state, 2, 4)  # a delayed fetch reports less: recorded, yet not a breach
        state.maybe_shrink_isr(10_000, LAG_MS)
        state.check_invariants()

    def test_a_high_watermark_gone_back_is_caught(self) -> None:
        state = leader(isr=(1, 2), log_end=10)
        fetch(state, 2, 10)
        state._high_watermark = 8  # as a bug would
        with pytest.raises(ReplicationInvariantError, match="went back 10 -> 8"):
            state.check_invariants()

    def test_an_isr_member_below_the_hw_is_caught(self) -> None:
        state = leader(isr=(1, 2), log_end=10)
        fetch(state, 2, 6)
        state._high_watermark = 7
        with pytest.raises(ReplicationInvariantError, match="isr member 2"):
            state.check_invariants()

    def test_a_leader_missing_from_its_isr_is_caught(self) -> None:
        state = leader(isr=(1, 2))
        state._isr = (2,)
        with pytest.raises(ReplicationInvariantError, match="leader not in its isr"):
            state.check_invariants()

    def test_a_follower_hw_beyond_its_log_end_is_caught(self) -> None:
        follower = FollowerState(
            replica_id=2, leader_id=1, leader_epoch=5, high_watermark=6, logger=LOG
        )
        follower.check_invariants(6)
        with pytest.raises(ReplicationInvariantError, match="high watermark 6, log end 5"):
            follower.check_invariants(5)


# --- package rules -------------------------------------------------------------------------
