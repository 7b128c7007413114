"""The repository's docker-compose.yml as a user runs it: three containers, each a combined
controller + broker, reachable from the host and from other containers, through faults.

Each test uses a topic of its own and leaves every container running and healthy, so the
tests share one cluster (bringing it up is the slow part) yet do not depend on each other's
data. Writes use ``acks=all`` with idempotence on a topic of three replicas and
``min.insync.replicas=2`` (the compose file's cluster defaults); "nothing acknowledged is
lost" means every value whose send completed is found when the topic is read back.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import pytest

from cluster.client import AdminClient, Consumer, Producer
from cluster.client.admin import NewTopic
from cluster.client.producer import RecordMetadata
from lograft.protocol.errors import LograftError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import TopicPartition
from tests.docker.compose import NODE_IDS, ComposeCluster
from tests.integration.nodes import wait_until

pytestmark = pytest.mark.docker

FAULT_TIMEOUT_S = 90.0


@pytest.fixture
def admin(compose_cluster: ComposeCluster) -> Iterator[AdminClient]:
    """An admin client on the host, bootstrapped from every node's published port."""
    client = AdminClient({"bootstrap.servers": compose_cluster.bootstrap})
    try:
        yield client
    finally:
        client.close()


def create_topic(admin: AdminClient, name: str) -> None:
    """A topic of one partition with the cluster's default replication factor."""
    admin.create_topics([NewTopic(name, 1, -1)])[name].result()

    def fully_replicated() -> bool:
        try:
            return len(replicas(admin, name)[2]) == 3
        except UnknownTopicOrPartitionError:
            return False  # the broker asked has not applied the new topic's record yet

    wait_until(fully_replicated, 30, f"{name} to have three in-sync replicas")


def replicas(admin: AdminClient, topic: str) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, ISR) of partition 0 of ``topic``."""
    (description,) = admin.describe_topics([topic])
    partition = description.partitions[0]
    return partition.leader, partition.replicas, partition.isr


def produce(cluster: ComposeCluster, topic: str, values: Sequence[bytes]) -> list[bytes]:
    """Send ``values`` with ``acks=all`` (one ``Producer.send`` each); the acknowledged ones."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "delivery.timeout.ms": 60000,
        }
    )
    try:
        futures: list[tuple[bytes, Future[RecordMetadata]]] = [
            (value, producer.send(topic, value)) for value in values
        ]
        producer.flush(90)
    finally:
        producer.close()
    return [value for value, future in futures if future.done() and future.exception() is None]


def read_all(cluster: ComposeCluster, topic: str) -> list[bytes]:
    """Every value of partition 0 of ``topic``, from its start to its end offset."""
    tp = TopicPartition(topic, 0)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "enable.auto.commit": False})
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        while consumer.position(tp) < end:
            values += [r.value or b"" for r in consumer.poll(1000)]
        return values
    finally:
        consumer.close()


