"""The follower side of one partition: what to fetch next and what a fetch answer means.

Pure: with each call the shell passes the local log's end offset and its leader-epoch
cache *as they are now* (the log changes both as it appends and truncates; the core keeps
no copy that could go stale) and gets an action back. Not thread-safe.

A follower at ``leader_epoch`` fetches from ``leader_id`` with its log end offset as the
fetch offset and the epoch of its last record as ``last_fetched_epoch``. The answer is one
of (Kafka's ``AbstractFetcherThread`` with KIP-320 truncation on fetch):

* records -> :class:`AppendRecords`: append them at the fetch offset; the follower's high
  watermark becomes ``min(leader high watermark, new log end offset)`` (Kafka's
  ``maybeUpdateHighWatermark``: it may come down, when a new leader's lags this one's);
* a diverging epoch -> :class:`TruncateTo`: truncate the log (and the epoch cache) to the
  offset, log it, fetch again (the next fetch may diverge again, one epoch further back);
* ``FENCED_LEADER_EPOCH`` / ``NOT_LEADER_OR_FOLLOWER`` -> :class:`AwaitMetadata`: this
  follower's view is stale; wait for the metadata log to name the new leader;
* ``UNKNOWN_LEADER_EPOCH`` and other retriable errors -> :class:`BackOff`: the leader is
  behind; retry after a back-off;
* an answer for another epoch or another fetch offset (late, duplicated, reordered) ->
  :class:`Ignore`.

Truncating below the follower's high watermark would drop committed records: it raises
:class:`ReplicationInvariantError`, unless the topic allows unclean leader election
(``unclean.leader.election.enable``): then committed records may really be gone, the
truncation goes ahead, the high watermark comes down with it, and it is logged as an error
naming both offsets (Kafka's behaviour).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Generic, TypeVar

from lograft.protocol.errors import (
    FencedLeaderEpochError,
    LograftError,
    NotLeaderOrFollowerError,
)
from replica.replication.errors import ReplicationInvariantError
from replica.replication.leader_epoch_cache import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
)
from replica.replication.messages import FetchRequest, FetchResponse

__all__ = [
    "AppendRecords",
    "AwaitMetadata",
    "BackOff",
    "FollowerAction",
    "FollowerState",
    "Ignore",
    "TruncateTo",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class AppendRecords(Generic[R]):
    """Append ``records`` at ``fetch_offset`` (the log end); then HW = ``high_watermark``."""

    fetch_offset: int
    records: R
    records_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Truncate the log and the leader-epoch cache to ``offset``, then fetch again.

    ``leader_epoch`` / ``leader_end_offset`` are the leader's diverging epoch answer, for
    the log line. ``complete`` is False when the follower did not know the leader's epoch
    (KIP-279): the next fetch continues the search one epoch further back.
    """

    offset: int
    leader_epoch: int
    leader_end_offset: int
    complete: bool


@dataclass(frozen=True, slots=True)
class AwaitMetadata:
    """Stop fetching until the metadata log names a leader at a newer epoch."""

    error: LograftError


@dataclass(frozen=True, slots=True)
class BackOff:
    """Retry the same fetch after ``replica.fetch.backoff.ms``."""

    error: LograftError


@dataclass(frozen=True, slots=True)
class Ignore:
    """A stale answer (another epoch or fetch offset): drop it."""

    reason: str


FollowerAction = AppendRecords[R] | TruncateTo | AwaitMetadata | BackOff | Ignore
"""What :meth:`FollowerState.on_fetch_response` tells the shell to do."""


