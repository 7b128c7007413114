"""A restarted replica reopens at its checkpointed high watermark, not at its log end.

Real processes: three brokers and a dedicated controller. The partition leader takes an
``acks=1`` tail while its followers are paused and fenced, so the tail exists on the
leader alone; the leader is killed and restarted and is elected again (it is the ISR's
last member). Before issue 10 it reopened with its high watermark at the log end and
published the tail at once; now it reopens at ``replication-offset-checkpoint`` and a
consumer sees the tail only once a returning follower holds it and is back in the ISR.
"""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest

from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import fetch_all, fetch_once, produce

pytestmark = pytest.mark.integration

TOPIC = "tail"


def _state(cluster: QuorumCluster, node: NodeProcess) -> pb.PartitionMetadata | None:
    metadata = cluster.metadata(node, [TOPIC])
    if metadata is None or not metadata.topics or metadata.topics[0].error_code:
        return None
    return metadata.topics[0].partitions[0]


def _values(node: NodeProcess) -> list[bytes]:
    with grpc.insecure_channel(node.address) as channel:
        return [r.value or b"" for r in fetch_all(pb_grpc.BrokerStub(channel), TOPIC, 0)]


# Over 70 lines: a test that walks one restart scenario in order.
def test_a_restarted_leader_publishes_its_acks_1_tail_only_once_the_isr_has_it(
    tmp_path: Path,
) -> None:
    cluster = QuorumCluster(
        tmp_path,
        dedicated_controller=True,
        configs={
            # Paused followers leave the ISR by being fenced (session), not by lagging.
            "replica.lag.time.max.ms": "600000",
            "replica.high.watermark.checkpoint.interval.ms": "100",
        },
    )
    cluster.start()
    paused: list[NodeProcess] = []
    try:
        assert (
            cluster.create_topic(cluster.nodes[1], TOPIC, 1, 3, {"min.insync.replicas": "2"}) == 0
        )
        wait_until(
            lambda: (
                (s := _state(cluster, cluster.nodes[1])) is not None
                and s.leader_id > 0
                and len(s.isr_nodes) == 3
            ),
            CLUSTER_TIMEOUT_S,
            "a full ISR",
        )
        first = _state(cluster, cluster.nodes[1])
        assert first is not None
        leader = cluster.nodes[first.leader_id]
        followers = [cluster.nodes[r] for r in first.replica_nodes if r != first.leader_id]
        with grpc.insecure_channel(leader.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            committed = encode_batch([b"c0", b"c1", b"c2"])
            wait_until(
                lambda: produce(stub, TOPIC, 0, committed, acks=-1).error_code == 0,
                CLUSTER_TIMEOUT_S,
                "an acks=all write",
            )

            # The followers stop; the controller fences them and shrinks the ISR to the
            # leader, which then takes an acks=1 tail that only it holds.
            for follower in followers:
                assert follower.process is not None
                follower.process.send_signal(signal.SIGSTOP)
                paused.append(follower)
            wait_until(
                lambda: (
                    (s := _state(cluster, leader)) is not None
                    and list(s.isr_nodes) == [leader.node_id]
                ),
                CLUSTER_TIMEOUT_S,
                "the ISR shrunk to the leader",
            )
            tail = produce(stub, TOPIC, 0, encode_batch([b"t3", b"t4"]), acks=1)
            assert tail.error_code == 0 and tail.base_offset == 3
            assert fetch_once(stub, TOPIC, 0, 3).high_watermark == 3
        checkpoint = leader.data_dir / "replication-offset-checkpoint"
        wait_until(
            lambda: checkpoint.exists() and f"{TOPIC} 0 3" in checkpoint.read_text(),
            CLUSTER_TIMEOUT_S,
            "the high watermark checkpointed",
        )

        leader.kill()
        leader.start(wait=True)
        wait_until(
            lambda: (
                (s := _state(cluster, leader)) is not None
                and s.leader_id == leader.node_id
                and s.leader_epoch > first.leader_epoch
            ),
            CLUSTER_TIMEOUT_S,
            "the restarted replica elected leader again",
        )
        # Elected with the tail in its log, it still publishes only what was committed.
        assert _values(leader) == [b"c0", b"c1", b"c2"]
        with grpc.insecure_channel(leader.address) as channel:
            answer = fetch_once(pb_grpc.BrokerStub(channel), TOPIC, 0, 3)
        assert answer.high_watermark == 3 and not answer.records

        # One follower returns, copies the tail and rejoins the ISR: then it is committed.
        returning = paused.pop(0)
        assert returning.process is not None
        returning.process.send_signal(signal.SIGCONT)
        wait_until(
            lambda: _values(leader) == [b"c0", b"c1", b"c2", b"t3", b"t4"],
            CLUSTER_TIMEOUT_S,
            "the tail committed",
        )
        wait_until(
            lambda: (s := _state(cluster, leader)) is not None and returning.node_id in s.isr_nodes,
            CLUSTER_TIMEOUT_S,
            "the returning follower in the ISR",
        )
    finally:
        for node in paused:
            if node.process is not None:
                node.process.send_signal(signal.SIGCONT)
        cluster.stop()
