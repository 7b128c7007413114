"""fdatasync off the event loop, on a C thread that never takes the GIL (decision 0016).

A partition's group commit (:meth:`replica.partition.Partition.wait_flushed`) used to run
its fdatasync on the event loop while the disk was fast. Under a steady trickle of
``acks=all`` records that blocked the leader's loop for every record, and everything the
loop had to do meanwhile (the followers' fetches that move the high watermark, the next
produce, the answers) queued behind the disk. A Python worker thread costs the loop more
than it saves: it needs the GIL before and after the call, and each hand-over is a
cross-CPU wake-up. :class:`LoopFlusher` hands the descriptors to ``replica._fsync_worker``
instead: its thread is plain C, and it reports finished jobs through an eventfd the loop
watches.

One flusher per event loop, made on first use (:func:`loop_flusher`); None where the C
extension is not built, and the partition then flushes as before.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

try:
    from replica._fsync_worker import FsyncWorker
except ImportError:  # built without a C compiler, or not Linux
    FsyncWorker = None  # type: ignore[assignment,misc]

__all__ = ["LoopFlusher", "loop_flusher"]

log = logging.getLogger(__name__)


class LoopFlusher:
    """A C fsync thread whose finished jobs complete futures on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the thread and watch its eventfd on ``loop`` (call on that loop)."""
        assert FsyncWorker is not None
        self._worker = FsyncWorker()
        self._waiting: dict[int, asyncio.Future[tuple[int, float]]] = {}
        """Each job's outcome, until :meth:`result` or :meth:`wait` takes it."""
        loop.add_reader(self._worker.fileno(), self._jobs_finished)

    def submit(self, fds: list[int]) -> int:
        """Queue a job that fdatasyncs ``fds`` in order, then closes them all (the job owns
        them from here on, whatever happens); returns its id. On the loop's thread."""
        job = self._worker.submit(fds)
        self._waiting[job] = asyncio.get_running_loop().create_future()
        return job

    async def result(self, job: int) -> tuple[int, float]:
        """Once ``job`` is done: its errno (0 if every fdatasync succeeded) and the seconds
        its fdatasyncs took. A cancelled caller leaves the outcome to :meth:`wait`."""
        outcome = await asyncio.shield(self._waiting[job])
        self._waiting.pop(job, None)
        return outcome

    def wait(self, job: int) -> int:
        """Block the calling thread (not holding the GIL) until ``job`` is done; its errno.
        For ending a flush whose task cannot wait any more (the log closes, the task was
        cancelled): at most one fdatasync's wait. A :meth:`result` still waiting on the job
        gets the outcome too."""
        waiting = self._waiting.pop(job, None)
        if waiting is not None and waiting.done():
            return waiting.result()[0]
        _, error, seconds = self._worker.wait(job)  # takes the job: not reported again
        if waiting is not None:
            waiting.set_result((error, seconds))
        return error

    def _jobs_finished(self) -> None:
        for job, error, seconds in self._worker.completed():
            waiting = self._waiting.get(job)
            if waiting is not None and not waiting.done():
                waiting.set_result((error, seconds))


_flushers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopFlusher] = (
    weakref.WeakKeyDictionary()
)


def loop_flusher() -> LoopFlusher | None:
    """The running loop's flusher, started on first use; None without the C extension."""
    if FsyncWorker is None:
        return None
    loop = asyncio.get_running_loop()
    flusher = _flushers.get(loop)
    if flusher is None:
        flusher = _flushers[loop] = LoopFlusher(loop)
        log.debug("fsync worker started")
    return flusher
