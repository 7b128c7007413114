"""A topic config altered while a partition runs takes effect at once (no restart)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import (
    MessageTooLargeError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log.partition_log import PartitionLog
from replica.partition import Partition

TP = TopicPartition("t", 0)
BASE = LogConfig().with_overrides({"flush.policy": "interval"})


def _leader(directory: Path, isr: tuple[int, ...]) -> Partition:
    partition = Partition(TP, PartitionLog.open(directory, BASE, int(time.time() * 1000)))
    partition.become_leader(
        replica_id=1, replicas=(1, 2, 3), isr=isr, leader_epoch=1, partition_epoch=0, now_ms=0
    )
    return partition


def _append(partition: Partition, values: list[bytes], acks: int) -> int:
    data = bytearray(encode_batch(values))
    limit = partition.log.config.max_message_bytes
    appended = partition.append_as_leader(data, validate_batches(data, limit), acks, 0)
    return appended.required_offset


def test_raising_min_insync_replicas_refuses_acks_all_and_lowering_it_commits(
    tmp_path: Path,
) -> None:
    partition = _leader(tmp_path, isr=(1, 2))
    _append(partition, [b"a"], acks=-1)
    partition.on_follower_fetch(2, 1, 1, 1, now_ms=1)
    assert partition.high_watermark == 1

    partition.update_config(BASE.with_overrides({"min.insync.replicas": "3"}))
    with pytest.raises(NotEnoughReplicasError):
        _append(partition, [b"refused"], acks=-1)
    _append(partition, [b"b"], acks=1)
    partition.on_follower_fetch(2, 2, 1, 1, now_ms=2)
    assert partition.high_watermark == 1, "held: the ISR is below the new minimum"

    # Back to the default: the record both ISR members hold is committed at once.
    partition.update_config(BASE)
    assert partition.high_watermark == 2
    assert _append(partition, [b"c"], acks=-1) == 3


def test_a_higher_minimum_fails_produces_already_waiting(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _leader(tmp_path, isr=(1, 2))
        waiting = partition.acks_all_waiter(_append(partition, [b"a"], acks=-1), 1)
        partition.update_config(BASE.with_overrides({"min.insync.replicas": "3"}))
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_log_settings_apply_to_the_next_append(tmp_path: Path) -> None:
    partition = _leader(tmp_path, isr=(1,))
    partition.update_config(BASE.with_overrides({"max.message.bytes": "100"}))
    with pytest.raises(MessageTooLargeError):
        _append(partition, [b"x" * 200], acks=1)
    partition.update_config(BASE.with_overrides({"segment.bytes": "200"}))
    for i in range(5):
        _append(partition, [bytes([i]) * 100], acks=1)
    assert partition.log.config.segment_bytes == 200
    assert len(list(tmp_path.glob("*.log"))) > 1, "small segments roll"