def test_host_producer_and_network_consumer(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """Produced from the host with acks=all, read by a container on the compose network."""
    create_topic(admin, "from-host")
    _, assigned, _ = replicas(admin, "from-host")
    assert sorted(assigned) == list(NODE_IDS)
    values = [f"record-{i}".encode() for i in range(200)]
    assert produce(compose_cluster, "from-host", values) == values

    printed = compose_cluster.run_in_network(
        "consume", "from-host", "--from-beginning", "--max-messages", "200"
    )
    assert printed.splitlines() == [v.decode() for v in values]


def test_the_rest_proxy_service_produces_with_curl(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """The compose file's rest-proxy service: records POSTed with curl reach the topic."""
    create_topic(admin, "via-proxy")
    base = f"http://127.0.0.1:{compose_cluster.rest_proxy_port}/v3/clusters"

    def curl(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            ["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        body, _, status = done.stdout.rpartition("\n")
        return int(status or 0), body

    wait_until(lambda: curl(base)[0] == 200, FAULT_TIMEOUT_S, "the rest proxy to answer")
    cluster_id = json.loads(curl(base)[1])["data"][0]["cluster_id"]
    for i in range(3):
        status, report = curl(
            "-H",
            "Content-Type: application/json",
            "--data",
            json.dumps({"value": {"type": "STRING", "data": f"posted-{i}"}}),
            f"{base}/{cluster_id}/topics/via-proxy/records",
        )
        assert (status, json.loads(report)["error_code"]) == (200, 200), report
    assert read_all(compose_cluster, "via-proxy") == [b"posted-0", b"posted-1", b"posted-2"]


def test_killed_leader_loses_no_acknowledged_write(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """docker kill the leader's container: writes go on through a new leader, none is lost."""
    create_topic(admin, "kill-leader")
    before = produce(compose_cluster, "kill-leader", [f"before-{i}".encode() for i in range(100)])
    assert len(before) == 100
    leader, _, _ = replicas(admin, "kill-leader")

    compose_cluster.docker("kill", compose_cluster.container(leader))
    try:
        after = produce(compose_cluster, "kill-leader", [f"after-{i}".encode() for i in range(100)])
        assert len(after) == 100, "a write with two of three replicas alive failed"
        new_leader, _, _ = replicas(admin, "kill-leader")
        assert new_leader not in (leader, -1)
        assert read_all(compose_cluster, "kill-leader") == before + after
    finally:
        compose_cluster.compose("start", compose_cluster.service(leader))
        compose_cluster.wait_healthy(NODE_IDS)
    wait_until(
        lambda: len(replicas(admin, "kill-leader")[2]) == 3,
        FAULT_TIMEOUT_S,
        "the restarted node to rejoin the ISR",
    )


def test_paused_follower_leaves_and_rejoins_isr(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """docker pause a follower: the ISR shrinks and writes go on; unpaused, it rejoins."""
    create_topic(admin, "pause-follower")
    leader, assigned, _ = replicas(admin, "pause-follower")
    follower = next(n for n in assigned if n != leader)
    container = compose_cluster.container(follower)

    compose_cluster.docker("pause", container)
    try:
        wait_until(
            lambda: follower not in replicas(admin, "pause-follower")[2],
            FAULT_TIMEOUT_S,
            f"paused node {follower} to leave the ISR",
        )
        written = produce(compose_cluster, "pause-follower", [b"while-paused"] * 50)
        assert len(written) == 50
    finally:
        compose_cluster.docker("unpause", container)
    wait_until(
        lambda: follower in replicas(admin, "pause-follower")[2],
        FAULT_TIMEOUT_S,
        f"node {follower} to rejoin the ISR",
    )
    compose_cluster.wait_healthy(NODE_IDS)
    assert read_all(compose_cluster, "pause-follower") == [b"while-paused"] * 50


def test_disconnected_node_catches_up_after_reconnect(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """Cut a follower off the compose network, write, reconnect it: it catches up."""
    create_topic(admin, "disconnect")
    leader, assigned, _ = replicas(admin, "disconnect")
    follower = next(n for n in assigned if n != leader)
    container = compose_cluster.container(follower)
    service = compose_cluster.service(follower)

    compose_cluster.docker("network", "disconnect", compose_cluster.network_name, container)
    try:
        wait_until(
            lambda: follower not in replicas(admin, "disconnect")[2],
            FAULT_TIMEOUT_S,
            f"disconnected node {follower} to leave the ISR",
        )
        written = produce(compose_cluster, "disconnect", [f"cut-{i}".encode() for i in range(50)])
        assert len(written) == 50
    finally:
        compose_cluster.docker(
            "network", "connect", "--alias", service, compose_cluster.network_name, container
        )
    wait_until(
        lambda: follower in replicas(admin, "disconnect")[2],
        FAULT_TIMEOUT_S,
        f"node {follower} to rejoin the ISR after reconnecting",
    )
    compose_cluster.wait_healthy(NODE_IDS)
    assert read_all(compose_cluster, "disconnect") == written


def test_restart_of_every_node_keeps_committed_records(
    compose_cluster: ComposeCluster, admin: AdminClient
) -> None:
    """docker-compose restart (a controlled stop of all three): every committed record stays."""
    create_topic(admin, "restart-all")
    written = produce(compose_cluster, "restart-all", [f"kept-{i}".encode() for i in range(300)])
    assert len(written) == 300

    compose_cluster.compose("restart")
    compose_cluster.wait_healthy(NODE_IDS)

    def read_back() -> list[bytes] | None:
        try:
            return read_all(compose_cluster, "restart-all")
        except LograftError:
            return None  # leaders are still being elected after the restart

    wait_until(lambda: read_back() is not None, FAULT_TIMEOUT_S, "the topic to be readable")
    assert read_back() == written
