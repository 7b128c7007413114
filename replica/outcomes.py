"""Awaiting several things and keeping each one's failure, in as few loop turns as possible."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

__all__ = ["outcomes"]


async def outcomes(awaitables: Sequence[Awaitable[object]]) -> list[BaseException | None]:
    """Await every item and return, in order, ``None`` for each that finished or the
    exception it raised, as ``gather(return_exceptions=True)`` does.

    A single item is awaited in the caller's own task: gather's task and its callbacks would
    add three turns of the event loop, and on the ``acks=all`` path each turn waits behind
    the node's other ready work. A cancellation of the caller still propagates.
    """
    if len(awaitables) == 1:
        try:
            await awaitables[0]
        except Exception as exc:
            return [exc]
        return [None]
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    return [result if isinstance(result, BaseException) else None for result in results]
