"""What the leader core of a partition returns to its shell.

Frozen values, one per kind of answer: a follower fetch's decision (:class:`ServeFrom` or
:class:`DivergingEpoch`) with the :class:`LeaderUpdate` of that step (together a
:class:`FetchOutcome`), the update of every other step (the new high watermark, an
AlterPartition to send, the ``acks=all`` waits to judge again, the followers to wake), and
an ``acks=all`` verdict (:class:`AcksAllStatus`). The rules that produce them are in
:mod:`replica.replication.leader_state`.
"""

from __future__ import annotations

from dataclasses import dataclass

from lograft.protocol.errors import LograftError
from replica.replication.leader_epoch_cache import EpochEndOffset
from replica.replication.messages import IsrProposal

__all__ = [
    "NO_CHANGE",
    "AcksAllStatus",
    "DivergingEpoch",
    "FetchDecision",
    "FetchOutcome",
    "LeaderUpdate",
    "ServeFrom",
]


@dataclass(frozen=True, slots=True)
class ServeFrom:
    """Serve records from ``fetch_offset``; the response carries ``high_watermark``."""

    fetch_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """The follower's log diverges: ``diverging.epoch`` ends at ``diverging.end_offset``."""

    diverging: EpochEndOffset
    high_watermark: int


FetchDecision = ServeFrom | DivergingEpoch
"""What :meth:`LeaderState.on_follower_fetch` decides."""


@dataclass(frozen=True, slots=True)
class LeaderUpdate:
    """What one step of a :class:`LeaderState` changed, for the shell to perform.

    The shell sends ``isr_proposal``, publishes ``high_watermark`` (consumers may read up
    to it), judges its waiting ``acks=all`` produces again if ``recheck_acks``
    (:meth:`LeaderState.completed_acks_all`), and wakes held follower fetches if
    ``wake_followers``. A field left at its default asks for nothing.
    """

    high_watermark: int | None = None
    """The new high watermark, when this step advanced it (or the one a leader opens with)."""
    isr_proposal: IsrProposal | None = None
    """An AlterPartition to send to the controller."""
    isr_committed: tuple[int, ...] | None = None
    """The ISR this step took as committed (:meth:`LeaderState.on_isr_committed`)."""
    recheck_acks: bool = False
    """A waiting ``acks=all`` produce may be done or failed now: the HW advanced, or the
    committed ISR or ``min.insync.replicas`` changed (the only inputs of that verdict)."""
    wake_followers: bool = False
    """The leader's log grew, or it just became leader: held follower fetches may answer."""


NO_CHANGE = LeaderUpdate()
"""A step that changed nothing the shell acts on."""


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What :meth:`LeaderState.on_follower_fetch` returns: the answer and the update."""

    decision: FetchDecision
    update: LeaderUpdate = NO_CHANGE


@dataclass(frozen=True, slots=True)
class AcksAllStatus:
    """Outcome of an ``acks=all`` produce waiting for ``required_offset``.

    ``done`` and no error: answer success. ``done`` with an error: answer the error.
    Not ``done``: keep waiting.
    """

    done: bool
    error: LograftError | None = None
