"""Durable storage for a controller's metadata log directory (``__cluster_metadata-0/``).

:class:`DiskStorage` answers the Raft core's :class:`~controller.raft.storage.Storage`
reads from a :class:`~controller.raft.storage.MemoryStorage` it keeps, and persists each
``Ready`` with :meth:`DiskStorage.write`, which returns only once everything it wrote is on
stable storage; only then does the memory view change, by the same validated plan. This
module adds the persistence alone: the files, their order of writing and their recovery.
Byte formats are in :mod:`controller.storage.formats`.

Directory layout::

    quorum-state                               epoch and vote (atomic replace)
    metadata.log                               header(base offset) + framed entries
    <end_offset:020d>-<epoch:010d>.checkpoint  snapshots: the newest, plus the previous one
                                               while the log still covers its end
    .lock                                      flock against a second opener
    *.tmp                                      leftovers of an interrupted atomic write

Why two snapshots: when a local snapshot N supersedes C, the log file keeps its entries
from C's end (not N's), so a checkpoint N later found corrupt can be replaced by C plus
the log on the next open. Entries below N's end are dropped from memory at once (reads
never see them); the next snapshot's rewrite drops them from disk. A snapshot installed
from the leader that does not continue the log (it covers more than the log, or the log
holds a different epoch at its last offset) resets the log to start at its end, and then
only that snapshot is kept: if it is later found corrupt the directory is unrecoverable
and :meth:`DiskStorage.open` raises.

Persistence order inside :meth:`DiskStorage.write` (the core's order, each step durable
before the next, so a crash leaves a prefix of the steps):

1. the snapshot file (temp + fsync + rename + directory fsync);
2. the log: rewritten atomically when the snapshot moves its start, else truncated
   (``ftruncate`` at the remembered frame position) and appended (one ``pwrite``),
   then ``fsync`` (after a truncation) or ``fdatasync`` (appends only);
3. snapshot files no longer kept are deleted (directory fsync);
4. ``quorum-state`` (temp + fsync + rename + directory fsync).

Recovery (:meth:`DiskStorage.open`) treats every file as untrusted; see its docstring. It is
done by :mod:`controller.storage.recovery`; the file names are in
:mod:`controller.storage.layout`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from controller.raft.messages import Entry, HardState, Snapshot, SnapshotId
from controller.raft.storage import PlannedWrite
from controller.storage.formats import (
    encode_frame,
    encode_log_header,
    encode_quorum_state,
    encode_snapshot,
    snapshot_file_name,
)
from controller.storage.layout import LOCK_FILE, LOG_FILE, QUORUM_STATE_FILE
from controller.storage.recovery import Recovered, recover
from lograft.durable import create_directories, fsync_directory, write_file_atomically
from lograft.protocol.errors import KafkaStorageError

if TYPE_CHECKING:
    from controller.raft.ready import Ready

__all__ = ["LOCK_FILE", "LOG_FILE", "QUORUM_STATE_FILE", "DiskStorage"]

log = logging.getLogger(__name__)


class DiskStorage:
    """A durable :class:`~controller.raft.storage.Storage` over one metadata log directory.

    Build it with :meth:`open` (which recovers). Every entry since the snapshot, the
    snapshot and the hard state are held in a ``MemoryStorage``, so the read side never
    touches disk; :meth:`write` persists a ``Ready`` and returns once it is durable.

    Thread-safety: none inside; the shell serialises access. :meth:`write` runs on one
    worker thread at a time, and the read methods run on the event loop thread only while
    no ``write`` is in flight (the shell awaits the write before reading again). After a
    failed write (an ``OSError`` becomes :class:`KafkaStorageError`) the instance refuses
    further writes: what reached the disk is unknown, so the node must restart and recover.

    Errors: ``write`` raises ``IndexError`` (from ``MemoryStorage.plan``) or ``ValueError``
    for a ``Ready`` that does not fit the log, and ``MessageTooLargeError`` for an entry or
    snapshot over the size limits -- all before any I/O, so the disk is unchanged.
    """

    __slots__ = (
        "_closed",
        "_directory",
        "_failed",
        "_file_base",
        "_file_end",
        "_lock_fd",
        "_log_fd",
        "_memory",
        "_positions",
        "_snapshot_files",
    )

    def __init__(self, directory: Path, lock_fd: int, state: Recovered) -> None:
        """Use :meth:`open`; this adopts already recovered state and open descriptors."""
        self._directory = directory
        self._lock_fd = lock_fd
        self._log_fd = state.log_fd
        self._memory = state.memory
        #: File position of each entry of the memory view's log (same indexes).
        self._positions = state.positions
        self._file_base = state.file_base
        self._file_end = state.file_end
        self._snapshot_files = state.snapshot_files
        self._closed = False
        self._failed = False

    # --- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> DiskStorage:
        """Open (creating if new) and recover the metadata log directory ``directory``.

        Recovery, files being untrusted input:

        * ``*.tmp`` files (an interrupted atomic write) are removed with a WARNING.
        * ``quorum-state`` must be valid (exact fields, version, ranges, CRC); a corrupt
          one, or a missing one next to a log or snapshots, raises
          :class:`~controller.storage.formats.CorruptMetadataStorageError` (a
          ``KafkaStorageError``): resetting a vote could let this node vote twice.
        * The log is scanned from its header; at the first torn or corrupt frame, or one
          whose offset does not continue the sequence, the file is truncated there
          (``ftruncate`` + ``fsync``) and a WARNING gives ``dir position bytes_dropped``.
        * The newest valid snapshot whose end is not below the log's base offset is used;
          corrupt ones are skipped with a WARNING. A log base above every valid
          snapshot's end means committed entries are gone: fatal.
        * If that snapshot covers more than the log, or the log's entry at its last offset
          has another epoch (a crash between saving an installed snapshot and resetting
          the log), the log is reset to start at the snapshot's end. Otherwise entries
          between the log's base and the snapshot's end stay on disk (the fallback for an
          older snapshot) but are not served.

        Raises ``KafkaStorageError`` when the directory is locked by another opener or an
        I/O error occurs. Blocking (it reads the whole log and the chosen snapshot): call
        it before the event loop serves, or from a worker thread.
        """
        path = Path(directory)
        try:
            create_directories(path)
            lock_fd = _lock_directory(path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot open metadata log dir={path}: {exc}") from exc
        try:
            state = recover(path)
        except OSError as exc:
            os.close(lock_fd)
            raise KafkaStorageError(f"recovery failed dir={path}: {exc}") from exc
        except BaseException:
            os.close(lock_fd)
            raise
        storage = cls(path, lock_fd, state)
        log.info(
            "metadata log opened dir=%s epoch=%d voted_for=%s log_start_offset=%d "
            "log_end_offset=%d snapshot_epoch=%s size_bytes=%d",
            path,
            storage.hard_state().epoch,
            storage.hard_state().voted_for,
            storage.log_start_offset(),
            storage.log_end_offset(),
            None if (snapshot := storage.snapshot()) is None else snapshot.epoch,
            storage.size_bytes(),
        )
        return storage

    def close(self) -> None:
        """Close the log file and release the directory lock; idempotent, writes nothing.

        Reads keep answering from memory afterwards; writes raise.
        """
        if self._closed:
            return
        self._closed = True
        try:
            os.close(self._log_fd)
        finally:
            os.close(self._lock_fd)

    def __enter__(self) -> DiskStorage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- helpers for the shell -------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The metadata log directory."""
        return self._directory

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def snapshot_id(self) -> SnapshotId | None:
        """``(end_offset, epoch)`` of the current snapshot, or ``None``."""
        snapshot = self._memory.snapshot()
        return None if snapshot is None else snapshot.id

    def size_bytes(self) -> int:
        """Bytes on disk: the log file plus every snapshot file (no I/O; tracked)."""
        return self._file_end + sum(self._snapshot_files.values())

    def __repr__(self) -> str:
        return (
            f"DiskStorage(dir={str(self._directory)!r}, hard_state={self.hard_state()}, "
            f"snapshot={self.snapshot_id()}, "
            f"log=[{self.log_start_offset()}, {self.log_end_offset()}))"
        )

    # --- read side (the Storage protocol): the memory view, never the disk ------------------

    def hard_state(self) -> HardState:
        """See :meth:`Storage.hard_state`."""
        return self._memory.hard_state()

    def snapshot(self) -> Snapshot | None:
        """See :meth:`Storage.snapshot`."""
        return self._memory.snapshot()

    def log_start_offset(self) -> int:
        """See :meth:`Storage.log_start_offset`."""
        return self._memory.log_start_offset()

    def log_end_offset(self) -> int:
        """See :meth:`Storage.log_end_offset`."""
        return self._memory.log_end_offset()

    def epoch_at(self, offset: int) -> int:
        """See :meth:`Storage.epoch_at`."""
        return self._memory.epoch_at(offset)

    def entries(self, start: int, end: int) -> Sequence[Entry]:
        """See :meth:`Storage.entries`."""
        return self._memory.entries(start, end)

    # --- write side ------------------------------------------------------------------------

    def write(self, ready: Ready) -> None:
        """Persist ``ready``'s snapshot, truncation, entries and hard state; durable on return.

        Same semantics as ``MemoryStorage.write`` (an older or equal snapshot is ignored,
        entries below a new snapshot's end are dropped). A ``Ready`` with nothing to
        persist (``must_sync`` false) returns at once without any I/O. The whole ``Ready``
        is validated before the first byte is written.
        """
        if not ready.must_sync:
            return
        if self._closed:
            raise KafkaStorageError(f"metadata log is closed dir={self._directory}")
        if self._failed:
            raise KafkaStorageError(
                f"metadata log failed earlier, restart to recover dir={self._directory}"
            )
        plan = self._plan(ready)
        try:
            self._persist(plan)
        except OSError as exc:
            self._failed = True
            log.error(
                "metadata log write failed dir=%s errno=%s error=%s",
                self._directory,
                errno.errorcode.get(exc.errno or 0, exc.errno),
                exc,
            )
            raise KafkaStorageError(
                f"metadata log write failed dir={self._directory}: {exc}"
            ) from exc
        self._apply(plan)

    def _plan(self, ready: Ready) -> _Plan:
        """Validate ``ready`` and compute the new state and the I/O, touching nothing."""
        memory = self._memory
        plan = _Plan(memory.plan(ready))  # the log rules: IndexError before any I/O
        change = plan.change
        snapshot = change.snapshot
        start, end = memory.log_start_offset(), memory.log_end_offset()
        if snapshot is not None:
            plan.snapshot_blob = encode_snapshot(snapshot)
            if start < snapshot.end_offset <= end:
                continues = memory.epoch_at(snapshot.end_offset - 1) == snapshot.epoch
            else:
                continues = snapshot.end_offset == start
            plan.keep_snapshots = {snapshot_file_name(snapshot.end_offset, snapshot.epoch)}
            if continues:
                # Keep the log from the current snapshot's end, so that snapshot stays a
                # usable fallback should the new checkpoint be found corrupt on open.
                base, plan.rewrite_from = start, 0
                current = memory.snapshot()
                if current is not None:
                    plan.keep_snapshots.add(snapshot_file_name(current.end_offset, current.epoch))
            else:
                # The log does not lead to this snapshot: it restarts at its end, and the
                # previous snapshot (now separated from the log by a gap) is useless.
                base, plan.rewrite_from = snapshot.end_offset, change.drop
            if base != self._file_base:
                plan.rewrite_base = base
        if plan.rewrite_base is None and start + change.drop + change.keep < end:
            # A truncation above the snapshot: cut the file at that entry's frame.
            plan.truncate_position = self._positions[change.drop + change.keep]
        plan.new_frames = [encode_frame(entry) for entry in change.entries]
        if change.hard_state is not None:
            plan.hard_state_blob = encode_quorum_state(change.hard_state)
        return plan

    def _persist(self, plan: _Plan) -> None:
        """Do the I/O of ``plan`` in the documented order; each step durable before the next."""
        directory = self._directory
        snapshot = plan.change.snapshot
        if snapshot is not None and plan.snapshot_blob is not None:
            name = snapshot_file_name(snapshot.end_offset, snapshot.epoch)
            write_file_atomically(directory / name, plan.snapshot_blob)
            plan.snapshot_sizes[name] = len(plan.snapshot_blob)
        if plan.rewrite_base is not None:
            self._rewrite_log(plan, plan.rewrite_base)
        else:
            self._edit_log(plan)
        if plan.keep_snapshots is not None:
            keep = plan.keep_snapshots
            doomed = sorted(name for name in self._snapshot_files if name not in keep)
            for name in doomed:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / name)
            if doomed:
                fsync_directory(directory)
                log.info("metadata log deleted snapshots dir=%s files=%s", directory, doomed)
            plan.deleted = doomed
        if plan.hard_state_blob is not None:
            write_file_atomically(directory / QUORUM_STATE_FILE, plan.hard_state_blob)

    def _rewrite_log(self, plan: _Plan, base: int) -> None:
        """Replace the log file by one starting at ``base`` (temp + fsync + rename)."""
        change, memory = plan.change, self._memory
        start = memory.log_start_offset()
        parts = [encode_log_header(base)]
        # Entries kept only on disk (between the fallback snapshot and the new one).
        below = memory.entries(start + plan.rewrite_from, start + change.drop)
        parts.extend(encode_frame(e) for e in below)
        position = sum(map(len, parts))
        positions: list[int] = []
        kept = memory.entries(start + change.drop, start + change.drop + change.keep)
        for frame in [encode_frame(e) for e in kept] + plan.new_frames:
            positions.append(position)
            parts.append(frame)
            position += len(frame)
        path = self._directory / LOG_FILE
        write_file_atomically(path, b"".join(parts))
        new_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        os.close(self._log_fd)
        self._log_fd = new_fd
        plan.positions = positions
        plan.file_base = base
        plan.file_end = position
        log.info(
            "metadata log rewritten dir=%s base_offset=%d log_start_offset=%d entries=%d bytes=%d",
            self._directory,
            base,
            change.start,
            len(positions),
            position,
        )

    def _edit_log(self, plan: _Plan) -> None:
        """Truncate and append in place; one fsync (or fdatasync) for both."""
        fd = self._log_fd
        file_end = self._file_end
        if plan.truncate_position is not None:
            os.ftruncate(fd, plan.truncate_position)
            file_end = plan.truncate_position
        appended: list[int] = []
        if plan.new_frames:
            blob = b"".join(plan.new_frames)
            for frame in plan.new_frames:
                appended.append(file_end)
                file_end += len(frame)
            _pwrite_all(fd, blob, appended[0])
        if plan.truncate_position is not None:
            # A size change is metadata: fsync, not only fdatasync, makes the cut durable.
            os.fsync(fd)
        elif plan.new_frames:
            os.fdatasync(fd)
        plan.appended_positions = appended
        plan.file_base = self._file_base
        plan.file_end = file_end

    def _apply(self, plan: _Plan) -> None:
        """Adopt the state ``plan`` made durable (in place: appends are the common case)."""
        change = plan.change
        self._memory.apply(change)
        if plan.positions is not None:
            self._positions = plan.positions
        else:
            del self._positions[: change.drop]
            del self._positions[change.keep :]
            self._positions.extend(plan.appended_positions)
        self._file_base = plan.file_base
        self._file_end = plan.file_end
        for name in plan.deleted:
            self._snapshot_files.pop(name, None)
        self._snapshot_files.update(plan.snapshot_sizes)


