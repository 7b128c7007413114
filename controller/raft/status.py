"""What :meth:`RaftNode.status() <controller.raft.node.RaftNode.status>` reports.

Values only, for ``lograft cluster status``, metrics and tests; nothing here is persisted.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.raft.quorum_state import Role

__all__ = ["RaftStatus", "ReplicaStatus"]


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """The leader's view of one replica (voter or observer)."""

    replica_id: int
    is_voter: bool
    log_end_offset: int
    lag: int


@dataclass(frozen=True, slots=True)
class RaftStatus:
    """A snapshot of a node's state for ``lograft cluster status`` and tests."""

    node_id: int
    role: Role
    epoch: int
    leader_id: int | None
    voted_for: int | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    applied_offset: int
    replicas: tuple[ReplicaStatus, ...] = ()
