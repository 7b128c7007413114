"""Where a partition's flushes run.

A group commit (``wait_flushed``) hands its fdatasync to the C fsync thread, so the loop
serves fetches and produces meanwhile (decision 0016); closing the log, or cancelling the
flush, while that runs must neither deadlock nor publish an unsynced offset.

A follower's ``flush_now`` does too. Without the C extension: on the event loop while the
disk is fast, in a Python worker thread once it is slow (decision 0011), so a slow disk
stalls the node's loop at most once. For those, the log's flush is replaced by one that takes a
chosen time on the partition's clock and notes the thread it ran in; everything else (the
group commit, the waiters, the moving average) is the partition's own code.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from lograft.protocol.batch_header import validate_batches
from lograft.protocol.errors import KafkaStorageError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica import flush_worker
from replica import group_commit as group_commit_module
from replica.group_commit import INLINE_FLUSH_MAX_S
from replica.log.partition_log import LogFailureHandler, PartitionLog
from replica.partition import Partition

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
        monkeypatch.setattr(group_commit_module, "interval_clock_s", disk.clock_s)
        monkeypatch.setattr(group_commit_module, "loop_flusher", lambda: None)  # no C thread
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
        monkeypatch.setattr(group_commit_module, "interval_clock_s", disk.clock_s)
        monkeypatch.setattr(group_commit_module, "loop_flusher", lambda: None)  # no C thread
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


# ---- the group commit on the C fsync thread (decision 0016) ---------------------------------

needs_fsync_thread = pytest.mark.skipif(
    flush_worker.FsyncWorker is None and not os.environ.get("LOGRAFT_REQUIRE_SPEEDUPS"),
    reason="replica._fsync_worker is not built (no C compiler)",
)


def _append(log: PartitionLog, count: int) -> int:
    for index in range(count):
        data = bytearray(encode_batch([b"%d" % index]))
        log.append(data, validate_batches(data, 1 << 20), leader_epoch=0, now_ms=0)
    return log.log_end_offset


def _reopened_flushed_offset(tmp_path: Path) -> int:
    """What a reopened log trusts as flushed: its end after a clean close only."""
    log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
    try:
        return log.flushed_offset
    finally:
        log.close()


def _python_fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The descriptors Python's own ``os.fdatasync`` syncs from now on (the C fsync thread's
    syncs are not among them)."""
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def noted(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", noted)
    return synced


@needs_fsync_thread
def test_a_group_commit_fdatasyncs_on_the_c_thread_not_in_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python_syncs = _python_fdatasyncs(monkeypatch)

    async def scenario() -> tuple[int, int, list[int]]:
        log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
        partition = Partition(TP, log)
        end = _append(log, 3)
        await partition.wait_flushed(end)
        flushed, synced_in_python = log.flushed_offset, list(python_syncs)
        log.close()  # the close's own syncs (indexes, checkpoints) are not the group commit
        return end, flushed, synced_in_python

    end, flushed, synced_in_python = asyncio.run(scenario())
    assert flushed == end == 3
    assert synced_in_python == []
    assert _reopened_flushed_offset(tmp_path) == 3


async def _flush_under_way(tmp_path: Path) -> tuple[PartitionLog, Partition, asyncio.Task[None]]:
    """A log with three records and a group commit whose job is on the fsync thread."""
    log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
    partition = Partition(TP, log)
    waiting = asyncio.ensure_future(partition.wait_flushed(_append(log, 3)))
    await asyncio.sleep(0)  # wait_flushed starts the flush task
    await asyncio.sleep(0)  # which hands the descriptors over and waits
    flushing = partition.group_commit.flush_task
    assert flushing is not None and not flushing.done()
    return log, partition, waiting


@needs_fsync_thread
def test_a_followers_flush_now_fdatasyncs_on_the_c_thread_and_the_loop_runs_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the loop, the first fdatasync after the disk turned slow stalled the whole node
    # (its heartbeats and Raft included) for as long as it took.
    python_syncs = _python_fdatasyncs(monkeypatch)

    async def scenario() -> tuple[int, int, list[int], list[str]]:
        log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000))
        partition = Partition(TP, log)
        await partition.wait_flushed(_append(log, 1))  # the moving average: a fast disk
        end = _append(log, 2)
        other_work: list[str] = []
        asyncio.get_running_loop().call_soon(other_work.append, "ran")
        await partition.flush_now()
        flushed, synced_in_python = log.flushed_offset, list(python_syncs)
        log.close()
        return end, flushed, synced_in_python, other_work

    end, flushed, synced_in_python, other_work = asyncio.run(scenario())
    assert flushed == end == 3
    assert synced_in_python == []
    assert other_work == ["ran"]


