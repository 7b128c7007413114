"""Crash-safe small-file writes shared by the broker and the controller.

A checkpoint, a vote or a topic list is replaced all or nothing: write a temporary file,
fsync it, rename it over the target, fsync the directory. A crash leaves the old file or the
new one, never a mix; the directory fsync makes the rename itself survive power loss.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TMP_SUFFIX", "fsync_directory", "write_file_atomically"]

TMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
