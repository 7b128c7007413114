"""Crash-safe small-file writes shared by the broker and the controller.

A checkpoint, a vote or a topic list is replaced all or nothing: write a temporary file,
fsync it, rename it over the target, fsync the directory. A crash leaves the old file or the
new one, never a mix; the directory fsync makes the rename itself survive power loss.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TMP_SUFFIX", "create_directories", "fsync_directory", "write_file_atomically"]

TMP_SUFFIX = ".tmp"
"""Appended to a file's name for the copy an atomic write renames over it; a crash may leave
that copy behind (the old file intact), and the opens that find one remove it."""


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_directories(directory: Path) -> None:
    """Create ``directory`` and any missing ancestors, durably: after each ``mkdir`` the
    parent is fsynced, because a new directory entry survives power loss only then (POSIX;
    Kafka flushes the parent after creating a log directory). ``directory``'s own parent is
    fsynced even when it already existed: a process that crashed between its ``mkdir`` and
    the fsync left an entry that a power loss could still take. Raises ``OSError``."""
    missing: list[Path] = []
    current = Path(os.path.abspath(directory))
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            if not path.is_dir():
                raise
            continue  # created meanwhile by someone else, who makes it durable
        fsync_directory(path.parent)
    if not missing:
        fsync_directory(Path(os.path.abspath(directory)).parent)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, durably and all or nothing; raises ``OSError``."""
    temporary = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(path.parent)
