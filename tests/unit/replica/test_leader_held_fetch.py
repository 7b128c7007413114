"""How a leader answers a follower's fetch it holds: only the partitions that moved.

A follower's fetch names every partition it follows on this leader. The leader takes each
one's progress when the fetch arrives and holds the fetch while none has records for it;
when one moves, the answer carries that one, and the idle partitions (nothing to tell: no
records, and the high watermark the follower already knows) are left out. A partition that
stops being led at the follower's epoch while the fetch is held is answered with its error
at once, not at the end of the fetch's max wait. The broker's own service, partitions and
logs on disk; only the gRPC hop is left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from lograft.protocol.records import encode_batch, iter_records
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_service import BrokerEndpoint, BrokerService
from replica.log_manager import LogManager

LEADER, FOLLOWER = 1, 2
REPLICAS = (1, 2, 3)
EPOCH = 1
A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
# Far longer than a test waits: a held fetch answered at all was answered because it moved.
MAX_WAIT_MS = 60_000
EXPECT_S = 10.0


def _now_ms() -> int:
    return 0


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[tuple[LogManager, BrokerService]]:
    logs = LogManager(tmp_path / "node-1", LogConfig(), _now_ms)
    logs.open(load_topics=False)
    for tp in (A, B):
        partition = logs.open_partition(tp, "topic-id", {})
        logs.adopt_partition(partition)
        partition.become_leader(
            replica_id=LEADER,
            replicas=REPLICAS,
            isr=REPLICAS,
            leader_epoch=EPOCH,
            partition_epoch=EPOCH,
            now_ms=_now_ms(),
        )
    endpoint = BrokerEndpoint(LEADER, "127.0.0.1", 0)
    yield logs, BrokerService(logs, endpoint, "cluster", _now_ms)
    logs.close()


def _follower_fetch(b_offset: int = 0, max_wait_ms: int = MAX_WAIT_MS) -> pb.FetchRequest:
    """Both partitions, as a follower that knows HW 0: A from offset 0 (an empty log), B
    from ``b_offset`` (holding B's first ``b_offset`` records, all of this epoch)."""
    wanted = [
        pb.FetchPartition(
            partition=tp.partition,
            fetch_offset=offset,
            partition_max_bytes=1 << 20,
            current_leader_epoch=EPOCH,
            last_fetched_epoch=EPOCH if offset else -1,
            known_high_watermark=0,
        )
        for tp, offset in ((A, 0), (B, b_offset))
    ]
    return pb.FetchRequest(
        replica_id=FOLLOWER,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[pb.FetchTopic(name="t", partitions=wanted)],
    )


async def _held(
    logs: LogManager, service: BrokerService, request: pb.FetchRequest | None = None
) -> asyncio.Task[pb.FetchResponse]:
    """The fetch, started and waiting on its partitions (it made its first pass)."""
    holding = asyncio.Event()
    original = logs.partitions[B].add_data_waiter

    def add_data_waiter(waiter: asyncio.Future[None], replica: bool = False) -> None:
        original(waiter, replica)
        holding.set()

    logs.partitions[B].add_data_waiter = add_data_waiter  # type: ignore[method-assign]
    context = cast(grpc.aio.ServicerContext, None)
    task = asyncio.create_task(service.Fetch(request or _follower_fetch(), context))
    try:
        async with asyncio.timeout(EXPECT_S):
            await holding.wait()
    finally:
        logs.partitions[B].add_data_waiter = original  # type: ignore[method-assign]
    assert not task.done(), "an idle leader answered a fetch it should hold"
    return task


def _answered(response: pb.FetchResponse) -> dict[int, pb.FetchPartitionResponse]:
    return {result.partition: result for topic in response.topics for result in topic.partitions}


async def test_a_held_fetch_answers_the_partition_that_got_records_and_leaves_the_idle_out(
    leader: tuple[LogManager, BrokerService],
) -> None:
    logs, service = leader
    task = await _held(logs, service)
    data = bytearray(encode_batch([b"one", b"two"]))
    logs.partitions[A].append_as_leader(data, validate_batches(data, 1 << 20), 1, _now_ms())
    async with asyncio.timeout(EXPECT_S):
        response = await task
    answered = _answered(response)
    assert list(answered) == [A.partition]
    assert [r.value for r in iter_records(answered[A.partition].records)] == [b"one", b"two"]


async def test_a_partition_that_stops_being_led_ends_a_held_fetch_with_its_error(
    leader: tuple[LogManager, BrokerService],
) -> None:
    logs, service = leader
    task = await _held(logs, service)
    logs.partitions[B].become_follower(EPOCH + 1, replica_id=LEADER, leader_id=3)
    async with asyncio.timeout(EXPECT_S):
        response = await task
    answered = _answered(response)
    assert list(answered) == [B.partition]
    assert answered[B.partition].error_code in (
        NotLeaderOrFollowerError.code,
        FencedLeaderEpochError.code,
    )


async def test_an_idle_partition_whose_high_watermark_moved_during_the_wait_is_told_it(
    leader: tuple[LogManager, BrokerService],
) -> None:
    """A high watermark that moves does not wake a follower's held fetch; the answer the
    fetch ends with carries it (the follower learns it then, not one fetch later)."""
    logs, service = leader
    b = logs.partitions[B]
    data = bytearray(encode_batch([b"one", b"two"]))
    appended = b.append_as_leader(data, validate_batches(data, 1 << 20), 1, _now_ms())
    await b.wait_flushed(appended.required_offset)
    # The follower holds both records; broker 3 has not fetched yet, so the HW stays 0.
    task = await _held(logs, service, _follower_fetch(b_offset=2, max_wait_ms=200))
    assert b.high_watermark == 0
    b.on_follower_fetch(3, 2, EPOCH, EPOCH, _now_ms())  # broker 3 catches up: HW 2
    assert b.high_watermark == 2
    async with asyncio.timeout(EXPECT_S):
        response = await task
    answered = _answered(response)
    assert list(answered) == [B.partition]
    assert (answered[B.partition].high_watermark, answered[B.partition].records) == (2, b"")
