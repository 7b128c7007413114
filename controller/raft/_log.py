"""The core's view of its log: persisted storage plus entries not yet persisted.

etcd calls this ``raftLog`` (storage + ``unstable``). Entries at and above
``unstable_offset`` live in memory until the application reports them persisted
(``stable_to``). Persisted entries at or above ``unstable_offset`` are *logically gone*:
the next ``Ready`` tells the application to truncate them. A snapshot received from the
leader or taken locally is held as ``pending_snapshot`` until persisted; while it is
pending the view starts at its end offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.raft.errors import RaftInvariantError
from controller.raft.messages import Entry, Snapshot, SnapshotId
from controller.raft.storage import Storage


class RaftLog:
    """Storage plus the unstable suffix and a pending snapshot (not thread-safe)."""

    __slots__ = ("pending_snapshot", "storage", "unstable", "unstable_offset")

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.pending_snapshot: Snapshot | None = None
        self.unstable_offset = storage.log_end_offset()
        self.unstable: list[Entry] = []

    # --- reads -------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """First offset the view can serve entries for."""
        if self.pending_snapshot is not None:
            return self.pending_snapshot.end_offset
        return self.storage.log_start_offset()

    @property
    def log_end_offset(self) -> int:
        """One past the last entry in the view."""
        return self.unstable_offset + len(self.unstable)

    def snapshot_id(self) -> SnapshotId | None:
        """Id of the newest snapshot (pending or persisted)."""
        snap = self.snapshot()
        return None if snap is None else snap.id

    def snapshot(self) -> Snapshot | None:
        """The newest snapshot (pending or persisted)."""
        if self.pending_snapshot is not None:
            return self.pending_snapshot
        return self.storage.snapshot()

    def epoch_at(self, offset: int) -> int | None:
        """Epoch of the entry at ``offset``; ``None`` when compacted away or past the end.

        ``log_start_offset - 1`` answers the snapshot's epoch (0 for offset -1).
        """
        if offset >= self.unstable_offset:
            index = offset - self.unstable_offset
            return self.unstable[index].epoch if index < len(self.unstable) else None
        start = self.log_start_offset
        if offset == start - 1:
            if offset < 0:
                return 0
            snap = self.snapshot()
            if snap is None:
                raise RaftInvariantError(f"log starts at {start} but there is no snapshot")
            return snap.epoch
        if offset < start:
            return None
        return self.storage.epoch_at(offset)

    @property
    def last_epoch(self) -> int:
        """Epoch of the last entry (or of the snapshot, or 0)."""
        epoch = self.epoch_at(self.log_end_offset - 1)
        if epoch is None:
            raise RaftInvariantError("the last entry of the log has no epoch")
        return epoch

    def entries(self, start: int, end: int) -> list[Entry]:
        """Entries ``[start, end)`` clipped to the view; ``start`` must not be compacted."""
        end = min(end, self.log_end_offset)
        if start < self.log_start_offset:
            raise RaftInvariantError(
                f"entries from {start} are compacted (start {self.log_start_offset})"
            )
        if start >= end:
            return []
        result: list[Entry] = []
        if start < self.unstable_offset:
            result.extend(self.storage.entries(start, min(end, self.unstable_offset)))
        if end > self.unstable_offset:
            lo = max(start, self.unstable_offset) - self.unstable_offset
            result.extend(self.unstable[lo : end - self.unstable_offset])
        return result

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """Kafka's ``endOffsetForEpoch``: the largest epoch ``<= epoch`` and where it ends.

        Returns ``(found_epoch, end_offset)``, end_offset being the first offset whose entry
        has a larger epoch (or the log end offset). ``None`` when the answer lies inside the
        snapshot, so the asker must fetch the snapshot instead.
        """
        offset = self.log_end_offset - 1
        start = self.log_start_offset
        # Scan back over entries with a larger epoch; divergence is normally near the end.
        while offset >= start:
            entry_epoch = self.epoch_at(offset)
            if entry_epoch is None:
                raise RaftInvariantError(f"missing entry at {offset}")
            if entry_epoch <= epoch:
                return entry_epoch, offset + 1
            offset -= 1
        base_epoch = self.epoch_at(start - 1)
        if base_epoch is not None and base_epoch <= epoch:
            return base_epoch, start  # every entry after the snapshot has a larger epoch
        return None

    # --- writes (in memory until the application persists them) --------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that continue the view exactly at its end."""
        for entry in entries:
            if entry.offset != self.log_end_offset:
                raise RaftInvariantError(f"append at {entry.offset}, log end {self.log_end_offset}")
            self.unstable.append(entry)

    def truncate_to(self, end_offset: int) -> None:
        """Drop every entry at ``end_offset`` and above."""
        if end_offset >= self.log_end_offset:
            return
        if end_offset < self.log_start_offset:
            raise RaftInvariantError(
                f"truncate to {end_offset} below log start {self.log_start_offset}"
            )
        if end_offset >= self.unstable_offset:
            del self.unstable[end_offset - self.unstable_offset :]
        else:
            self.unstable = []
            self.unstable_offset = end_offset

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot`` (a lagging replica catching up)."""
        self.pending_snapshot = snapshot
        self.unstable = []
        self.unstable_offset = snapshot.end_offset

    def compact(self, snapshot: Snapshot) -> None:
        """Drop the prefix covered by a snapshot the application took locally."""
        if snapshot.end_offset > self.unstable_offset:
            raise RaftInvariantError("cannot compact entries that are not persisted yet")
        self.pending_snapshot = snapshot

    # --- the ready/advance handshake -------------------------------------------------------

    def truncate_from_offset(self) -> int | None:
        """Where persisted entries must be cut before the unstable ones are appended."""
        if self.storage.log_end_offset() > self.unstable_offset:
            return self.unstable_offset
        return None

    def stable_to(self, offset: int, epoch: int) -> None:
        """The application persisted entries up to ``offset`` (with ``epoch``)."""
        if offset < self.unstable_offset or self.epoch_at(offset) != epoch:
            return  # truncated or replaced since that Ready; the next Ready carries it
        drop = offset + 1 - self.unstable_offset
        del self.unstable[:drop]
        self.unstable_offset = offset + 1

    def snapshot_persisted(self, snapshot: Snapshot) -> None:
        """The application persisted ``snapshot``."""
        if self.pending_snapshot is snapshot:
            self.pending_snapshot = None
