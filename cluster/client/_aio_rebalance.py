"""An ``AsyncConsumer``'s rebalance callbacks, run on the event loop while the rebalance waits.

The sync ``Consumer`` calls its rebalance callbacks on the worker thread, in the middle of a
poll. :func:`bridge` makes such a callback out of an ``AsyncConsumer`` handler (plain or
``async``): it runs the handler on the loop and, until the handler is done, lets the worker
run only the handler's own calls (``Worker.serve_until``). :data:`IN_CALLBACK` tells those
calls apart from other tasks'. :func:`handlers` applies Kafka's defaults to the callbacks
``subscribe`` was given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
from collections.abc import Callable
from typing import TypeVar

from lograft.protocol.errors import IllegalStateError

from ._aio_worker import Worker
from ._connection import TopicPartition
from ._consumer_values import ConsumerRebalanceListener
from .consumer import Consumer, RebalanceCallback

__all__ = [
    "IN_CALLBACK",
    "KINDS",
    "AsyncConsumerRebalanceListener",
    "Handler",
    "bridge",
    "handlers",
]

log = logging.getLogger(__name__)

ConsumerT = TypeVar("ConsumerT")
"""The ``AsyncConsumer`` handlers are given (which imports this module, so it is not named)."""

Handler = Callable[[ConsumerT, list[TopicPartition]], object]
"""What runs on the loop for one kind of change: ``handler(consumer, partitions)``."""

IN_CALLBACK: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "lograft_in_rebalance_callback", default=None
)
"""The consumer whose rebalance callback the current task runs, if any."""

KINDS = ("assign", "revoke", "lost")
"""The kinds of change, in the order of the sync ``Consumer.subscribe`` callbacks."""


def bridge(
    consumer: ConsumerT,
    loop: asyncio.AbstractEventLoop,
    handler: Handler[ConsumerT] | None,
    worker: Worker,
    publish: Callable[[], None],
) -> RebalanceCallback | None:
    """A sync callback for the sync consumer that runs ``handler`` on the loop.

    It runs on ``worker`` (inside a poll): it calls ``publish`` (so the handler sees the
    assignment as it is now), then serves the handler's own calls until the handler is done.
    """
    if handler is None:
        return None

    def call(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        publish()
        done = asyncio.run_coroutine_threadsafe(_run(consumer, handler, partitions), loop)
        worker.serve_until(done)
        try:
            done.result()
        except concurrent.futures.CancelledError:
            raise IllegalStateError("a rebalance callback was cancelled") from None

    return call


async def _run(
    consumer: ConsumerT, handler: Handler[ConsumerT], partitions: list[TopicPartition]
) -> None:
    IN_CALLBACK.set(consumer)  # this task's own context: what the callback awaits sees it
    result = handler(consumer, partitions)
    if inspect.isawaitable(result):
        await result


def handlers(
    on_assign: Handler[ConsumerT] | None,
    on_revoke: Handler[ConsumerT] | None,
    on_lost: Handler[ConsumerT] | None,
    listener: AsyncConsumerRebalanceListener | ConsumerRebalanceListener | None,
) -> dict[str, Handler[ConsumerT]]:
    """What to call on the loop for each kind of change (Kafka's defaults applied)."""
    found: dict[str, Handler[ConsumerT]] = {}
    if listener is not None:
        revoked = listener.on_partitions_revoked
        # The sync listener's default on_partitions_lost calls on_partitions_revoked and
        # drops its result: an async override would never run. Call it directly.
        lost: Callable[[list[TopicPartition]], object] = (
            revoked
            if type(listener).on_partitions_lost is ConsumerRebalanceListener.on_partitions_lost
            else listener.on_partitions_lost
        )
        assigned = listener.on_partitions_assigned
        found["assign"] = lambda _consumer, partitions: assigned(partitions)
        found["revoke"] = lambda _consumer, partitions: revoked(partitions)
        found["lost"] = lambda _consumer, partitions: lost(partitions)
        return found
    if on_assign is not None:
        found["assign"] = on_assign
    if on_revoke is not None:
        found["revoke"] = on_revoke
    chosen_lost = on_lost if on_lost is not None else on_revoke
    if chosen_lost is not None:
        found["lost"] = chosen_lost
    return found


class AsyncConsumerRebalanceListener:
    """Rebalance callbacks as ``async`` methods (aiokafka's listener); override some.

    Each method gets the sorted partitions concerned and runs on the event loop; the
    rebalance waits for it. ``on_partitions_lost`` calls ``on_partitions_revoked`` unless
    overridden, as in Kafka.
    """

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Before these partitions go to another member: commit or flush work for them."""

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """After these partitions were added; ``await consumer.seek(...)`` to start elsewhere."""

    async def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        """These partitions may already belong to another member: do not commit them."""
        await self.on_partitions_revoked(lost)
