"""Torn and corrupted segment tails: what a crash mid-write or a bad disk leaves in a log.

:func:`tear_tails` damages the end of the active segment (the last ``.log`` file) of every
partition in a stopped node's data directory (:func:`tear_tail`: of one partition's
directory), one of three ways drawn per partition:

* ``cut``: the file loses its last bytes, usually in the middle of a batch (a write that
  reached the disk only in part);
* ``garbage``: its last bytes are overwritten with random bytes (a torn sector, bit rot);
* ``zeros``: zero bytes are appended (the file grew, its data never arrived: what ext4 and
  XFS can show after a crash).

With a ``reach`` (:func:`tear_tail`), a cut or garbage spans exactly that many bytes: the
last-replica fault tears the last in-sync replica back to a follower's log end (replicas hold
the same batches byte for byte, so that is a batch boundary), so that it comes back without
the records it acknowledged after that follower left.

The node must recover on start: re-validate the active segment batch by batch, truncate at
the first batch that fails, drop what follows, and fetch the rest again from the leader. The
damage is confined to one replica and to partition logs: the metadata log
(``__cluster_metadata-0``) is left alone, because Raft, like Kafka's KRaft quorum, assumes a
voter keeps what it fsynced (a voter that forgets acknowledged entries can elect a leader
without them); that is the power-loss scenario's subject, where nothing fsynced is lost.

:func:`empty_partition` removes every file of one partition's directory: a replica that comes
back with none of the records it had (a disk replaced, a directory wiped by hand).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

from cluster.node import METADATA_LOG_DIR
from replica.log.segment import LOG_SUFFIX, parse_segment_file_name

__all__ = ["DAMAGE_KINDS", "empty_partition", "tear_tail", "tear_tails"]

log = logging.getLogger(__name__)

DAMAGE_KINDS = ("cut", "garbage", "zeros")
"""The ways a tail is damaged (the module docstring's); with a ``reach``, never ``zeros``."""
MAX_DAMAGE_BYTES = 16 * 1024
"""At most this many bytes of a segment's end are cut or overwritten (zeros: appended)."""


def _active_segment(partition_dir: Path) -> Path | None:
    segments = []
    for path in partition_dir.iterdir():
        parsed = parse_segment_file_name(path.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            segments.append((parsed[0], path))
    return max(segments)[1] if segments else None


def _damage(segment: Path, kind: str, rng: random.Random, reach: int = 0) -> str:
    size = segment.stat().st_size
    count = min(size, reach) if reach > 0 else rng.randint(1, max(1, min(size, MAX_DAMAGE_BYTES)))
    with open(segment, "r+b") as file:
        if kind == "cut":
            file.truncate(size - count)
        elif kind == "garbage":
            file.seek(size - count)
            file.write(rng.randbytes(count))
        else:
            file.seek(size)
            file.write(bytes(count))
        file.flush()
        os.fsync(file.fileno())
    return f"{segment.parent.name}/{segment.name} {kind} {count} of {size} B"


def tear_tail(partition_dir: Path, rng: random.Random, reach: int = 0) -> str | None:
    """Damage the tail of the active segment of one partition's directory (its node must be
    stopped); returns what was done, or ``None`` when there is no segment or it is empty
    (nothing to tear). With ``reach``, the damage (then a cut or garbage, never zeros) spans
    exactly that many bytes of the segment's end (at most the whole segment): the tail a
    replica holds beyond another one's log end, which it then recovers to."""
    segment = _active_segment(partition_dir)
    if segment is None or segment.stat().st_size == 0:
        return None
    kinds = DAMAGE_KINDS if reach <= 0 else tuple(k for k in DAMAGE_KINDS if k != "zeros")
    what = _damage(segment, rng.choice(kinds), rng, max(0, reach))
    log.info("segment tail damaged partition_dir=%s %s", partition_dir, what)
    return what


def tear_tails(node_dir: Path, rng: random.Random) -> list[str]:
    """Damage the active segment's tail of every partition under ``node_dir`` (the node
    must be stopped); returns one line per damaged segment. Empty segments are left alone:
    there is nothing to tear."""
    done = []
    for partition_dir in sorted(p for p in node_dir.iterdir() if p.is_dir()):
        if partition_dir.name == METADATA_LOG_DIR:
            continue
        what = tear_tail(partition_dir, rng)
        if what is not None:
            done.append(what)
    return done


def empty_partition(partition_dir: Path) -> str:
    """Remove every file (and directory) inside ``partition_dir``, keeping the directory
    itself, and make the removal durable (its node must be stopped); returns what was
    removed."""
    files = 0
    size = 0
    for path in sorted(partition_dir.rglob("*"), reverse=True):  # children before parents
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
            continue
        files += 1
        size += path.lstat().st_size
        path.unlink()
    descriptor = os.open(partition_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    what = f"{partition_dir.name}: {files} files ({size} B) removed"
    log.info("partition directory emptied partition_dir=%s %s", partition_dir, what)
    return what
