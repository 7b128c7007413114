"""Choosing a partition for a record, the way Apache Kafka's Java client does.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions``, with ``murmur2`` identical
to ``org.apache.kafka.common.utils.Utils.murmur2``, so a key lands on the same partition that a
Kafka client would pick. Unkeyed records use the sticky partitioner of KIP-480: every unkeyed
record for a topic goes to one partition until the producer starts a new batch for it (the
previous one filled up or was sent), then a different partition is chosen at random.

``murmur2`` and ``partition_for_key`` are pure. ``StickyPartitioner`` is thread-safe; it takes
an injected ``random.Random`` so tests can seed it.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence

__all__ = [
    "Partitioner",
    "StickyPartitioner",
    "murmur2",
    "partition_for_key",
    "to_positive",
]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 of ``data`` exactly as Kafka's ``Utils.murmur2`` computes it.

    Returns a signed 32-bit integer, like the Java method (``-973932308`` for ``b"21"``).
    """
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    words = length // 4
    if words:
        for k in struct.unpack_from(f"<{words}I", buf):
            k = (k * _M) & _MASK32
            k ^= k >> 24
            k = (k * _M) & _MASK32
            h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    base = length & ~3
    if tail >= 3:
        h ^= buf[base + 2] << 16
    if tail >= 2:
        h ^= buf[base + 1] << 8
    if tail >= 1:
        h ^= buf[base]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit of a 32-bit hash."""
    return h & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition a Kafka client picks for ``key`` among ``num_partitions``."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """KIP-480 sticky choice for unkeyed records, one sticky partition per topic.

    ``partition`` returns the current sticky partition of a topic (choosing one at random
    the first time). The producer calls ``on_new_batch`` when an unkeyed record would open a
    new batch on the sticky partition; the partitioner then moves to another partition, chosen
    at random among the available ones (those with a leader) and never the one just left
    when there is a choice. Thread-safe.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._sticky: dict[str, int] = {}

    def partition(
        self, topic: str, num_partitions: int, available: Sequence[int] | None = None
    ) -> int:
        """The sticky partition for ``topic``; ``available`` lists partitions with a leader."""
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, got {num_partitions}")
        # Read without the lock first: once per record, and a dict read is atomic; a choice
        # made meanwhile by another thread is as good as this one's.
        current = self._sticky.get(topic)
        if current is not None and current < num_partitions and not available:
            return current
        with self._lock:
            current = self._sticky.get(topic)
            if (
                current is not None
                and current < num_partitions
                and (not available or current in available)
            ):
                return current
            return self._choose_locked(topic, num_partitions, available, avoid=None)

    def on_new_batch(
        self,
        topic: str,
        previous: int,
        num_partitions: int,
        available: Sequence[int] | None = None,
    ) -> int:
        """Move ``topic`` off ``previous`` (if it is still the sticky one); return the new one."""
        with self._lock:
            current = self._sticky.get(topic)
            if current is not None and current != previous and current < num_partitions:
                return current  # another thread moved it already
            return self._choose_locked(topic, num_partitions, available, avoid=previous)

    def _choose_locked(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int] | None,
        avoid: int | None,
    ) -> int:
        pool = [p for p in available if 0 <= p < num_partitions] if available else []
        if not pool:
            pool = list(range(num_partitions))
        if avoid is not None and len(pool) > 1:
            pool = [p for p in pool if p != avoid] or pool
        choice = pool[self._rng.randrange(len(pool))]
        self._sticky[topic] = choice
        return choice


class Partitioner:
    """The producer's default partitioner: murmur2 for keyed records, sticky for the rest."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.sticky = StickyPartitioner(rng)

    def partition(
        self,
        topic: str,
        key: bytes | None,
        num_partitions: int,
        available: Sequence[int] | None = None,
    ) -> int:
        """The partition for a record with ``key`` (``None``: unkeyed) on ``topic``."""
        if key is not None:
            return partition_for_key(key, num_partitions)
        return self.sticky.partition(topic, num_partitions, available)
