"""How late the node's event loop runs: each stall is logged with its length.

Every request, heartbeat and Raft message of a node is handled on one asyncio loop. When
the machine is busy (other processes want the cores) or one callback runs long, everything
on the loop waits; a heartbeat answered late can cost a broker its session, a Raft fetch
answered late an election. :class:`LoopLagMonitor` sleeps ``interval_s`` at a time and
measures how much later than asked it woke: that lateness is the loop's lag. A lag of
``log_above_ms`` or more is logged (``event loop stalled node_id=N lag_ms=M``), so that a
churn of leaders or sessions can be read against the stalls that caused it. A stall has two
usual causes on a busy machine: the process waiting for a core, and one long callback; the
garbage collector's pauses are one such callback the monitor can see, so a collection of
``log_above_ms`` or more is logged too (``gc pause long node_id=N generation=G ms=M``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["LoopLagMonitor"]

log = logging.getLogger(__name__)


class LoopLagMonitor:
    """Measures the event loop's lag; run :meth:`run` as a task on the loop."""

    def __init__(
        self,
        node_id: int,
        *,
        interval_s: float = 0.1,
        log_above_ms: float = 250.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node_id = node_id
        self._interval_s = interval_s
        self._log_above_ms = log_above_ms
        self._clock = clock
        self.stalls = 0
        """Lags of ``log_above_ms`` or more so far."""
        self.longest_ms = 0.0
        """The longest lag measured so far."""
        self.longest_gc_ms = 0.0
        """The longest garbage collection since :meth:`run` started."""
        self._gc_started: float | None = None

    def record(self, lag_ms: float) -> None:
        """One measured lag (ms): counted, and logged when it is a stall."""
        self.longest_ms = max(self.longest_ms, lag_ms)
        if lag_ms >= self._log_above_ms:
            self.stalls += 1
            log.warning("event loop stalled node_id=%d lag_ms=%d", self._node_id, round(lag_ms))

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` entry: times each collection, logs a long one."""
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        if self._gc_started is None:
            return
        took_ms = (time.perf_counter() - self._gc_started) * 1000.0
        self._gc_started = None
        self.longest_gc_ms = max(self.longest_gc_ms, took_ms)
        if took_ms >= self._log_above_ms:
            log.warning(
                "gc pause long node_id=%d generation=%d ms=%d collected=%d",
                self._node_id,
                info.get("generation", -1),
                round(took_ms),
                info.get("collected", 0),
            )

    async def run(self) -> None:
        """Measure until cancelled (the collector's pauses too, meanwhile)."""
        gc.callbacks.append(self.on_gc)
        try:
            while True:
                asked = self._clock() + self._interval_s
                await asyncio.sleep(self._interval_s)
                self.record(max(0.0, self._clock() - asked) * 1000.0)
        finally:
            gc.callbacks.remove(self.on_gc)
