"""Test helpers for the producer state: batch headers as the broker sees them, and
producing them through :class:`~replica.producer_state.ProducerStateManager`."""

from __future__ import annotations

from lograft.protocol.batch_header import BatchHeader
from replica.producer_state import AppendPlan, Duplicate, ProducerStateManager

__all__ = ["PID", "at_offset", "header", "produce"]

PID = 1000


def header(
    producer_id: int = PID,
    epoch: int = 0,
    seq: int = 0,
    count: int = 1,
    base_offset: int = 0,
    timestamp: int = 1_000,
) -> BatchHeader:
    """A batch header as the broker sees it (only the fields the producer state reads)."""
    return BatchHeader(
        position=0,
        base_offset=base_offset,
        batch_length=49 + 7 * count,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=seq,
        records_count=count,
    )


def produce(manager: ProducerStateManager, batch: BatchHeader) -> AppendPlan | Duplicate:
    """Check ``batch``; if it is new, append it at the manager's end offset and record it."""
    result = manager.check_and_plan(batch)
    if isinstance(result, AppendPlan):
        manager.on_appended(at_offset(batch, manager.end_offset))
    return result


def at_offset(batch: BatchHeader, base_offset: int) -> BatchHeader:
    """``batch`` as appended at ``base_offset``."""
    return header(
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        batch.records_count,
        base_offset,
        batch.max_timestamp,
    )
