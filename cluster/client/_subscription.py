"""The consumer's subscription state (Kafka's ``SubscriptionState``): what it reads, from where.

One ``PartitionState`` per partition the consumer reads (assigned with ``assign``, or owned
in its group with ``subscribe``): its position (the offset of the next record ``poll``
returns), the offset the next fetch asks for, a pending reset (``seek_to_beginning``,
``seek_to_end``, ``auto.offset.reset``), whether it is paused, the fetched records not
yet handed out, and since when its leader has not answered (none elected, or unreachable).
Every seek renews the partition's *epoch*, so answers to fetches and lookups sent before it
are recognised as stale and dropped.

Bookkeeping only: nothing here does I/O or starts threads. Not thread-safe: the consumer's
polling thread owns it.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lograft.protocol.batch_header import BatchHeader
from lograft.protocol.errors import IllegalStateError
from lograft.protocol.record_codec import BatchSkip

from ._connection import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "CompletedFetch",
    "PartitionState",
    "SubscriptionState",
]

logger = logging.getLogger(__name__)

EARLIEST = -2
"""A reset to the first offset (``ListOffsets`` timestamp -2)."""
LATEST = -1
"""A reset to the end offset (``ListOffsets`` timestamp -1)."""


@dataclass(slots=True)
class CompletedFetch:
    """The batches one fetch returned for one partition, decoded a batch at a time as
    ``poll`` hands out their records (``poll_batches`` hands out the batches' bytes)."""

    data: bytes
    """The fetched record batches, as the broker sent them."""
    fetch_offset: int
    """The offset fetched from: records before it (in the first batch) are not returned."""
    next_offset: int
    """The offset after the last whole batch."""
    skip: BatchSkip | None = None
    """Batches to drop (a ``read_committed`` consumer's aborted transactions)."""
    cursor: int = 0
    """Where in ``data`` the next batch not yet decoded or handed out starts."""
    batch: BatchHeader | None = None
    """The batch ``records`` were decoded from."""
    records: list[Any] = field(default_factory=list)
    """``ConsumerRecord`` objects of ``batch`` that ``poll`` has not returned yet."""


@dataclass(slots=True)
class PartitionState:
    """How far the consumer has read one partition, and what it has fetched of it."""

    position: int | None = None
    """The offset of the next record ``poll`` returns; ``None``: reset first."""
    fetch_offset: int | None = None
    """The offset the next fetch asks for (past buffered data)."""
    reset: int | None = None
    """A pending ``seek_to_beginning`` (-2) or ``seek_to_end`` (-1)."""
    epoch: int = 0
    """Unique per consumer; renewed by every seek, so data fetched before it is dropped."""
    committed_pending: bool = False
    """The group's committed offset is to be read before the position is known."""
    lookup: bool = False
    """A committed-offset or offset lookup for this state (its epoch) is in flight."""
    paused: bool = False
    in_flight: bool = False
    retry_at: float = 0.0
    high_watermark: int = -1
    buffered: deque[CompletedFetch] = field(default_factory=deque)
    stalled_since: float | None = None
    """Since when (consumer clock) fetches and offset lookups of this partition fail for
    want of a leader that answers (none elected, unreachable, or not the leader any more);
    ``None`` while they succeed. A seek leaves it: it does not bring a leader."""
    stalled_reason: str = ""
    """Why, as the last failure said (``LEADER_NOT_AVAILABLE: T-1``, ...)."""

    def note_stalled(self, now: float, reason: str) -> None:
        """A fetch or lookup of this partition could not be made or failed retriably."""
        if self.stalled_since is None:
            self.stalled_since = now
        self.stalled_reason = reason

    def note_answered(self) -> None:
        """Its leader answered for it: no longer stalled."""
        self.stalled_since = None
        self.stalled_reason = ""


class SubscriptionState:
    """The partitions a consumer reads and the state of each; see the module docstring.

    ``discard`` is called with ``(topic, partition)`` pairs whose records already returned
    by ``poll`` but not yet handed out (by iterating the consumer) are to be forgotten: the
    partition was dropped or its position moved.
    """

    def __init__(
        self,
        reset_policy: str,
        *,
        committed_first: bool,
        discard: Callable[[set[tuple[str, int]]], None],
    ) -> None:
        self.reset_policy = reset_policy
        """``auto.offset.reset``: ``earliest``, ``latest`` or ``none``."""
        self.states: dict[TopicPartition, PartitionState] = {}
        self.mode: Literal["assign", "subscribe"] | None = None
        """How the partitions were chosen: ``assign``, ``subscribe`` or neither yet."""
        self.topics: tuple[str, ...] = ()
        """The subscribed topics, sorted (empty without ``subscribe``)."""
        self._committed_first = committed_first
        self._discard = discard
        self._epochs = itertools.count(1)

    def new_state(self) -> PartitionState:
        """The state of a partition just added: first the committed offset, with a group."""
        return PartitionState(epoch=self.new_epoch(), committed_pending=self._committed_first)

    def new_epoch(self) -> int:
        """An epoch no partition state has had yet."""
        return next(self._epochs)

    def state(self, tp: TopicPartition) -> PartitionState:
        """The state of ``tp``; raises ``IllegalStateError`` if it is not read."""
        state = self.states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned")
        return state

    def assign(self, wanted: Iterable[TopicPartition]) -> None:
        """Read exactly ``wanted``: states of partitions kept stay, new ones start fresh."""
        self.states = {tp: self.states.get(tp) or self.new_state() for tp in wanted}

    def add(self, partitions: Iterable[TopicPartition]) -> None:
        """Start reading ``partitions`` (given by the group), each with a fresh state."""
        for tp in partitions:
            self.states[tp] = self.new_state()

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop reading ``partitions``: forget their positions and every record fetched."""
        dropped = set()
        for tp in partitions:
            state = self.states.pop(tp, None)
            if state is not None:
                state.buffered.clear()
                dropped.add((tp.topic, tp.partition))
        if dropped:
            self._discard(dropped)

    def moved(self, tp: TopicPartition, state: PartitionState) -> None:
        """The position of ``tp`` changes: drop what was fetched or looked up for the old one."""
        state.epoch = self.new_epoch()
        state.buffered.clear()
        state.retry_at = 0.0
        state.committed_pending = False
        state.lookup = False  # the answer of one in flight is for the old epoch
        self._discard({(tp.topic, tp.partition)})

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next offset ``poll`` returns for ``tp``."""
        state = self.state(tp)
        self.moved(tp, state)
        state.position = offset
        state.fetch_offset = offset
        state.reset = None

    def request_reset(self, tp: TopicPartition, state: PartitionState, spec: int) -> None:
        """Forget the position of ``tp``: look it up again as ``spec`` (EARLIEST or LATEST)."""
        self.moved(tp, state)
        state.position = state.fetch_offset = None
        state.reset = spec

    def default_reset(self) -> int:
        """The reset ``auto.offset.reset`` asks for (``none``: LATEST; callers check it)."""
        return EARLIEST if self.reset_policy == "earliest" else LATEST

    def reset_spec(self, tp: TopicPartition, state: PartitionState) -> int:
        """Where ``tp`` starts without a position: a pending seek, else ``auto.offset.reset``."""
        if state.reset is not None:
            return state.reset
        if self.reset_policy == "none":
            raise IllegalStateError(
                f"no position for {tp.topic}-{tp.partition} and "
                "auto.offset.reset=none: call seek() first"
            )
        return self.default_reset()

    def apply_committed(self, found: Mapping[TopicPartition, int | None]) -> None:
        """Start partitions waiting for it at their committed offset (if the group has one)."""
        for tp, offset in found.items():
            state = self.states.get(tp)
            if state is None or not state.committed_pending:
                continue  # dropped or moved meanwhile
            state.committed_pending = False
            if offset is not None and state.position is None:
                state.position = state.fetch_offset = offset
                state.reset = None
                logger.debug(
                    "position from committed offset topic=%s partition=%d offset=%d",
                    tp.topic,
                    tp.partition,
                    offset,
                )

    def apply_offsets(self, found: Mapping[TopicPartition, int]) -> None:
        """Start partitions still without a position at the offsets their reset found."""
        for tp, offset in found.items():
            resolved = self.states.get(tp)
            if resolved is None or resolved.position is not None or resolved.committed_pending:
                continue
            resolved.position = resolved.fetch_offset = max(offset, 0)
            resolved.reset = None
            logger.debug(
                "position reset topic=%s partition=%d offset=%d", tp.topic, tp.partition, offset
            )

    def positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The known positions of ``partitions``: offsets of what ``poll`` returned, + 1."""
        found: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self.states.get(tp)
            if state is not None and state.position is not None:
                found[tp] = state.position
        return found

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, state in self.states.items() if state.paused}

    def stalled(self, now: float, min_s: float) -> dict[TopicPartition, str]:
        """Partitions whose leader has not answered for at least ``min_s`` (→ why)."""
        return {
            tp: state.stalled_reason
            for tp, state in self.states.items()
            if state.stalled_since is not None and now - state.stalled_since >= min_s
        }
