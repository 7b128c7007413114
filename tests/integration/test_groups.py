"""Consumer groups against real processes: finding the coordinator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cluster.client import Consumer, Producer, TopicPartition
from cluster.errors import CoordinatorNotAvailableError, InvalidGroupIdError
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S

pytestmark = pytest.mark.integration

OFFSETS_PARTITIONS = 3


@pytest.fixture
def grouped(tmp_path: Path) -> Iterator[QuorumCluster]:
    running = QuorumCluster(
        tmp_path, configs={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _find(cluster: QuorumCluster, node_id: int, group_id: str) -> pb.FindCoordinatorResponse:
    with grpc.insecure_channel(cluster.nodes[node_id].address) as channel:
        response: pb.FindCoordinatorResponse = pb_grpc.BrokerStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_id=group_id), timeout=TIMEOUT_S
        )
        return response


def test_the_coordinator_is_the_leader_of_the_groups_offsets_partition(
    grouped: QuorumCluster,
) -> None:
    first = _find(grouped, 1, "orders-app")
    # The internal topic is created on first use; until it has leaders: retriable.
    assert first.error_code in (0, CoordinatorNotAvailableError.code)
    wait_until(
        lambda: all(_find(grouped, n, "orders-app").error_code == 0 for n in grouped.broker_ids),
        CLUSTER_TIMEOUT_S,
        "every broker to know the group's coordinator",
    )
    leaders = grouped.leaders(grouped.nodes[1], OFFSETS_TOPIC)
    assert len(leaders) == OFFSETS_PARTITIONS
    expected = leaders[partition_for_group("orders-app", OFFSETS_PARTITIONS)]
    answers = {_find(grouped, n, "orders-app").node_id for n in grouped.broker_ids}
    assert answers == {expected}, "every broker names the same coordinator"
    found = _find(grouped, 3, "orders-app")
    assert found.port == int(grouped.nodes[expected].address.rsplit(":", 1)[1])

    assert _find(grouped, 1, "").error_code == InvalidGroupIdError.code


def _assignments(consumers: list[Consumer], seen: list[bytes]) -> list[set[TopicPartition]]:
    """Poll each consumer once (keeping what it returns) and give their assignments."""
    for consumer in consumers:
        seen.extend(r.value for r in consumer.poll(timeout_ms=50) if r.value is not None)
    return [consumer.assignment() for consumer in consumers]


def test_three_consumers_share_six_partitions_and_resume_from_committed_offsets(
    grouped: QuorumCluster,
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "events", 6, 3) == 0
    with Producer({"bootstrap.servers": grouped.bootstrap, "acks": "all"}) as producer:
        for n in range(600):
            producer.send("events", f"{n}".encode(), partition=n % 6)
    config = {
        "bootstrap.servers": grouped.bootstrap,
        "group.id": "readers",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumers = [Consumer(config) for _ in range(3)]
    try:
        for consumer in consumers:
            consumer.subscribe(["events"])
        seen: list[bytes] = []

        def balanced() -> bool:
            owned = _assignments(consumers, seen)
            every = set().union(*owned)
            return len(every) == 6 and sorted(len(o) for o in owned) == [2, 2, 2]

        wait_until(balanced, CLUSTER_TIMEOUT_S, "a balanced assignment")

        def read_all() -> bool:
            _assignments(consumers, seen)
            return len(seen) >= 600

        wait_until(read_all, CLUSTER_TIMEOUT_S, "every record")
        # At least once: a partition handed over before anything was committed is read
        # again from the start by its new owner.
        assert {int(v) for v in seen} == set(range(600))
        for consumer in consumers:
            consumer.commit()
    finally:
        for consumer in consumers:
            consumer.close()
    with Consumer(config) as late:
        committed = late.committed([TopicPartition("events", p) for p in range(6)])
        assert committed == {TopicPartition("events", p): 100 for p in range(6)}