class FollowerState:
    """A follower of ``leader_id`` at ``leader_epoch`` (a new epoch is a new object).

    ``logger`` is the shell's (named ``replica.replication``): the core logs its start and
    its truncations there.
    """

    __slots__ = (
        "_high_watermark",
        "_log",
        "leader_epoch",
        "leader_id",
        "replica_id",
        "unclean_leader_election",
    )

    def __init__(
        self,
        *,
        replica_id: int,
        leader_id: int,
        leader_epoch: int,
        high_watermark: int,
        logger: logging.Logger,
        unclean_leader_election: bool = False,
    ) -> None:
        if leader_id == replica_id:
            raise ReplicationInvariantError(f"replica={replica_id} cannot follow itself")
        if high_watermark < 0:
            raise ReplicationInvariantError(
                f"replica={replica_id} follows with negative high watermark {high_watermark}"
            )
        self._log = logger
        self.replica_id = replica_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.unclean_leader_election = unclean_leader_election
        self._high_watermark = high_watermark
        logger.info(
            "partition follower start replica=%d leader=%d leader_epoch=%d high_watermark=%d",
            replica_id,
            leader_id,
            leader_epoch,
            high_watermark,
        )

    @property
    def high_watermark(self) -> int:
        """The last high watermark learned from the leader, capped at the local log end."""
        return self._high_watermark

    def fetch_request(self, log_end_offset: int, epoch_cache: LeaderEpochCache) -> FetchRequest:
        """The next fetch: from the log end, with the epoch of the last record."""
        return FetchRequest(
            replica_id=self.replica_id,
            current_leader_epoch=self.leader_epoch,
            fetch_offset=log_end_offset,
            last_fetched_epoch=epoch_cache.latest_epoch,
        )

    def on_fetch_response(
        self, response: FetchResponse[R], log_end_offset: int, epoch_cache: LeaderEpochCache
    ) -> FollowerAction[R]:
        """Decide what to do with the leader's answer (see the module docstring)."""
        if response.error is not None:
            if isinstance(response.error, FencedLeaderEpochError | NotLeaderOrFollowerError):
                return AwaitMetadata(response.error)
            return BackOff(response.error)
        if response.leader_epoch != self.leader_epoch:
            return Ignore(f"answer of epoch {response.leader_epoch}, following {self.leader_epoch}")
        if response.fetch_offset != log_end_offset:
            return Ignore(f"answer for offset {response.fetch_offset}, log end {log_end_offset}")
        if response.diverging_epoch is not None:
            diverging = response.diverging_epoch
            return self._truncation(
                diverging.epoch, diverging.end_offset, log_end_offset, epoch_cache
            )
        if response.records_end_offset < response.fetch_offset:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} records end {response.records_end_offset} before "
                f"fetch offset {response.fetch_offset}"
            )
        self._high_watermark = min(response.high_watermark, response.records_end_offset)
        return AppendRecords(
            response.fetch_offset,
            response.records,
            response.records_end_offset,
            self._high_watermark,
        )

    def on_truncated(self, log_end_offset: int) -> None:
        """The shell performed a :class:`TruncateTo`; the log now ends at ``log_end_offset``.

        A log truncates whole batches, so it may end below the offset asked for; ending
        below the high watermark is checked by the same rule as the truncation itself.
        """
        if log_end_offset < self._high_watermark:
            self._check_truncation(log_end_offset)

    def check_invariants(self, log_end_offset: int) -> None:
        """Raise :class:`ReplicationInvariantError` if what holds between steps does not.

        ``log_end_offset`` is the local log's end now: the high watermark is not negative
        and does not pass it (a truncation below it lowered it, or raised), and this
        replica does not follow itself. A simulation calls this after every event.
        """
        hw = self._high_watermark
        if not 0 <= hw <= log_end_offset or self.leader_id == self.replica_id:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} follows {self.leader_id} at leader_epoch="
                f"{self.leader_epoch} with high watermark {hw}, log end {log_end_offset}"
            )

    def _check_truncation(self, offset: int) -> None:
        if offset >= self._high_watermark:
            return
        if not self.unclean_leader_election:
            raise ReplicationInvariantError(
                f"replica={self.replica_id} leader_epoch={self.leader_epoch} would truncate "
                f"to {offset}, below its high watermark {self._high_watermark}"
            )
        self._log.error(
            "partition follower truncating below high watermark after an unclean leader "
            "election replica=%d leader=%d leader_epoch=%d offset=%d high_watermark=%d",
            self.replica_id,
            self.leader_id,
            self.leader_epoch,
            offset,
            self._high_watermark,
        )
        self._high_watermark = offset

    def _truncation(
        self,
        leader_epoch: int,
        leader_end_offset: int,
        log_end_offset: int,
        epoch_cache: LeaderEpochCache,
    ) -> TruncateTo:
        # Kafka's AbstractFetcherThread.getOffsetTruncationState.
        if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
            offset, complete = min(self._high_watermark, log_end_offset), True
        elif leader_epoch == UNDEFINED_EPOCH:
            offset, complete = min(leader_end_offset, log_end_offset), True
        else:
            mine = epoch_cache.end_offset_for(leader_epoch, log_end_offset)
            if mine.is_undefined:
                offset, complete = min(leader_end_offset, log_end_offset), True
            elif mine.epoch != leader_epoch:
                offset, complete = min(mine.end_offset, log_end_offset), False
            else:
                offset = min(mine.end_offset, leader_end_offset, log_end_offset)
                complete = True
        self._check_truncation(offset)
        self._log.info(
            "partition follower truncate replica=%d leader=%d leader_epoch=%d offset=%d "
            "log_end_offset=%d diverging_epoch=%d diverging_end_offset=%d complete=%s",
            self.replica_id,
            self.leader_id,
            self.leader_epoch,
            offset,
            log_end_offset,
            leader_epoch,
            leader_end_offset,
            complete,
        )
        return TruncateTo(offset, leader_epoch, leader_end_offset, complete)
