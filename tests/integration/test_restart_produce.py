"""acks=all sends across a whole-cluster restart (issue 12: STALE_BROKER_EPOCH after restart).

After every whole-cluster crash of a power-loss run, the first `lograft produce --acks all`
failed with ``STALE_BROKER_EPOCH: broker 1 epoch -1 is not the current 3`` for seconds after
the cluster reported itself healthy, and a running producer's batches failed with it. A
restarted broker must not act on its partitions before it has registered again (Kafka's
broker waits for its registration and the metadata up to it), and whatever a producer is
told meanwhile must be retriable: every send, by a producer that kept running across the
restart or by a new one started right after it, ends acknowledged within
``delivery.timeout.ms``.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest

from cluster.client import Producer
from cluster.client.producer import RecordMetadata
from lograft.protocol.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import node_pb2 as npb
from lograft.protocol.wire import node_pb2_grpc as npb_grpc
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import QuorumCluster
from tests.integration.wire_helpers import produce

pytestmark = pytest.mark.integration

TOPIC = "restarted"
PARTITIONS = 3
CLUSTER_TIMEOUT_S = 60.0
DELIVERY_TIMEOUT_MS = 90_000
SENDS_BEFORE_RESTART = 30
FRESH_SENDS_AFTER_HEALTHY = 10
"""New producers that must succeed once the restarted cluster is healthy again."""
MAX_ROUNDS = 1000


def _producer(cluster: QuorumCluster) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
            "linger.ms": 0,
        }
    )


def _failures(sent: list[tuple[str, Future[RecordMetadata]]]) -> list[str]:
    failed = []
    for value, future in sent:
        error = future.exception(timeout=DELIVERY_TIMEOUT_MS / 1000 + 30)
        if error is not None:
            failed.append(f"{value}: {type(error).__name__}: {error}")
    return failed


def test_acks_all_sends_across_a_whole_cluster_restart_are_all_acknowledged(
    tmp_path: Path,
) -> None:
    cluster = QuorumCluster(tmp_path, configs={"min.insync.replicas": "2"})
    cluster.start()
    try:
        first = cluster.nodes[1]
        assert cluster.create_topic(first, TOPIC, PARTITIONS, 3) == 0
        wait_until(
            lambda: all(
                len(leaders) == PARTITIONS and min(leaders.values()) >= 0
                for node in cluster.alive_brokers()
                if (leaders := cluster.leaders(node, TOPIC)) is not None
            ),
            CLUSTER_TIMEOUT_S,
            "a leader for every partition",
        )
        running = _producer(cluster)
        sent: list[tuple[str, Future[RecordMetadata]]] = []
        try:
            for i in range(SENDS_BEFORE_RESTART):
                value = f"before-{i}"
                sent.append((value, running.send(TOPIC, value.encode())))
            running.flush(DELIVERY_TIMEOUT_MS / 1000)
            assert _failures(sent) == []

            cluster.stop()  # kill -9 every node at once
            for node in cluster.nodes.values():
                node.start(wait=False)
            # The running producer sends while the nodes start...
            for i in range(SENDS_BEFORE_RESTART):
                value = f"starting-{i}"
                sent.append((value, running.send(TOPIC, value.encode())))
            for node in cluster.nodes.values():
                node.wait_ready()  # listening: a new producer can bootstrap

            # ...and from the moment they listen, each round a new producer sends one record
            # and waits for its answer (what `lograft produce --acks all` does), and the
            # running one sends one more, until new producers have succeeded
            # FRESH_SENDS_AFTER_HEALTHY times after the cluster was healthy again.
            fresh: list[tuple[str, Future[RecordMetadata]]] = []
            fresh_ok_after_healthy = 0
            round_no = 0
            while fresh_ok_after_healthy < FRESH_SENDS_AFTER_HEALTHY:
                value = f"after-{round_no}"
                sent.append((value, running.send(TOPIC, value.encode())))
                healthy = cluster.healthy()
                with _producer(cluster) as new_producer:
                    future = new_producer.send(TOPIC, f"fresh-{round_no}".encode())
                    new_producer.flush(DELIVERY_TIMEOUT_MS / 1000)
                fresh.append((f"fresh-{round_no}", future))
                if future.exception() is not None:
                    break  # reported below
                if healthy:
                    fresh_ok_after_healthy += 1
                round_no += 1
                assert round_no < MAX_ROUNDS, "the restarted cluster never became healthy"
            running.flush(DELIVERY_TIMEOUT_MS / 1000)
            failures = _failures(sent) + _failures(fresh)
            assert failures == [], "sends that failed across the restart:\n" + "\n".join(failures)
        finally:
            running.close(10)
    finally:
        cluster.stop()


def _produce_answer(node: NodeProcess, partition: int, answers: list[str]) -> str:
    """Produce one record (acks=1) to ``partition`` on ``node``; the answer, also appended
    to ``answers``: the error name, or ``appended`` when the node took the record."""
    with grpc.insecure_channel(node.address) as channel:
        answer = produce(pb_grpc.BrokerStub(channel), TOPIC, partition, encode_batch([b"x"]), 1)
    if answer.error_code == 0:
        answers.append("appended")
    else:
        answers.append(error_for_code(answer.error_code, answer.error_message).error_name)
    return answers[-1]


def _broker_epoch(node: NodeProcess) -> int:
    """The broker epoch the node's own health answer gives (-1: not registered)."""
    with grpc.insecure_channel(node.address) as channel:
        facts = npb_grpc.NodeStub(channel).NodeHealth(npb.NodeHealthRequest(), timeout=5)
    return int(facts.broker_epoch)


