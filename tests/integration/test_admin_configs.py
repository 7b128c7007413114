"""Partitions added, configs described and altered live, through the controller quorum.

One three-node cluster for the module (each test uses its own topic); the test that kills
a broker runs last and brings it back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cluster.client import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    Consumer,
    NewPartitions,
    NewTopic,
    Producer,
    TopicPartition,
)
from lograft.protocol.errors import NotEnoughReplicasError
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 60.0
METADATA_MAX_AGE_MS = 500


@pytest.fixture(scope="module")
def cluster(shared_grouped: QuorumCluster) -> QuorumCluster:
    return shared_grouped


@pytest.fixture
def admin(cluster: QuorumCluster) -> Iterator[AdminClient]:
    with AdminClient(bootstrap_servers=cluster.bootstrap) as client:
        yield client


def _topic(name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, name)


def _partitions(admin: AdminClient, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """``{partition: (leader, isr)}`` as the cluster describes the topic now."""
    (description,) = admin.describe_topics([topic])
    return {p.partition: (p.leader, p.isr) for p in description.partitions}


def _fully_replicated(admin: AdminClient, topic: str, count: int) -> bool:
    found = _partitions(admin, topic)
    return len(found) == count and all(
        leader >= 0 and len(isr) == 3 for leader, isr in found.values()
    )


def _cli(cluster: QuorumCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LOGRAFT_BOOTSTRAP=cluster.bootstrap)
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", "--api-timeout-ms", "20000", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


# ---- (c) describe, and bad input through the CLI ------------------------------------------------


def test_describe_shows_sources_and_bad_input_is_one_typed_line(
    cluster: QuorumCluster, admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("described", 2, 3, {"retention.ms": "60000"})])[
        "described"
    ].result()
    config = admin.describe_configs([_topic("described")])[_topic("described")]
    assert config["retention.ms"].value == "60000"
    assert config["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert config["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG
    assert config["segment.bytes"].is_default and not config["segment.bytes"].is_read_only

    overrides = _cli(cluster, "configs", "describe", "--topic", "described")
    assert overrides.returncode == 0, overrides.stderr
    assert overrides.stdout.splitlines()[0] == "Dynamic configs for topic described are:"
    assert [line.split()[0] for line in overrides.stdout.splitlines()[1:]] == ["retention.ms=60000"]
    everything = _cli(cluster, "configs", "describe", "--topic", "described", "--all")
    assert everything.returncode == 0, everything.stderr
    assert "min.insync.replicas=1 sensitive=false synonyms={DEFAULT_CONFIG:" in everything.stdout
    broker = _cli(cluster, "configs", "describe", "--broker", "2", "--all")
    assert broker.returncode == 0, broker.stderr
    assert "  node.id=2 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=2}" in (
        broker.stdout.splitlines()
    )

    refused = {
        "INVALID_CONFIG: unknown topic config 'retention.hours'": (
            "configs alter --topic described --add-config retention.hours=1"
        ),
        "INVALID_CONFIG: retention.ms='soon' is not valid": (
            "configs alter --topic described --add-config retention.ms=soon"
        ),
        "UNKNOWN_TOPIC_OR_PARTITION: topic 'nowhere' does not exist": (
            "configs alter --topic nowhere --add-config retention.ms=1"
        ),
        "INVALID_PARTITIONS: The topic described currently has 2 partition(s); 1 would not": (
            "topics alter described --partitions 1"
        ),
        "INVALID_CONFIG: Cannot update these configs dynamically": (
            "configs alter --broker 1 --add-config log.retention.ms=1"
        ),
    }
    for expected, command in refused.items():
        result = _cli(cluster, *command.split())
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"lograft: {expected}"), result.stderr
    # Nothing was changed by the refused calls.
    after = admin.describe_configs([_topic("described")])[_topic("described")]
    assert after["retention.ms"].value == "60000"
    assert len(_partitions(admin, "described")) == 2


# ---- (b) partitions added while clients run -------------------------------------------------


def test_added_partitions_get_leaders_and_a_running_group_reads_them(
    cluster: QuorumCluster, admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("grown", 2, 3)])["grown"].result()
    group_config = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": "grown-readers",
        "auto.offset.reset": "earliest",
        "metadata.max.age.ms": METADATA_MAX_AGE_MS,
    }
    with Consumer(group_config) as subscriber:
        subscriber.subscribe(["grown"])
        seen: dict[int, list[bytes]] = {}

        def read(partition: int) -> bool:
            for record in subscriber.poll(timeout_ms=100):
                seen.setdefault(record.partition, []).append(record.value or b"")
            return partition in seen

        with Producer(bootstrap_servers=cluster.bootstrap) as before:
            before.send("grown", b"old", partition=1).result(timeout=60)
        wait_until(lambda: read(1), CLUSTER_TIMEOUT_S, "the group to read partition 1")

        assert admin.create_partitions({"grown": NewPartitions(4)})["grown"].result() is None
        # Every broker learns of them from the metadata log, a little after the controller.
        wait_until(lambda: len(_partitions(admin, "grown")) == 4, CLUSTER_TIMEOUT_S, "4 partitions")
        partitions = _partitions(admin, "grown")
        assert sorted(partitions) == [0, 1, 2, 3]
        assert all(leader in cluster.broker_ids for leader, _ in partitions.values())
        wait_until(lambda: _fully_replicated(admin, "grown", 4), CLUSTER_TIMEOUT_S, "full ISRs")
        # A new producer may ask any broker; each learns of the partitions on its own time.
        wait_until(
            lambda: all(
                len(cluster.leaders(node, "grown")) == 4 for node in cluster.alive_brokers()
            ),
            CLUSTER_TIMEOUT_S,
            "every broker to know the 4 partitions",
        )

        with Producer(bootstrap_servers=cluster.bootstrap) as after:
            assert after.partitions_for("grown") == [0, 1, 2, 3]
            assert after.send("grown", b"new", partition=3).result(timeout=60).offset == 0
        # The group's running member is given the new partitions and reads them.
        wait_until(lambda: read(3), CLUSTER_TIMEOUT_S, "the group to read partition 3")
        assert seen[3] == [b"new"]
        assert TopicPartition("grown", 3) in subscriber.assignment()


def test_a_running_producer_sees_added_partitions_after_metadata_max_age(
    cluster: QuorumCluster, admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("grown-later", 1, 3)])["grown-later"].result()
    config = {"bootstrap.servers": cluster.bootstrap, "metadata.max.age.ms": METADATA_MAX_AGE_MS}
    with Producer(config) as producer:
        assert producer.send("grown-later", b"old").result(timeout=60).partition == 0
        assert (
            admin.create_partitions({"grown-later": NewPartitions(2)})["grown-later"].result()
            is None
        )
        # Once its metadata is older than metadata.max.age.ms the producer refreshes it in
        # the background; it never hit an error that would have made it look.
        wait_until(
            lambda: producer.partitions_for("grown-later") == [0, 1],
            20 * METADATA_MAX_AGE_MS / 1000,
            "the producer to see partition 1",
        )
        assert producer.send("grown-later", b"new", partition=1).result(60).partition == 1


# ---- (a) min.insync.replicas altered live ---------------------------------------------------


def test_min_insync_replicas_altered_live_refuses_and_then_allows_acks_all(
    cluster: QuorumCluster, admin: AdminClient
) -> None:
    admin.create_topics([NewTopic("strict", 1, 3)])["strict"].result()
    wait_until(lambda: _fully_replicated(admin, "strict", 1), CLUSTER_TIMEOUT_S, "a full ISR")
    resource = _topic("strict")
    raised = admin.incremental_alter_configs(
        {resource: [AlterConfigOp("min.insync.replicas", "3")]}
    )
    assert raised[resource].result() is None
    described = admin.describe_configs([resource])[resource]["min.insync.replicas"]
    assert (described.value, described.source) == ("3", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "delivery.timeout.ms": 4000}
    )
    follower = -1
    try:
        # Three in-sync replicas: min.insync.replicas=3 is met.
        assert producer.send("strict", b"three", partition=0).result(timeout=60).offset == 0
        leader, isr = _partitions(admin, "strict")[0]
        follower = next(b for b in isr if b != leader)
        cluster.nodes[follower].kill()
        wait_until(
            lambda: len(_partitions(admin, "strict")[0][1]) == 2,
            CLUSTER_TIMEOUT_S,
            "the killed broker out of the ISR",
        )
        with pytest.raises(NotEnoughReplicasError):
            producer.send("strict", b"refused", partition=0).result(timeout=60)

        deleted = admin.incremental_alter_configs(
            {resource: [AlterConfigOp("min.insync.replicas", op_type=AlterConfigOpType.DELETE)]}
        )
        assert deleted[resource].result() is None
        described = admin.describe_configs([resource])[resource]["min.insync.replicas"]
        assert (described.value, described.source) == ("1", ConfigSource.DEFAULT_CONFIG)
        # The same producer, never restarted: the default (1) lets acks=all through again.
        assert producer.send("strict", b"two", partition=0).result(timeout=60).offset >= 1
    finally:
        producer.close(timeout=30)
        if follower >= 0:
            cluster.nodes[follower].start(wait=False)
