"""Recovery of a metadata log directory: reading its files back, none of them trusted.

What :meth:`controller.storage.disk_storage.DiskStorage.open` finds on disk, rebuilt into
the state a :class:`~controller.storage.disk_storage.DiskStorage` starts from: leftovers of
interrupted atomic writes are removed, ``quorum-state`` is validated (or created for a new
directory), the log is scanned frame by frame and cut at the first torn, corrupt or
out-of-sequence frame, the newest valid snapshot the log reaches is chosen, and a log that
does not continue that snapshot is reset to start at its end. The rules, and why each is
safe, are in :meth:`DiskStorage.open`; byte formats are in :mod:`controller.storage.formats`.

Blocking; runs before the directory is served, with the directory lock held.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from controller.raft.messages import Entry, HardState, Snapshot
from controller.raft.storage import MemoryStorage
from controller.storage.formats import (
    LOG_HEADER_SIZE,
    MAX_QUORUM_STATE_BYTES,
    MAX_SNAPSHOT_BYTES,
    SNAPSHOT_HEADER_SIZE,
    CorruptMetadataStorageError,
    FrameError,
    decode_frame,
    decode_log_header,
    decode_quorum_state,
    decode_snapshot,
    encode_log_header,
    encode_quorum_state,
    parse_snapshot_name,
)
from controller.storage.layout import LOG_FILE, QUORUM_STATE_FILE
from lograft.durable import TMP_SUFFIX, fsync_directory, write_file_atomically

__all__ = ["Recovered", "recover"]

log = logging.getLogger(__name__)

_INITIAL_HARD_STATE = HardState(0, None)


@dataclass(slots=True)
class Recovered:
    """State rebuilt from the directory by :func:`recover`; the caller owns ``log_fd``."""

    log_fd: int
    #: The hard state, the snapshot and the entries the log serves after it.
    memory: MemoryStorage
    #: File position of each entry the memory view serves (same indexes).
    positions: list[int]
    #: The base offset in the log file's header.
    file_base: int
    #: Where the valid frames end: the next append goes there.
    file_end: int
    #: Bytes of each snapshot file on disk, by name.
    snapshot_files: dict[str, int]


def recover(directory: Path) -> Recovered:
    """Rebuild the storage state from ``directory``; the rules are :meth:`DiskStorage.open`'s.

    Raises ``OSError`` on I/O failure and
    :class:`~controller.storage.formats.CorruptMetadataStorageError` when the files cannot be
    trusted; ``log_fd`` is closed again on any failure.
    """
    names = set(os.listdir(directory))
    _remove_temporaries(directory, names)
    checkpoints = {name: parsed for name in names if (parsed := parse_snapshot_name(name))}
    hard_state = _recover_quorum_state(directory, names, bool(checkpoints))
    raw, file_base = _read_log_file(directory, names, checkpoints, hard_state)
    scanned, positions, valid_end = _scan_log(directory, raw, file_base)
    log_fd = os.open(directory / LOG_FILE, os.O_RDWR | os.O_CLOEXEC)
    try:
        if valid_end < len(raw):
            os.ftruncate(log_fd, valid_end)
            os.fsync(log_fd)
        snapshot = _choose_snapshot(directory, checkpoints, file_base)
        if snapshot is None and file_base > 0:
            raise CorruptMetadataStorageError(
                f"no valid snapshot covers the log's start dir={directory} "
                f"base_offset={file_base} snapshots={sorted(checkpoints)}"
            )
        start = 0 if snapshot is None else snapshot.end_offset
        reset = snapshot is not None and _must_reset(directory, snapshot, scanned, file_base)
        if reset:
            os.close(log_fd)
            log_fd = -1
            header = encode_log_header(start)
            write_file_atomically(directory / LOG_FILE, header)
            log_fd = os.open(directory / LOG_FILE, os.O_RDWR | os.O_CLOEXEC)
            entries: list[Entry] = []
            positions = []
            file_base, file_end = start, len(header)
        else:
            cut = start - file_base
            entries, positions, file_end = scanned[cut:], positions[cut:], valid_end
        sizes = {
            name: (directory / name).stat().st_size
            for name in checkpoints
            if (directory / name).exists()
        }
    except BaseException:
        if log_fd >= 0:
            os.close(log_fd)
        raise
    memory = MemoryStorage()
    memory.set_hard_state(hard_state)
    if snapshot is not None:
        memory.save_snapshot(snapshot)
    memory.append(entries)
    return Recovered(
        log_fd=log_fd,
        memory=memory,
        positions=positions,
        file_base=file_base,
        file_end=file_end,
        snapshot_files=sizes,
    )


def _read_log_file(
    directory: Path, names: set[str], checkpoints: dict[str, tuple[int, int]], hard_state: HardState
) -> tuple[bytes, int]:
    """The log file's bytes and the base offset in its header; creates a missing log file
    only where the directory's creation was interrupted."""
    if LOG_FILE not in names:
        if checkpoints or hard_state != _INITIAL_HARD_STATE:
            raise CorruptMetadataStorageError(
                f"log file missing dir={directory} file={LOG_FILE} "
                f"snapshots={len(checkpoints)} epoch={hard_state.epoch}"
            )
        # Only a crash while creating the directory gets here (quorum-state comes first).
        write_file_atomically(directory / LOG_FILE, encode_log_header(0))
    raw = (directory / LOG_FILE).read_bytes()
    try:
        return raw, decode_log_header(raw)
    except FrameError as exc:
        # The header is only ever written by an atomic replace: a bad one is not a torn
        # write but damage, and without it nothing says where the entries belong.
        raise CorruptMetadataStorageError(
            f"corrupt log header dir={directory} file={LOG_FILE} reason={exc.reason}"
        ) from exc


