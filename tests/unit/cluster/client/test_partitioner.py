"""murmur2 and partition choice match Kafka's Java client (via kafka-python), sticky rules."""

from __future__ import annotations

import random
import warnings

import pytest

from cluster.client.partitioner import (
    Partitioner,
    StickyPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)

# kafka-python's package import uses a deprecated importlib.resources call.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_murmur2

# From Apache Kafka's UtilsTest.testMurmur2: Utils.murmur2 returns a signed int.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_VECTORS.items()))
def test_known_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_empty_and_short_inputs() -> None:
    for data in (b"", b"\x00", b"\xff", b"\xff\xfe", b"\x80\x81\x82", b"\xff" * 4):
        assert murmur2(data) & 0xFFFFFFFF == kafka_murmur2(data)


def test_matches_kafka_python_on_random_keys() -> None:
    rng = random.Random(20240601)
    for _ in range(5000):
        key = rng.randbytes(rng.randrange(0, 80))
        assert murmur2(key) & 0xFFFFFFFF == kafka_murmur2(key)
        assert -(2**31) <= murmur2(key) < 2**31


def test_partition_matches_kafka_default_partitioner() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        key = rng.randbytes(rng.randrange(1, 40))
        partitions = rng.randrange(1, 64)
        # kafka-python's DefaultPartitioner: (murmur2(key) & 0x7fffffff) % len(partitions)
        expected = (kafka_murmur2(key) & 0x7FFFFFFF) % partitions
        assert partition_for_key(key, partitions) == expected


def test_to_positive_and_bad_partition_count() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_stays_until_new_batch() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 6)
    assert all(sticky.partition("t", 6) == first for _ in range(100))
    moved = sticky.on_new_batch("t", first, 6)
    assert moved != first
    assert sticky.partition("t", 6) == moved
    # a stale notification (another thread moved on already) changes nothing
    assert sticky.on_new_batch("t", first, 6) == moved


def test_sticky_uses_available_partitions_and_visits_all() -> None:
    sticky = StickyPartitioner(random.Random(2))
    seen = set()
    current = sticky.partition("t", 8, available=[1, 3, 5])
    assert current in (1, 3, 5)
    for _ in range(200):
        current = sticky.on_new_batch("t", current, 8, available=[1, 3, 5])
        seen.add(current)
    assert seen == {1, 3, 5}
    # the sticky partition lost its leader: choose again
    assert sticky.partition("t", 8, available=[7]) == 7


def test_sticky_single_partition_and_topic_shrink() -> None:
    sticky = StickyPartitioner(random.Random(3))
    assert sticky.on_new_batch("t", 0, 1) == 0
    sticky.partition("u", 10)
    assert sticky.partition("u", 2) in (0, 1)


def test_default_partitioner() -> None:
    partitioner = Partitioner(random.Random(4))
    assert partitioner.partition("t", b"foobar", 10) == to_positive(-790332482) % 10
    unkeyed = partitioner.partition("t", None, 10)
    assert partitioner.partition("t", None, 10) == unkeyed
