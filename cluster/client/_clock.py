"""Time for the client's background loops: the real clock, or a manual one for tests.

Kafka's clients take a ``Time`` so that their tests run linger, backoff and timeouts on a
mock clock; this is the same seam. A client reads time and blocks only through a
``Clock``:

* ``monotonic()`` for every deadline (``linger.ms``, ``retry.backoff.ms``,
  ``delivery.timeout.ms``, ``max.block.ms``), ``time()`` for wall-clock record timestamps;
* ``wait(condition, timeout)`` instead of ``condition.wait(timeout)`` (the caller holds
  the condition's lock and re-checks its predicate afterwards, as with any condition: a
  wait may end early);
* ``sleep(seconds)`` instead of ``time.sleep``.

``SYSTEM_CLOCK`` is the real one and the default. ``ManualClock`` moves only when a test
calls ``advance``; a ``wait`` or ``sleep`` whose deadline the advance reaches wakes then, so
a test of linger or backoff needs no real sleeping. ``ManualClock.wait_for_parked`` lets a
test wait until a background thread has settled into a wait with a given deadline (it has
seen everything so far and decided to wait), the point at which asserting "nothing was
sent yet" is meaningful.

Using it elsewhere (the consumer, for instance): take an optional ``Clock``, default
``SYSTEM_CLOCK``, and replace ``time.monotonic()``, ``time.time()``, ``time.sleep(s)`` and
``cond.wait(t)`` with the clock's methods. A manual clock can only wake waits that go
through it: a blocking ``queue.get(timeout=...)`` has to become a deque guarded by a
``threading.Condition`` (notified where the queue was put to) and ``clock.wait`` on it;
``threading.Event.wait(t)`` likewise becomes a flag under a condition. Timeouts enforced by
gRPC itself (call deadlines) stay on real time.

Two such replacements are here for that: ``ClockQueue`` (``queue.SimpleQueue`` whose
``get(timeout)`` waits through a clock) and ``future_result`` (``Future.result(timeout)``
with the timeout on a clock).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "ClockQueue",
    "ManualClock",
    "SystemClock",
    "future_result",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Clock(Protocol):
    """Where a client reads time and blocks; see the module docstring."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines and durations)."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (for record timestamps)."""
        ...

    def wait(self, condition: threading.Condition, timeout: float | None) -> None:
        """``condition.wait(timeout)``: the caller holds the lock; may return early."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time``, ``Condition.wait``, ``time.sleep``."""

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def wait(self, condition: threading.Condition, timeout: float | None) -> None:
        """``condition.wait(timeout)``."""
        condition.wait(timeout)

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
"""The clock every client uses unless given another."""


@dataclass(frozen=True, slots=True)
class _Parked:
    condition: threading.Condition
    deadline: float | None