def _must_reset(directory: Path, snapshot: Snapshot, scanned: list[Entry], file_base: int) -> bool:
    """Whether the log must restart at ``snapshot``'s end: it stops short of that end, or its
    entry just before it has another epoch than the snapshot's last entry."""
    start = snapshot.end_offset
    log_end = file_base + len(scanned)
    cut = start - file_base
    if start > log_end:
        # A crash after saving an installed snapshot, before the log was reset.
        log.info(
            "metadata log behind snapshot, resetting dir=%s log_end_offset=%d "
            "snapshot_end_offset=%d",
            directory,
            log_end,
            start,
        )
        return True
    if cut > 0 and scanned[cut - 1].epoch != snapshot.epoch:
        # Our entry before the snapshot's end is not the committed one, so nothing
        # after it is committed either (log matching): drop, never serve it.
        log.warning(
            "metadata log does not continue snapshot, resetting dir=%s "
            "offset=%d log_epoch=%d snapshot_epoch=%d entries_dropped=%d",
            directory,
            start - 1,
            scanned[cut - 1].epoch,
            snapshot.epoch,
            log_end - start,
        )
        return True
    return False


def _remove_temporaries(directory: Path, names: set[str]) -> None:
    """Delete leftovers of interrupted atomic writes; their targets are intact."""
    strays = sorted(name for name in names if name.endswith(TMP_SUFFIX))
    for name in strays:
        log.warning(
            "metadata log stray temporary file removed dir=%s file=%s bytes=%d",
            directory,
            name,
            (directory / name).stat().st_size,
        )
        os.unlink(directory / name)
        names.discard(name)
    if strays:
        fsync_directory(directory)


def _recover_quorum_state(directory: Path, names: set[str], has_snapshots: bool) -> HardState:
    """Read and validate ``quorum-state``, or create it for a new directory."""
    path = directory / QUORUM_STATE_FILE
    if QUORUM_STATE_FILE in names:
        with open(path, "rb") as handle:
            # Read one byte past the limit so an oversized file is caught without reading it.
            raw = handle.read(MAX_QUORUM_STATE_BYTES + 1)
        return decode_quorum_state(raw, str(path))
    if LOG_FILE in names or has_snapshots:
        # Recreating it would forget a vote this node may have cast: refuse.
        raise CorruptMetadataStorageError(
            f"quorum-state missing next to a log dir={directory} file={QUORUM_STATE_FILE}"
        )
    write_file_atomically(path, encode_quorum_state(_INITIAL_HARD_STATE))
    log.info("metadata log directory initialised dir=%s", directory)
    return _INITIAL_HARD_STATE


def _scan_log(directory: Path, raw: bytes, base_offset: int) -> tuple[list[Entry], list[int], int]:
    """Frames of ``raw`` up to the first bad one: ``(entries, positions, valid_end)``."""
    view = memoryview(raw)
    entries: list[Entry] = []
    positions: list[int] = []
    position = LOG_HEADER_SIZE
    expected = base_offset
    reason = ""
    while position < len(raw):
        try:
            frame = decode_frame(view, position)
        except FrameError as exc:
            reason = exc.reason
            break
        if frame.entry.offset != expected:
            reason = f"offset_gap expected={expected} found={frame.entry.offset}"
            break
        entries.append(frame.entry)
        positions.append(position)
        position = frame.end
        expected += 1
    if position < len(raw):
        log.warning(
            "metadata log truncated at bad frame dir=%s file=%s position=%d bytes_dropped=%d "
            "next_offset=%d reason=%s",
            directory,
            LOG_FILE,
            position,
            len(raw) - position,
            expected,
            reason,
        )
    return entries, positions, position


def _choose_snapshot(
    directory: Path, checkpoints: dict[str, tuple[int, int]], file_base: int
) -> Snapshot | None:
    """The newest valid snapshot whose end the log reaches (``end >= file_base``)."""
    ordered = sorted(checkpoints.items(), key=lambda item: item[1], reverse=True)
    for name, (end_offset, epoch) in ordered:
        if end_offset < file_base:
            # Older than the log's start: left over from a reset; the log cannot follow it.
            continue
        path = directory / name
        size = path.stat().st_size
        if size > SNAPSHOT_HEADER_SIZE + MAX_SNAPSHOT_BYTES:
            reason = f"too_large size={size}"
        else:
            try:
                return decode_snapshot(path.read_bytes(), end_offset, epoch)
            except FrameError as exc:
                reason = str(exc)
        log.warning(
            "metadata log corrupt snapshot ignored dir=%s file=%s reason=%s",
            directory,
            name,
            reason,
        )
    return None
