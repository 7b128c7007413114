"""The state of one Raft node, by composition, and the role changes that keep it whole.

:class:`Core` holds one object per concern instead of sharing fields through base
classes: the log view (:class:`~controller.raft._log.RaftLog`), the election state
(:class:`~controller.raft.quorum_state.QuorumState`), the election timer, the fetcher's
state, the outbox, and the role objects that exist only in their role -- a
:class:`~controller.raft._state.Candidacy` while pre-candidate or candidate, a
:class:`~controller.raft._leader.LeaderState` while leader. The behaviour is functions
taking the core (``_election``, ``_leader``, ``_fetcher``, ``_snapshots``), picked per role
by ``_step`` as etcd picks ``stepLeader``/``stepCandidate``/``stepFollower``.

Every role change of the node goes through a method here, so the role objects always
match the role (``_invariants`` checks that they do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.raft._log import RaftLog
from controller.raft._state import Candidacy, ElectionTimer, FetchState, Outbox
from controller.raft.errors import RaftInvariantError
from controller.raft.messages import ErrorCode, RaftMessage, Snapshot
from controller.raft.quorum_state import QuorumState, Role
from controller.raft.ready import Rejection

if TYPE_CHECKING:
    from logging import Logger
    from random import Random

    from controller.raft._state import HeldFetch, LeaderState
    from controller.raft.config import RaftConfig
    from controller.raft.storage import Storage

__all__ = ["Core"]


class Core:
    """Everything one node knows, each field in one home (not thread-safe)."""

    def __init__(self, config: RaftConfig, storage: Storage, rng: Random, logger: Logger) -> None:
        self.cfg = config
        self.rng = rng
        self.majority = len(config.voters) // 2 + 1
        self.log = RaftLog(storage)
        self.quorum = QuorumState(config.node_id, config.voters, storage.hard_state(), logger)
        snapshot = storage.snapshot()
        # The high watermark is not persisted (as in KRaft): after a restart it is known to
        # be at least the snapshot's end, and the leader tells the rest. The application
        # restored its state machine from that snapshot before building the node.
        self.high_watermark = snapshot.end_offset if snapshot is not None else 0
        self.applied_end = self.high_watermark
        #: A snapshot received from the leader, to hand to the application with its Ready.
        self.snapshot_to_apply: Snapshot | None = None
        self.timer = ElectionTimer(config.election_timeout_ticks, rng)
        self.fetch = FetchState(want_fetch=not self.quorum.is_voter)
        self.out = Outbox()
        self.candidacy: Candidacy | None = None
        self.leader: LeaderState | None = None
        #: Fetches the leader holds (long poll), by fetcher. Kept outside ``LeaderState`` so
        #: that losing leadership still answers them (with the new leader, if known).
        self.held_fetches: dict[int, HeldFetch] = {}

    # --- identity and election state -------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This node's id."""
        return self.cfg.node_id

    @property
    def role(self) -> Role:
        """The current role."""
        return self.quorum.role

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        return self.quorum.leader_id

    @property
    def voted_for(self) -> int | None:
        """The vote cast in the current epoch."""
        return self.quorum.voted_for

    # --- output ----------------------------------------------------------------------------

    def send(self, message: RaftMessage) -> None:
        """Queue ``message`` for the next Ready."""
        self.out.messages.append(message)

    def reject(self, error: ErrorCode, detail: str) -> Rejection:
        """Count and describe a refused message."""
        self.out.rejections[error] += 1
        return Rejection(error, detail)

    # --- role changes ----------------------------------------------------------------------

    def become_unattached(self, epoch: int) -> None:
        """Learn a higher epoch with no leader (voters) or an unknown leader (observers)."""
        self.leader = None
        self.candidacy = None
        if self.quorum.is_voter:
            self.quorum.transition_to_unattached(epoch)
            self.timer.reset()
        else:
            self.quorum.transition_to_observer(epoch, None)

    def observe_leader(self, epoch: int, leader_id: int) -> None:
        """``leader_id`` is the leader of ``epoch`` (it said so, or answered as leader)."""
        if epoch > self.epoch or (epoch == self.epoch and self.leader_id is None):
            self.leader = None
            self.candidacy = None
            if self.quorum.is_voter:
                self.quorum.transition_to_follower(epoch, leader_id)
                self.timer.reset()
            else:
                self.quorum.transition_to_observer(epoch, leader_id)
            self.fetch.pending = False
            self.fetch.want_fetch = True
            self.fetch.want_snapshot = None
        elif epoch == self.epoch and self.leader_id != leader_id:
            raise RaftInvariantError(
                f"node={self.node_id} epoch={epoch} has leader={self.leader_id}; "
                f"{leader_id} claims it too"
            )
        self.timer.elapsed = 0

    def on_leader_hint(self, epoch: int, leader_id: int | None) -> None:
        """A non-leader answered our fetch, maybe naming the leader."""
        self.fetch.pending = False
        is_other_voter = leader_id in self.cfg.voters and leader_id != self.node_id
        if (
            leader_id is not None
            and is_other_voter
            and (epoch > self.epoch or (epoch == self.epoch and self.leader_id is None))
        ):
            self.observe_leader(epoch, leader_id)
            return
        if epoch > self.epoch:
            self.become_unattached(epoch)
        if not self.quorum.is_voter and self.leader_id is None:
            self.fetch.observer_target = None  # ask another voter next time

    def become_pre_candidate(self) -> None:
        """Start (or restart) a pre-vote round: this node's pre-vote is its first."""
        previous = self.candidacy
        prospective = previous.prospective_leader if previous is not None else None
        if self.role is Role.FOLLOWER and self.leader_id is not None:
            prospective = (self.epoch, self.leader_id)
        self.quorum.transition_to_pre_candidate()
        self.timer.reset()
        self.candidacy = Candidacy({self.node_id}, prospective)

    def become_candidate(self) -> None:
        """Bump the epoch and vote for this node."""
        self.quorum.transition_to_candidate()
        self.timer.reset()
        self.candidacy = Candidacy({self.node_id})

    def become_leader(self, leader: LeaderState) -> None:
        """Lead the current epoch (the caller counted a majority of votes)."""
        self.quorum.transition_to_leader()
        self.candidacy = None
        self.leader = leader
        self.fetch.want_fetch = False
        self.fetch.want_snapshot = None

    def resign(self) -> None:
        """Check-quorum failed: give up leadership, staying in the epoch (Unattached)."""
        self.leader = None
        self.quorum.transition_to_unattached(self.epoch)
        self.timer.reset()

    def forget_leader(self) -> None:
        """An observer that has not heard from its leader for an election timeout."""
        self.quorum.transition_to_observer(self.epoch, None)
