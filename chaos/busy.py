"""CPU-bound processes beside the nodes: a machine busy with something else.

``python -m chaos run --busy N`` starts ``N`` processes that only spin, for the whole run,
so the nodes get a share of the cores instead of all of them (on two cores, three nodes
and one spinning process each get about half a core when all are runnable). Each process
spins for a bounded time of its own and is ended by its PID when the run ends.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from types import TracebackType

__all__ = ["BusyLoops"]

log = logging.getLogger(__name__)

_SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


class BusyLoops:
    """``count`` spinning processes, each ending on its own after ``max_s`` seconds at most;
    a context manager (``start`` on entry, ``stop`` on exit)."""

    def __init__(self, count: int, max_s: float) -> None:
        if count < 0:
            raise ValueError(f"busy process count must be >= 0, not {count}")
        self._count = count
        self._max_s = max_s
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """The PIDs of the processes started and not yet stopped."""
        return [p.pid for p in self._processes]

    def start(self) -> None:
        """Start the processes."""
        code = _SPIN.format(seconds=float(self._max_s))
        for _ in range(self._count):
            self._processes.append(
                subprocess.Popen(
                    [sys.executable, "-c", code],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        if self._processes:
            log.info("busy processes started pids=%s", self.pids)

    def stop(self) -> None:
        """Kill the processes this object started (by PID) and reap them."""
        for process in self._processes:
            if process.poll() is None:
                process.kill()
        for process in self._processes:
            process.wait()
        self._processes.clear()

    def __enter__(self) -> BusyLoops:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
