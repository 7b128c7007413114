"""One test per claim of the Raft paper (and of KRaft's additions), etcd raft_paper_test style.

Sections cite "In Search of an Understandable Consensus Algorithm (Extended Version)",
Ongaro and Ousterhout, 2014, and Ongaro's thesis (2014) for pre-vote and check-quorum.
Each test drives :class:`RaftNode` directly: messages in, ``Ready`` out, no clock, no I/O.
"""

# Over 600 lines: one test per claim of the Raft paper, grouped by its sections (etcd's style).
from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from controller.raft import (
    BeginQuorumEpoch,
    Entry,
    EntryKind,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HardState,
    IllegalTransitionError,
    MemoryStorage,
    NotLeaderError,
    RaftInvariantError,
    RaftMessage,
    RaftNode,
    RaftUsageError,
    Role,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import QuorumState
from tests.unit.raft_fixtures import CLUSTER, TIMEOUT, Net, drain, make_node


def vote_request(
    src: int, dst: int, epoch: int, last_epoch: int = 0, leo: int = 0, *, pre_vote: bool = False
) -> VoteRequest:
    """A VoteRequest in this test's cluster."""
    return VoteRequest(CLUSTER, src, dst, epoch, last_epoch, leo, pre_vote)


def responses(ready_messages: Iterable[RaftMessage]) -> list[VoteResponse]:
    """The vote responses among ``ready_messages``."""
    return [m for m in ready_messages if isinstance(m, VoteResponse)]


def state_of(node: RaftNode) -> tuple[object, ...]:
    """Everything a rejected message must leave alone."""
    return (
        node.role,
        node.epoch,
        node.voted_for,
        node.leader_id,
        node.high_watermark,
        node.log_start_offset,
        node.log_end_offset,
        node.has_ready(),
    )


def storage_with(
    entries: list[tuple[int, int]], epoch: int, voted_for: int | None = None
) -> MemoryStorage:
    """A persisted log of ``(offset, epoch)`` entries and a hard state."""
    store = MemoryStorage()
    store.append([Entry(o, e, f"{o}@{e}".encode()) for o, e in entries])
    store.set_hard_state(HardState(epoch, voted_for))
    return store


# --- 5.1 / 5.2: epochs and elections -----------------------------------------------------


def test_follower_grants_one_vote_per_epoch() -> None:
    """Section 5.2: each server votes for at most one candidate in a given term."""
    node, _store = make_node(1)
    node.step(vote_request(2, 1, epoch=1))
    node.step(vote_request(3, 1, epoch=1))
    ready = node.ready()
    assert [(m.dst, m.granted) for m in responses(ready.messages)] == [(2, True), (3, False)]
    assert ready.hard_state == HardState(1, 2)
    assert node.voted_for == 2


def test_vote_is_persisted_in_the_same_ready_as_the_grant() -> None:
    """Figure 2, "Persistent state": votedFor is stable storage before answering RPCs."""
    node, store = make_node(1)
    node.step(vote_request(2, 1, epoch=5))
    ready = node.ready()
    assert ready.hard_state == HardState(5, 2)
    assert responses(ready.messages)[0].granted
    store.write(ready)
    node.advance(ready)
    # A restart from that storage keeps the vote: another candidate is refused.
    restarted, _ = make_node(1, storage=store)
    restarted.step(vote_request(3, 1, epoch=5))
    assert not responses(restarted.ready().messages)[0].granted


def test_candidate_with_stale_log_loses() -> None:
    """Section 5.4.1: a voter denies its vote if its own log is more up to date."""
    node, _ = make_node(1, storage=storage_with([(0, 1), (1, 2)], epoch=2))
    # Longer log, older last epoch: refused.
    node.step(vote_request(2, 1, epoch=3, last_epoch=1, leo=5))
    # Same last epoch, shorter log: refused.
    node.step(vote_request(3, 1, epoch=3, last_epoch=2, leo=1))
    assert [m.granted for m in responses(node.ready().messages)] == [False, False]
    assert node.voted_for is None


def test_candidate_with_up_to_date_log_wins() -> None:
    """Section 5.4.1: up-to-date means a later last epoch, or the same one and as long."""
    node, _ = make_node(1, storage=storage_with([(0, 1), (1, 2)], epoch=2))
    node.step(vote_request(2, 1, epoch=3, last_epoch=2, leo=2))
    assert responses(node.ready().messages)[0].granted


def test_higher_epoch_makes_a_leader_step_down() -> None:
    """Section 5.1: a server that sees a larger term becomes a follower of that term."""
    net = Net()
    leader = net.elect(1)
    epoch = leader.epoch
    leader.step(BeginQuorumEpoch(CLUSTER, 2, 1, epoch + 1))
    assert (leader.role, leader.epoch, leader.leader_id) == (Role.FOLLOWER, epoch + 1, 2)


def test_election_timeouts_are_randomised() -> None:
    """Section 5.2: randomized election timeouts in [T, 2T) make split votes rare."""
    waits = set()
    for seed in range(20):
        node, _store = make_node(1, seed=seed, pre_vote=False)
        for ticks in range(1, 2 * TIMEOUT + 1):
            node.tick()
            if node.role is Role.CANDIDATE:
                waits.add(ticks)
                break
    assert min(waits) >= TIMEOUT and max(waits) < 2 * TIMEOUT
    assert len(waits) > 3


def test_single_round_elects_exactly_one_leader() -> None:
    """Section 5.2: a candidate with votes from a majority becomes leader, and only it."""
    net = Net(voters=(1, 2, 3, 4, 5))
    net.elect(3)
    assert net.leaders() == [3]
    assert {n.leader_id for i, n in net.nodes.items() if i != 3} == {3}


# --- 5.3 / 5.4: log replication and commitment -----------------------------------------


def test_leader_appends_a_no_op_on_election() -> None:
    """Section 8 / 5.4.2: a new leader commits a blank entry of its own term at the start."""
    net = Net()
    leader = net.elect(1)
    last = leader.entries(leader.log_end_offset - 1, leader.log_end_offset)[0]
    assert (last.kind, last.epoch, last.data) == (EntryKind.LEADER_CHANGE, leader.epoch, b"")
    net.tick(2)
    assert leader.high_watermark == leader.log_end_offset
    assert [e.kind for e in net.applied[2]] == [EntryKind.LEADER_CHANGE]


def test_entry_commits_once_a_majority_stores_it() -> None:
    """Section 5.3: an entry is committed once the leader has replicated it on a majority."""
    net = Net(voters=(1, 2, 3, 4, 5))
    leader = net.elect(1)
    net.tick(2)
    net.cut = {3, 4, 5}  # only 1 and 2 replicate: not a majority of five
    offset = leader.propose(b"x")
    net.tick(3, only=[1, 2])
    assert leader.high_watermark <= offset
    net.cut = {4, 5}  # now 1, 2, 3: a majority
    net.tick(3, only=[1, 2, 3])
    assert leader.high_watermark == offset + 1
    assert [e.data for e in net.applied[1] if e.kind is EntryKind.DATA] == [b"x"]


def test_commit_counts_only_current_epoch_entries_figure_8() -> None:
    """Section 5.4.2, Figure 8: an old-term entry on a majority is not committed by counting.

    Node 1 holds an epoch-2 entry that node 2 also holds: a majority of three. Leading
    epoch 4, node 1 must not advance the high watermark over it until the epoch-4 no-op is on a
    majority too (a leader of epoch 3 could still overwrite it).
    """
    node, store = make_node(1, storage=storage_with([(0, 1), (1, 2)], epoch=3))
    for _ in range(3 * TIMEOUT):
        node.tick()
        if node.role is Role.PRE_CANDIDATE:
            break
    node.step(VoteResponse(CLUSTER, 2, 1, 4, True, True))
    node.step(VoteResponse(CLUSTER, 2, 1, 4, True, False))
    assert node.role is Role.LEADER and node.epoch == 4
    drain(node, store)
    assert node.log_end_offset == 3  # [e1, e2, no-op e4]
    # Node 2 has exactly [e1, e2]: fetch_offset 2, last epoch 2 -> matches our log.
    node.step(FetchRequest(CLUSTER, 2, 1, 4, 2, 2))
    drain(node, store)
    assert node.high_watermark == 0, "counted a previous epoch's entry on a majority"
    node.step(FetchRequest(CLUSTER, 2, 1, 4, 3, 4))
    drain(node, store)
    assert node.high_watermark == 3


def test_follower_truncates_a_diverging_suffix() -> None:
    """Section 5.3: the leader forces followers' logs to duplicate its own (KIP-320 style)."""
    node, store = make_node(2, storage=storage_with([(0, 1), (1, 2), (2, 2)], epoch=3))
    node.step(BeginQuorumEpoch(CLUSTER, 1, 2, 3))
    fetch = next(m for m in drain(node, store) if isinstance(m, FetchRequest))
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (3, 2)
    # The leader has [e1@0, e3@1]: epoch <= 2 ends at offset 1 in its log.
    node.step(FetchResponse(CLUSTER, 1, 2, 3, ErrorCode.NONE, 1, 3, 2, (), 0, 1, 1, None))
    ready = node.ready()
    assert ready.truncate_from_offset == 1
    refetch = next(m for m in ready.messages if isinstance(m, FetchRequest))
    assert (refetch.fetch_offset, refetch.last_fetched_epoch) == (1, 1)
    store.write(ready)
    node.advance(ready)
    node.step(
        FetchResponse(
            CLUSTER, 1, 2, 3, ErrorCode.NONE, 1, 1, 1, (Entry(1, 3, b"new"),), 2, None, None, None
        )
    )
    drain(node, store)
    assert [(e.offset, e.epoch) for e in store.entries(0, store.log_end_offset())] == [
        (0, 1),
        (1, 3),
    ]
    assert node.high_watermark == 2


def test_follower_never_truncates_committed_entries() -> None:
    """Section 5.4 (Leader Completeness): a committed entry is never removed; if asked, crash."""
    node, store = make_node(2, storage=storage_with([(0, 1), (1, 1)], epoch=1))
    node.step(BeginQuorumEpoch(CLUSTER, 1, 2, 1))
    drain(node, store)
    node.step(FetchResponse(CLUSTER, 1, 2, 1, ErrorCode.NONE, 1, 2, 1, (), 2, None, None, None))
    assert node.high_watermark == 2
    with pytest.raises(RaftInvariantError):
        node.step(FetchResponse(CLUSTER, 1, 2, 1, ErrorCode.NONE, 1, 2, 1, (), 2, 0, 0, None))


def test_lagging_follower_catches_up() -> None:
    """Section 5.3: the leader retries until the follower's log matches and is complete."""
    net = Net()
    leader = net.elect(1)
    net.cut = {3}
    for i in range(20):
        leader.propose(f"{i}".encode())
    net.tick(3)
    net.cut = set()
    net.tick(30)
    assert net.nodes[3].log_end_offset == leader.log_end_offset
    assert net.nodes[3].high_watermark == leader.high_watermark == leader.log_end_offset


# --- 7: snapshots -------------------------------------------------------------------------


def test_lagging_replica_installs_the_leaders_snapshot() -> None:
    """Section 7: the leader sends its snapshot to a follower that lags behind its log start."""
    net = Net()
    leader = net.elect(1)
    net.cut = {3}
    for i in range(5):
        leader.propose(f"{i}".encode())
    net.tick(3, only=[1, 2])
    snapshot = leader.create_snapshot(leader.applied_offset, b"image")
    net.flush()
    assert leader.log_start_offset == snapshot.end_offset
    net.cut = set()
    follower, store = net.nodes[3], net.stores[3]
    net.tick(10)
    seen_snapshot = [r for r in net.readies[3] if r.snapshot is not None]
    assert seen_snapshot and seen_snapshot[0].apply_snapshot
    assert seen_snapshot[0].snapshot == snapshot
    assert store.snapshot() == snapshot
    assert follower.log_start_offset == snapshot.end_offset
    assert follower.high_watermark == leader.high_watermark


def test_snapshot_compacts_the_log_prefix() -> None:
    """Section 7: the snapshot replaces the log prefix it covers."""
    net = Net()
    leader = net.elect(1)
    leader.propose(b"a")
    net.tick(2)
    end = leader.applied_offset
    leader.create_snapshot(end, b"img")
    net.flush()
    store = net.stores[1]
    assert store.log_start_offset() == end and store.snapshot() is not None
    assert leader.epoch_at(end - 1) == store.snapshot().epoch  # type: ignore[union-attr]


# --- Pre-vote and check-quorum (thesis 9.6 and 6.2) ---------------------------------------


def test_pre_vote_does_not_disrupt_a_stable_leader() -> None:
    """Thesis 9.6: a partitioned server's pre-votes fail, so it never bumps the epoch."""
    net = Net()
    leader = net.elect(1)
    epoch = leader.epoch
    net.cut = {3}
    net.tick(5 * TIMEOUT)
    assert net.nodes[3].epoch == epoch and net.nodes[3].role is Role.PRE_CANDIDATE
    net.cut = set()
    net.tick(3 * TIMEOUT)
    assert net.leaders() == [1] and leader.epoch == epoch
    assert net.nodes[3].status().role is Role.FOLLOWER


def test_pre_vote_refused_by_a_voter_hearing_from_its_leader() -> None:
    """Thesis 9.6: a follower that heard from the leader within the timeout refuses."""
    net = Net()
    leader = net.elect(1)
    follower = net.nodes[2]
    follower.step(
        vote_request(
            3, 2, leader.epoch + 1, leader.last_epoch, leader.log_end_offset, pre_vote=True
        )
    )
    refused = responses(drain(follower, net.stores[2]))
    assert refused and not refused[0].granted and follower.epoch == leader.epoch


def test_check_quorum_leader_steps_down() -> None:
    """Thesis 6.2: a leader that hears from no majority for an election timeout steps down."""
    net = Net()
    leader = net.elect(1)
    epoch = leader.epoch
    net.cut = {2, 3}
    net.tick(TIMEOUT - 1, only=[1])
    assert leader.role is Role.LEADER
    net.tick(1, only=[1])
    assert (leader.role, leader.epoch, leader.leader_id) == (Role.UNATTACHED, epoch, None)
    with pytest.raises(NotLeaderError):
        leader.propose(b"late")


def test_stale_leader_steps_down_when_a_voter_is_in_a_later_epoch() -> None:
    """Section 5.1 (found by the simulator): a voter stuck in a later epoch fences the leader."""
    net = Net()
    leader = net.elect(1)
    epoch = leader.epoch
    # Node 3 restarts in a later epoch with an old log, as after a lost candidacy.
    net.stores[3] = storage_with([], epoch=epoch + 1, voted_for=3)
    net.nodes[3], _ = make_node(3, storage=net.stores[3])
    net.tick(6 * TIMEOUT)
    assert len(net.leaders()) == 1 and net.leaders() != [3]
    assert {n.epoch for n in net.nodes.values()} == {net.nodes[net.leaders()[0]].epoch}
    assert net.nodes[3].log_end_offset == leader.log_end_offset


# --- Observers (KRaft) ---------------------------------------------------------------------


def test_observer_does_not_vote() -> None:
    """KIP-595: observers replicate the log but are not voters; they answer no vote."""
    node, _ = make_node(4, voters=(1, 2, 3))
    assert node.role is Role.OBSERVER
    before = state_of(node)
    rejection = node.step(vote_request(1, 4, epoch=1))
    assert rejection is not None and rejection.error is ErrorCode.INVALID_REQUEST
    assert not any(isinstance(m, VoteResponse) for m in node.ready().messages)
    assert state_of(node)[:5] == before[:5]
    for _ in range(10 * TIMEOUT):
        node.tick()
    assert node.role is Role.OBSERVER and node.epoch == 0


def test_observer_follows_the_log_without_counting_for_quorum() -> None:
    """KIP-595: observers fetch and apply committed entries, but never count for the HW."""
    net = Net(voters=(1, 2, 3), observers=(4,))
    leader = net.elect(1)
    net.tick(5)
    assert net.nodes[4].leader_id == 1 and net.nodes[4].role is Role.OBSERVER
    net.cut = {2, 3}
    offset = leader.propose(b"obs")
    net.tick(3, only=[1, 4])
    assert net.nodes[4].log_end_offset > offset
    assert leader.high_watermark <= offset, "an observer counted toward the quorum"
    net.cut = set()
    net.tick(5)
    assert b"obs" in [e.data for e in net.applied[4]]


# --- Long poll (KRaft's fetch MaxWaitMs) ---------------------------------------------------

WAIT = TIMEOUT // 2


def fetches(messages: Iterable[RaftMessage], src: int) -> list[FetchRequest]:
    """The fetch requests ``src`` sent among ``messages``."""
    return [m for m in messages if isinstance(m, FetchRequest) and m.src == src]


def caught_up_leader() -> tuple[Net, RaftNode]:
    """A long-polling quorum led by node 1, every follower caught up and holding a fetch."""
    net = Net(fetch_max_wait_ticks=WAIT)
    leader = net.elect(1)
    net.tick(2)
    assert all(n.high_watermark == leader.log_end_offset for n in net.nodes.values())
    # Tick until both followers fetched during the same tick: their fetches were just held.
    for _ in range(3 * WAIT):
        net.sent.clear()
        net.tick(1)
        if fetches(net.sent, 2) and fetches(net.sent, 3):
            net.sent.clear()
            return net, leader
    raise AssertionError("the followers never fetched on the same tick")


def test_leader_holds_a_fetch_with_nothing_new_until_the_max_wait() -> None:
    """KRaft: a fetch that finds no entry and no higher high watermark waits up to its max
    wait, then gets an empty answer; the follower, whose fetch was held across ticks, fetches
    again at once (an idle follower wakes once per long poll) and that fetch is held too."""
    net, leader = caught_up_leader()
    net.tick(WAIT - 1)
    assert not [m for m in net.sent if isinstance(m, FetchResponse)], "answered before max wait"
    net.tick(1)
    answers = [m for m in net.sent if isinstance(m, FetchResponse)]
    assert {m.dst for m in answers} == {2, 3} and not any(m.entries for m in answers)
    assert len(fetches(net.sent, 2)) == 1 and len(fetches(net.sent, 3)) == 1, (
        "a follower whose long poll ended waited for a tick to fetch again"
    )
    net.sent.clear()
    net.tick(1)
    assert not net.sent, "the fetch sent after the long poll was not held"
    assert leader.role is Role.LEADER


def test_a_leader_that_answers_at_once_is_fetched_from_once_a_tick() -> None:
    """Without long polls (``fetch_max_wait_ticks`` 0) an empty answer comes within the tick
    its fetch went out: the follower waits for the next tick instead of fetching in a loop."""
    net = Net()
    net.elect(1)
    net.tick(2)
    for _ in range(5):
        net.sent.clear()
        net.tick(1)
        assert len(fetches(net.sent, 2)) == 1 and len(fetches(net.sent, 3)) == 1


def test_a_held_fetch_is_answered_as_soon_as_the_log_grows() -> None:
    """Long poll: a new entry goes to the waiting followers without waiting for a tick, and
    the high watermark that their next fetches produce goes back without one either."""
    net, leader = caught_up_leader()
    offset = leader.propose(b"now")
    net.flush()  # no tick
    assert all(b"now" in [e.data for e in net.applied[i]] for i in (1, 2, 3))
    assert leader.high_watermark == offset + 1
    assert all(n.high_watermark == offset + 1 for n in net.nodes.values())


def test_a_follower_behind_the_high_watermark_is_answered_at_once() -> None:
    """A fetch is held only when the fetcher knows the leader's high watermark already."""
    net, leader = caught_up_leader()
    hw, epoch = leader.high_watermark, leader.epoch
    leo, last_epoch = leader.log_end_offset, leader.last_epoch
    leader.step(FetchRequest(CLUSTER, 2, 1, epoch, leo, last_epoch, hw - 1, WAIT))
    answers = [m for m in drain(leader, net.stores[1]) if isinstance(m, FetchResponse)]
    assert [(m.dst, m.high_watermark) for m in answers] == [(2, hw)]
    leader.step(FetchRequest(CLUSTER, 2, 1, epoch, leo, last_epoch, hw, WAIT))
    assert not drain(leader, net.stores[1]), "a fetch with nothing new was not held"


def test_the_leader_holds_no_longer_than_its_own_max_wait() -> None:
    """A fetcher asking for a longer wait gets the leader's: a held fetch counts as the
    follower being alive, which must not outlast half an election timeout."""
    net, leader = caught_up_leader()
    hw, epoch = leader.high_watermark, leader.epoch
    leo, last_epoch = leader.log_end_offset, leader.last_epoch
    net.cut = {2, 3}
    leader.step(FetchRequest(CLUSTER, 2, 1, epoch, leo, last_epoch, hw, 100 * TIMEOUT))
    for _ in range(WAIT - 1):
        leader.tick()
    assert not drain(leader, net.stores[1])
    leader.tick()
    assert [m.dst for m in drain(leader, net.stores[1])] == [2, 3]  # 3's was held as long


def test_an_idle_quorum_fetches_once_per_max_wait_and_keeps_its_leader() -> None:
    """Idle cost: followers fetch about once per max wait (not every tick), and held fetches
    keep check-quorum and the followers' election timers satisfied: no election happens."""
    net, leader = caught_up_leader()
    epoch = leader.epoch
    ticks = 20 * TIMEOUT
    net.tick(ticks)
    assert leader.role is Role.LEADER and {n.epoch for n in net.nodes.values()} == {epoch}
    assert not [m for m in net.sent if isinstance(m, (VoteRequest, BeginQuorumEpoch))]
    for follower in (2, 3):
        assert len(fetches(net.sent, follower)) <= ticks // WAIT


def test_check_quorum_still_deposes_a_leader_whose_followers_are_gone() -> None:
    """Thesis 6.2 with long poll: fetches held when the followers vanished expire; the
    leader steps down within an election timeout plus the max wait."""
    net, leader = caught_up_leader()
    epoch = leader.epoch
    net.cut = {2, 3}
    net.tick(TIMEOUT + WAIT, only=[1])
    assert (leader.role, leader.epoch) == (Role.UNATTACHED, epoch)


def test_a_follower_elects_a_new_leader_when_the_long_polled_one_dies() -> None:
    """Section 5.2: held fetches do not hide a dead leader: the followers time out and elect."""
    net, leader = caught_up_leader()
    epoch = leader.epoch
    net.cut = {1}
    net.tick(6 * TIMEOUT, only=[2, 3])
    new_leaders = [i for i in (2, 3) if net.nodes[i].role is Role.LEADER]
    assert len(new_leaders) == 1 and net.nodes[new_leaders[0]].epoch > epoch


def test_losing_leadership_answers_held_fetches_with_the_new_epoch() -> None:
    """A fetch held when the leader learns a later epoch is answered at once, not dropped:
    the fetcher hears of the epoch instead of waiting out its fetch timeout."""
    net, leader = caught_up_leader()
    epoch = leader.epoch
    leader.step(BeginQuorumEpoch(CLUSTER, 3, 1, epoch + 1))  # 3 won a later epoch
    held = [m for m in drain(leader, net.stores[1]) if isinstance(m, FetchResponse)]
    assert {m.dst for m in held} == {2, 3}
    assert {(m.error, m.epoch, m.leader_id) for m in held} == {
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, epoch + 1, 3)
    }


