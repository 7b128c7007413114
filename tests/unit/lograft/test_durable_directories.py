"""A created directory is durable only after its parent is fsynced (proto/lograft/durable.py).

Power loss cannot be simulated in a unit test; these tests record which directories are
fsynced, which is what decides whether a new entry survives one (POSIX: a directory entry is
durable after an fsync of its directory).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lograft import durable
from lograft.durable import create_directories


@pytest.fixture
def synced_dirs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories fsynced through ``os.fsync``, in order."""
    synced: list[Path] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fsync", recording_fsync)
    return synced


def test_each_new_directory_is_followed_by_an_fsync_of_its_parent(
    tmp_path: Path, synced_dirs: list[Path]
) -> None:
    create_directories(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert synced_dirs == [tmp_path, tmp_path / "a", tmp_path / "a" / "b"]


def test_an_existing_directory_has_its_parent_fsynced_again(
    tmp_path: Path, synced_dirs: list[Path]
) -> None:
    (tmp_path / "data").mkdir()  # a crash may have come between this mkdir and its fsync
    create_directories(tmp_path / "data")
    assert synced_dirs == [tmp_path]


def test_a_file_in_the_way_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "data").write_bytes(b"")
    with pytest.raises(OSError):
        create_directories(tmp_path / "data" / "node-1")


def test_a_node_data_directory_is_created_durably(tmp_path: Path, synced_dirs: list[Path]) -> None:
    from cluster.node import load_or_create_identity

    load_or_create_identity(tmp_path / "cluster" / "node-1", 1, "")
    assert tmp_path in synced_dirs  # the entry of cluster/
    assert tmp_path / "cluster" in synced_dirs  # the entry of node-1/