def test_a_restarted_broker_leads_nothing_before_it_has_registered_again(
    tmp_path: Path,
) -> None:
    # A long broker session keeps the restarted brokers unregistered: the new active
    # controller counts the previous incarnations' sessions as live and refuses their
    # registrations (DUPLICATE_BROKER_REGISTRATION) until those sessions expire. Meanwhile
    # every node has replayed its metadata log, whose image names it leader of partitions
    # under the previous incarnation's registration.
    cluster = QuorumCluster(tmp_path, configs={"broker.session.timeout.ms": "60000"})
    cluster.start()
    try:
        first = cluster.nodes[1]
        assert cluster.create_topic(first, TOPIC, PARTITIONS, 3) == 0
        wait_until(
            lambda: (
                len(cluster.leaders(first, TOPIC)) == PARTITIONS
                and min(cluster.leaders(first, TOPIC).values()) >= 0
            ),
            CLUSTER_TIMEOUT_S,
            "a leader for every partition",
        )
        cluster.stop()  # kill -9 every node at once
        for node in cluster.nodes.values():
            node.start()
        leaders: dict[int, int] = {}

        def image_replayed() -> bool:
            leaders.update(cluster.leaders(first, TOPIC))
            return len(leaders) == PARTITIONS and min(leaders.values()) >= 0

        wait_until(image_replayed, CLUSTER_TIMEOUT_S, "the metadata image replayed on node 1")
        for partition, leader_id in sorted(leaders.items()):
            leader = cluster.nodes[leader_id]
            answers: list[str] = []

            def hosted(
                leader: NodeProcess = leader,
                partition: int = partition,
                answers: list[str] = answers,
            ) -> bool:
                answer = _produce_answer(leader, partition, answers)
                return answer != UnknownTopicOrPartitionError.error_name

            # Asked until the partition is hosted there (its log opened).
            wait_until(hosted, CLUSTER_TIMEOUT_S, f"{TOPIC}-{partition} hosted on node {leader_id}")
            assert _broker_epoch(leader) == -1, "the premise: the broker has not registered"
            assert answers[-1] == NotLeaderOrFollowerError.error_name, (
                f"node {leader_id}, not registered since its restart, answered a produce to "
                f"{TOPIC}-{partition} with: {answers}"
            )
    finally:
        cluster.stop()
