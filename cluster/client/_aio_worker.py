"""The worker thread of an asyncio client, and outcomes handed from threads to the event loop.

Each ``AsyncProducer`` and ``AsyncConsumer`` runs its blocking calls on one :class:`Worker`,
in the order they were made; :func:`observe` brings a thread's future (a
``concurrent.futures.Future`` or a producer's ``RecordFuture``) to the loop without letting
a cancelled awaiter cancel the thread's work.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from lograft.protocol.errors import IllegalStateError

__all__ = ["Worker", "observe"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


class Outcome(Protocol[_T_co]):
    """What :func:`observe` needs of a thread's future."""

    def cancelled(self) -> bool:
        """Whether it was cancelled."""
        ...

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Its error, once done."""
        ...

    def result(self, timeout: float | None = None) -> _T_co:
        """Its value, once done."""
        ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(self)`` once done."""
        ...


class _Stop:
    """The worker's stop marker."""


class _Wake:
    """Wakes a worker that serves jobs while it waits (``serve_until``)."""


_STOP = _Stop()
_WAKE = _Wake()
_Job = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], bool]
"""(future, fn, args, nested_ok)"""


class Worker:
    """One daemon thread running a client's blocking calls in the order they were submitted.

    A job may wait for the event loop (a rebalance callback) with :meth:`serve_until`;
    meanwhile the worker runs inside it only the jobs submitted with ``nested_ok`` (the
    callback's own calls). Other jobs, and :meth:`stop`, submitted meanwhile wait until the
    job is done, then come in their order: a call from another task never runs in the
    middle of a rebalance. After :meth:`stop`, jobs still queued, and any submitted later,
    fail with ``IllegalStateError``. Thread-safe.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | _Stop | _Wake] = queue.SimpleQueue()
        self._deferred: deque[_Job | _Stop] = deque()
        """(worker thread) What arrived during ``serve_until`` and waits for the outer job."""
        self._lock = threading.Lock()
        self._exited = False
        self._depth = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., _T], *args: Any, nested_ok: bool = False) -> Future[_T]:
        """Queue ``fn(*args)``; cancelling the future before it starts skips it.

        ``nested_ok``: it may run inside a job waiting in ``serve_until`` (a call made by
        the rebalance callback that job waits for).
        """
        future: Future[_T] = Future()
        with self._lock:
            if not self._exited:
                self._jobs.put((future, fn, args, nested_ok))
                return future
        future.set_exception(IllegalStateError("client is closed"))
        return future

    def stop(self) -> None:
        """Stop once the jobs queued so far (and those they wait for) are done."""
        self._jobs.put(_STOP)

    @property
    def nested(self) -> bool:
        """Whether the running job runs inside another (on the worker thread)."""
        return self._depth > 0

    def serve_until(self, waited: Future[Any]) -> None:
        """Inside a job: run the ``nested_ok`` jobs submitted meanwhile until ``waited`` is
        done; keep the others (and a stop) for after the job."""
        if threading.current_thread() is not self._thread:
            raise IllegalStateError("serve_until() belongs to the worker thread")
        waited.add_done_callback(lambda _done: self._jobs.put(_WAKE))
        self._depth += 1
        try:
            while not waited.done():
                item = self._jobs.get()
                if isinstance(item, _Wake):
                    continue
                if isinstance(item, _Stop) or not item[3]:
                    self._deferred.append(item)
                else:
                    self._execute(item)
        finally:
            self._depth -= 1

    def _run(self) -> None:
        while True:
            item = self._deferred.popleft() if self._deferred else self._jobs.get()
            if isinstance(item, _Stop):
                break
            if not isinstance(item, _Wake):
                self._execute(item)
        with self._lock:
            self._exited = True
        left: list[_Job | _Stop | _Wake] = list(self._deferred)
        self._deferred.clear()
        while True:
            try:
                left.append(self._jobs.get_nowait())
            except queue.Empty:
                break
        for item in left:
            if isinstance(item, tuple) and item[0].set_running_or_notify_cancel():
                item[0].set_exception(IllegalStateError("client is closed"))

    @staticmethod
    def _execute(job: _Job) -> None:
        future, fn, args, _nested_ok = job
        if not future.set_running_or_notify_cancel():
            return  # cancelled before its turn
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting task, whatever it is
            future.set_exception(exc)
        else:
            future.set_result(result)


def observe(source: Outcome[_T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[_T]:
    """An asyncio future completing with ``source``'s outcome.

    Unlike ``asyncio.wrap_future``, cancelling it leaves ``source`` alone: a record's or a
    commit's future belongs to the client's threads, which complete it whatever happens.
    """
    destination: asyncio.Future[_T] = loop.create_future()

    def settle(done: Outcome[_T]) -> None:
        if destination.done():
            return
        if done.cancelled():
            destination.cancel()
            return
        error = done.exception()
        if error is not None:
            destination.set_exception(error)
        else:
            destination.set_result(done.result())

    def on_done(done: Outcome[_T]) -> None:
        try:  # noqa: SIM105 - once per record sent: cheaper than contextlib.suppress
            loop.call_soon_threadsafe(settle, done)
        except RuntimeError:
            pass  # the loop is closed: nobody can await the outcome any more

    source.add_done_callback(on_done)
    return destination
