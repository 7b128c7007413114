"""Errors of the pure replication core.

Request-level failures use the shared :mod:`lograft.protocol.errors` classes directly
(``FENCED_LEADER_EPOCH``, ``UNKNOWN_LEADER_EPOCH``, ``NOT_LEADER_OR_FOLLOWER``,
``NOT_ENOUGH_REPLICAS``, ...). Two kinds are defined here:

* :class:`ReplicationInvariantError` -- the core or its caller broke a replication rule (a
  high watermark moving backwards, a leader missing from its own ISR, a truncation below
  the high watermark). It crashes the node on purpose and is never caught and logged away.
* :class:`LeaderEpochCheckpointError` -- a leader-epoch checkpoint that does not parse or
  breaks the cache's ordering rules; the shell treats the file as corrupt storage.
"""

from __future__ import annotations

from lograft.protocol.errors import InvariantError, KafkaStorageError

__all__ = ["LeaderEpochCheckpointError", "ReplicationInvariantError"]


class ReplicationInvariantError(InvariantError):
    """A replication safety invariant is broken; the node halts (never answered)."""


class LeaderEpochCheckpointError(KafkaStorageError):
    """``KAFKA_STORAGE_ERROR``: the leader-epoch checkpoint text is not valid."""
