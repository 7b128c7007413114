"""The C fsync thread (``replica._fsync_worker``) and its event-loop side
(:class:`replica.flush_worker.LoopFlusher`): jobs are synced and closed in order, each
job's outcome (an errno, never an exception) reaches the loop, and a closed worker refuses
work instead of losing it."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from replica.flush_worker import LoopFlusher, loop_flusher

try:
    from replica._fsync_worker import FsyncWorker
except ImportError:  # pragma: no cover - only on a machine without a C compiler
    if os.environ.get("LOGRAFT_REQUIRE_SPEEDUPS"):
        raise
    pytest.skip("replica._fsync_worker is not built (no C compiler)", allow_module_level=True)


def _written(path: Path) -> int:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC)
    os.write(fd, b"record" * 100)
    return fd


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        assert exc.errno == errno.EBADF
        return False
    return True


def test_a_job_syncs_and_closes_its_descriptors_and_reports_through_the_eventfd(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[list[tuple[int, int, float]], list[bool]]:
        worker = FsyncWorker()
        reported: asyncio.Future[list[tuple[int, int, float]]] = (
            asyncio.get_running_loop().create_future()
        )
        asyncio.get_running_loop().add_reader(
            worker.fileno(), lambda: reported.done() or reported.set_result(worker.completed())
        )
        fds = [_written(tmp_path / f"segment-{index}") for index in range(3)]
        job = worker.submit(fds)
        jobs = await reported
        asyncio.get_running_loop().remove_reader(worker.fileno())
        worker.close()
        assert [entry[0] for entry in jobs] == [job]
        return jobs, [_is_open(fd) for fd in fds]

    jobs, still_open = asyncio.run(scenario())
    assert jobs[0][1] == 0  # every fdatasync succeeded
    assert jobs[0][2] >= 0.0
    assert still_open == [False, False, False]


def test_a_failed_fdatasync_is_reported_as_its_errno(tmp_path: Path) -> None:
    worker = FsyncWorker()
    closed = _written(tmp_path / "segment")
    os.close(closed)
    job = worker.submit([closed])
    assert worker.wait(job)[:2] == (job, errno.EBADF)
    # wait() took the outcome: it is not reported twice.
    assert worker.completed() == []
    worker.close()


def test_waiting_on_a_job_already_reported_raises_instead_of_waiting_forever(
    tmp_path: Path,
) -> None:
    worker = FsyncWorker()
    job = worker.submit([_written(tmp_path / "segment")])
    later = worker.submit([_written(tmp_path / "later")])
    assert worker.wait(later)[:2] == (later, 0)  # both finished: the jobs go in order
    assert [entry[0] for entry in worker.completed()] == [job]
    with pytest.raises(LookupError, match="already reported"):
        worker.wait(job)
    worker.close()


def test_jobs_finish_in_the_order_they_were_submitted(tmp_path: Path) -> None:
    worker = FsyncWorker()
    jobs = [worker.submit([_written(tmp_path / f"segment-{index}")]) for index in range(20)]
    worker.close()  # finishes the queue first
    assert [entry[0] for entry in worker.completed()] == jobs


def test_a_closed_worker_finishes_what_it_was_given_and_refuses_more(tmp_path: Path) -> None:
    worker = FsyncWorker()
    fd = _written(tmp_path / "segment")
    job = worker.submit([fd])
    worker.close()
    worker.close()  # idempotent
    assert [(entry[0], entry[1]) for entry in worker.completed()] == [(job, 0)]
    assert not _is_open(fd)
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit([])


def test_what_is_not_a_descriptor_is_refused_before_anything_is_queued() -> None:
    worker = FsyncWorker()
    with pytest.raises(ValueError, match="not a descriptor"):
        worker.submit([-1])
    with pytest.raises(TypeError):
        worker.submit(["3"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no job"):
        worker.wait(0)
    worker.close()


def test_a_loop_has_one_flusher_and_a_cancelled_waiter_leaves_the_outcome_to_wait(
    tmp_path: Path,
) -> None:
    async def scenario() -> int:
        flusher = loop_flusher()
        assert isinstance(flusher, LoopFlusher)
        assert loop_flusher() is flusher
        job = flusher.submit([_written(tmp_path / "segment")])
        waiting = asyncio.ensure_future(flusher.result(job))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return flusher.wait(job)

    assert asyncio.run(scenario()) == 0
