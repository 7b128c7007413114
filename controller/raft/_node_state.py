"""The state every part of a :class:`~controller.raft.node.RaftNode` shares.

The node is one object assembled from one class per concern (elections, the leader side,
the fetcher side, snapshot transfer, and :mod:`controller.raft.node` for the inputs and
outputs). :class:`NodeState` is their common base: it builds the node's state and holds what
more than one of them does -- learning a higher epoch or the leader of an epoch (the
discovery every message can bring), the election timer, and queueing output.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from controller.raft._log import RaftLog
from controller.raft.errors import RaftInvariantError
from controller.raft.messages import ErrorCode, RaftMessage, Snapshot, SnapshotId
from controller.raft.quorum_state import QuorumState, Role
from controller.raft.ready import Ready, Rejection

if TYPE_CHECKING:
    # Only the type: the generator itself is injected, never the global one.
    from random import Random

    from controller.raft._leader import HeldFetch, LeaderState
    from controller.raft.config import RaftConfig
    from controller.raft.storage import Storage

__all__ = ["NodeState"]


class NodeState:
    """The fields of one node and the role changes any handler may make (not thread-safe)."""

    def __init__(self, config: RaftConfig, storage: Storage, rng: Random) -> None:
        self._cfg = config
        self._rng = rng
        self._majority = len(config.voters) // 2 + 1
        self._log = RaftLog(storage)
        self._quorum = QuorumState(config.node_id, config.voters, storage.hard_state())
        self._persisted_hard_state = storage.hard_state()
        snapshot = storage.snapshot()
        # The high watermark is not persisted (as in KRaft): after a restart it is known to
        # be at least the snapshot's end, and the leader tells the rest. The application
        # restored its state machine from that snapshot before building the node.
        self._high_watermark = snapshot.end_offset if snapshot is not None else 0
        self._applied_end = self._high_watermark
        self._messages: list[RaftMessage] = []
        self._outstanding: Ready | None = None
        self._snapshot_to_apply: Snapshot | None = None
        self._election_elapsed = 0
        self._randomized_election_timeout = self._draw_election_timeout()
        self._votes: set[int] = set()
        self._leader: LeaderState | None = None
        #: Fetches the leader holds (long poll), by fetcher. Kept outside ``LeaderState`` so
        #: that losing leadership still answers them (with the new leader, if known).
        self._held_fetches: dict[int, HeldFetch] = {}
        self._want_fetch = False
        self._fetch_pending = False
        self._fetch_age = 0
        self._want_snapshot: SnapshotId | None = None
        self._observer_target: int | None = None
        #: KIP-996: the (epoch, leader) a voter followed when its election timer fired. As a
        #: pre-candidate it keeps fetching from that leader, and an answer makes it a
        #: follower again; only the epoch it was taken in counts.
        self._prospective_leader: tuple[int, int] | None = None
        #: Messages refused by ``step``, by error (wrong cluster, stale epoch, malformed...).
        self.rejections: Counter[ErrorCode] = Counter()
        if not self._quorum.is_voter:
            self._want_fetch = True

    # --- identity and role ----------------------------------------------------------------

    @property
    def node_id(self) -> int:
        """This node's id."""
        return self._cfg.node_id

    @property
    def config(self) -> RaftConfig:
        """The configuration the node was built with."""
        return self._cfg

    @property
    def role(self) -> Role:
        """The current role."""
        return self._quorum.role

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._quorum.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if known."""
        return self._quorum.leader_id

    @property
    def voted_for(self) -> int | None:
        """The vote cast in the current epoch."""
        return self._quorum.voted_for

    # --- the election timer ---------------------------------------------------------------

    def _draw_election_timeout(self) -> int:
        timeout = self._cfg.election_timeout_ticks
        return timeout + self._rng.randrange(timeout)

    def _reset_election_timer(self) -> None:
        self._election_elapsed = 0
        self._randomized_election_timeout = self._draw_election_timeout()

    # --- learning of an epoch or a leader -------------------------------------------------

    def _become_unattached(self, epoch: int) -> None:
        """Learn a higher epoch with no leader (voters) or an unknown leader (observers)."""
        self._leader = None
        if self._quorum.is_voter:
            self._quorum.transition_to_unattached(epoch)
            self._reset_election_timer()
        else:
            self._quorum.transition_to_observer(epoch, None)

    def _observe_leader(self, epoch: int, leader_id: int) -> None:
        """``leader_id`` is the leader of ``epoch`` (it said so, or answered as leader)."""
        if epoch > self.epoch or (epoch == self.epoch and self.leader_id is None):
            self._leader = None
            if self._quorum.is_voter:
                self._quorum.transition_to_follower(epoch, leader_id)
                self._reset_election_timer()
            else:
                self._quorum.transition_to_observer(epoch, leader_id)
            self._fetch_pending = False
            self._want_fetch = True
            self._want_snapshot = None
        elif epoch == self.epoch and self.leader_id != leader_id:
            raise RaftInvariantError(
                f"node={self.node_id} epoch={epoch} has leader={self.leader_id}; "
                f"{leader_id} claims it too"
            )
        self._election_elapsed = 0

    def _on_leader_hint(self, epoch: int, leader_id: int | None) -> None:
        """A non-leader answered our fetch, maybe naming the leader."""
        self._fetch_pending = False
        is_other_voter = leader_id in self._cfg.voters and leader_id != self.node_id
        if (
            leader_id is not None
            and is_other_voter
            and (epoch > self.epoch or (epoch == self.epoch and self.leader_id is None))
        ):
            self._observe_leader(epoch, leader_id)
            return
        if epoch > self.epoch:
            self._become_unattached(epoch)
        if not self._quorum.is_voter and self.leader_id is None:
            self._observer_target = None  # ask another voter next time

    # --- output ---------------------------------------------------------------------------

    def _send(self, message: RaftMessage) -> None:
        self._messages.append(message)

    def _reject(self, error: ErrorCode, detail: str) -> Rejection:
        self.rejections[error] += 1
        return Rejection(error, detail)
