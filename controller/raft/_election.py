"""Elections: pre-vote, vote and winning an epoch (Raft section 5.2, KIP-595, KIP-996).

A voter whose election timer fires asks for pre-votes for ``epoch + 1`` without bumping its
epoch; with a majority it becomes a candidate, bumps the epoch and votes for itself; with a
majority of votes it becomes leader and appends the epoch's LEADER_CHANGE entry. Votes go
only to a candidate whose log is at least as up to date (section 5.4.1), and a voter that
hears from a live leader refuses them (the lease of section 9.6, with check-quorum).
"""

from __future__ import annotations

from controller.raft._leader import LeaderState
from controller.raft._node_state import NodeState
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

__all__ = ["Election"]


class Election(NodeState):
    """The candidate's and the voter's side of an election."""

    def _start_election(self) -> None:
        if self._cfg.pre_vote:
            if self.role is Role.FOLLOWER and self.leader_id is not None:
                self._prospective_leader = (self.epoch, self.leader_id)
            self._quorum.transition_to_pre_candidate()
            self._reset_election_timer()
            self._votes = {self.node_id}
            self._request_votes(pre_vote=True)
            if len(self._votes) >= self._majority:
                self._become_candidate()
        else:
            self._become_candidate()

    def _become_candidate(self) -> None:
        self._quorum.transition_to_candidate()
        self._reset_election_timer()
        self._votes = {self.node_id}
        self._request_votes(pre_vote=False)
        if len(self._votes) >= self._majority:
            self._become_leader()

    def _request_votes(self, *, pre_vote: bool) -> None:
        epoch = self.epoch + 1 if pre_vote else self.epoch
        last_epoch, leo = self._log.last_epoch, self._log.log_end_offset
        for voter in sorted(self._cfg.voters):
            if voter != self.node_id:
                self._send(
                    VoteRequest(
                        self._cfg.cluster_id, self.node_id, voter, epoch, last_epoch, leo, pre_vote
                    )
                )

    def _become_leader(self) -> None:
        self._quorum.transition_to_leader()
        start = self._log.log_end_offset
        self._leader = LeaderState(epoch_start_offset=start)
        self._want_fetch = False
        self._want_snapshot = None
        # The no-op: committing an entry of our own epoch is what commits the entries of
        # earlier epochs we inherited (section 5.4.2), and it lets the high watermark move.
        self._log.append([Entry(start, self.epoch, b"", EntryKind.LEADER_CHANGE)])
        for voter in sorted(self._cfg.voters):
            if voter != self.node_id:
                self._send(BeginQuorumEpoch(self._cfg.cluster_id, self.node_id, voter, self.epoch))

    def _in_lease(self) -> bool:
        """Whether this voter heard from a live leader within the minimum election timeout.

        Such a voter refuses pre-votes and ignores higher-epoch votes, so a node that was
        partitioned away cannot depose a leader that a majority still follows (section 9.6).
        """
        if self.role is Role.LEADER:
            return True
        return (
            self.role is Role.FOLLOWER
            and self._cfg.check_quorum
            and self._election_elapsed < self._cfg.election_timeout_ticks
        )

    def _log_is_up_to_date(self, last_epoch: int, log_end_offset: int) -> bool:
        """Section 5.4.1: grant only to a candidate whose log is at least as up to date."""
        return (last_epoch, log_end_offset) >= (self._log.last_epoch, self._log.log_end_offset)

    def _on_vote_request(self, m: VoteRequest) -> Rejection | None:
        if not self._quorum.is_voter:
            return self._reject(ErrorCode.INVALID_REQUEST, "an observer does not vote")
        if m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"vote requested by non-voter {m.src}")
        if m.pre_vote:
            granted = (
                m.epoch > self.epoch
                and not self._in_lease()
                and self._log_is_up_to_date(m.last_epoch, m.log_end_offset)
            )
            self._send(
                self._vote_response(m.src, m.epoch if granted else self.epoch, granted, True)
            )
            return None
        if m.epoch < self.epoch:
            self._send(self._vote_response(m.src, self.epoch, False, False))
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote for stale epoch {m.epoch}")
        if m.epoch > self.epoch:
            if self._in_lease():
                return None  # ignored, not refused: see _in_lease
            self._become_unattached(m.epoch)
        granted = (
            self.role in (Role.UNATTACHED, Role.PRE_CANDIDATE)
            and self.voted_for in (None, m.src)
            and self._log_is_up_to_date(m.last_epoch, m.log_end_offset)
        )
        if granted:
            self._quorum.grant_vote(m.src)
            self._election_elapsed = 0
        self._send(self._vote_response(m.src, self.epoch, granted, False))
        return None

    def _vote_response(self, dst: int, epoch: int, granted: bool, pre_vote: bool) -> VoteResponse:
        return VoteResponse(self._cfg.cluster_id, self.node_id, dst, epoch, granted, pre_vote)

    def _on_vote_response(self, m: VoteResponse) -> Rejection | None:
        if not self._quorum.is_voter or m.src not in self._cfg.voters:
            return self._reject(ErrorCode.INVALID_REQUEST, f"vote response from {m.src}")
        if m.pre_vote:
            if m.granted:
                if self.role is Role.PRE_CANDIDATE and m.epoch == self.epoch + 1:
                    self._votes.add(m.src)
                    if len(self._votes) >= self._majority:
                        self._become_candidate()
            elif m.epoch > self.epoch:
                self._become_unattached(m.epoch)
            return None
        if m.epoch > self.epoch:
            self._become_unattached(m.epoch)
            return None
        if m.epoch < self.epoch:
            return self._reject(ErrorCode.FENCED_LEADER_EPOCH, f"vote from stale epoch {m.epoch}")
        if self.role is Role.CANDIDATE and m.granted:
            self._votes.add(m.src)
            if len(self._votes) >= self._majority:
                self._become_leader()
        return None
