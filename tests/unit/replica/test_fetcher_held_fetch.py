"""A replica fetcher does not let a fetch the leader holds delay what it newly follows.

An idle leader holds a follower's fetch for up to its max wait. A partition the follower is
given meanwhile (a leader moved here, or a new epoch) must be asked for at once, not when
that held fetch returns; and a partition backing off after an error must not wait for a
fetch held longer than its back-off.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import replica.fetcher as fetcher_module
from lograft.protocol.errors import UnknownServerError
from lograft.protocol.framed.server import FramedListener
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.fetcher import ReplicaFetcher
from replica.log_manager import LogManager

# The fetcher's max wait here: far longer than any test waits, so a fetch held that long
# is only ever given up.
MAX_WAIT_MS = 60_000
# How long a test waits for the fetch it expects before it fails (never slept through).
EXPECT_S = 10.0
BACK_OFF_S = 1.0
A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def _now_ms() -> int:
    return 0


class _Leader:
    """A leader whose Fetch handler records each request and, while it has no error to
    answer, holds it for the request's max wait, as an idle leader does."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[pb.FetchRequest] = asyncio.Queue()
        self.error_for: dict[int, int] = {}
        """Partition → error code the next answer carries for it (then held no more)."""

    async def fetch(self, request: pb.FetchRequest, context: Any) -> pb.FetchResponse:
        await self.requests.put(request)
        if not self.error_for:
            await asyncio.sleep(request.max_wait_ms / 1000)  # holding it: nothing new
        response = pb.FetchResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                answer.partitions.add(
                    partition=wanted.partition,
                    high_watermark=0,
                    error_code=self.error_for.pop(wanted.partition, 0),
                )
        return response

    async def next_request(self) -> pb.FetchRequest:
        async with asyncio.timeout(EXPECT_S):
            return await self.requests.get()


def _asked(request: pb.FetchRequest) -> set[TopicPartition]:
    return {TopicPartition(t.name, p.partition) for t in request.topics for p in t.partitions}


@asynccontextmanager
async def _follower_of(leader: _Leader, tmp_path: Path) -> AsyncIterator[ReplicaFetcher]:
    listener = FramedListener(
        "127.0.0.1", 0, grpc_port=1, handlers={"Fetch": leader.fetch}, max_request_bytes=1 << 20
    )
    await listener.bind()
    await listener.serve()
    logs = LogManager(tmp_path, LogConfig(), _now_ms)
    for tp in (A, B):
        partition = logs.open_partition(tp, "topic-id", {})
        partition.become_follower(0, replica_id=1, leader_id=2)
        logs.adopt_partition(partition)
    fetcher = ReplicaFetcher(1, 2, f"127.0.0.1:{listener.port}", logs, _now_ms, MAX_WAIT_MS)
    fetcher.start()
    try:
        yield fetcher
    finally:
        await fetcher.stop()
        await listener.stop(grace_s=0)
        for partition in logs.partitions.values():
            partition.log.close()


async def test_a_partition_given_while_a_fetch_is_held_is_asked_for_at_once(
    tmp_path: Path,
) -> None:
    leader = _Leader()
    async with _follower_of(leader, tmp_path) as fetcher:
        fetcher.set_partitions({A: 0})
        assert _asked(await leader.next_request()) == {A}  # held by the leader from now on
        fetcher.set_partitions({A: 0, B: 0})
        assert _asked(await leader.next_request()) == {A, B}


async def test_a_fetch_without_a_backing_off_partition_waits_no_longer_than_its_back_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Long enough that B is still backing off when the next fetch is built, however slow
    # the machine; short enough that the test waits it out.
    monkeypatch.setattr(fetcher_module, "RETRY_BACKOFF_S", BACK_OFF_S)
    leader = _Leader()
    leader.error_for[B.partition] = UnknownServerError.code  # retriable: B backs off
    async with _follower_of(leader, tmp_path) as fetcher:
        fetcher.set_partitions({A: 0, B: 0})
        first = await leader.next_request()
        assert _asked(first) == {A, B} and first.max_wait_ms == MAX_WAIT_MS
        second = await leader.next_request()  # B waits out its back-off
        assert _asked(second) == {A}
        assert 0 < second.max_wait_ms <= BACK_OFF_S * 1000 + 1
        assert _asked(await leader.next_request()) == {A, B}  # B is due again


async def test_a_fetcher_stopped_as_it_gives_up_a_held_fetch_stops(tmp_path: Path) -> None:
    leader = _Leader()
    async with _follower_of(leader, tmp_path) as fetcher:
        fetcher.set_partitions({A: 0})
        await leader.next_request()
        fetcher.set_partitions({A: 0, B: 0})  # gives the held fetch up...
        async with asyncio.timeout(EXPECT_S):
            await fetcher.stop()  # ...and a stop right after must still end the fetcher
