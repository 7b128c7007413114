"""What a follower does with one fetch answer: the fetcher's per-partition step.

The replica fetcher (:mod:`replica.fetcher`) and the replication simulation
(``tests/sim/replication_sim.py``) both run this code, so what the simulation checks is what
the broker runs: the decision comes from the pure :class:`~replica.replication.FollowerState`
and this module only performs it on a :class:`FollowerLog` (a :class:`~replica.partition.
Partition` in the broker, a list of entries in the simulation) and says when to fetch next.
No rule about truncation or the high watermark lives here.
"""

from __future__ import annotations

import enum
from typing import Protocol, TypeVar

from replica.replication import (
    AppendRecords,
    AwaitMetadata,
    BackOff,
    FetchResponse,
    FollowerState,
    Ignore,
    LeaderEpochCache,
    ReplicationInvariantError,
    TruncateTo,
)

__all__ = ["FollowerLog", "NextFetch", "handle_fetch_response"]

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)


class FollowerLog(Protocol[R_contra]):
    """The follower's local log, as the fetch step needs it."""

    @property
    def log_end_offset(self) -> int:
        """One past the last offset in the log."""
        ...

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        """The log's leader-epoch cache as it is now (a copy will do: it is only read)."""
        ...

    def append_fetched(self, fetch_offset: int, records: R_contra) -> None:
        """Append the leader's records (its offsets and epochs) at ``fetch_offset``."""
        ...

    def truncate_diverged(self, offset: int) -> None:
        """Drop the log and its leader-epoch cache from ``offset`` on (whole batches; the
        log may end below ``offset``); nothing at or beyond the log end.

        The log's own cache never holds an epoch that wrote nothing (a leader assigns its
        epoch in a copy; the log learns it from the first record), so a truncation at the
        log end has nothing to remove.
        """
        ...


class NextFetch(enum.Enum):
    """When the fetcher sends this partition's next fetch."""

    NOW = "now"
    """Truncated, or the answer was stale: fetch again at once."""
    AFTER_FLUSH = "after_flush"
    """Records were appended: make them durable, publish the high watermark, then fetch
    (the next fetch offset tells the leader they are on this replica's disk)."""
    CAUGHT_UP = "caught_up"
    """Nothing new: fetch again; the leader holds the fetch open until data arrives."""
    BACK_OFF = "back_off"
    """A retriable error: fetch again after the back-off."""
    AWAIT_METADATA = "await_metadata"
    """This follower's view of the leader is stale: wait for the metadata log."""


def handle_fetch_response(
    state: FollowerState, log: FollowerLog[R], response: FetchResponse[R]
) -> NextFetch:
    """Let ``state`` decide on ``response``, perform it on ``log``, say when to fetch next."""
    action = state.on_fetch_response(response, log.log_end_offset, log.leader_epoch_cache)
    if isinstance(action, AppendRecords):
        if action.records_end_offset == action.fetch_offset:
            return NextFetch.CAUGHT_UP
        log.append_fetched(action.fetch_offset, action.records)
        if log.log_end_offset != action.records_end_offset:
            raise ReplicationInvariantError(
                f"replica={state.replica_id} appended up to {action.records_end_offset} but "
                f"its log ends at {log.log_end_offset}"
            )
        return NextFetch.AFTER_FLUSH
    if isinstance(action, TruncateTo):
        log.truncate_diverged(action.offset)
        state.on_truncated(log.log_end_offset)
        return NextFetch.NOW
    if isinstance(action, AwaitMetadata):
        return NextFetch.AWAIT_METADATA
    if isinstance(action, BackOff):
        return NextFetch.BACK_OFF
    assert isinstance(action, Ignore)
    return NextFetch.NOW
