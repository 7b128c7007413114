"""Elections: pre-vote, vote and winning an epoch (Raft section 5.2, KIP-595, KIP-996).

A voter whose election timer fires asks for pre-votes for ``epoch + 1`` without bumping its
epoch; with a majority it becomes a candidate, bumps the epoch and votes for itself; with a
majority of votes it becomes leader and appends the epoch's LEADER_CHANGE entry. Votes go
only to a candidate whose log is at least as up to date (section 5.4.1), and a voter that
hears from a live leader refuses them (the lease of section 9.6, with check-quorum).

Functions of the :class:`~controller.raft._core.Core`; the candidate's round lives in its
:class:`~controller.raft._state.Candidacy`.
"""

from __future__ import annotations

from controller.raft._core import Core
from controller.raft._state import LeaderState
from controller.raft.errors import RaftInvariantError
from controller.raft.messages import (
    BeginQuorumEpoch,
    Entry,
    EntryKind,
    ErrorCode,
    VoteRequest,
    VoteResponse,
)
from controller.raft.quorum_state import Role
from controller.raft.ready import Rejection

__all__ = [
    "in_lease",
    "log_is_up_to_date",
    "on_vote_request",
    "on_vote_response",
    "refuse_vote_request",
    "refuse_vote_response",
    "start_election",
]


def start_election(core: Core) -> None:
    """The election timer fired: pre-vote (KIP-996) or campaign at once."""
    if core.cfg.pre_vote:
        core.become_pre_candidate()
        _request_votes(core, pre_vote=True)
        if _won(core):
            _campaign(core)
    else:
        _campaign(core)


def _campaign(core: Core) -> None:
    core.become_candidate()
    _request_votes(core, pre_vote=False)
    if _won(core):
        _win(core)


def _won(core: Core) -> bool:
    candidacy = core.candidacy
    if candidacy is None:
        raise RaftInvariantError(f"node={core.node_id} counts votes without a candidacy")
    return len(candidacy.votes) >= core.majority


def _count_vote(core: Core, voter: int) -> bool:
    """Record ``voter``'s grant in this round; whether the round is won."""
    candidacy = core.candidacy
    if candidacy is None:
        raise RaftInvariantError(f"node={core.node_id} counts votes without a candidacy")
    candidacy.votes.add(voter)
    return len(candidacy.votes) >= core.majority


def _request_votes(core: Core, *, pre_vote: bool) -> None:
    epoch = core.epoch + 1 if pre_vote else core.epoch
    last_epoch, leo = core.log.last_epoch, core.log.log_end_offset
    cid, me = core.cfg.cluster_id, core.node_id
    for voter in sorted(core.cfg.voters):
        if voter != me:
            core.send(VoteRequest(cid, me, voter, epoch, last_epoch, leo, pre_vote))


def _win(core: Core) -> None:
    start = core.log.log_end_offset
    core.become_leader(LeaderState(epoch_start_offset=start))
    # The no-op: committing an entry of our own epoch is what commits the entries of
    # earlier epochs we inherited (section 5.4.2), and it lets the high watermark move.
    core.log.append([Entry(start, core.epoch, b"", EntryKind.LEADER_CHANGE)])
    for voter in sorted(core.cfg.voters):
        if voter != core.node_id:
            core.send(BeginQuorumEpoch(core.cfg.cluster_id, core.node_id, voter, core.epoch))


def in_lease(core: Core) -> bool:
    """Whether this voter heard from a live leader within the minimum election timeout.

    Such a voter refuses pre-votes and ignores higher-epoch votes, so a node that was
    partitioned away cannot depose a leader that a majority still follows (section 9.6).
    """
    if core.role is Role.LEADER:
        return True
    return (
        core.role is Role.FOLLOWER
        and core.cfg.check_quorum
        and core.timer.elapsed < core.cfg.election_timeout_ticks
    )


def log_is_up_to_date(core: Core, last_epoch: int, log_end_offset: int) -> bool:
    """Section 5.4.1: grant only to a candidate whose log is at least as up to date."""
    return (last_epoch, log_end_offset) >= (core.log.last_epoch, core.log.log_end_offset)


def refuse_vote_request(core: Core, m: VoteRequest) -> Rejection | None:
    """An observer's answer to a vote request: it does not vote."""
    return core.reject(ErrorCode.INVALID_REQUEST, "an observer does not vote")


def on_vote_request(core: Core, m: VoteRequest) -> Rejection | None:
    """A voter's answer to a (pre-)vote request."""
    if m.src not in core.cfg.voters:
        return core.reject(ErrorCode.INVALID_REQUEST, f"vote requested by non-voter {m.src}")
    if m.pre_vote:
        granted = (
            m.epoch > core.epoch
            and not in_lease(core)
            and log_is_up_to_date(core, m.last_epoch, m.log_end_offset)
        )
        core.send(_vote_response(core, m.src, m.epoch if granted else core.epoch, granted, True))
        return None
    if m.epoch < core.epoch:
        core.send(_vote_response(core, m.src, core.epoch, False, False))
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote for stale epoch {m.epoch}")
    if m.epoch > core.epoch:
        if in_lease(core):
            return None  # ignored, not refused: see in_lease
        core.become_unattached(m.epoch)
    granted = (
        core.role in (Role.UNATTACHED, Role.PRE_CANDIDATE)
        and core.voted_for in (None, m.src)
        and log_is_up_to_date(core, m.last_epoch, m.log_end_offset)
    )
    if granted:
        core.quorum.grant_vote(m.src)
        core.timer.elapsed = 0
    core.send(_vote_response(core, m.src, core.epoch, granted, False))
    return None


def _vote_response(core: Core, dst: int, epoch: int, granted: bool, pre_vote: bool) -> VoteResponse:
    return VoteResponse(core.cfg.cluster_id, core.node_id, dst, epoch, granted, pre_vote)


def refuse_vote_response(core: Core, m: VoteResponse) -> Rejection | None:
    """An observer asked nobody for votes."""
    return core.reject(ErrorCode.INVALID_REQUEST, f"vote response from {m.src}")


def on_vote_response(core: Core, m: VoteResponse) -> Rejection | None:
    """A voter hears a (pre-)vote answer: only this round's candidate counts it."""
    if m.src not in core.cfg.voters:
        return core.reject(ErrorCode.INVALID_REQUEST, f"vote response from {m.src}")
    if m.pre_vote:
        if m.granted:
            in_round = core.role is Role.PRE_CANDIDATE and m.epoch == core.epoch + 1
            if in_round and _count_vote(core, m.src):
                _campaign(core)
        elif m.epoch > core.epoch:
            core.become_unattached(m.epoch)
        return None
    if m.epoch > core.epoch:
        core.become_unattached(m.epoch)
        return None
    if m.epoch < core.epoch:
        return core.reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote from stale epoch {m.epoch}")
    if core.role is Role.CANDIDATE and m.granted and _count_vote(core, m.src):
        _win(core)
    return None
