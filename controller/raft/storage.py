"""The storage the Raft core reads, and an in-memory implementation for tests.

The core never writes storage: it hands the application a :class:`~controller.raft.node.Ready`
with what to persist, the application writes and fsyncs it, then calls ``advance``. The core
only *reads* what is already stored (its own not-yet-persisted entries it keeps in memory).
This is etcd's ``Storage`` interface in KRaft's words.

Offsets: the log holds entries ``[log_start_offset, log_end_offset)``. A snapshot, if any,
covers everything below ``log_start_offset``; the epoch of entry ``log_start_offset - 1`` is
the snapshot's epoch (0 for an empty log at offset 0).

Thread-safety: none; the core and the shell call it from one thread (the node's event loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from controller.raft.messages import Entry, HardState, Snapshot

if TYPE_CHECKING:
    from controller.raft.node import Ready

__all__ = ["MemoryStorage", "Storage"]


class Storage(Protocol):
    """Read access to the persisted hard state, snapshot and log."""

    def hard_state(self) -> HardState:
        """The last persisted epoch and vote (``HardState(0, None)`` for a new node)."""
        ...

    def snapshot(self) -> Snapshot | None:
        """The latest persisted snapshot, if any."""
        ...

    def log_start_offset(self) -> int:
        """Offset of the first entry kept in the log (the snapshot's end offset, or 0)."""
        ...

    def log_end_offset(self) -> int:
        """One past the offset of the last persisted entry."""
        ...

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at ``offset`` for ``log_start_offset - 1 <= offset < end``."""
        ...

    def entries(self, start: int, end: int) -> Sequence[Entry]:
        """Entries ``[start, end)``, all inside ``[log_start_offset, log_end_offset)``."""
        ...


class MemoryStorage:
    """A :class:`Storage` held in memory, with the write side the application drives.

    :meth:`write` applies a ``Ready`` in the documented order. Used by unit tests and, with
    a fsync model around it, by the simulator.
    """

    __slots__ = ("_entries", "_hard_state", "_snapshot", "_start")

    def __init__(self) -> None:
        self._hard_state = HardState(0, None)
        self._snapshot: Snapshot | None = None
        self._start = 0
        self._entries: list[Entry] = []

    # --- read side (the Storage protocol) ---------------------------------------------

    def hard_state(self) -> HardState:
        """See :meth:`Storage.hard_state`."""
        return self._hard_state

    def snapshot(self) -> Snapshot | None:
        """See :meth:`Storage.snapshot`."""
        return self._snapshot

    def log_start_offset(self) -> int:
        """See :meth:`Storage.log_start_offset`."""
        return self._start

    def log_end_offset(self) -> int:
        """See :meth:`Storage.log_end_offset`."""
        return self._start + len(self._entries)

    def epoch_at(self, offset: int) -> int:
        """See :meth:`Storage.epoch_at`."""
        if offset == self._start - 1:
            return self._snapshot.epoch if self._snapshot is not None else 0
        if not self._start <= offset < self.log_end_offset():
            raise IndexError(
                f"offset {offset} outside [{self._start - 1}, {self.log_end_offset()})"
            )
        return self._entries[offset - self._start].epoch

    def entries(self, start: int, end: int) -> Sequence[Entry]:
        """See :meth:`Storage.entries`."""
        if not self._start <= start <= end <= self.log_end_offset():
            raise IndexError(
                f"range [{start}, {end}) outside [{self._start}, {self.log_end_offset()})"
            )
        return self._entries[start - self._start : end - self._start]

    # --- write side ----------------------------------------------------------------------

    def set_hard_state(self, hard_state: HardState) -> None:
        """Store the epoch and vote."""
        self._hard_state = hard_state

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` and drop every entry below its end offset."""
        if self._snapshot is not None and snapshot.end_offset <= self._snapshot.end_offset:
            return  # an older or equal image: the newer one already covers it
        end = self.log_end_offset()
        if snapshot.end_offset >= end:
            self._entries = []
        else:
            del self._entries[: snapshot.end_offset - self._start]
        self._start = snapshot.end_offset
        self._snapshot = snapshot

    def truncate_from(self, offset: int) -> None:
        """Drop every entry at ``offset`` and above."""
        if offset < self._start:
            raise IndexError(f"cannot truncate below log start {self._start}: {offset}")
        del self._entries[offset - self._start :]

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that continue the log exactly at its end offset."""
        expected = self.log_end_offset()
        for entry in entries:
            if entry.offset != expected:
                raise IndexError(f"append at {entry.offset}, log end offset is {expected}")
            self._entries.append(entry)
            expected += 1

    def write(self, ready: Ready) -> None:
        """Apply what ``ready`` asks to persist, in order: snapshot, truncation, entries, vote.

        A real store would fsync after this, before the ready's messages are sent.
        """
        if ready.snapshot is not None:
            self.save_snapshot(ready.snapshot)
        if ready.truncate_from_offset is not None:
            self.truncate_from(ready.truncate_from_offset)
        if ready.entries:
            self.append(ready.entries)
        if ready.hard_state is not None:
            self.set_hard_state(ready.hard_state)

    def copy(self) -> MemoryStorage:
        """An independent copy (entries are immutable, so they are shared)."""
        other = MemoryStorage()
        other._hard_state = self._hard_state
        other._snapshot = self._snapshot
        other._start = self._start
        other._entries = list(self._entries)
        return other
