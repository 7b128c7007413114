"""A produce's acknowledgement does not outlive the leadership that appended it.

Found by the chaos suite (pause-leader, acks=all): a leader appended a producer's batches,
was paused while its group commit was under way, lost the partition, truncated them as a
follower, led again at a later epoch and refilled those offsets with other records. The
old produce's flush wait then passed on the new records, its acks=all wait was registered
under the new leadership, and the producer was told its records were at offsets that held
someone else's: 204 acknowledged records lost.

A real log with the default ``flush.policy=fsync`` (the ack waits for the leader's flush)
and an ISR of the leader alone, so the high watermark follows its flushes; the flush runs on
the loop (decision 0011), so a test decides what happens before it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import NotLeaderOrFollowerError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica import group_commit as group_commit_module
from replica.log.partition_log import PartitionLog
from replica.partition import LeaderAppend, Partition

TP = TopicPartition("t", 0)
CONFIG = LogConfig().with_overrides({"min.insync.replicas": "1"})
GUARD_S = 10  # only against a hang: every wait below ends on its own


def _open(directory: Path) -> Partition:
    return Partition(TP, PartitionLog.open(directory, CONFIG, int(time.time() * 1000)))


def _lead(partition: Partition, epoch: int) -> None:
    partition.become_leader(
        replica_id=1,
        replicas=(1, 2, 3),
        isr=(1,),
        leader_epoch=epoch,
        partition_epoch=epoch,
        now_ms=0,
    )


def _append(partition: Partition, values: list[bytes]) -> LeaderAppend:
    data = bytearray(encode_batch(values))
    return partition.append_as_leader(data, validate_batches(data, 1 << 20), -1, 0)


def _acked(partition: Partition, appended: LeaderAppend) -> asyncio.Future[None]:
    return asyncio.ensure_future(
        partition.wait_acked(appended.required_offset, -1, appended.leader_epoch)
    )


async def _waiting_for_its_flush(partition: Partition, values: list[bytes]) -> asyncio.Future[None]:
    """Lead at epoch 1, append ``values`` and start their produce's ack wait; return once it
    waits for the group commit, which has not run yet (the flush on the loop, decision 0011:
    it runs when its task's turn comes)."""
    _lead(partition, epoch=1)
    acked = _acked(partition, _append(partition, values))
    for _ in range(10):  # loop turns, not time: the ack wait's task starts the flush task
        if partition.group_commit.flush_task is not None:
            break
        await asyncio.sleep(0)
    flushing = partition.group_commit.flush_task
    assert flushing is not None and not flushing.done()
    assert partition.log.flushed_offset < partition.log_end_offset
    return acked


@pytest.fixture(autouse=True)
def _flush_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_commit_module, "loop_flusher", lambda: None)  # no C thread


def test_records_cut_and_refilled_by_a_later_leadership_are_not_acknowledged(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        acked = await _waiting_for_its_flush(partition, [b"a", b"b"])
        # Before the flush runs, the node learns it follows (it was paused), cuts the tail,
        # then leads again and refills those offsets; the flush then covers the new records.
        partition.become_follower(2, replica_id=1, leader_id=2)
        partition.truncate_to(0)
        _lead(partition, epoch=3)
        refill = _append(partition, [b"x", b"y", b"z"])

        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(acked, GUARD_S)
        await asyncio.wait_for(_acked(partition, refill), GUARD_S)
        assert partition.high_watermark == 3
        partition.log.close()

    asyncio.run(scenario())


def test_a_flush_wait_for_records_cut_away_ends_without_waiting_for_new_ones(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        acked = await _waiting_for_its_flush(partition, [b"a", b"b"])
        partition.become_follower(2, replica_id=1, leader_id=2)
        partition.truncate_to(0)

        # Nothing is appended again, yet the wait ends: leadership moved.
        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(acked, GUARD_S)
        partition.log.close()

    asyncio.run(scenario())


def test_a_produce_whose_handler_awaited_past_a_leadership_change_fails_at_once(
    tmp_path: Path,
) -> None:
    # A produce to several partitions awaits between its appends (a transaction's
    # verification): by the time it waits for this append's ack, the tail may be gone.
    async def scenario() -> None:
        partition = _open(tmp_path)
        _lead(partition, epoch=1)
        appended = _append(partition, [b"a", b"b"])
        partition.become_follower(2, replica_id=1, leader_id=2)
        partition.truncate_to(0)

        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(_acked(partition, appended), GUARD_S)
        partition.log.close()

    asyncio.run(scenario())


def test_a_produce_waiting_for_its_flush_on_a_partition_going_away_fails(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        partition = _open(tmp_path)
        acked = await _waiting_for_its_flush(partition, [b"a"])
        partition.unhost()  # the topic is deleted, or the node shuts down

        with pytest.raises(NotLeaderOrFollowerError):
            await asyncio.wait_for(acked, GUARD_S)
        partition.log.close()

    asyncio.run(scenario())
