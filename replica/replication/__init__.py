"""Partition replication as pure state machines (issue 4): leader, follower, epoch cache.

Import from here. Nothing in this package reads a clock, opens a socket, starts a thread
or touches the disk: the broker's shell feeds it fetches, appends and ``now_ms``, hands
each core its logger, and does what it returns (a leader's steps return a
:class:`LeaderUpdate`). See :mod:`replica.replication.leader_state` for the high watermark
and ISR rules (:mod:`replica.replication.leader_outputs` for what they return),
:mod:`replica.replication.follower_state` for fetch answers and truncation, and
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
from replica.replication.leader_outputs import (
    NO_CHANGE,
    AcksAllStatus,
    DivergingEpoch,
    FetchDecision,
    FetchOutcome,
    LeaderUpdate,
    ServeFrom,
)
from replica.replication.leader_state import (
    ISR_TRANSITIONS,
    FollowerProgress,
    IsrState,
    LeaderState,
    check_current_leader_epoch,
)
from replica.replication.messages import FetchRequest, FetchResponse, IsrProposal

__all__ = [
    "CHECKPOINT_VERSION",
    "ISR_TRANSITIONS",
    "NO_CHANGE",
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
    "FetchOutcome",
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
    "LeaderUpdate",
    "ReplicationInvariantError",
    "ServeFrom",
    "TruncateTo",
    "check_current_leader_epoch",
]