class ManualClock:
    """A clock that moves only when ``advance`` is called; thread-safe.

    It starts at ``start`` seconds (like ``time.monotonic``, not at zero) and its wall clock
    at ``wall_start``. Time is kept in whole nanoseconds, so advancing by 0.999 and then
    0.001 lands exactly on the next second. A ``wait`` parks on the given condition until
    it is notified or an ``advance`` reaches its deadline; one without a timeout parks until
    notified. A ``wait`` whose deadline has already come returns at once.
    """

    def __init__(self, start: float = 1000.0, wall_start: float = 1_700_000_000.0) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._now_ns = round(start * 1e9)
        self._wall_offset_ns = round(wall_start * 1e9) - self._now_ns
        self._parked: dict[int, _Parked] = {}
        self._tokens = itertools.count()

    def monotonic(self) -> float:
        """The manual time, in seconds."""
        with self._lock:
            return self._now_ns / 1e9

    def time(self) -> float:
        """The manual wall-clock time: ``wall_start`` plus every advance."""
        with self._lock:
            return (self._now_ns + self._wall_offset_ns) / 1e9

    def wait(self, condition: threading.Condition, timeout: float | None) -> None:
        """Park until ``condition`` is notified or the clock reaches now + ``timeout``."""
        with self._lock:
            now = self._now_ns / 1e9
            deadline = None if timeout is None else now + max(timeout, 0.0)
            if deadline is not None and deadline <= now:
                return
            token = next(self._tokens)
            self._parked[token] = _Parked(condition, deadline)
            self._changed.notify_all()
        # Registered while holding ``condition``'s lock, and ``advance`` needs that lock to
        # notify: its wake-up cannot fall between the registration and the wait.
        try:
            condition.wait()
        finally:
            with self._lock:
                self._parked.pop(token, None)
                self._changed.notify_all()

    def sleep(self, seconds: float) -> None:
        """Park until an ``advance`` reaches now + ``seconds``."""
        condition = threading.Condition()
        with condition:
            deadline = self.monotonic() + seconds
            while (remaining := deadline - self.monotonic()) > 0:
                self.wait(condition, remaining)

    def advance(self, seconds: float) -> None:
        """Move the clock on and wake every wait whose deadline it reaches."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        with self._lock:
            self._now_ns += round(seconds * 1e9)
            now = self._now_ns / 1e9
            due = [
                token
                for token, parked in self._parked.items()
                if parked.deadline is not None and parked.deadline <= now
            ]
            woken = [self._parked.pop(token) for token in due]
            self._changed.notify_all()
        for parked in woken:
            with parked.condition:
                parked.condition.notify_all()

    def parked(self) -> list[float | None]:
        """The deadlines of the waits parked now (None: no deadline), earliest first."""
        with self._lock:
            return self._deadlines_locked()

    def wait_for_parked(
        self,
        deadline: float | None = None,
        *,
        count: int = 1,
        timeout_s: float = 10.0,
    ) -> None:
        """Block until ``count`` waits are parked (with ``deadline``, if given).

        A test calls it to know that a background thread has caught up and chosen to wait
        until ``deadline`` (matched to within a microsecond). Real time bounds this wait:
        after ``timeout_s`` seconds it raises ``TimeoutError`` naming what is parked.
        """

        def settled() -> bool:
            deadlines = self._deadlines_locked()
            if deadline is None:
                return len(deadlines) >= count
            close = [d for d in deadlines if d is not None and abs(d - deadline) <= 1e-6]
            return len(close) >= count

        with self._changed:
            if not self._changed.wait_for(settled, timeout_s):
                raise TimeoutError(
                    f"no {count} waits parked until {deadline} within {timeout_s} s; "
                    f"now {self._now_ns / 1e9}, parked {self._deadlines_locked()}"
                )

    def _deadlines_locked(self) -> list[float | None]:
        parked = [p.deadline for p in self._parked.values()]
        return sorted(parked, key=lambda d: (d is None, d or 0.0))


class ClockQueue(Generic[_T]):
    """A FIFO for many producers and one consumer whose blocking ``get`` waits via a clock.

    ``queue.SimpleQueue``'s interface (``put``, ``get(timeout)``, ``get_nowait``, raising
    ``queue.Empty``), but a ``ManualClock`` can end a ``get``'s wait. Thread-safe.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._items: deque[_T] = deque()
        self._nonempty = threading.Condition()

    def put(self, item: _T) -> None:
        """Append ``item`` and wake a waiting ``get``."""
        with self._nonempty:
            self._items.append(item)
            self._nonempty.notify()

    def get(self, timeout: float) -> _T:
        """The oldest item, waiting at most ``timeout`` seconds on the clock for one."""
        with self._nonempty:
            deadline = self._clock.monotonic() + timeout
            while not self._items:
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    raise queue.Empty
                self._clock.wait(self._nonempty, remaining)
            return self._items.popleft()

    def get_nowait(self) -> _T:
        """The oldest item; ``queue.Empty`` if there is none."""
        with self._nonempty:
            if not self._items:
                raise queue.Empty
            return self._items.popleft()


def future_result(clock: Clock, future: Future[_T], timeout: float | None) -> _T:
    """``future.result(timeout)``, the timeout counted on ``clock``.

    Raises ``TimeoutError`` when ``future`` is not done ``timeout`` seconds after the call,
    and whatever ``future.result()`` raises once it is. ``None`` waits without a limit.
    """
    if timeout is None:
        return future.result()
    done = threading.Condition()

    def wake(_future: Future[_T]) -> None:
        with done:
            done.notify_all()

    future.add_done_callback(wake)
    with done:
        deadline = clock.monotonic() + max(timeout, 0.0)
        while not future.done():
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                raise TimeoutError
            clock.wait(done, remaining)
    return future.result()
