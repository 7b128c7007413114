"""A replica fetcher publishes only a high watermark its own flush covered.

After appending a fetch's records the fetcher flushes them, then publishes the follower's
high watermark: a replica counts only what is on its disk. If the partition's role changes
while that flush runs (it follows another leader now), the follower state is another
fetcher's, whose high watermark may cover records appended since and not flushed.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import replica.fetcher as fetcher_module
import replica.group_commit as group_commit_module
from lograft.protocol.batch_header import assign_offsets
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.fetcher import ReplicaFetcher, _Sent, to_core_response
from replica.follower_fetch import NextFetch, handle_fetch_response
from replica.log_manager import LogManager
from replica.partition import Partition
from tests.unit.log_fixtures import headers_of, make_batch

TP = TopicPartition("t", 0)


def _now_ms() -> int:
    return 0


def _records(first_offset: int, epoch: int) -> bytes:
    """Two records as the leader stored them at ``first_offset``, stamped with ``epoch``."""
    batch = bytearray(make_batch([b"a", b"b"]))
    assign_offsets(batch, headers_of(bytes(batch)), first_offset, epoch)
    return bytes(batch)


def _answer(records: bytes, high_watermark: int) -> pb.FetchResponse:
    response = pb.FetchResponse()
    response.topics.add(name=TP.topic).partitions.add(
        partition=TP.partition, high_watermark=high_watermark, records=records
    )
    return response


def _following(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Partition, ReplicaFetcher]:
    """A partition following node 2 at epoch 1, and a fetcher (never started) for it whose
    back-off is over at once."""
    logs = LogManager(tmp_path, LogConfig(), _now_ms)
    partition = logs.open_partition(TP, "topic-id", {})
    partition.become_follower(1, replica_id=1, leader_id=2)
    logs.adopt_partition(partition)
    fetcher = ReplicaFetcher(1, 2, "127.0.0.1:1", logs, _now_ms)
    fetcher.set_partitions({TP: 1})
    monkeypatch.setattr(fetcher_module, "RETRY_BACKOFF_S", 0.0)  # retried at the next fetch
    return partition, fetcher


async def test_a_role_change_during_the_flush_publishes_no_high_watermark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = LogManager(tmp_path, LogConfig(), _now_ms)
    partition = logs.open_partition(TP, "topic-id", {})
    partition.become_follower(1, replica_id=1, leader_id=2)
    logs.adopt_partition(partition)
    # Never started: its answer handling is driven directly.
    fetcher = ReplicaFetcher(1, 2, "127.0.0.1:1", logs, _now_ms)
    old = partition.follower_state
    assert old is not None
    asked = _Sent(
        partition, old, old.fetch_request(partition.log_end_offset, partition.leader_epoch_cache)
    )
    real_flush_now = partition.flush_now

    async def flush_then_follow_another_leader() -> None:
        await real_flush_now()  # offsets 0 and 1 are on disk
        # Meanwhile the partition follows node 3, whose fetcher appends offsets 2 and 3
        # and learns a high watermark of 4; its own flush has not run yet.
        partition.become_follower(2, replica_id=1, leader_id=3)
        new = partition.follower_state
        assert new is not None
        request = new.fetch_request(partition.log_end_offset, partition.leader_epoch_cache)
        (result,) = _answer(_records(2, 2), 4).topics[0].partitions
        answer = to_core_response(result, request, 0)
        assert handle_fetch_response(new, partition, answer) is NextFetch.AFTER_FLUSH

    monkeypatch.setattr(partition, "flush_now", flush_then_follow_another_leader)
    try:
        await fetcher._handle(_answer(_records(0, 1), 2), {TP: asked})
        assert partition.log.flushed_offset == 2
        assert partition.log_end_offset == 4
        assert partition.high_watermark <= partition.log.flushed_offset
    finally:
        partition.log.close()


async def test_a_high_watermark_left_unpublished_by_a_failed_flush_is_asked_for_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fetch names the lower of the core's and the published high watermark: a leader
    leaves out a partition whose high watermark the follower names, so naming the core's
    after a failed flush would leave the published one behind until the leader's moved."""
    partition, fetcher = _following(tmp_path, monkeypatch)
    real_flush_now = partition.flush_now

    async def failing_flush() -> None:
        raise OSError("disk full")

    try:
        _, sent, _ = fetcher._request()
        monkeypatch.setattr(partition, "flush_now", failing_flush)
        await fetcher._handle(_answer(_records(0, 1), 2), sent)
        state = partition.follower_state
        assert state is not None
        assert (state.high_watermark, partition.high_watermark) == (2, 0)
        # Its fetch offset would claim offsets 0 and 1 on disk: it is left out until a
        # flush gets them there.
        request, _, unflushed = fetcher._request()
        assert request is None
        assert unflushed == [partition]

        monkeypatch.setattr(partition, "flush_now", real_flush_now)
        await fetcher._flush_left_over(unflushed)
        request, sent, unflushed = fetcher._request()
        assert request is not None
        assert unflushed == []
        (wanted,) = request.topics[0].partitions
        assert wanted.fetch_offset == 2
        assert wanted.known_high_watermark == 0
        # The leader, whose high watermark is 2, answers it (nothing new but the HW).
        await fetcher._handle(_answer(b"", 2), sent)
        assert partition.high_watermark == 2 == partition.log.flushed_offset
    finally:
        partition.log.close()


async def test_a_replica_whose_fdatasync_failed_claims_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fdatasync the kernel may have dropped the records: the log fails and
    the replica stops fetching it, so the leader never counts those records as on this
    replica's disk (it takes the replica out of the ISR instead)."""
    partition, fetcher = _following(tmp_path, monkeypatch)
    monkeypatch.setattr(group_commit_module, "loop_flusher", lambda: None)  # no C thread

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    try:
        _, sent, _ = fetcher._request()
        monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
        await fetcher._handle(_answer(_records(0, 1), 2), sent)
        assert (partition.log_end_offset, partition.log.flushed_offset) == (2, 0)
        assert partition.log.failed

        request, _, unflushed = fetcher._request()
        assert request is None
        assert unflushed == []
    finally:
        monkeypatch.undo()
        partition.log.close()
