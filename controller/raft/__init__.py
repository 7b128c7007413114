"""The pure Raft core of the controller quorum (KRaft-style, etcd RawNode-shaped).

Import from here; the submodules' layout may change. See :mod:`controller.raft.node` for the
protocol and the ``ready``/``advance`` contract, and :mod:`controller.raft.quorum_state` for
the role transition table. Nothing in this package reads a clock, opens a socket, starts a
thread or touches the disk.
"""

from controller.raft.errors import (
    IllegalTransitionError,
    InvalidSnapshotError,
    NotLeaderError,
    RaftInvariantError,
    RaftUsageError,
)
from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    Entry,
    EntryKind,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    HardState,
    Message,
    RaftMessage,
    Snapshot,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from controller.raft.node import RaftConfig, RaftNode, RaftStatus, Ready, Rejection, ReplicaStatus
from controller.raft.quorum_state import TRANSITIONS, Role
from controller.raft.storage import MemoryStorage, Storage

__all__ = [
    "TRANSITIONS",
    "BeginQuorumEpoch",
    "BeginQuorumEpochResponse",
    "Entry",
    "EntryKind",
    "ErrorCode",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "HardState",
    "IllegalTransitionError",
    "InvalidSnapshotError",
    "MemoryStorage",
    "Message",
    "NotLeaderError",
    "RaftConfig",
    "RaftInvariantError",
    "RaftMessage",
    "RaftNode",
    "RaftStatus",
    "RaftUsageError",
    "Ready",
    "Rejection",
    "ReplicaStatus",
    "Role",
    "Snapshot",
    "SnapshotId",
    "Storage",
    "VoteRequest",
    "VoteResponse",
]
