"""The records an ``AsyncConsumer`` has fetched and not yet handed out, in fetch order.

A poll of the sync ``Consumer`` returns up to ``max.poll.records`` records; ``getone`` and
``async for`` hand them out one at a time, and a cancelled ``getmany`` leaves its poll's
records here for the next call. Records given back to the sync consumer leave the buffer by
partition, with the offset of each partition's first one (where the consumer seeks to).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Collection, Iterable, Sequence

from ._connection import TopicPartition
from ._consumer_values import ConsumerRecord

__all__ = ["RecordBuffer", "by_partition", "first_offsets"]

log = logging.getLogger(__name__)


def by_partition(records: Sequence[ConsumerRecord]) -> dict[TopicPartition, list[ConsumerRecord]]:
    """``records`` grouped by partition, each partition's in their order."""
    grouped: dict[TopicPartition, list[ConsumerRecord]] = {}
    for record in records:
        grouped.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
    return grouped


def first_offsets(records: Iterable[ConsumerRecord]) -> dict[TopicPartition, int]:
    """The offset of each partition's first record (records of a partition are in order)."""
    first: dict[TopicPartition, int] = {}
    for record in records:
        first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
    return first


class RecordBuffer:
    """Records fetched and not handed out, oldest first. Thread-safe (the worker fills it,
    the event loop takes from it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: deque[ConsumerRecord] = deque()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def extend(self, records: Iterable[ConsumerRecord]) -> None:
        """Add a poll's records after those already buffered."""
        with self._lock:
            self._records.extend(records)

    def take(self, limit: int) -> list[ConsumerRecord]:
        """Remove and return up to ``limit`` records, oldest first."""
        with self._lock:
            count = min(limit, len(self._records))
            return [self._records.popleft() for _ in range(count)]

    def first_offsets(self) -> dict[TopicPartition, int]:
        """The offset of each buffered partition's first record."""
        with self._lock:
            buffered = list(self._records)
        return first_offsets(buffered)

    def first_offset(self, tp: TopicPartition) -> int | None:
        """The offset of the first buffered record of ``tp``, if any."""
        with self._lock:
            for record in self._records:
                if record.topic == tp.topic and record.partition == tp.partition:
                    return record.offset
        return None

    def remove(self, partitions: Collection[TopicPartition] | None) -> dict[TopicPartition, int]:
        """Remove the records of ``partitions`` (all if None); their first offsets."""
        with self._lock:
            if not self._records:
                return {}
            if partitions is None:
                taken = list(self._records)
                self._records.clear()
            else:
                taken = []
                kept: deque[ConsumerRecord] = deque()
                for record in self._records:
                    tp = TopicPartition(record.topic, record.partition)
                    (taken if tp in partitions else kept).append(record)
                self._records = kept
        return first_offsets(taken)
