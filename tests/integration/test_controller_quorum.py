"""The controller quorum with real processes: failover, fencing, restart of every node."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest

from cluster.status import describe_cluster
from lograft.protocol.errors import (
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    StaleBrokerEpochError,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import produce

pytestmark = pytest.mark.integration


def test_kill9_active_controller_elects_another_and_topics_can_be_created(
    cluster: QuorumCluster,
) -> None:
    first = cluster.active_controller()
    assert first in cluster.nodes
    cluster.nodes[first].kill()
    survivor = next(n for n in cluster.alive())
    wait_until(
        lambda: cluster.active_controller() not in (-1, first),
        CLUSTER_TIMEOUT_S,
        "a new active controller",
    )
    wait_until(
        lambda: cluster.create_topic(survivor, "after-failover", 3, 2) == 0,
        CLUSTER_TIMEOUT_S,
        "CreateTopics to succeed",
    )
    assert set(cluster.leaders(survivor, "after-failover")) == {0, 1, 2}


def test_kill9_broker_is_fenced_and_its_partitions_get_new_leaders(
    cluster: QuorumCluster,
) -> None:
    any_node = cluster.nodes[1]
    assert cluster.create_topic(any_node, "spread", 6, 3) == 0
    wait_until(lambda: len(cluster.leaders(any_node, "spread")) == 6, 30, "leaders")
    leaders = cluster.leaders(any_node, "spread")
    victim = leaders[0]
    led = {p for p, leader in leaders.items() if leader == victim}
    cluster.nodes[victim].kill()
    observer = next(n for n in cluster.alive())
    wait_until(
        lambda: all(
            cluster.leaders(observer, "spread").get(p, victim) not in (victim, -1) for p in led
        ),
        CLUSTER_TIMEOUT_S,
        "new leaders for the victim's partitions",
    )
    metadata = cluster.metadata(observer, ["spread"])
    assert metadata is not None
    assert victim not in {b.node_id for b in metadata.brokers}
    for partition in metadata.topics[0].partitions:
        assert victim not in partition.isr_nodes
        assert partition.leader_id in partition.isr_nodes
    # Two live brokers cannot host three replicas.
    assert cluster.create_topic(observer, "too-wide", 1, 3) == InvalidReplicationFactorError.code


def test_restarting_every_node_at_once_keeps_the_metadata(cluster: QuorumCluster) -> None:
    node = cluster.nodes[1]
    for index in range(5):
        assert cluster.create_topic(node, f"kept-{index}", 2, 3) == 0
    # The broker answered CreateTopics once its own image had the topic (read-your-writes).
    before = cluster.metadata(node)
    assert before is not None
    expected = {
        (t.name, t.topic_id): [(p.partition, tuple(p.replica_nodes)) for p in t.partitions]
        for t in before.topics
    }
    # Each topic has an id of its own (what Kafka clients name topics by), kept below.
    assert len({topic_id for _, topic_id in expected}) == 5
    assert all(len(topic_id) == 16 for _, topic_id in expected)
    for each in cluster.nodes.values():
        each.kill()
    cluster.start()
    for each in cluster.nodes.values():
        after = cluster.metadata(each)
        assert after is not None
        got = {
            (t.name, t.topic_id): [(p.partition, tuple(p.replica_nodes)) for p in t.partitions]
            for t in after.topics
        }
        assert got == expected
    assert len(expected) == 5


def test_controlled_shutdown_moves_leadership_before_the_broker_exits(
    cluster: QuorumCluster,
) -> None:
    any_node = cluster.nodes[1]
    assert cluster.create_topic(any_node, "handover", 6, 3) == 0
    wait_until(lambda: len(cluster.leaders(any_node, "handover")) == 6, 30, "leaders")
    leaders = cluster.leaders(any_node, "handover")
    leaving = leaders[0]
    assert cluster.nodes[leaving].stop() == 0
    assert "controlled shutdown complete" in cluster.nodes[leaving].read_log()
    observer = next(n for n in cluster.alive())
    wait_until(
        lambda: leaving not in cluster.leaders(observer, "handover").values(),
        CLUSTER_TIMEOUT_S,
        "leadership to move away",
    )
    assert -1 not in cluster.leaders(observer, "handover").values()


def _controller_call(cluster: QuorumCluster, method: str, request: object) -> Any:
    leader = cluster.nodes[cluster.active_controller()]
    with grpc.insecure_channel(leader.address) as channel:
        return getattr(cpb_grpc.ControllerStub(channel), method)(request, timeout=10)


def test_alter_partition_and_producer_id_blocks_through_the_controller(
    cluster: QuorumCluster,
) -> None:
    node = cluster.nodes[1]
    assert cluster.create_topic(node, "isr", 1, 3) == 0
    wait_until(lambda: len(cluster.leaders(node, "isr")) == 1, 30, "a leader")
    metadata = cluster.metadata(node, ["isr"])
    assert metadata is not None
    partition = metadata.topics[0].partitions[0]
    leader = partition.leader_id
    quorum = cluster.describe_quorum(node)
    assert quorum is not None
    epochs = {b.broker_id: b.broker_epoch for b in quorum.brokers}
    shrunk = [leader, next(r for r in partition.replica_nodes if r != leader)]
    request = cpb.AlterPartitionRequest(
        broker_id=leader,
        broker_epoch=epochs[leader],
        topic="isr",
        partition=0,
        leader_epoch=partition.leader_epoch,
        partition_epoch=0,
        new_isr=shrunk,
    )
    answer = _controller_call(cluster, "AlterPartition", request)
    assert answer.error_code == 0, answer
    assert list(answer.isr) == shrunk and answer.partition_epoch == 1
    stale = _controller_call(cluster, "AlterPartition", request)  # based on epoch 0 again
    assert stale.error_code == InvalidUpdateVersionError.code
    # The dropped follower is caught up, so the leader proposes it back (AlterPartition).
    wait_until(
        lambda: (
            sorted(cluster.metadata(node, ["isr"]).topics[0].partitions[0].isr_nodes)
            == sorted(partition.replica_nodes)
        ),
        30,
        "the leader to add the caught-up follower back to the ISR",
    )
    first = _controller_call(
        cluster,
        "AllocateProducerIds",
        cpb.AllocateProducerIdsRequest(broker_id=1, broker_epoch=epochs[1]),
    )
    second = _controller_call(
        cluster,
        "AllocateProducerIds",
        cpb.AllocateProducerIdsRequest(broker_id=2, broker_epoch=epochs[2]),
    )
    assert first.error_code == second.error_code == 0
    assert second.producer_id_start >= first.producer_id_start + first.producer_id_len
    refused = _controller_call(
        cluster,
        "AllocateProducerIds",
        cpb.AllocateProducerIdsRequest(broker_id=1, broker_epoch=999),
    )
    assert refused.error_code == StaleBrokerEpochError.code


def test_replicas_of_a_partition_go_to_distinct_racks(tmp_path: Path) -> None:
    racked = QuorumCluster(tmp_path, racks={1: "rack-a", 2: "rack-b", 3: "rack-b"})
    racked.start()
    try:
        node = racked.nodes[1]
        assert racked.create_topic(node, "racked", 12, 2) == 0
        metadata = racked.metadata(node, ["racked"])
        assert metadata is not None
        rack_of = {b.node_id: b.rack for b in metadata.brokers}
        assert rack_of == racked.racks
        for partition in metadata.topics[0].partitions:
            assert {rack_of[r] for r in partition.replica_nodes} == {"rack-a", "rack-b"}
    finally:
        racked.stop()


def test_cluster_status_reports_quorum_brokers_and_partitions(cluster: QuorumCluster) -> None:
    node = cluster.nodes[2]
    assert cluster.create_topic(node, "watched", 2, 3) == 0
    leaders = cluster.leaders(node, "watched")
    with grpc.insecure_channel(cluster.nodes[leaders[0]].address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        # The leader opens its log just after the metadata reaches it: retriable until then.
        wait_until(
            lambda: (
                produce(stub, "watched", 0, encode_batch([b"a", b"b", b"c"]), acks=-1).error_code
                == 0
            ),
            30,
            "the leader to accept a produce",
        )
    status = describe_cluster([n.address for n in cluster.nodes.values()])
    assert status["quorum"]["leader_id"] == cluster.active_controller()
    assert {v["node_id"] for v in status["quorum"]["voters"]} == {1, 2, 3}
    assert [b["fenced"] for b in status["brokers"]] == [False, False, False]
    assert status["offline_partitions"] == []
    rows = {(p["topic"], p["partition"]): p for p in status["partitions"]}
    assert rows[("watched", 0)]["high_watermark"] == 3
    assert rows[("watched", 1)]["high_watermark"] == 0
    assert rows[("watched", 0)]["leader"] == leaders[0]


def test_pausing_the_active_controller_fences_only_it(cluster: QuorumCluster) -> None:
    """A paused controller holds the heartbeats sent to it; the brokers must move them to
    the new controller as soon as it is elected, or it fences live brokers along with the
    paused one (their sessions start afresh with it, and last one session timeout)."""
    first = cluster.active_controller()
    assert first in cluster.nodes
    paused = cluster.nodes[first]
    assert paused.process is not None
    paused.process.send_signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: cluster.active_controller() not in (-1, first),
            CLUSTER_TIMEOUT_S,
            "a new active controller",
        )
        successor = cluster.nodes[cluster.active_controller()]
        fenced = re.compile(r"brokers fenced after session timeout broker_ids=\[([\d, ]*)\]")
        wait_until(
            lambda: fenced.search(successor.read_log()) is not None,
            CLUSTER_TIMEOUT_S,
            "the paused broker to be fenced",
        )
        fenced_ids = {
            int(n) for m in fenced.finditer(successor.read_log()) for n in m.group(1).split(",")
        }
        assert fenced_ids == {first}
    finally:
        paused.process.send_signal(signal.SIGCONT)
