"""Clock jumps: each node's wall clock set ahead or back while it runs (libfaketime).

Nodes read the wall clock for record timestamps (``LogAppendTime``, ``CreateTime`` checks),
time-based retention and segment rolling, the group coordinator's offset expiry and the
controller's record times; they time everything else (Raft and session timeouts,
heartbeats, the ISR's lag) with the monotonic clock, which a wall-clock jump must not move.
:class:`NodeClocks` starts each node with Debian's libfaketime preloaded
(``LD_PRELOAD``), reading its offset from a file of its own on every call
(``FAKETIME_NO_CACHE=1``: about 8 µs per ``time.time()`` here), with the monotonic clock
left alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``); :meth:`NodeClocks.set_offset` moves one
node's wall clock at once, as an NTP step or an operator's ``date -s`` would.

libfaketime 0.9.10 (Debian 12) with ``FAKETIME_DONT_FAKE_MONOTONIC=1`` makes Python's
``time.sleep`` fail with ``EINVAL`` (its absolute ``clock_nanosleep`` on the monotonic clock is
mistranslated); a node process never calls it (asyncio, ``threading.Event.wait`` and
``select`` work), so the clock-jump scenario runs, but only node processes are preloaded.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

__all__ = ["NodeClocks", "clock_unavailable", "libfaketime_path"]

_LIBFAKETIME_GLOBS = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def libfaketime_path() -> Path | None:
    """Where libfaketime is installed (Debian's ``faketime`` package), or ``None``."""
    for pattern in _LIBFAKETIME_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    return None


def clock_unavailable() -> str | None:
    """Why clock jumps cannot run here (libfaketime missing), or ``None``."""
    if libfaketime_path() is None:
        hint = " (apt-get install faketime)" if shutil.which("apt-get") else ""
        return f"libfaketime not found{hint}"
    return None


class NodeClocks:
    """One wall-clock offset file per node under ``directory``; :meth:`env` is what a node
    is started with, :meth:`set_offset` moves its clock."""

    def __init__(self, directory: Path, node_ids: list[int]) -> None:
        library = libfaketime_path()
        if library is None:
            raise FileNotFoundError(clock_unavailable())
        self._library = library
        self._directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.offsets: dict[int, int] = {}
        """Each node's offset now, in seconds."""
        for node in node_ids:
            self.set_offset(node, 0)

    def _file(self, node: int) -> Path:
        return self._directory / f"clock-{node}"

    def env(self, node: int) -> dict[str, str]:
        """The environment variables that start ``node`` on its own clock."""
        return {
            "LD_PRELOAD": str(self._library),
            "FAKETIME_TIMESTAMP_FILE": str(self._file(node)),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def set_offset(self, node: int, seconds: int) -> None:
        """Set ``node``'s wall clock ``seconds`` from the real time (0: right again); the
        running node sees it on its next clock read. Written whole (rename), never half."""
        path = self._file(node)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(f"{seconds:+d}\n")
        os.replace(temporary, path)
        self.offsets[node] = seconds
