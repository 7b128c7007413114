"""The checkpoint files of one partition directory, and when each was last written.

Two small files are this module's own: ``recovery-point-offset-checkpoint`` (offsets below
it were fdatasync'ed, so recovery may start at the segment holding it) and
``cleaner-offset-checkpoint`` (the first offset not yet cleaned and the earliest delete
horizon of the tombstones in the cleaned part; Kafka keeps those offsets in one such file
per log directory). Each is a version line (``0``) then one number a line, replaced
atomically. A missing or invalid file reads as None: the recovery point then means "recover
everything", the cleaner checkpoint "everything is dirty" (work, not data, is lost).

:class:`LogCheckpoints` writes them and the ``leader-epoch-checkpoint``
(:mod:`replica.log.epoch_checkpoint` holds its format) and remembers what each holds on
disk, so that :class:`replica.log.partition_log.PartitionLog` writes only what changed: its
``persist_*`` methods take the log's current value under the log's lock and write it only
if it differs from the file (or, for the recovery point, if recovery would need it).

The order rule that makes the lazy epoch-checkpoint write safe: the leader-epoch checkpoint
is written before any recovery point that must cover it. :meth:`PartitionLog.flush`
persists the epoch cache after its fdatasync and before it publishes the new flushed
offset; every recovery point is a flushed offset read after that (by the flush, or by a
truncation on another thread), so it finds the checkpoint already covering its offsets.
After a crash the checkpoint's entries below the recovery point are right, and the open
rebuilds the rest (:mod:`replica.log.log_loader`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from lograft.durable import write_file_atomically
from lograft.protocol.errors import KafkaStorageError
from replica.log.epoch_checkpoint import write_epoch_checkpoint

if TYPE_CHECKING:
    from replica.log.cleaning_state import CleaningState
    from replica.log.local_log import LocalLog
    from replica.log.log_epochs import LogEpochs

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "RECOVERY_POINT_FILE",
    "LogCheckpoints",
    "encode_checkpoint",
    "read_cleaner_checkpoint",
    "read_recovery_point",
]

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
"""Offsets below the one it holds were fdatasync'ed: recovery after a crash may start at
the segment holding it."""
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
"""The first offset not yet cleaned and the earliest delete horizon of the tombstones in
the cleaned part (Kafka keeps the offsets in one such file per log directory)."""
_CHECKPOINT_VERSION = 0
_MAX_CHECKPOINT_BYTES = 64


def _read_checkpoint_values(
    directory: Path, name: str, what: str, minimums: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The numbers of checkpoint file ``name`` (a version line, then one number a line, each
    at least its minimum), or None if the file is missing or not valid."""
    path = directory / name
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        if len(data) > _MAX_CHECKPOINT_BYTES:
            raise ValueError(f"{len(data)} bytes")
        version, *lines, trailer = data.decode("ascii").split("\n")
        values = tuple(int(line) for line in lines)
        if (
            int(version) != _CHECKPOINT_VERSION
            or trailer
            or len(values) != len(minimums)
            or any(value < minimum for value, minimum in zip(values, minimums, strict=True))
        ):
            raise ValueError(f"unexpected content {data!r}")
        return values
    except ValueError as exc:
        log.warning("ignoring invalid %s checkpoint dir=%s reason=%s", what, directory, exc)
        return None


def encode_checkpoint(*values: int) -> bytes:
    """The text of a checkpoint file holding ``values``."""
    return "".join(f"{value}\n" for value in (_CHECKPOINT_VERSION, *values)).encode("ascii")


def read_recovery_point(directory: Path) -> int | None:
    """The recovery point, or None if the file is missing or not valid (then: recover all)."""
    values = _read_checkpoint_values(directory, RECOVERY_POINT_FILE, "recovery", (0,))
    return None if values is None else values[0]


def read_cleaner_checkpoint(directory: Path) -> tuple[int, int] | None:
    """``(first dirty offset, tombstone horizon ms)``, or None if missing or not valid (then
    the whole log counts as dirty, which costs work, not data)."""
    values = _read_checkpoint_values(directory, CLEANER_CHECKPOINT_FILE, "cleaner", (0, -1))
    return None if values is None else (values[0], values[1])