@needs_fsync_thread
def test_closing_a_log_while_its_group_commit_runs_ends_that_flush_first(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        log, _, waiting = await _flush_under_way(tmp_path)
        log.close()  # takes the flush lock the running flush holds: must not deadlock
        await waiting  # the producers waiting on it are answered, not failed

    asyncio.run(scenario())
    assert _reopened_flushed_offset(tmp_path) == 3


@needs_fsync_thread
def test_a_cancelled_group_commit_still_ends_its_flush(tmp_path: Path) -> None:
    async def scenario() -> None:
        log, partition, waiting = await _flush_under_way(tmp_path)
        flushing = partition.group_commit.flush_task
        assert flushing is not None
        flushing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await flushing
        waiting.cancel()
        assert log.flushed_offset == 3
        log.close()

    asyncio.run(scenario())
    assert _reopened_flushed_offset(tmp_path) == 3


class _FailingFlusher:
    """A fsync thread whose every fdatasync fails with EIO."""

    def __init__(self) -> None:
        self.jobs = 0

    def submit(self, fds: list[int]) -> int:
        for fd in fds:
            os.close(fd)
        self.jobs += 1
        return self.jobs

    async def result(self, job: int) -> tuple[int, float]:
        return errno.EIO, 0.0

    def wait(self, job: int) -> int:
        return errno.EIO


def _flush_through(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flusher: type[_FailingFlusher],
    on_failure: LogFailureHandler | None = None,
) -> pytest.ExceptionInfo[Exception]:
    """A group commit through ``flusher``: what it raised to the waiting produce. Checks
    that nothing was published as flushed, the log takes no more writes, and it closes."""
    monkeypatch.setattr(group_commit_module, "loop_flusher", flusher)

    async def scenario() -> pytest.ExceptionInfo[Exception]:
        log = PartitionLog.open(tmp_path, LogConfig(), int(time.time() * 1000), on_failure)
        partition = Partition(TP, log)
        with pytest.raises(Exception) as raised:
            await partition.wait_flushed(_append(log, 1))
        assert log.flushed_offset == 0
        with pytest.raises(KafkaStorageError):
            _append(log, 1)  # a failed log takes no more writes
        log.close()  # the flush lock was released
        return raised

    return asyncio.run(scenario())


def test_a_failed_fdatasync_on_the_fsync_thread_fails_the_waiters_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _flush_through(tmp_path, monkeypatch, _FailingFlusher).type is KafkaStorageError


def test_the_first_failed_fdatasync_is_handed_to_the_log_failure_handler_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The node halts in this handler (cluster.halt.halt_on_log_failure): Kafka stops a
    # broker whose log directory failed rather than keep leading with it.
    failures: list[tuple[Path, BaseException]] = []
    raised = _flush_through(
        tmp_path,
        monkeypatch,
        _FailingFlusher,
        on_failure=lambda directory, error: failures.append((directory, error)),
    )
    assert raised.type is KafkaStorageError
    assert [(directory, type(error)) for directory, error in failures] == [(tmp_path, OSError)]
    assert isinstance(failures[0][1], OSError) and failures[0][1].errno == errno.EIO


class _LostFlusher(_FailingFlusher):
    """A fsync thread that loses its jobs' outcomes (a bug)."""

    async def result(self, job: int) -> tuple[int, float]:
        raise RuntimeError("outcome lost")

    def wait(self, job: int) -> int:
        raise LookupError(job)


def test_a_flush_whose_outcome_is_lost_fails_the_log_and_never_blocks_its_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not trusted: what was synced is unknown, so the log fails.
    raised = _flush_through(tmp_path, monkeypatch, _LostFlusher)
    assert raised.match("outcome lost")
