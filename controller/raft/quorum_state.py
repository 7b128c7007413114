"""Every role change of a Raft node lives here; this file owns the election state.

Transition table (``from`` row -> allowed ``to``; epoch rule in brackets)::

    from \\ to      Unattached   Follower     PreCandidate  Candidate    Leader   Observer
    Unattached     [e' > e]     [e' >= e]    [e]           [e + 1]      -        -
    Follower       [e' > e]     [e' > e]     [e]           [e + 1]      -        -
    PreCandidate   [e' > e]     [e' >= e]    [e] new round [e + 1]      -        -
    Candidate      [e' > e]     [e' >= e]    [e]           [e + 1]      [e]      -
    Leader         [e' >= e]    [e' > e]     -             -            -        -
    Observer       -            -            -             -            -        [e' >= e]

* Unattached: a voter that knows the epoch but no leader (it may have voted in it:
  Kafka's "Voted" state is Unattached with ``voted_for`` set). A leader that loses its
  quorum (check-quorum) resigns into Unattached *in the same epoch*.
* Follower: a voter that knows the leader of its epoch and fetches from it. A follower
  never switches to another leader in the same epoch: that would be two leaders in one
  epoch, which raises.
* PreCandidate: a voter whose election timer fired, asking for pre-votes for ``e + 1``
  without bumping its epoch (KIP-996); a new round after a timeout re-enters it.
* Candidate: bumped to ``e + 1`` and voted for itself.
* Leader: a candidate that won a majority of the voters' votes in its epoch.
* Observer: every role of a non-voter (a broker following the metadata log). It never
  votes and never becomes a candidate; its leader may be unknown (``None``).

Only voters use the first five roles, only non-voters the last. A change the table does not
allow raises :class:`IllegalTransitionError`; every allowed change is logged exactly once,
as ``key=value`` fields with the node id. The caller persists the resulting hard state
(epoch, vote) before sending any message (see ``Ready``).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from controller.raft.errors import IllegalTransitionError, RaftInvariantError
from controller.raft.messages import HardState

if TYPE_CHECKING:
    # Only the type: the logger itself is the shell's, passed in (no module-level logger).
    from logging import Logger

__all__ = ["TRANSITIONS", "QuorumState", "Role"]


class Role(enum.Enum):
    """The role of a node in its current epoch."""

    UNATTACHED = "Unattached"
    FOLLOWER = "Follower"
    PRE_CANDIDATE = "PreCandidate"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    OBSERVER = "Observer"


_U, _F, _P, _C, _L, _O = (
    Role.UNATTACHED,
    Role.FOLLOWER,
    Role.PRE_CANDIDATE,
    Role.CANDIDATE,
    Role.LEADER,
    Role.OBSERVER,
)

#: The table above as data: the roles each role may change to.
TRANSITIONS: dict[Role, frozenset[Role]] = {
    _U: frozenset({_U, _F, _P, _C}),
    _F: frozenset({_U, _F, _P, _C}),
    _P: frozenset({_U, _F, _P, _C}),
    _C: frozenset({_U, _F, _P, _C, _L}),
    _L: frozenset({_U, _F}),
    _O: frozenset({_O}),
}


class QuorumState:
    """Role, epoch, vote and known leader of one node; the only place they change.

    ``logger`` is where every role change and vote is logged; the shell that builds the
    node chooses it. Not thread-safe; owned by one :class:`~controller.raft.node.RaftNode`.
    """

    __slots__ = ("_epoch", "_leader_id", "_logger", "_role", "_voted_for", "node_id", "voters")

    def __init__(
        self, node_id: int, voters: frozenset[int], hard_state: HardState, logger: Logger
    ) -> None:
        self._logger = logger
        self.node_id = node_id
        self.voters = voters
        self._epoch = hard_state.epoch
        self._voted_for = hard_state.voted_for
        self._leader_id: int | None = None
        # A restarted voter is Unattached even if it led before: leadership is not persisted.
        self._role = Role.UNATTACHED if node_id in voters else Role.OBSERVER
        if self._voted_for is not None and self._voted_for not in voters:
            raise RaftInvariantError(
                f"node={node_id} persisted a vote for non-voter {self._voted_for}"
            )

    @property
    def role(self) -> Role:
        """The current role."""
        return self._role

    @property
    def epoch(self) -> int:
        """The current epoch (Raft's term)."""
        return self._epoch

    @property
    def voted_for(self) -> int | None:
        """Whom this node voted for in the current epoch."""
        return self._voted_for

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        return self._leader_id

    @property
    def is_voter(self) -> bool:
        """Whether this node is one of the voters."""
        return self.node_id in self.voters

    @property
    def hard_state(self) -> HardState:
        """What must be persisted for the current state."""
        return HardState(self._epoch, self._voted_for)

    # --- transitions ---------------------------------------------------------------------

    def transition_to_unattached(self, epoch: int) -> None:
        """Enter ``epoch`` without a leader (a higher epoch seen, or a leader resigning)."""
        same_epoch_ok = self._role is Role.LEADER and epoch == self._epoch
        if epoch <= self._epoch and not same_epoch_ok:
            self._illegal(Role.UNATTACHED, epoch, "needs a higher epoch")
        voted_for = self._voted_for if epoch == self._epoch else None
        self._change(Role.UNATTACHED, epoch, voted_for, None)

    def transition_to_follower(self, epoch: int, leader_id: int) -> None:
        """Follow ``leader_id``, the leader of ``epoch``."""
        if leader_id == self.node_id or leader_id not in self.voters:
            self._illegal(Role.FOLLOWER, epoch, f"leader {leader_id} is not another voter")
        if epoch < self._epoch:
            self._illegal(Role.FOLLOWER, epoch, "epoch went back")
        if epoch == self._epoch and self._role in (Role.LEADER, Role.FOLLOWER):
            # Two leaders in one epoch: election safety is broken somewhere.
            raise RaftInvariantError(
                f"node={self.node_id} epoch={epoch} role={self._role.value} "
                f"leader={self._leader_id} told of another leader {leader_id}"
            )
        voted_for = self._voted_for if epoch == self._epoch else None
        self._change(Role.FOLLOWER, epoch, voted_for, leader_id)

    def transition_to_pre_candidate(self) -> None:
        """Start (or restart) a pre-vote round for ``epoch + 1``."""
        self._change(Role.PRE_CANDIDATE, self._epoch, self._voted_for, None)

    def transition_to_candidate(self) -> None:
        """Bump the epoch and vote for this node."""
        self._change(Role.CANDIDATE, self._epoch + 1, self.node_id, None)

    def transition_to_leader(self) -> None:
        """Become the leader of the current epoch (the caller counted a majority)."""
        if self._voted_for != self.node_id:
            self._illegal(Role.LEADER, self._epoch, "did not vote for itself")
        self._change(Role.LEADER, self._epoch, self._voted_for, self.node_id)

    def transition_to_observer(self, epoch: int, leader_id: int | None) -> None:
        """A non-voter learns an epoch and (maybe) its leader."""
        if epoch < self._epoch:
            self._illegal(Role.OBSERVER, epoch, "epoch went back")
        if leader_id is not None and leader_id not in self.voters:
            self._illegal(Role.OBSERVER, epoch, f"leader {leader_id} is not a voter")
        if (
            epoch == self._epoch
            and leader_id is not None
            and self._leader_id is not None
            and leader_id != self._leader_id
        ):
            raise RaftInvariantError(
                f"node={self.node_id} epoch={epoch} knew leader={self._leader_id} "
                f"and was told of another leader {leader_id}"
            )
        self._change(Role.OBSERVER, epoch, None, leader_id)

    def grant_vote(self, candidate_id: int) -> None:
        """Record this voter's vote in the current epoch (one vote per epoch)."""
        if self._voted_for not in (None, candidate_id):
            raise RaftInvariantError(
                f"node={self.node_id} epoch={self._epoch} already voted for {self._voted_for}"
            )
        # A follower knows a leader in this epoch and a (pre-)candidate voted for itself,
        # except a pre-candidate, which has not bumped its epoch yet.
        if self._role not in (Role.UNATTACHED, Role.PRE_CANDIDATE):
            raise RaftInvariantError(f"node={self.node_id} votes while {self._role.value}")
        self._voted_for = candidate_id
        self._logger.info(
            "raft vote node=%d epoch=%d voted_for=%d", self.node_id, self._epoch, candidate_id
        )

    # --- helpers -------------------------------------------------------------------------

    def _illegal(self, to: Role, epoch: int, why: str) -> None:
        raise IllegalTransitionError(
            f"node={self.node_id} from={self._role.value} to={to.value} "
            f"epoch={self._epoch} new_epoch={epoch}: {why}"
        )

    def _change(self, to: Role, epoch: int, voted_for: int | None, leader_id: int | None) -> None:
        if to not in TRANSITIONS[self._role]:
            self._illegal(to, epoch, "not in the transition table")
        if (to is Role.OBSERVER) == self.is_voter:
            self._illegal(to, epoch, "voters and observers keep to their own roles")
        if epoch < self._epoch:
            self._illegal(to, epoch, "epoch went back")
        previous = self._role
        self._role, self._epoch, self._voted_for, self._leader_id = to, epoch, voted_for, leader_id
        self._logger.info(
            "raft transition node=%d from=%s to=%s epoch=%d leader=%s voted_for=%s",
            self.node_id,
            previous.value,
            to.value,
            epoch,
            leader_id,
            voted_for,
        )
