"""Replica placement: even leaders, spread followers, distinct racks, deterministic by seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controller.logic import PlacementBroker, place_replicas
from lograft.protocol.errors import InvalidPartitionsError, InvalidReplicationFactorError


def _brokers(n: int, racks: int = 0) -> list[PlacementBroker]:
    return [PlacementBroker(b, f"rack{b % racks}" if racks else None) for b in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_three_brokers_thirty_partitions_ten_leaders_each(seed: int) -> None:
    placements = place_replicas(_brokers(3), 30, 3, random.Random(seed))
    assert Counter(p[0] for p in placements) == {0: 10, 1: 10, 2: 10}
    for replicas in placements:
        assert sorted(replicas) == [0, 1, 2]


@pytest.mark.parametrize(("brokers", "partitions", "rf"), [(5, 50, 3), (4, 12, 2), (7, 70, 1)])
def test_leaders_and_replicas_spread_evenly(brokers: int, partitions: int, rf: int) -> None:
    placements = place_replicas(_brokers(brokers), partitions, rf, random.Random(7))
    leaders = Counter(p[0] for p in placements)
    assert set(leaders.values()) == {partitions // brokers}
    replicas = Counter(b for p in placements for b in p)
    assert max(replicas.values()) - min(replicas.values()) <= 1
    for p in placements:
        assert len(p) == rf and len(set(p)) == rf


def test_followers_vary_between_rounds() -> None:
    # The shift grows each round, so leader 0 does not always have the same follower.
    placements = place_replicas(_brokers(4), 40, 2, random.Random(1))
    assert len({p[1] for p in placements if p[0] == 0}) > 1


def test_same_seed_same_placement_different_seeds_differ() -> None:
    a = place_replicas(_brokers(5), 20, 3, random.Random(42))
    assert a == place_replicas(_brokers(5), 20, 3, random.Random(42))
    assert any(place_replicas(_brokers(5), 20, 3, random.Random(s)) != a for s in range(5))


@pytest.mark.parametrize("seed", range(5))
def test_rack_aware_replicas_of_a_partition_on_distinct_racks(seed: int) -> None:
    brokers = _brokers(6, racks=3)
    rack_of = {b.broker_id: b.rack for b in brokers}
    placements = place_replicas(brokers, 30, 3, random.Random(seed))
    for replicas in placements:
        assert len({rack_of[b] for b in replicas}) == 3
    assert set(Counter(p[0] for p in placements).values()) == {5}
    assert set(Counter(rack_of[p[0]] for p in placements).values()) == {10}


def test_rack_aware_with_fewer_racks_than_replicas_uses_every_rack() -> None:
    brokers = _brokers(4, racks=2)
    rack_of = {b.broker_id: b.rack for b in brokers}
    for replicas in place_replicas(brokers, 20, 3, random.Random(0)):
        assert len(set(replicas)) == 3 and {rack_of[b] for b in replicas} == {"rack0", "rack1"}


def test_uneven_racks() -> None:
    brokers = [PlacementBroker(0, "a"), PlacementBroker(1, "a"), PlacementBroker(2, "a")]
    brokers.append(PlacementBroker(3, "b"))
    rack_of = {b.broker_id: b.rack for b in brokers}
    for replicas in place_replicas(brokers, 20, 2, random.Random(3)):
        assert {rack_of[b] for b in replicas} == {"a", "b"}


def test_errors() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        place_replicas(_brokers(2), 1, 3, random.Random(0))
    with pytest.raises(InvalidReplicationFactorError):
        place_replicas(_brokers(2), 1, 0, random.Random(0))
    with pytest.raises(InvalidPartitionsError):
        place_replicas(_brokers(2), 0, 1, random.Random(0))
