"""Transactions on one partition: verification, markers, the last stable offset, aborted
transactions, and all of it surviving a restart, a follower's copy and a truncation.

A real log on disk (``flush.policy=interval``) led by a replica whose ISR is itself alone,
so the high watermark follows every append.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lograft.protocol.batch_builder import RecordBatchBuilder
from lograft.protocol.batch_header import iter_headers, validate_batches
from lograft.protocol.control_records import EndTxnMarker
from lograft.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log.partition_log import PartitionLog
from replica.partition import Partition
from replica.producer_state import AbortedTxn

TP = TopicPartition("t", 0)
CONFIG = LogConfig().with_overrides({"flush.policy": "interval", "min.insync.replicas": "1"})
COMMIT = EndTxnMarker(committed=True, coordinator_epoch=3)
ABORT = EndTxnMarker(committed=False, coordinator_epoch=3)


def _open(directory: Path) -> Partition:
    return Partition(TP, PartitionLog.open(directory, CONFIG, int(time.time() * 1000)))


def _lead(partition: Partition, epoch: int = 1) -> Partition:
    partition.become_leader(
        replica_id=1, replicas=(1,), isr=(1,), leader_epoch=epoch, partition_epoch=0, now_ms=0
    )
    return partition


def _batch(
    producer_id: int, epoch: int, sequence: int, count: int = 2, transactional: bool = True
) -> bytearray:
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    for index in range(count):
        builder.append(value=b"v%d" % index, timestamp_ms=1_000)
    return bytearray(builder.build())


def _append(
    partition: Partition, data: bytearray, verified: frozenset[tuple[int, int]] = frozenset()
) -> int:
    headers = validate_batches(data, 1 << 20)
    return partition.append_as_leader(data, headers, 1, 0, verified).batch_base_offsets[0]


def test_a_transaction_starts_on_a_partition_only_once_the_coordinator_verified_it(
    tmp_path: Path,
) -> None:
    partition = _lead(_open(tmp_path))
    data = _batch(7, 0, 0)
    assert partition.transactions_to_verify(bytes(data)) == {(7, 0)}
    with pytest.raises(InvalidTxnStateError, match="has not added this partition"):
        _append(partition, data)
    with pytest.raises(InvalidTxnStateError):
        _append(partition, _batch(7, 0, 0), verified=frozenset({(7, 1)}))  # another epoch
    assert partition.log_end_offset == 0
    assert _append(partition, _batch(7, 0, 0), verified=frozenset({(7, 0)})) == 0
    # The transaction is open here now: its next batches need no verification ...
    assert partition.transactions_to_verify(bytes(_batch(7, 0, 2))) == frozenset()
    assert _append(partition, _batch(7, 0, 2)) == 2
    # ... and the producer may not write outside it until a marker ends it.
    with pytest.raises(InvalidTxnStateError, match="non-transactional"):
        _append(partition, _batch(7, 0, 4, transactional=False))


def test_the_last_stable_offset_waits_for_the_oldest_open_transaction(tmp_path: Path) -> None:
    partition = _lead(_open(tmp_path))
    _append(partition, _batch(1, 0, 0, transactional=False))  # offsets 0-1, idempotent
    _append(partition, _batch(7, 0, 0), verified=frozenset({(7, 0)}))  # 2-3
    _append(partition, _batch(8, 0, 0), verified=frozenset({(8, 0)}))  # 4-5
    assert partition.high_watermark == 6
    assert partition.last_stable_offset == 2
    assert partition.append_marker(7, 1, COMMIT, now_ms=5) == 7  # marker at 6
    assert partition.last_stable_offset == 4, "producer 8's transaction still holds it"
    assert partition.append_marker(8, 1, ABORT, now_ms=5) == 8  # marker at 7
    assert partition.last_stable_offset == partition.high_watermark == 8
    assert partition.aborted_transactions(0, 8) == [AbortedTxn(8, 4, 7)]
    assert partition.aborted_transactions(8, 20) == [], "ended before the fetch offset"
    assert partition.aborted_transactions(0, 4) == [], "begins at or after the fetch's end"


def test_a_stale_marker_is_not_written_and_an_old_coordinator_is_fenced(tmp_path: Path) -> None:
    partition = _lead(_open(tmp_path))
    _append(partition, _batch(7, 0, 0), verified=frozenset({(7, 0)}))
    assert partition.append_marker(7, 1, COMMIT, now_ms=5) == 3
    # The next transaction writes with the epoch the marker carried, from sequence 0.
    with pytest.raises(OutOfOrderSequenceNumberError):
        _append(partition, _batch(7, 1, 2), verified=frozenset({(7, 1)}))
    assert _append(partition, _batch(7, 1, 0), verified=frozenset({(7, 1)})) == 3
    # A duplicate of the first marker (a restarted marker job) must not end it; its
    # caller waits for everything appended so far to be replicated.
    assert partition.append_marker(7, 1, COMMIT, now_ms=6) == 5
    assert partition.log_end_offset == 5 and partition.last_stable_offset == 3
    with pytest.raises(TransactionCoordinatorFencedError):
        partition.append_marker(7, 2, EndTxnMarker(True, coordinator_epoch=2), now_ms=7)
    with pytest.raises(InvalidProducerEpochError):
        _append(partition, _batch(7, 0, 2))  # the finished transaction's late write
    assert partition.append_marker(7, 2, ABORT, now_ms=8) == 6
    assert partition.aborted_transactions(0, 6) == [AbortedTxn(7, 3, 5)]


@pytest.mark.parametrize("snapshot", [False, True])
def test_open_and_aborted_transactions_survive_a_restart(tmp_path: Path, snapshot: bool) -> None:
    partition = _lead(_open(tmp_path))
    _append(partition, _batch(7, 0, 0), verified=frozenset({(7, 0)}))  # 0-1
    partition.append_marker(7, 1, ABORT, now_ms=5)  # 2
    _append(partition, _batch(8, 0, 0), verified=frozenset({(8, 0)}))  # 3-4
    if snapshot:
        partition.write_producer_snapshot()
    partition.log.close()

    reopened = _lead(_open(tmp_path), epoch=2)
    assert reopened.producer_state == partition.producer_state
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(7, 0, 2)]
    assert reopened.producer_state.open_transactions() == {8: 3}
    assert reopened.last_stable_offset == 3
    assert reopened.append_marker(8, 1, COMMIT, now_ms=6) == 6
    assert reopened.last_stable_offset == 6


def test_a_follower_copy_holds_the_same_transactions_and_truncation_reopens_one(
    tmp_path: Path,
) -> None:
    leader = _lead(_open(tmp_path / "leader"))
    _append(leader, _batch(7, 0, 0), verified=frozenset({(7, 0)}))  # 0-1
    leader.append_marker(7, 1, ABORT, now_ms=5)  # 2
    _append(leader, _batch(8, 0, 0), verified=frozenset({(8, 0)}))  # 3-4
    leader.append_marker(8, 1, COMMIT, now_ms=5)  # 5
    follower = _open(tmp_path / "follower")
    follower.become_follower(1, replica_id=2, leader_id=1)
    data = bytearray(leader.log.read(0, 1 << 20))
    follower.append_as_follower(data, list(iter_headers(data)), 0)
    assert follower.producer_state == leader.producer_state

    follower.truncate_to(5)  # cuts producer 8's commit marker
    assert follower.producer_state.open_transactions() == {8: 3}
    assert follower.aborted_transactions(0, 10) == [AbortedTxn(7, 0, 2)]
    follower.truncate_to(2)  # cuts producer 7's abort marker
    assert follower.producer_state.open_transactions() == {7: 0}
    assert follower.aborted_transactions(0, 10) == []
