"""Typed errors of the Raft core, each with Kafka's name for it.

Two kinds live here. Errors a caller may meet in normal operation (``propose`` on a node
that is not the leader) are subclasses of the shared :mod:`lograft.protocol.errors` classes, so a
client retries them exactly as it retries the broker's. Errors that mean the core itself or
its caller broke a rule (an illegal role change, a committed entry about to be truncated,
``ready`` called twice without ``advance``) derive from :class:`RaftInvariantError`: they
crash the node on purpose and are never caught and logged away.
"""

from __future__ import annotations

from lograft.protocol.errors import InvalidRequestError, InvariantError, NotLeaderOrFollowerError

__all__ = [
    "IllegalTransitionError",
    "InvalidSnapshotError",
    "NotLeaderError",
    "RaftInvariantError",
    "RaftUsageError",
]


class NotLeaderError(NotLeaderOrFollowerError):
    """``NOT_LEADER_OR_FOLLOWER``: only the leader of the current epoch accepts proposals.

    ``leader_id`` is the leader this node knows of (``None`` while an election runs) and
    ``epoch`` its current epoch, so the caller can redirect without a metadata round trip.
    """

    def __init__(self, node_id: int, epoch: int, leader_id: int | None) -> None:
        super().__init__(f"node={node_id} epoch={epoch} leader={leader_id}")
        self.node_id = node_id
        self.epoch = epoch
        self.leader_id = leader_id


class InvalidSnapshotError(InvalidRequestError):
    """``INVALID_REQUEST``: a snapshot was asked for at an offset the node cannot cover."""


class RaftInvariantError(InvariantError):
    """A Raft safety invariant is broken; the node halts (never answered over the wire).

    Never caught inside lograft: continuing after this would risk losing committed data.
    """


class IllegalTransitionError(RaftInvariantError):
    """A role change that the transition table in ``quorum_state.py`` does not allow."""


class RaftUsageError(RaftInvariantError):
    """The application broke the ``ready``/``advance`` contract of :class:`RaftNode`."""
