"""What the core hands back: the :class:`Ready` batch and a refused step's :class:`Rejection`.

:mod:`controller.raft.node` describes the ``ready``/``advance`` contract these values carry.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.raft.messages import Entry, ErrorCode, HardState, RaftMessage, Snapshot
from controller.raft.quorum_state import Role

__all__ = ["Ready", "Rejection"]


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the core wants done, in one batch; see :mod:`controller.raft.node`.

    Persist first (``snapshot``, ``truncate_from_offset``, ``entries``, ``hard_state``, then
    fsync), then send ``messages``, then apply (``apply_snapshot``, ``committed_entries``),
    then ``advance(ready)``. Sending before the fsync breaks Raft: a vote or an
    acknowledged entry could be forgotten by a crash after the peer counted it.
    """

    #: Epoch and vote to persist, or ``None`` when unchanged.
    hard_state: HardState | None
    #: A snapshot to persist; then drop persisted entries below its end offset.
    snapshot: Snapshot | None
    #: True when ``snapshot`` came from the leader: reset the state machine to its image.
    apply_snapshot: bool
    #: Drop persisted entries at and above this offset (after the snapshot, before appending).
    truncate_from_offset: int | None
    #: Entries to append (they continue the log at its end after the truncation).
    entries: tuple[Entry, ...]
    #: Messages to send once the above is durable.
    messages: tuple[RaftMessage, ...]
    #: Committed entries to apply, in offset order (LEADER_CHANGE ones carry no data).
    committed_entries: tuple[Entry, ...]
    #: Soft state, for the shell's metrics and routing; nothing to persist.
    role: Role
    epoch: int
    leader_id: int | None
    high_watermark: int

    @property
    def must_sync(self) -> bool:
        """Whether step 1 has anything to write (and therefore fsync)."""
        return (
            self.hard_state is not None
            or self.snapshot is not None
            or self.truncate_from_offset is not None
            or bool(self.entries)
        )


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why ``step`` refused a message; the node's state did not change because of it."""

    error: ErrorCode
    detail: str
