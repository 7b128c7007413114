"""The partition shell as leader and follower: acks=all, min.insync.replicas, idempotence.

A real log on disk (``flush.policy=interval``, so no flush thread is needed) and the event
loop of ``asyncio.run``; followers are played by calling ``on_follower_fetch``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lograft.protocol.batch_header import iter_headers, validate_batches
from lograft.protocol.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log.partition_log import PartitionLog
from replica.partition import Partition
from replica.replication import DivergingEpoch

TP = TopicPartition("t", 0)
CONFIG = LogConfig().with_overrides({"flush.policy": "interval", "min.insync.replicas": "2"})


def _open(directory: Path) -> Partition:
    return Partition(TP, PartitionLog.open(directory, CONFIG, int(time.time() * 1000)))


def _lead(partition: Partition, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 1) -> None:
    partition.become_leader(
        replica_id=1,
        replicas=(1, 2, 3),
        isr=isr,
        leader_epoch=epoch,
        partition_epoch=0,
        now_ms=0,
    )


def _batch(values: list[bytes], producer_id: int = -1, sequence: int = -1) -> bytearray:
    data = bytearray(
        encode_batch(
            values,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=sequence,
        )
    )
    return data


def _append(partition: Partition, data: bytearray, acks: int = 1) -> tuple[int, ...]:
    headers = validate_batches(data, 1 << 20)
    return partition.append_as_leader(data, headers, acks, 0).batch_base_offsets


def test_acks_all_waits_for_every_isr_member(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        _lead(partition)
        data = _batch([b"a", b"b"])
        headers = validate_batches(data, 1 << 20)
        appended = partition.append_as_leader(data, headers, -1, 0)
        waiting = partition.acks_all_waiter(appended.required_offset, appended.leader_epoch)
        partition.on_follower_fetch(2, 2, 1, 1, now_ms=1)
        assert not waiting.done() and partition.high_watermark == 0
        partition.on_follower_fetch(3, 2, 1, 1, now_ms=1)
        await asyncio.wait_for(waiting, 1)
        assert partition.high_watermark == 2

    asyncio.run(scenario())


def test_acks_all_is_refused_below_min_insync_replicas_and_nothing_is_appended(
    tmp_path: Path,
) -> None:
    partition = _open(tmp_path)
    _lead(partition, isr=(1,))
    with pytest.raises(NotEnoughReplicasError):
        _append(partition, _batch([b"x"]), acks=-1)
    assert partition.log.log_end_offset == 0
    assert _append(partition, _batch([b"y"]), acks=1) == (0,)
    # The HW does not advance while the ISR is below min.insync.replicas.
    assert partition.high_watermark == 0


def test_isr_shrinking_while_waiting_fails_with_not_enough_replicas_after_append(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        _lead(partition, isr=(1, 2))
        data = _batch([b"a"])
        appended = partition.append_as_leader(data, validate_batches(data, 1 << 20), -1, 0)
        waiting = partition.acks_all_waiter(appended.required_offset, appended.leader_epoch)
        partition.become_leader(
            replica_id=1, replicas=(1, 2, 3), isr=(1,), leader_epoch=1, partition_epoch=1, now_ms=5
        )
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_losing_leadership_fails_waiting_produces(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        _lead(partition)
        data = _batch([b"a"])
        appended = partition.append_as_leader(data, validate_batches(data, 1 << 20), -1, 0)
        waiting = partition.acks_all_waiter(appended.required_offset, appended.leader_epoch)
        partition.become_follower(2)
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(waiting, 1)
        with pytest.raises(NotLeaderOrFollowerError):
            _append(partition, _batch([b"b"]))

    asyncio.run(scenario())


def test_a_retried_batch_gets_its_first_offsets_and_is_not_appended_again(
    tmp_path: Path,
) -> None:
    partition = _open(tmp_path)
    _lead(partition)
    first = _batch([b"a", b"b"], producer_id=7, sequence=0)
    second = _batch([b"c"], producer_id=7, sequence=2)
    assert _append(partition, bytearray(first)) == (0,)
    assert _append(partition, _batch([b"other"])) == (2,)
    assert _append(partition, bytearray(second)) == (3,)
    # Both retried together with a new batch: originals keep their offsets.
    third = _batch([b"d"], producer_id=7, sequence=3)
    assert _append(partition, first + second + third) == (0, 3, 4)
    assert partition.log.log_end_offset == 5


def test_a_sequence_gap_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    partition = _open(tmp_path)
    _lead(partition)
    _append(partition, _batch([b"a"], producer_id=7, sequence=0))
    with pytest.raises(OutOfOrderSequenceNumberError):
        _append(partition, _batch([b"c"], producer_id=7, sequence=2))
    assert partition.log.log_end_offset == 1


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_a_restart(tmp_path: Path, clean: bool) -> None:
    partition = _open(tmp_path)
    _lead(partition)
    first = _batch([b"a", b"b"], producer_id=7, sequence=0)
    _append(partition, bytearray(first))
    _append(partition, _batch([b"c"], producer_id=9, sequence=0))
    if clean:
        partition.write_producer_snapshot()
    _append(partition, _batch([b"d"], producer_id=7, sequence=2))
    partition.log.close()

    reopened = _open(tmp_path)
    _lead(reopened, epoch=2)
    assert reopened.producer_state == partition.producer_state
    assert _append(reopened, bytearray(first)) == (0,)
    with pytest.raises(OutOfOrderSequenceNumberError):
        _append(reopened, _batch([b"e"], producer_id=7, sequence=5))


def test_a_follower_truncation_forgets_the_truncated_batches(tmp_path: Path) -> None:
    leader = _open(tmp_path / "leader")
    _lead(leader)
    _append(leader, _batch([b"a"], producer_id=7, sequence=0))
    _append(leader, _batch([b"b"], producer_id=7, sequence=1))
    follower = _open(tmp_path / "follower")
    follower.become_follower(1)
    data = bytearray(leader.log.read(0, 1 << 20))
    follower.append_as_follower(data, list(iter_headers(data)), 0)
    assert follower.producer_state == leader.producer_state

    follower.truncate_to(1)
    assert follower.log.log_end_offset == 1
    entry = follower.producer_state.entry(7)
    assert entry is not None and entry.last_seq == 0
    # As a leader again it accepts the truncated sequence anew.
    _lead(follower, epoch=2)
    assert _append(follower, _batch([b"b2"], producer_id=7, sequence=1)) == (1,)


def test_a_follower_ahead_in_an_old_epoch_is_told_where_it_diverges(tmp_path: Path) -> None:
    partition = _open(tmp_path)
    _lead(partition, epoch=1)
    _append(partition, _batch([b"a", b"b"]))
    _lead(partition, epoch=3)
    _append(partition, _batch([b"c"]))
    decision = partition.on_follower_fetch(2, 5, 1, 3, now_ms=1)
    assert isinstance(decision, DivergingEpoch)
    assert (decision.diverging.epoch, decision.diverging.end_offset) == (1, 2)
