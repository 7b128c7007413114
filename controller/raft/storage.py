"""The storage the Raft core reads, and an in-memory implementation of it.

The core never writes storage: it hands the application a :class:`~controller.raft.ready.Ready`
with what to persist, the application writes and fsyncs it, then calls ``advance``. The core
only *reads* what is already stored (its own not-yet-persisted entries it keeps in memory).
This is etcd's ``Storage`` interface in KRaft's words.

Offsets: the log holds entries ``[log_start_offset, log_end_offset)``. A snapshot, if any,
covers everything below ``log_start_offset``; the epoch of entry ``log_start_offset - 1`` is
the snapshot's epoch (0 for an empty log at offset 0).

:class:`MemoryStorage` is the whole in-memory view: unit tests and the simulator use it
alone, and :class:`~controller.storage.disk_storage.DiskStorage` keeps one as its read side
and adds persistence. So that a durable store can check a ``Ready`` before its first byte
of I/O, writing is split in two: :meth:`MemoryStorage.plan` validates and returns a
:class:`PlannedWrite` without changing anything, :meth:`MemoryStorage.apply` performs it.

Thread-safety: none; the core and the shell call it from one thread (the node's event loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from controller.raft.messages import Entry, HardState, Snapshot

if TYPE_CHECKING:
    from controller.raft.ready import Ready

__all__ = ["MemoryStorage", "PlannedWrite", "Storage"]


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


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """What one write does to a :class:`MemoryStorage`, already validated against it.

    Applied in the core's order: adopt ``snapshot`` (moving the log start to ``start``),
    keep the current entries ``[drop, drop + keep)`` (the rest fall below the snapshot or
    are truncated), append ``entries``, then store ``hard_state``. Indexes are into the
    entries held when the plan was made; a plan is only valid until the next change.
    """

    #: The snapshot to adopt, or ``None`` (none given, or not newer than the current one).
    snapshot: Snapshot | None
    #: The log start offset afterwards.
    start: int
    #: Current entries dropped from the front, below the new snapshot's end.
    drop: int
    #: Current entries kept after those dropped; the ones after them are truncated.
    keep: int
    #: Entries appended after the kept ones.
    entries: Sequence[Entry]
    #: The epoch and vote to store, or ``None`` when unchanged.
    hard_state: HardState | None


class MemoryStorage:
    """A :class:`Storage` held in memory, with the write side the application drives.

    :meth:`write` applies a ``Ready`` in the documented order. Used by unit tests and the
    simulator (with a fsync model around it), and as the read side of ``DiskStorage``.
    Every write is validated whole before anything changes: one that does not fit the log
    raises ``IndexError`` and leaves the storage as it was.
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

    def plan(self, ready: Ready) -> PlannedWrite:
        """Validate what ``ready`` asks to persist and return it as a plan; changes nothing.

        Raises ``IndexError`` when the truncation falls below the (new) log start or the
        entries do not continue the log at its end after the truncation.
        """
        return self._plan(
            ready.snapshot, ready.truncate_from_offset, ready.entries, ready.hard_state
        )

    def apply(self, planned: PlannedWrite) -> None:
        """Perform a plan made by :meth:`plan` on this storage, unchanged since."""
        if planned.snapshot is not None:
            self._snapshot = planned.snapshot
        self._start = planned.start
        # In place: appending at the end is the common case and must not copy the log.
        del self._entries[: planned.drop]
        del self._entries[planned.keep :]
        self._entries.extend(planned.entries)
        if planned.hard_state is not None:
            self._hard_state = planned.hard_state

    def write(self, ready: Ready) -> None:
        """Apply what ``ready`` asks to persist, in order: snapshot, truncation, entries, vote.

        A real store would fsync after this, before the ready's messages are sent.
        """
        self.apply(self.plan(ready))

    def set_hard_state(self, hard_state: HardState) -> None:
        """Store the epoch and vote."""
        self.apply(self._plan(None, None, (), hard_state))

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` and drop every entry below its end offset.

        An older or equal snapshot is ignored: the newer one already covers it.
        """
        self.apply(self._plan(snapshot, None, (), None))

    def truncate_from(self, offset: int) -> None:
        """Drop every entry at ``offset`` and above."""
        self.apply(self._plan(None, offset, (), None))

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that continue the log exactly at its end offset."""
        self.apply(self._plan(None, None, entries, None))

    def copy(self) -> MemoryStorage:
        """An independent copy (entries are immutable, so they are shared)."""
        other = MemoryStorage()
        other._hard_state = self._hard_state
        other._snapshot = self._snapshot
        other._start = self._start
        other._entries = list(self._entries)
        return other

    def _plan(
        self,
        snapshot: Snapshot | None,
        truncate_from: int | None,
        entries: Sequence[Entry],
        hard_state: HardState | None,
    ) -> PlannedWrite:
        start, held = self._start, len(self._entries)
        drop = 0
        if snapshot is not None and (
            self._snapshot is None or snapshot.end_offset > self._snapshot.end_offset
        ):
            # Entries past the snapshot's end stay, whether or not they continue it: the
            # core truncates them in the same Ready when they do not.
            drop = min(snapshot.end_offset - start, held)
            start = snapshot.end_offset
        else:
            snapshot = None
        keep = held - drop
        if truncate_from is not None:
            if truncate_from < start:
                raise IndexError(f"cannot truncate below log start {start}: {truncate_from}")
            keep = min(keep, truncate_from - start)
        expected = start + keep
        for entry in entries:
            if entry.offset != expected:
                raise IndexError(f"append at {entry.offset}, log end offset is {expected}")
            expected += 1
        return PlannedWrite(snapshot, start, drop, keep, entries, hard_state)
