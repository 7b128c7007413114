"""What a bulk send (``Producer.send_bulk``) returns, and the call that collects it.

A leaf of the client: the accumulator and the sender complete a ``BulkCall`` without
importing the ``Producer`` facade (``cluster.client.producer`` re-exports the results).
"""

from __future__ import annotations

import bisect
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

__all__ = ["BulkBatch", "BulkCall", "BulkResult"]


@dataclass(frozen=True, slots=True)
class BulkBatch:
    """One batch of a bulk send: values ``[start_index, start_index + record_count)``."""

    partition: int
    base_offset: int
    record_count: int
    start_index: int
    latency_ms: float
    """From sending the request that carried the batch to its response."""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """The outcome of ``send_bulk``: every batch written, in input order."""

    topic: str
    record_count: int
    batches: tuple[BulkBatch, ...]

    def offset_of(self, index: int) -> tuple[int, int]:
        """``(partition, offset)`` of the value at ``index`` (offset -1 with ``acks=0``).

        Holds for unkeyed bulk sends, whose batches cover consecutive indexes; keyed bulk
        sends group values by partition, so there ``start_index`` counts within the group.
        """
        starts = [b.start_index for b in self.batches]
        position = bisect.bisect_right(starts, index) - 1
        if position < 0 or index >= self.record_count:
            raise IndexError(index)
        batch = self.batches[position]
        if batch.base_offset < 0:
            return batch.partition, -1
        return batch.partition, batch.base_offset + index - batch.start_index


class BulkCall:
    """Collects the batches of one ``send_bulk`` call into its future."""

    __slots__ = ("batches", "error", "future", "record_count", "remaining", "sealed", "topic")

    def __init__(self, topic: str, record_count: int) -> None:
        self.topic = topic
        self.record_count = record_count
        self.future: Future[BulkResult] = Future()
        self.batches: list[BulkBatch] = []
        self.error: BaseException | None = None
        self.remaining = 0
        self.sealed = False

    def finish_if_done(self) -> None:
        if not self.sealed or self.remaining > 0 or self.future.done():
            return
        try:
            if self.error is not None:
                self.future.set_exception(self.error)
            else:
                batches = tuple(sorted(self.batches, key=lambda b: (b.start_index, b.partition)))
                self.future.set_result(BulkResult(self.topic, self.record_count, batches))
        except InvalidStateError:
            pass
