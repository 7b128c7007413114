"""The ``leader-epoch-checkpoint`` file of a partition directory (Kafka's name and format).

The text is :meth:`LeaderEpochCache.encode`'s: a version line (``0``), an entry count, then
one ``epoch start_offset`` line per entry. Writes are atomic (temp file, fsync, rename,
directory fsync), so a reader sees either the old or the new file, never a torn one.

This module only moves text between the cache and the disk; *when* to write and how to
reconcile the file with the log after a crash is :class:`replica.log.partition_log.PartitionLog`'s
business.
"""

from __future__ import annotations

from pathlib import Path

from lograft.durable import write_file_atomically
from replica.replication.errors import LeaderEpochCheckpointError
from replica.replication.leader_epoch_cache import LeaderEpochCache

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "LEADER_EPOCH_CHECKPOINT_TMP_FILE",
    "read_epoch_checkpoint",
    "write_epoch_checkpoint",
]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
"""The file's name in a partition directory (Kafka's)."""
LEADER_EPOCH_CHECKPOINT_TMP_FILE = LEADER_EPOCH_CHECKPOINT_FILE + ".tmp"
"""Left behind only by a crash during a write; the log's open removes it."""
_MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
"""Far above any real cache (one line per leader epoch); guards against reading garbage."""


def read_epoch_checkpoint(directory: Path) -> LeaderEpochCache | None:
    """The cache stored in ``directory``, or None if there is no checkpoint file.

    Raises :class:`LeaderEpochCheckpointError` if the file exists but is not a valid
    checkpoint (bad text, not ASCII, too large, out-of-order entries) and ``OSError`` if it
    cannot be read.
    """
    path = directory / LEADER_EPOCH_CHECKPOINT_FILE
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > _MAX_CHECKPOINT_BYTES:
        raise LeaderEpochCheckpointError(f"{path.name} is larger than {_MAX_CHECKPOINT_BYTES}")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise LeaderEpochCheckpointError(f"{path.name} is not ASCII: {exc}") from exc
    return LeaderEpochCache.decode(text)


def write_epoch_checkpoint(directory: Path, text: str) -> None:
    """Replace the checkpoint in ``directory`` with ``text`` (from ``encode``), atomically.

    Durable on return: the temp file is fsync'ed before the rename and the directory after
    it, so a crash leaves either the previous checkpoint or this one. Raises ``OSError``.
    """
    write_file_atomically(directory / LEADER_EPOCH_CHECKPOINT_FILE, text.encode("ascii"))
