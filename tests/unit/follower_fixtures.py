"""A leader's batches and a follower's appends of them, for the partition log's follower
path and the epoch checkpoint."""

from __future__ import annotations

from collections.abc import Sequence

from lograft.protocol.batch_header import assign_offsets, validate_batches
from lograft.protocol.topic_config import LogConfig
from replica.log.partition_log import PartitionLog
from tests.unit.log_fixtures import headers_of, make_batch

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=128, retention_ms=-1)


def leader_batches(
    first_offset: int,
    epochs: Sequence[int],
    *,
    records: int = 2,
    timestamp_ms: int = 1_000,
) -> bytearray:
    """Batches as a leader stored them: one per epoch in ``epochs``, each of ``records``
    records, contiguous offsets from ``first_offset``, ``partitionLeaderEpoch`` stamped."""
    buffer = bytearray()
    offset = first_offset
    for index, epoch in enumerate(epochs):
        values = [bytes([index % 251]) * (index % 29 + 1) for _ in range(records)]
        batch = bytearray(make_batch(values, timestamp_ms=timestamp_ms + index))
        offset = assign_offsets(batch, headers_of(bytes(batch)), offset, epoch)
        buffer += batch
    return buffer


def follow(log: PartitionLog, data: bytearray, now_ms: int = 0) -> tuple[int, int]:
    """Append ``data`` as a follower; returns (first offset, last offset)."""
    result = log.append_as_follower(data, validate_batches(data, 1 << 20), now_ms)
    assert result.log_append_time_ms == -1
    return result.first_offset, result.last_offset


def entries(log: PartitionLog) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in log.leader_epoch_cache.entries]
