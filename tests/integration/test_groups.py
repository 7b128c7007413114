"""Consumer groups against real processes: finding the coordinator."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest

from cluster.client import Consumer, Producer, TopicPartition
from lograft.protocol.errors import CoordinatorNotAvailableError, InvalidGroupIdError
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, OFFSETS_PARTITIONS, QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S

pytestmark = pytest.mark.integration


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


CRASHING_MEMBER = """
import sys
from cluster.client import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "workers",
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "enable.auto.commit": False})
consumer.subscribe(["jobs"])
announced = False
while True:
    if consumer.poll(timeout_ms=100):
        consumer.commit()
    if consumer.assignment() and not announced:
        print("assigned", flush=True)
        announced = True
"""


# Over 70 lines: a test that walks one scenario in order: crash, replace, join.
def test_a_crashed_member_is_replaced_and_a_new_one_joins_without_stopping_the_others(
    grouped: QuorumCluster, tmp_path: Path
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "jobs", 6, 3) == 0
    with Producer({"bootstrap.servers": grouped.bootstrap, "acks": "all"}) as producer:
        for n in range(600):
            producer.send("jobs", f"{n}".encode(), partition=n % 6)
    config = {
        "bootstrap.servers": grouped.bootstrap,
        "group.id": "workers",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    }
    revoked: dict[int, set[TopicPartition]] = {0: set(), 1: set()}
    stayers = [Consumer(config), Consumer(config)]
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHING_MEMBER, grouped.bootstrap],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    newcomer: Consumer | None = None
    seen: list[bytes] = []
    everything = [TopicPartition("jobs", p) for p in range(6)]
    try:
        for index, consumer in enumerate(stayers):
            consumer.subscribe(["jobs"], on_revoke=lambda _c, ps, i=index: revoked[i].update(ps))
        assert crasher.stdout is not None
        announced: list[bytes] = []
        reader = threading.Thread(target=lambda: announced.extend(crasher.stdout or ()))
        reader.start()
        # The members must poll: a partition moves only once its owner has released it.
        wait_until(
            lambda: (
                [len(a) for a in _assignments(stayers, seen)] == [2, 2]
                and b"assigned\n" in announced
            ),
            CLUSTER_TIMEOUT_S,
            "three members with two partitions each",
        )
        with Consumer(config) as probe:
            before = probe.committed(everything)
        crasher.kill()
        crasher.wait(timeout=30)
        # session.timeout.ms (6 s) plus a margin for the coordinator's tick and heartbeats.
        wait_until(
            lambda: sorted(len(a) for a in _assignments(stayers, seen)) == [3, 3],
            6 + 20,
            "the crashed member's partitions to move to the others",
        )
        wait_until(
            lambda: len(_assignments(stayers, seen)) == 2 and len({int(v) for v in seen}) >= 400,
            CLUSTER_TIMEOUT_S,
            "the survivors to read the crashed member's partitions",
        )
        for consumer in stayers:
            consumer.commit()
        with Consumer(config) as probe:
            after = probe.committed(everything)
        for tp in everything:
            assert (after[tp] or 0) >= (before[tp] or 0), f"committed offset of {tp} went back"

        revoked[0].clear()
        revoked[1].clear()
        newcomer = Consumer(config)
        newcomer.subscribe(["jobs"])
        wait_until(
            lambda: sorted(len(a) for a in _assignments([*stayers, newcomer], seen)) == [2, 2, 2],
            CLUSTER_TIMEOUT_S,
            "the newcomer to take over two partitions",
        )
        for index, consumer in enumerate(stayers):
            # Cooperative: a member gives up only what moves; what it keeps is never revoked
            # (an eager rebalance would revoke everything and hand some of it back).
            assert not revoked[index] & consumer.assignment()
    finally:
        if crasher.poll() is None:
            crasher.kill()
        crasher.wait(timeout=30)
        if crasher.stdout is not None:
            crasher.stdout.close()
        for consumer in [*stayers, *([newcomer] if newcomer else [])]:
            consumer.close()
