"""How an ``AsyncConsumer`` drives its sync ``Consumer``: calls on the worker, polls into a buffer.

:class:`ConsumerDriver`, the base of ``AsyncConsumer``, owns the sync consumer, the client's
worker thread (:class:`~cluster.client._aio_worker.Worker`) and the records fetched and not
yet handed out (:class:`~cluster.client._aio_buffer.RecordBuffer`). A call runs on the
worker after the calls made before it and cuts a poll under way short, so that it does not
wait for the poll's timeout; a poll runs the sync consumer's poll on the worker and hands
records out of the buffer; records given back make their partitions seek to the first of
them. What the public methods mean is ``AsyncConsumer``'s (:mod:`cluster.client.aio`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import Any, TypeVar

from lograft.protocol.errors import IllegalStateError

from ._aio_buffer import RecordBuffer
from ._aio_rebalance import IN_CALLBACK
from ._aio_worker import Worker
from ._connection import TopicPartition
from ._consumer_values import ConsumerBatch, ConsumerRecord
from .consumer import Consumer

__all__ = ["ConsumerDriver"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class ConsumerDriver:
    """The sync consumer, worker and record buffer under an ``AsyncConsumer``."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._worker = Worker(f"lograft-aio-consumer-{consumer.config.client_id}")
        self._buffer = RecordBuffer()
        """Records the sync consumer returned and this one has not handed out."""
        self._poll_lock = asyncio.Lock()
        self._interrupt: threading.Event | None = None
        """Set to cut the running poll short (another call is waiting for the worker)."""
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._paused: frozenset[TopicPartition] = frozenset()
        self._closed = False

    # ---- running calls on the worker -----------------------------------------------------

    def _check_open(self) -> None:
        # A callback run by close() may still use the consumer (commit in on_revoke).
        if self._closed and IN_CALLBACK.get() is not self:
            raise IllegalStateError("consumer is closed")

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the worker, after the calls made before it.

        Cancelling the awaiting task before the call's turn skips it.
        """
        return await asyncio.wrap_future(self._submit(fn, *args))

    def _submit(self, fn: Callable[..., _T], *args: Any) -> Future[_T]:
        """Queue ``fn(*args)`` for the worker and cut a poll under way short.

        A rebalance callback's own calls run inside the rebalance that awaits the callback;
        any other task's calls wait until the rebalance is done.
        """
        self._check_open()
        nested_ok = IN_CALLBACK.get() is self
        future = self._worker.submit(self._job, fn, args, nested_ok=nested_ok)
        self._interrupt_poll()
        return future

    async def _aside(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a thread-safe call of the sync consumer off the worker (and off the loop)."""
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args))

    def _job(self, fn: Callable[..., _T], args: tuple[Any, ...]) -> _T:
        try:
            return fn(*args)
        finally:
            self._publish()

    def _publish(self) -> None:
        """(worker) What the plain methods answer until the next call completes."""
        self._assignment = frozenset(self._consumer.assignment())
        self._paused = frozenset(self._consumer.paused())

    def _interrupt_poll(self) -> None:
        event = self._interrupt
        if event is not None:
            event.set()
            self._consumer._wakeup()

    # ---- the buffer ----------------------------------------------------------------------

    def _reclaim(self, partitions: Collection[TopicPartition] | None = None) -> None:
        """(worker) Give buffered records back: each partition seeks to its first one."""
        self._seek_back(self._buffer.remove(partitions))

    def _seek_back(self, starts: dict[TopicPartition, int]) -> None:
        """(worker) Seek each partition back to where what was not handed out starts."""
        for tp, offset in starts.items():
            try:
                self._consumer.seek(tp, offset)
            except IllegalStateError:
                continue  # no longer assigned: nothing to give back

    def _reclaiming(self, fn: Callable[..., None], *args: Any) -> None:
        self._reclaim()
        fn(*args)

    # ---- polling -------------------------------------------------------------------------

    def _check_pollable(self) -> None:
        if IN_CALLBACK.get() is self:
            raise IllegalStateError("a rebalance callback must not poll its consumer")
        self._check_open()

    def _poll_job(self, timeout_ms: int, interrupt: threading.Event) -> None:
        if self._worker.nested:
            raise IllegalStateError("a rebalance callback must not poll its consumer")
        if self._buffer:
            return  # the records of a cut-short poll: hand them out first
        self._buffer.extend(self._consumer._poll(timeout_ms, interrupt))

    async def _fill(self, timeout_ms: int) -> None:
        """One poll of the sync consumer on the worker; its records go to the buffer."""
        await self._on_worker(self._poll_job, timeout_ms)

    async def _on_worker(self, job: Callable[[int, threading.Event], _T], timeout_ms: int) -> _T:
        """Run a poll ``job(timeout_ms, interrupt)`` on the worker and await it.

        If the caller is cancelled: a job not started yet never runs (``wrap_future``
        cancels it); one under way is cut short through ``interrupt``, and keeps or gives
        back what it took (each job says which).
        """
        interrupt = threading.Event()
        self._interrupt = interrupt
        future = self._worker.submit(self._job, job, (timeout_ms, interrupt))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            interrupt.set()
            self._consumer._wakeup()
            raise
        finally:
            if self._interrupt is interrupt:
                self._interrupt = None

    def _poll_batches_job(self, timeout_ms: int, interrupt: threading.Event) -> list[ConsumerBatch]:
        """(worker) A batch poll, after giving buffered records back (the batches then
        start at them); a poll cut short gives its batches back too."""
        if self._worker.nested:
            raise IllegalStateError("a rebalance callback must not poll its consumer")
        self._reclaim()
        batches = self._consumer._poll_batches(timeout_ms, interrupt)
        if interrupt.is_set() and batches:
            # Its caller was cancelled and will not see these: the next poll starts at them.
            starts: dict[TopicPartition, int] = {}
            for batch in batches:
                starts.setdefault(TopicPartition(batch.topic, batch.partition), batch.start_offset)
            self._seek_back(starts)
            return []
        return batches

    async def _get_batches(self, timeout_ms: int) -> list[ConsumerBatch]:
        self._check_pollable()
        async with self._poll_lock:
            self._check_open()
            return await self._on_worker(self._poll_batches_job, timeout_ms)

    async def _get(self, timeout_ms: int, limit: int) -> list[ConsumerRecord]:
        self._check_pollable()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000.0
        async with self._poll_lock:
            while True:
                self._check_open()
                records = self._buffer.take(limit)
                if records:
                    return records
                await self._fill(max(int((deadline - loop.time()) * 1000), 0))
                records = self._buffer.take(limit)
                if records or loop.time() >= deadline:
                    return records
