"""The future ``Producer.send`` returns: light, one shared outcome per batch.

``concurrent.futures.Future`` makes a ``Condition`` (a lock and a waiter list) for every
record and takes it again to complete each one: on a per-record send that was a third of the
client's time. Here every record of a batch shares one ``BatchOutcome``, which the sender
completes once, whatever the batch holds. A ``RecordFuture`` is three slots: the outcome, the
record's index in the batch and its timestamp; its ``RecordMetadata`` is made only when asked
for. A waiting thread gets an ``Event`` made on demand; callbacks are kept only for the
records that have them, in a ``deque`` that callers append to without a lock (see
``RecordFuture.add_done_callback``). A callback given to ``send`` itself rides in its
future's ``_callback`` slot and the deque holds that future: one object kept per record until
its batch completes instead of two, which matters because whatever a busy producer keeps
alive for a few milliseconds feeds the garbage collector's full collections.

The interface is ``concurrent.futures.Future``'s, as far as a producer's future can have it
(Kafka's ``FutureRecordMetadata`` too cannot be cancelled): ``result``, ``exception``,
``done``, ``add_done_callback``, ``cancel`` (always False) and ``cancelled`` (always False).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BatchOutcome", "RecordFuture", "RecordMetadata"]

log = logging.getLogger(__name__)

# One lock for every outcome: it is held only to publish an outcome's state and to make a
# waiter's event, never while waiting or running a callback, so sharing it costs nothing
# measurable and saves a lock per batch. Adding a callback does not take it.
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written; ``offset`` is -1 with ``acks=0``."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchOutcome:
    """What became of one batch: written at ``base_offset``, or failed with ``error``.

    Completed once, by the thread that handles its answer (or by ``close``); a second
    completion is ignored.
    """

    __slots__ = (
        "_event",
        "append_time",
        "base_offset",
        "callbacks",
        "done",
        "error",
        "partition",
        "topic",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.done = False
        self.base_offset = -1
        self.append_time = -1
        self.error: BaseException | None = None
        self._event: threading.Event | None = None
        self.callbacks: deque[RecordFuture | tuple[RecordFuture, Callable[[RecordFuture], object]]]
        self.callbacks = deque()
        """Callbacks not yet run, in the order they were added: a future whose ``_callback``
        slot holds one given to ``send``, or a (future, callback) pair from
        ``add_done_callback``. Appended to and taken from without a lock (deque's ``append``,
        ``popleft`` and ``remove`` are atomic), each taken, and so run, once."""

    def succeed(self, base_offset: int, log_append_time_ms: int) -> None:
        """The batch was written at ``base_offset`` (-1 with ``acks=0``)."""
        with _LOCK:
            if self.done:
                return
            self.base_offset = base_offset
            self.append_time = log_append_time_ms
            self.done = True
            event = self._event
        self._wake(event)

    def fail(self, error: BaseException) -> None:
        """The batch failed for good with ``error``."""
        with _LOCK:
            if self.done:
                return
            self.error = error
            self.done = True
            event = self._event
        self._wake(event)

    def _wake(self, event: threading.Event | None) -> None:
        if event is not None:
            event.set()
        # The callbacks not yet taken, in the order they were added.
        take = self.callbacks.popleft
        while True:
            try:
                entry = take()
            except IndexError:
                return
            if isinstance(entry, tuple):
                _run_callback(*entry)
            else:
                callback = entry._callback
                assert callback is not None, "a future queued for its callback has none"
                _run_callback(entry, callback)

    def wait(self, timeout: float | None) -> bool:
        """Wait until the batch is done, at most ``timeout`` seconds; whether it is."""
        with _LOCK:
            if self.done:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)


def _run_callback(future: RecordFuture, callback: Callable[[RecordFuture], object]) -> None:
    try:
        callback(future)
    except Exception:
        # As concurrent.futures does: a caller's callback failing must not stop the sender
        # from completing the other records.
        log.exception("exception calling callback for %r", future)


class RecordFuture:
    """The outcome of one ``Producer.send``: its ``RecordMetadata`` or its typed error."""

    __slots__ = ("_callback", "_index", "_outcome", "_timestamp")

    def __init__(
        self,
        outcome: BatchOutcome,
        index: int,
        timestamp_ms: int,
        callback: Callable[[RecordFuture], object] | None = None,
    ) -> None:
        self._outcome = outcome
        self._index = index
        self._timestamp = timestamp_ms
        self._callback = callback
        """The callback given to ``send``, if any: the producer queues the future for it."""

    @classmethod
    def failed(cls, topic: str, partition: int, error: BaseException) -> RecordFuture:
        """A future that has already failed with ``error`` (the record was never queued)."""
        outcome = BatchOutcome(topic, partition)
        outcome.fail(error)
        return cls(outcome, 0, -1)

    def done(self) -> bool:
        """Whether the record is written or has failed."""
        return self._outcome.done

    def cancel(self) -> bool:
        """A record handed to the producer cannot be taken back: always False."""
        return False

    def cancelled(self) -> bool:
        """Always False (see ``cancel``)."""
        return False

    def running(self) -> bool:
        """Whether the outcome is still pending (as ``concurrent.futures``: not done)."""
        return not self._outcome.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the record's ``RecordMetadata``; raises its error if it failed.

        Raises ``TimeoutError`` if it is not done within ``timeout`` seconds.
        """
        outcome = self._outcome
        if not outcome.done and not outcome.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        if outcome.error is not None:
            raise outcome.error
        base = outcome.base_offset
        return RecordMetadata(
            outcome.topic,
            outcome.partition,
            base + self._index if base >= 0 else -1,
            outcome.append_time if outcome.append_time >= 0 else self._timestamp,
        )

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome; the record's error, or None if it was written.

        Raises ``TimeoutError`` if it is not done within ``timeout`` seconds.
        """
        outcome = self._outcome
        if not outcome.done and not outcome.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        return outcome.error

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        """Call ``fn(future)`` when the record is done: at once if it already is, else in
        the producer's I/O thread, where its answer arrived (keep it short: it delays other
        answers, as in Kafka; a ``send`` from it blocks that thread while ``buffer.memory``
        is full or the topic's metadata is not known yet, and fails after ``max.block.ms``;
        the memory of the answer it came with is freed only after all that answer's
        callbacks ran).

        If the record completes while ``fn`` is being added, ``fn`` may run at once in this
        thread, as if added after completion; the batch's other callbacks stay with the
        thread that completed it.
        """
        outcome = self._outcome
        if outcome.done:
            _run_callback(self, fn)
            return
        entry = (self, fn)
        outcome.callbacks.append(entry)
        if outcome.done:
            # Completed while we appended: the completing thread may have emptied the deque
            # before our entry was in it. Take ours back and run it here, as if added after
            # completion; if it is gone, that thread took it and runs it. Only ours: it keeps
            # the batch's other callbacks, in order.
            try:
                outcome.callbacks.remove(entry)
            except ValueError:
                return
            _run_callback(self, fn)

    def __repr__(self) -> str:
        outcome = self._outcome
        state = "pending" if not outcome.done else "failed" if outcome.error else "done"
        return f"<RecordFuture {outcome.topic}-{outcome.partition}#{self._index} {state}>"
