"""A replica fetcher stops when told to, whatever it was waiting for.

The broker's image sync stops the fetcher of a leader that left (fenced, or nothing left to
follow from it) and awaits its end before it applies the next image. On Python 3.11,
``asyncio.wait_for`` swallows a cancellation that arrives just after the event it waits
for was set: the fetcher ran on, ``stop()`` never returned, and the broker applied no
further metadata image (the chaos suite's clock-jump scenario on a loaded machine: a node's
partitions stayed out of every ISR for the rest of the run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import pytest

from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.fetcher import FollowedPartition, ReplicaFetcher, ReplicaFetcherManager
from replica.log_manager import LogManager

# Far longer than a stop takes: only a fetcher that ignores its cancellation reaches it.
HANG_S = 10.0
TP = TopicPartition("t", 0)


def _now_ms() -> int:
    return 0


async def _returns(call: Awaitable[None]) -> None:
    try:
        async with asyncio.timeout(HANG_S):
            await call
    except TimeoutError:
        pytest.fail("the fetcher did not stop: it ignored its cancellation")


async def _idle() -> None:
    for _ in range(3):  # the fetcher task runs into its wait for work
        await asyncio.sleep(0)


async def test_a_fetcher_stops_right_after_its_partitions_changed(tmp_path: Path) -> None:
    fetcher = ReplicaFetcher(
        1, 2, "127.0.0.1:9", LogManager(tmp_path, LogConfig(), _now_ms), _now_ms
    )
    fetcher.start()
    await _idle()  # it hosts none of what it is told to follow: it waits for a change
    fetcher.set_partitions({TP: 0})  # the change wakes the wait...
    await _returns(fetcher.stop())  # ...which must not eat the cancellation


async def test_the_image_sync_drops_the_fetcher_of_a_leader_that_left(tmp_path: Path) -> None:
    manager = ReplicaFetcherManager(1, LogManager(tmp_path, LogConfig(), _now_ms), _now_ms)
    followed = {TP: FollowedPartition(leader_id=2, leader_epoch=0)}
    await manager.update(followed, {2: "127.0.0.1:9"})
    await _idle()
    await manager.update(followed, {2: "127.0.0.1:9"})  # a new image: partitions set again
    await _returns(manager.update({}, {}))  # the next image: broker 2 was fenced
