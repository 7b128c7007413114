"""Torn and corrupted segment tails: what a crash mid-write or a bad disk leaves in a log.

:func:`tear_tails` damages the end of the active segment (the last ``.log`` file) of every
partition in a stopped node's data directory, one of three ways drawn per partition:

* ``cut``: the file loses its last bytes, usually in the middle of a batch (a write that
  reached the disk only in part);
* ``garbage``: its last bytes are overwritten with random bytes (a torn sector, bit rot);
* ``zeros``: zero bytes are appended (the file grew, its data never arrived: what ext4 and
  XFS can show after a crash).

The node must recover on start: re-validate the active segment batch by batch, truncate at
the first batch that fails, drop what follows, and fetch the rest again from the leader. The
damage is confined to one replica and to partition logs: the metadata log
(``__cluster_metadata-0``) is left alone, because Raft, like Kafka's KRaft quorum, assumes a
voter keeps what it fsynced (a voter that forgets acknowledged entries can elect a leader
without them); that is the power-loss scenario's subject, where nothing fsynced is lost.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

from cluster.node import METADATA_LOG_DIR
from replica.log.segment import LOG_SUFFIX, parse_segment_file_name

__all__ = ["DAMAGE_KINDS", "tear_tails"]

log = logging.getLogger(__name__)

DAMAGE_KINDS = ("cut", "garbage", "zeros")
MAX_DAMAGE_BYTES = 16 * 1024
"""At most this many bytes of a segment's end are cut or overwritten (zeros: appended)."""


def _active_segment(partition_dir: Path) -> Path | None:
    segments = []
    for path in partition_dir.iterdir():
        parsed = parse_segment_file_name(path.name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            segments.append((parsed[0], path))
    return max(segments)[1] if segments else None


def _damage(segment: Path, kind: str, rng: random.Random) -> str:
    size = segment.stat().st_size
    count = rng.randint(1, max(1, min(size, MAX_DAMAGE_BYTES)))
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


def tear_tails(node_dir: Path, rng: random.Random) -> list[str]:
    """Damage the active segment's tail of every partition under ``node_dir`` (the node
    must be stopped); returns one line per damaged segment. Empty segments are left alone:
    there is nothing to tear."""
    done = []
    for partition_dir in sorted(p for p in node_dir.iterdir() if p.is_dir()):
        if partition_dir.name == METADATA_LOG_DIR:
            continue
        segment = _active_segment(partition_dir)
        if segment is None or segment.stat().st_size == 0:
            continue
        what = _damage(segment, rng.choice(DAMAGE_KINDS), rng)
        log.info("segment tail damaged node_dir=%s %s", node_dir, what)
        done.append(what)
    return done
