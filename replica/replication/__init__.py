"""Partition replication as pure state machines (issue 4): leader, follower, epoch cache.

Import from here. Nothing in this package reads a clock, opens a socket, starts a thread
or touches the disk: the broker's shell feeds it fetches, appends and ``now_ms`` and does
what it returns. See :mod:`replica.replication.leader_state` for the high watermark and
ISR rules, :mod:`replica.replication.follower_state` for fetch answers and truncation, and
:mod:`replica.replication.leader_epoch_cache` for KIP-101/KIP-279 epoch end offsets.
"""

from replica.replication.errors import LeaderEpochCheckpointError, ReplicationInvariantError
from replica.replication.follower_state import (
    AppendRecords,
    AwaitMetadata,
    BackOff,
    FollowerAction,
    FollowerState,
    Ignore,
    TruncateTo,
)
from replica.replication.leader_epoch_cache import (
    CHECKPOINT_VERSION,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
    LeaderEpochCache,
)
from replica.replication.leader_state import (
    ISR_TRANSITIONS,
    AcksAllStatus,
    DivergingEpoch,
    FetchDecision,
    FollowerProgress,
    IsrState,
    LeaderState,
    ServeFrom,
)
from replica.replication.messages import FetchRequest, FetchResponse, IsrProposal

__all__ = [
    "CHECKPOINT_VERSION",
    "ISR_TRANSITIONS",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "AcksAllStatus",
    "AppendRecords",
    "AwaitMetadata",
    "BackOff",
    "DivergingEpoch",
    "EpochEndOffset",
    "EpochEntry",
    "FetchDecision",
    "FetchRequest",
    "FetchResponse",
    "FollowerAction",
    "FollowerProgress",
    "FollowerState",
    "Ignore",
    "IsrProposal",
    "IsrState",
    "LeaderEpochCache",
    "LeaderEpochCheckpointError",
    "LeaderState",
    "ReplicationInvariantError",
    "ServeFrom",
    "TruncateTo",
]