def test_max_wait_must_stay_within_half_the_election_timeout() -> None:
    """A follower hears from its leader only through fetch answers: a longer wait would
    let its election timer fire under a live leader."""
    with pytest.raises(ValueError, match="fetch_max_wait_ticks"):
        make_node(1, fetch_max_wait_ticks=TIMEOUT // 2 + 1)


# --- Rejections: wrong cluster, malformed, stale ------------------------------------------


def test_wrong_cluster_id_is_rejected_and_changes_nothing() -> None:
    """KRaft INCONSISTENT_CLUSTER_ID: a message for another cluster is refused, not answered."""
    node, _ = make_node(1)
    before = state_of(node)
    rejection = node.step(VoteRequest("other-cluster", 2, 1, 9, 5, 5, False))
    assert rejection is not None and rejection.error is ErrorCode.INCONSISTENT_CLUSTER_ID
    assert rejection.error.name == "INCONSISTENT_CLUSTER_ID" and rejection.error.code == 104
    assert state_of(node) == before and not node.has_ready()
    assert node.rejections[ErrorCode.INCONSISTENT_CLUSTER_ID] == 1


@pytest.mark.parametrize(
    "message",
    [
        VoteRequest(CLUSTER, 2, 1, -1, 0, 0, False),
        VoteRequest(CLUSTER, 2, 7, 3, 0, 0, False),  # not addressed to node 1
        VoteRequest(CLUSTER, 2, 1, 3, 3, 0, False),  # last epoch not below the epoch
        VoteRequest(CLUSTER, 2, 1, 3, 0, 0, 1),  # type: ignore[arg-type]
        VoteRequest(CLUSTER, 1, 1, 3, 0, 0, False),  # from itself
        FetchRequest(CLUSTER, 2, 1, 2, -5, 0),
        FetchRequest(CLUSTER, 2, 1, 2, 3, 9),
        FetchResponse(
            CLUSTER, 2, 1, 3, ErrorCode.NONE, 2, 0, 0, (Entry(5, 1),), 0, None, None, None
        ),
        FetchResponse(
            CLUSTER, 2, 1, 3, ErrorCode.NONE, 2, 0, 0, (Entry(0, 9),), 0, None, None, None
        ),
        FetchResponse(
            CLUSTER, 2, 1, 3, ErrorCode.NONE, 3, 0, 0, (Entry(0, 1),), 0, None, None, None
        ),
        FetchResponse(CLUSTER, 2, 1, 3, ErrorCode.NONE, 2, 4, 1, (), 0, 1, 9, None),
        FetchResponse(CLUSTER, 2, 1, 3, "NONE", 2, 0, 0, (), 0, None, None, None),  # type: ignore[arg-type]
        FetchSnapshotRequest(CLUSTER, 2, 1, 3, SnapshotId(0, 0)),
        FetchSnapshotResponse(CLUSTER, 2, 1, 3, ErrorCode.NONE, 2, Snapshot(5, 9, b"")),
        FetchSnapshotResponse(CLUSTER, 2, 1, 3, ErrorCode.NONE, 2, None),
        "not a message",
    ],
)
def test_malformed_messages_are_rejected_and_change_nothing(message: object) -> None:
    """KRaft INVALID_REQUEST: a message no correct peer could send changes nothing."""
    node, _ = make_node(1)
    before = state_of(node)
    rejection = node.step(message)  # type: ignore[arg-type]
    assert rejection is not None and rejection.error is ErrorCode.INVALID_REQUEST, rejection
    assert state_of(node) == before and not node.has_ready()


def test_stale_epoch_messages_change_nothing() -> None:
    """Section 5.1: a request with a stale term is rejected (and answered with ours)."""
    node, store = make_node(1, storage=storage_with([(0, 1)], epoch=5, voted_for=3))
    before = state_of(node)
    stale_response = FetchResponse(
        CLUSTER, 2, 1, 4, ErrorCode.NONE, 2, 1, 1, (Entry(1, 4),), 2, None, None, None
    )
    for message in (
        stale_response,
        VoteResponse(CLUSTER, 2, 1, 4, True, False),
        BeginQuorumEpoch(CLUSTER, 2, 1, 4),
    ):
        rejection = node.step(message)
        assert rejection is not None and rejection.error is ErrorCode.FENCED_LEADER_EPOCH
    rejection = node.step(vote_request(2, 1, epoch=4, last_epoch=1, leo=9))
    assert rejection is not None and rejection.error is ErrorCode.FENCED_LEADER_EPOCH
    answers = drain(node, store)
    assert all(m.epoch == 5 for m in answers)  # told the stale senders our epoch
    assert not any(isinstance(m, VoteResponse) and m.granted for m in answers)
    assert state_of(node)[:7] == before[:7]
    assert store.entries(0, store.log_end_offset()) == [Entry(0, 1, b"0@1")]


# --- Contract and role table ----------------------------------------------------------------


def test_propose_on_a_follower_is_not_leader_or_follower() -> None:
    """Section 5.1 / Kafka: clients must send to the leader; the error names it, retriable."""
    net = Net()
    net.elect(1)
    with pytest.raises(NotLeaderError) as caught:
        net.nodes[2].propose(b"x")
    assert caught.value.error_name == "NOT_LEADER_OR_FOLLOWER" and caught.value.retriable
    assert caught.value.leader_id == 1


def test_ready_twice_without_advance_raises() -> None:
    """etcd RawNode contract: every Ready is acknowledged with Advance before the next."""
    node, _ = make_node(1)
    node.step(vote_request(2, 1, epoch=1))
    node.ready()
    with pytest.raises(RaftUsageError):
        node.ready()


def test_illegal_transition_raises() -> None:
    """Transition table: a leader never becomes a candidate; no silent fallback."""
    state = QuorumState(
        1, frozenset({1, 2, 3}), HardState(1, None), logging.getLogger("controller.raft")
    )
    state.transition_to_candidate()
    state.transition_to_leader()
    with pytest.raises(IllegalTransitionError):
        state.transition_to_candidate()
    with pytest.raises(RaftInvariantError):
        state.transition_to_follower(state.epoch, 2)  # two leaders in one epoch


def test_each_transition_is_logged_once_with_the_node_id(caplog: pytest.LogCaptureFixture) -> None:
    """CONVENTIONS: role changes are logged once, key=value, with the node id."""
    caplog.set_level(logging.INFO, logger="controller.raft")
    net = Net()
    net.elect(1)
    lines = [r.getMessage() for r in caplog.records if "transition node=1 " in r.getMessage()]
    assert lines == [
        "raft transition node=1 from=Unattached to=PreCandidate epoch=0 leader=None voted_for=None",
        "raft transition node=1 from=PreCandidate to=Candidate epoch=1 leader=None voted_for=1",
        "raft transition node=1 from=Candidate to=Leader epoch=1 leader=1 voted_for=1",
    ]


def test_a_follower_that_times_out_under_a_live_leader_keeps_fetching_and_rejoins() -> None:
    """KIP-996 (found by an integration test on a loaded machine): a follower whose fetch
    answers are lost times out while its leader lives. As a pre-candidate it keeps
    fetching from that leader, so the leader keeps its quorum; the first answer makes it a
    follower again. With one voter down, a pre-candidate that stopped fetching cost the
    leader its quorum (check-quorum), and the new epoch reset every broker session."""
    net, leader = caught_up_leader()
    epoch = leader.epoch
    net.cut = {3}  # one voter down: the leader's quorum is itself and node 2
    follower = net.nodes[2]

    def tick_losing_answers_to_2() -> None:
        for i in (1, 2):
            net.nodes[i].tick()
        net.flush(drop=lambda m: m.src == 1 and m.dst == 2)

    for _ in range(3 * TIMEOUT):
        tick_losing_answers_to_2()
        if follower.role is Role.PRE_CANDIDATE:
            break
    assert follower.role is Role.PRE_CANDIDATE
    net.sent.clear()
    for _ in range(WAIT + 2):  # every fetch held from before is answered, and lost
        tick_losing_answers_to_2()
    assert fetches(net.sent, 2), "the pre-candidate stopped fetching from its leader"
    net.tick(3 * TIMEOUT, only=[1, 2])  # answers get through again
    assert (leader.role, leader.epoch) == (Role.LEADER, epoch)
    assert (follower.role, follower.epoch, follower.leader_id) == (Role.FOLLOWER, epoch, 1)