class LogCheckpoints:
    """Writes one partition's checkpoint files and remembers what each holds on disk.

    Thread-safety: a writer holds :attr:`lock` from taking the value to write (under the
    log's own lock) until the write returns and the remembered value is updated, so the
    last write always carries the latest value. The remembered values are read under
    both locks. The ``persist_*`` methods do exactly that and may run on any thread; the
    ``write_*`` methods are for a caller that holds :attr:`lock` (or has the log to itself,
    as the open does).
    """

    def __init__(
        self,
        directory: Path,
        recovery_point: int,
        cleaner_checkpoint: tuple[int, int],
        epoch_cache_persisted: bool,
    ) -> None:
        """Start from what the open found on disk."""
        self._directory = directory
        self.lock = threading.Lock()
        """Serialises checkpoint writes; taken before the log's own lock, never after."""
        self.recovery_point = recovery_point
        """The recovery point on disk (what the open read, 0 if none)."""
        self.cleaner_checkpoint = cleaner_checkpoint
        """``(first dirty offset, tombstone horizon ms)`` on disk."""
        self.epoch_version = 0 if epoch_cache_persisted else -1
        """The leader-epoch cache version on disk (-1: the file does not match the cache)."""

    # ---- writing what changed -------------------------------------------------------------

    def persist_recovery_point(
        self, log_lock: threading.Lock, local: LocalLog, force: bool
    ) -> None:
        """Write the log's flushed offset as the recovery point if recovery would need it.

        Needed when it moved to another segment (recovery always re-checks the segment
        holding it, so a finer-grained checkpoint would buy nothing and cost two more fsyncs
        per flush), or went down (truncation); ``force`` writes any change (the close). The
        value is read under ``log_lock`` while holding :attr:`lock`, so the last write
        always carries the latest value. Raises ``KafkaStorageError``.
        """
        with self.lock:
            with log_lock:
                offset = local.flushed_offset
                persisted = self.recovery_point
                if offset == persisted:
                    return
                if (
                    not force
                    and offset > persisted
                    and local.segment_index(offset) == local.segment_index(persisted)
                ):
                    return
            self.write_recovery_point(offset)

    def persist_epoch_cache(self, log_lock: threading.Lock, epochs: LogEpochs) -> None:
        """Write ``leader-epoch-checkpoint`` if the cache changed since the last write.

        The text is taken under ``log_lock`` while holding :attr:`lock`, so the last write
        always carries the latest cache. Raises ``KafkaStorageError``.
        """
        with self.lock:
            with log_lock:
                version = epochs.version
                if version == self.epoch_version:
                    return
                text = epochs.cache.encode()
            self.write_epoch_cache(version, text)

    def persist_cleaner_checkpoint(self, log_lock: threading.Lock, cleaning: CleaningState) -> None:
        """Write the first dirty offset and the tombstone horizon if they changed.

        Taken under ``log_lock`` while holding :attr:`lock`, like the others. Raises
        ``KafkaStorageError``.
        """
        with self.lock:
            with log_lock:
                checkpoint = cleaning.checkpoint
                if checkpoint == self.cleaner_checkpoint:
                    return
            self.write_cleaner_checkpoint(checkpoint)

    # ---- writing --------------------------------------------------------------------------

    def write_recovery_point(self, offset: int) -> None:
        """Persist ``offset`` as the recovery point; raises ``KafkaStorageError``."""
        self._write(RECOVERY_POINT_FILE, "recovery point", encode_checkpoint(offset))
        self.recovery_point = offset

    def write_cleaner_checkpoint(self, checkpoint: tuple[int, int]) -> None:
        """Persist ``(first dirty offset, tombstone horizon ms)``; raises ``KafkaStorageError``."""
        self._write(CLEANER_CHECKPOINT_FILE, "cleaner checkpoint", encode_checkpoint(*checkpoint))
        self.cleaner_checkpoint = checkpoint

    def write_epoch_cache(self, version: int, text: str) -> None:
        """Persist the leader-epoch cache ``text`` (its :meth:`LeaderEpochCache.encode`) as
        cache version ``version``; raises ``KafkaStorageError``."""
        try:
            write_epoch_checkpoint(self._directory, text)
        except OSError as exc:
            raise KafkaStorageError(
                f"writing leader-epoch checkpoint of dir={self._directory} failed: {exc}"
            ) from exc
        self.epoch_version = version

    def _write(self, name: str, what: str, data: bytes) -> None:
        """Replace checkpoint file ``name`` atomically; ``KafkaStorageError`` if that fails."""
        try:
            write_file_atomically(self._directory / name, data)
        except OSError as exc:
            raise KafkaStorageError(
                f"writing {what} of dir={self._directory} failed: {exc}"
            ) from exc