@dataclass(slots=True)
class _Plan:
    """What one ``write`` will do on disk, computed and validated before any I/O."""

    #: The change to the memory view (and so to the log), validated by ``MemoryStorage``.
    change: PlannedWrite
    snapshot_blob: bytes | None = None
    #: Snapshot file names to keep (the rest are deleted); ``None``: no snapshot change.
    keep_snapshots: set[str] | None = None
    #: Rewrite the log file to start at this offset (``None``: edit it in place).
    rewrite_base: int | None = None
    #: Index into the current entries where the rewritten file's frames start.
    rewrite_from: int = 0
    truncate_position: int | None = None
    new_frames: list[bytes] = field(default_factory=list)
    hard_state_blob: bytes | None = None
    # Filled in by the I/O.
    positions: list[int] | None = None
    appended_positions: list[int] = field(default_factory=list)
    file_base: int = 0
    file_end: int = 0
    deleted: list[str] = field(default_factory=list)
    snapshot_sizes: dict[str, int] = field(default_factory=dict)


# --- file primitives ----------------------------------------------------------------------------


def _lock_directory(directory: Path) -> int:
    """Take an exclusive ``flock`` on the directory's lock file; returns its descriptor."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise KafkaStorageError(
            f"metadata log dir is in use by another process or instance dir={directory}"
        ) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    """``pwrite`` until all of ``data`` is written (a short write is legal)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written
