"""What waits on one partition: held fetches and ``acks=all`` produces.

A fetch that finds nothing to return waits on the partitions it asked for until one of
them may have more: new committed data for a consumer's fetch, any new data or a role
change for a follower's (``replica``). One waiter may wait on several partitions; the first
of them to move completes it. An ``acks=all`` produce waits until the leader core's verdict
(:meth:`replica.replication.LeaderState.completed_acks_all`) is done, with or without an
error; the partition asks for that verdict again only when a step of the core says it may
have changed (``LeaderUpdate.recheck_acks``).

The futures live on the event loop of the partition that owns them; not thread-safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lograft.protocol.errors import LograftError
from replica.replication import AcksAllStatus

__all__ = ["PartitionWaiters"]


class PartitionWaiters:
    """The fetch and ``acks=all`` waiters of one partition (see the module docstring)."""

    __slots__ = ("_acks", "_data", "_replica")

    def __init__(self) -> None:
        self._data: set[asyncio.Future[None]] = set()
        self._replica: set[asyncio.Future[None]] = set()
        self._acks: list[tuple[int, asyncio.Future[None]]] = []

    # ---- held fetches ---------------------------------------------------------------------

    def add_fetch(self, waiter: asyncio.Future[None], replica: bool) -> None:
        """Complete ``waiter`` at the next :meth:`wake_data` (or, for a follower's fetch,
        ``replica``, at the next :meth:`wake_replicas`)."""
        (self._replica if replica else self._data).add(waiter)

    def discard_fetch(self, waiter: asyncio.Future[None]) -> None:
        """Forget a waiter that was not completed (the fetch returned for another reason)."""
        self._data.discard(waiter)
        self._replica.discard(waiter)

    def wake_data(self) -> None:
        """New committed data: the consumers' held fetches look again."""
        _wake(self._data)

    def wake_replicas(self) -> None:
        """New data or a new role: the followers' held fetches look again."""
        _wake(self._replica)

    # ---- acks=all produces ----------------------------------------------------------------

    def add_acks(self, required_offset: int, waiter: asyncio.Future[None]) -> None:
        """Hold ``waiter`` until the verdict for ``required_offset`` is done."""
        self._acks.append((required_offset, waiter))

    def settle_acks(self, verdict: Callable[[int], AcksAllStatus]) -> None:
        """Judge every waiting produce again: complete, or fail, those ``verdict`` says
        are done, keep the others. A cancelled waiter (its produce timed out) is dropped."""
        if not self._acks:
            return
        still_waiting = []
        for offset, waiter in self._acks:
            if waiter.done():
                continue
            status = verdict(offset)
            if not status.done:
                still_waiting.append((offset, waiter))
            elif status.error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(status.error)
        self._acks = still_waiting

    def fail_acks(self, error: LograftError) -> None:
        """Fail every waiting produce with ``error`` (leadership moved, or it is unhosted)."""
        waiters, self._acks = self._acks, []
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)


def _wake(waiters: set[asyncio.Future[None]]) -> None:
    pending = list(waiters)
    waiters.clear()
    for waiter in pending:
        if not waiter.done():
            waiter.set_result(None)
