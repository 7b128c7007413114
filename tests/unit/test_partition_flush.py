"""Where a partition's flushes run: on the event loop while they are fast, in a worker
thread once they are slow (decision 0011), so a slow disk never stalls the node's loop.

The log's flush is replaced by one that takes a chosen time on the partition's clock and
notes the thread it ran in; everything else (the group commit, the waiters, the moving
average) is the partition's own code.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from replica import partition as partition_module
from replica.batch_header import validate_batches
from replica.log.partition_log import PartitionLog
from replica.partition import INLINE_FLUSH_MAX_S, Partition
from replica.records import encode_batch
from replica.topic_config import LogConfig
from replica.topic_partition import TopicPartition

TP = TopicPartition("t", 0)
SLOW_S = 5 * INLINE_FLUSH_MAX_S


class _TimedDisk:
    """The log, but its flush takes the next of ``seconds`` on this clock (the partition's
    ``interval_clock_s``) and notes the thread it ran in."""

    def __init__(self, log: PartitionLog, seconds: list[float]) -> None:
        self._log = log
        self._seconds = list(seconds)
        self.threads: list[int] = []
        self.now = 0.0

    def clock_s(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(self._log, name)

    def flush(self) -> int:
        self.threads.append(threading.get_ident())
        self.now += self._seconds.pop(0)
        return self._log.log_end_offset


def _flush_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: list[float]
) -> list[str]:
    """Append and flush once per entry of ``seconds``; where each flush ran."""

    async def scenario() -> list[str]:
        log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
        partition = Partition(TP, log)
        disk = _TimedDisk(log, seconds)
        partition.log = disk  # type: ignore[assignment]
        monkeypatch.setattr(partition_module, "interval_clock_s", disk.clock_s)
        loop_thread = threading.get_ident()
        for index in range(len(seconds)):
            data = bytearray(encode_batch([b"%d" % index]))
            log.append(data, validate_batches(data, 1 << 20), leader_epoch=0, now_ms=0)
            await partition.wait_flushed(log.log_end_offset)
        log.close()
        return ["loop" if ident == loop_thread else "worker" for ident in disk.threads]

    return asyncio.run(scenario())


def test_fast_flushes_run_on_the_loop_after_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _flush_threads(tmp_path, monkeypatch, [0.0] * 4) == ["worker", "loop", "loop", "loop"]


def test_a_slow_disk_is_flushed_from_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _flush_threads(tmp_path, monkeypatch, [SLOW_S] * 4) == ["worker"] * 4


def test_one_slow_flush_sends_the_next_to_a_worker_and_fast_ones_bring_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _flush_threads(tmp_path, monkeypatch, [0.0, 0.0, 0.0, SLOW_S, 0.0, 0.0])
    # The slow one ran on the loop: a disk's slowness is known only once a flush took long.
    assert threads == ["worker", "loop", "loop", "loop", "worker", "loop"]


def _flush_now_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seconds: float
) -> tuple[bool, list[str]]:
    """One flush through ``wait_flushed`` taking ``seconds``, then an append and
    ``flush_now``: whether ``flush_now`` finished without giving the loop a turn, and where
    each flush ran."""

    async def scenario() -> tuple[bool, list[str]]:
        log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
        partition = Partition(TP, log)
        disk = _TimedDisk(log, [seconds, 0.0])
        partition.log = disk  # type: ignore[assignment]
        monkeypatch.setattr(partition_module, "interval_clock_s", disk.clock_s)
        loop_thread = threading.get_ident()
        for index in range(2):
            data = bytearray(encode_batch([b"%d" % index]))
            log.append(data, validate_batches(data, 1 << 20), leader_epoch=0, now_ms=0)
            if index == 0:
                await partition.wait_flushed(log.log_end_offset)
        other_work: list[str] = []
        asyncio.get_running_loop().call_soon(other_work.append, "ran")
        await partition.flush_now()
        finished_at_once = not other_work
        log.close()
        threads = ["loop" if ident == loop_thread else "worker" for ident in disk.threads]
        return finished_at_once, threads

    return asyncio.run(scenario())


def test_flush_now_on_a_fast_disk_flushes_before_the_loop_gets_a_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower's next fetch waits for this flush: a task and a future would each cost
    # the follower a loop turn on every acks=all record's path.
    assert _flush_now_steps(tmp_path, monkeypatch, 0.0) == (True, ["worker", "loop"])


def test_flush_now_on_a_slow_disk_still_waits_for_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _flush_now_steps(tmp_path, monkeypatch, SLOW_S) == (False, ["worker", "worker"])
