"""Producer-state snapshots beside a partition log, and rebuilding the state from them.

The log is the truth: every idempotent batch carries its producer id, epoch and sequence in
its header, so the state can always be rebuilt by replaying headers. Snapshots
(``<20-digit end offset>.snapshot``, Kafka's naming) only shorten that replay: at open the
newest snapshot at or below the log end is loaded and the log replayed from its end
offset. A snapshot that fails its checks is deleted and an older one (or the whole log)
used instead. Snapshots above a truncation point are deleted with the truncation.

Touches the disk: run off the event loop (open) or where a short write is acceptable.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from lograft.durable import write_file_atomically
from lograft.protocol.batch_header import BatchHeader
from lograft.protocol.control_records import EndTxnMarker, decode_marker
from replica.log.partition_log import PartitionLog
from replica.producer_snapshot_codec import (
    CorruptProducerSnapshotError,
    decode_snapshot,
    encode_snapshot,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from replica.producer_state import MarkerReader, ProducerStateManager

__all__ = [
    "delete_snapshots_above",
    "load_producer_state",
    "marker_reader",
    "write_producer_snapshot",
]

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2


def _snapshots(directory: Path) -> list[tuple[int, Path]]:
    """``(end offset, path)`` of every snapshot file, newest first."""
    found = []
    for entry in os.scandir(directory):
        offset = parse_snapshot_file_name(entry.name)
        if offset is not None and entry.is_file(follow_symlinks=False):
            found.append((offset, directory / entry.name))
    return sorted(found, reverse=True)


def delete_snapshots_above(directory: Path, offset: int) -> None:
    """Remove snapshots that cover offsets at or beyond ``offset`` (after a truncation)."""
    for end_offset, path in _snapshots(directory):
        if end_offset > offset:
            path.unlink(missing_ok=True)


def marker_reader(partition_log: PartitionLog) -> MarkerReader:
    """Reads a control batch's transaction marker from ``partition_log`` (for a replay)."""

    def read_marker(header: BatchHeader) -> EndTxnMarker | None:
        data = partition_log.read(header.base_offset, header.size)
        return decode_marker(memoryview(data)[: header.size])

    return read_marker


def load_producer_state(partition_log: PartitionLog) -> ProducerStateManager:
    """The producer state of ``partition_log``: newest usable snapshot plus a header replay."""
    directory = partition_log.directory
    log_end_offset = partition_log.log_end_offset
    state: ProducerStateManager | None = None
    for end_offset, path in _snapshots(directory):
        if end_offset > log_end_offset:
            # Written before a crash took back the tail it covered.
            path.unlink(missing_ok=True)
            continue
        try:
            state = decode_snapshot(path.read_bytes())
        except (CorruptProducerSnapshotError, OSError) as exc:
            log.warning("discarding producer snapshot file=%s error=%s", path, exc)
            path.unlink(missing_ok=True)
            continue
        break
    if state is None:
        state = ProducerStateManager(end_offset=partition_log.log_start_offset)
    try:
        state.rebuild_from_batches(
            partition_log.batch_headers(state.end_offset), marker_reader(partition_log)
        )
    except ValueError as exc:
        # A snapshot that does not line up with the batches: replay the whole log.
        log.warning("producer snapshot does not match the log dir=%s error=%s", directory, exc)
        state = ProducerStateManager(end_offset=partition_log.log_start_offset)
        state.rebuild_from_batches(
            partition_log.batch_headers(state.end_offset), marker_reader(partition_log)
        )
    return state


def write_producer_snapshot(directory: Path, state: ProducerStateManager) -> None:
    """Write ``state`` as the snapshot at its end offset; keep the newest few only."""
    write_file_atomically(directory / snapshot_file_name(state.end_offset), encode_snapshot(state))
    for _, path in _snapshots(directory)[SNAPSHOTS_KEPT:]:
        path.unlink(missing_ok=True)
