"""A slow disk under part of a LazyFS tree: extra time each ``fsync`` takes, by path prefix.

The chaos suite's ``slow-disk`` fault makes one node's fsyncs slow (its data directory is
``/node-N`` in the mount) while the other nodes' stay fast. The delay is spent in the FUSE
request's own thread before the store is touched, so it holds up only the caller that
fsyncs, as a slow device would, not the rest of the file system. A delay removed or
shortened while fsyncs wait releases them at once (:meth:`FsyncDelays.hold`).
"""

from __future__ import annotations

import threading
import time

__all__ = ["MAX_DELAY_S", "FsyncDelays"]

MAX_DELAY_S = 30.0
"""The longest delay a prefix may get (a bound on what a control command can ask for)."""


class FsyncDelays:
    """Thread-safe table of path prefix -> seconds each fsync under it is held up."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._by_prefix: dict[str, float] = {}

    def set(self, prefix: str, seconds: float) -> None:
        """Hold up every fsync of a path under ``prefix`` (``/`` for all) by ``seconds``
        (0 removes it). ``ValueError`` for a relative prefix or a delay outside 0..30 s."""
        if not prefix.startswith("/"):
            raise ValueError(f"a delay prefix starts with /, got {prefix!r}")
        if not 0.0 <= seconds <= MAX_DELAY_S:
            raise ValueError(f"a delay is 0..{MAX_DELAY_S:g} s, got {seconds!r}")
        normalised = prefix.rstrip("/") or "/"
        with self._changed:
            if seconds == 0.0:
                self._by_prefix.pop(normalised, None)
            else:
                self._by_prefix[normalised] = seconds
            self._changed.notify_all()

    def clear(self) -> None:
        """No delay anywhere."""
        with self._changed:
            self._by_prefix.clear()
            self._changed.notify_all()

    def hold(self, path: str | None) -> None:
        """Hold an fsync of ``path`` up for its delay, counted from the call; returns early
        when the delay is removed or shortened meanwhile."""
        start = time.monotonic()
        with self._changed:
            while True:
                remaining = start + self._delay_locked(path) - time.monotonic()
                if remaining <= 0:
                    return
                self._changed.wait(remaining)

    def for_path(self, path: str | None) -> float:
        """The delay of an fsync of ``path`` (the longest matching prefix's; 0 for none or
        an unknown path)."""
        with self._changed:
            return self._delay_locked(path)

    def _delay_locked(self, path: str | None) -> float:
        if path is None:
            return 0.0
        best, delay = -1, 0.0
        for prefix, seconds in self._by_prefix.items():
            under = prefix == "/" or path == prefix or path.startswith(prefix + "/")
            if under and len(prefix) > best:
                best, delay = len(prefix), seconds
        return delay

    def snapshot(self) -> dict[str, float]:
        """Every prefix with its delay."""
        with self._changed:
            return dict(self._by_prefix)
