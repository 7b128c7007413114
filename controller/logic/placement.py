"""Replica placement: which brokers hold the replicas of a new topic's partitions.

Kafka's algorithm (``AdminUtils.assignReplicasToBrokers``, whose spirit KRaft's
``StripedReplicaPlacer`` keeps): leaders go round-robin over the brokers from a random
start, so each broker leads an equal share (3 brokers x 30 partitions -> 10 leaders each);
followers follow the leader at a shift that grows every full round, so replicas of
different partitions land on different broker pairs. When brokers have racks, the broker
list alternates racks and a follower is skipped while it would put two replicas of one
partition on one rack although some rack has none.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from lograft.protocol.errors import InvalidPartitionsError, InvalidReplicationFactorError

__all__ = ["PlacementBroker", "place_replicas"]


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    """A broker that may receive replicas, with its rack (None: no rack)."""

    broker_id: int
    rack: str | None = None


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # Kafka's replicaIndex: followers are the leader's successors at a distance of
    # 1 + (shift + j) mod (n - 1), never the leader itself.
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_alternated(brokers: Sequence[PlacementBroker]) -> list[PlacementBroker]:
    # rack1-b0, rack2-b0, rack3-b0, rack1-b1, ...: consecutive brokers are on different
    # racks, so round-robin leaders spread over racks too.
    by_rack: dict[str | None, list[PlacementBroker]] = {}
    for broker in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(broker.rack, []).append(broker)
    racks = [by_rack[r] for r in sorted(by_rack, key=lambda r: (r is not None, r or ""))]
    arranged: list[PlacementBroker] = []
    for i in range(max(len(members) for members in racks)):
        arranged.extend(members[i] for members in racks if i < len(members))
    return arranged


def place_replicas(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
) -> list[tuple[int, ...]]:
    """Replica lists (leader first) for partitions ``0..num_partitions-1``.

    ``brokers`` are the live, unfenced brokers. Raises ``InvalidReplicationFactorError``
    when there are fewer than ``replication_factor`` of them.
    """
    if num_partitions < 1:
        raise InvalidPartitionsError(f"num_partitions must be >= 1, got {num_partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be >= 1, got {replication_factor}"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} available brokers"
        )
    if len({b.broker_id for b in brokers}) != len(brokers):
        raise ValueError("broker ids must be distinct")
    racks = {b.rack for b in brokers}
    rack_aware = len(racks) > 1
    arranged = (
        _rack_alternated(brokers) if rack_aware else sorted(brokers, key=lambda b: b.broker_id)
    )
    n = len(arranged)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    placements: list[tuple[int, ...]] = []
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        if rack_aware:
            placements.append(
                _place_rack_aware(arranged, first, shift * len(racks), replication_factor, racks)
            )
        else:
            replicas = [arranged[first].broker_id]
            replicas.extend(
                arranged[_replica_index(first, shift, j, n)].broker_id
                for j in range(replication_factor - 1)
            )
            placements.append(tuple(replicas))
    return placements


def _place_rack_aware(
    arranged: Sequence[PlacementBroker],
    first: int,
    shift: int,
    replication_factor: int,
    racks: set[str | None],
) -> tuple[int, ...]:
    n = len(arranged)
    leader = arranged[first]
    replicas = [leader.broker_id]
    used_racks = {leader.rack}
    used_brokers = {leader.broker_id}
    k = 0
    while len(replicas) < replication_factor:
        if k >= 2 * n:
            # Kafka's loop always terminates for consistent input; this guard keeps a bug
            # from spinning forever: take any broker not used yet.
            broker = next(b for b in arranged if b.broker_id not in used_brokers)
        else:
            broker = arranged[_replica_index(first, shift, k, n)]
            k += 1
            # Skip a broker on a rack that has a replica while some rack has none, or a
            # broker that has a replica while some broker has none.
            rack_ok = broker.rack not in used_racks or len(used_racks) == len(racks)
            broker_ok = broker.broker_id not in used_brokers
            if not (rack_ok and broker_ok):
                continue
        replicas.append(broker.broker_id)
        used_racks.add(broker.rack)
        used_brokers.add(broker.broker_id)
    return tuple(replicas)
