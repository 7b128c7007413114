"""CreatePartitions and IncrementalAlterConfigs decisions, and DescribeConfigs answers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from controller.logic import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigSource,
    ConfigType,
    Decision,
    NewPartitions,
    NewTopic,
    create_partitions,
    create_topics,
    describe_broker_configs,
    describe_topic_configs,
    fence_brokers,
    incremental_alter_configs,
)
from controller.logic.configs import NODE_CONFIG_FIELDS
from lograft.metadata import ConfigRecord, ConfigResource, ConfigResourceType, PartitionRecord
from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    LograftError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.node_config import NODE_CONFIGS, NodeConfig
from lograft.protocol.topic_config import TOPIC_CONFIGS, LogConfig
from lograft.protocol.topic_partition import MAX_PARTITIONS
from tests.unit.controller_fixtures import Cluster

SET = AlterConfigOpType.SET
DELETE = AlterConfigOpType.DELETE


def _cluster(brokers: int = 3) -> Cluster:
    cluster = Cluster(seed=5)
    for broker_id in range(brokers):
        cluster.register(broker_id)
    return cluster


def _topic(name: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, name)


# ---- CreatePartitions -------------------------------------------------------------------------


def test_added_partitions_are_placed_led_and_replicated_like_the_topics_others() -> None:
    cluster = _cluster()
    before = cluster.create("orders", 3, 3)
    decision = create_partitions(cluster.image, [NewPartitions("orders", 9)], cluster.rng)
    assert all(isinstance(r, PartitionRecord) for r in decision.records)
    assert len(decision.records) == 6
    result = cluster.commit(decision)
    assert result[0].error is None
    topic = cluster.image.topic("orders")
    assert topic is not None and topic.topic_id == before.topic_id
    assert sorted(topic.partitions) == list(range(9))
    for partition_id in range(3):  # untouched
        assert topic.partitions[partition_id] == before.partitions[partition_id]
    for partition_id in range(3, 9):
        state = topic.partitions[partition_id]
        assert len(state.replicas) == 3 and state.isr == state.replicas
        assert state.leader == state.replicas[0]
        assert (state.leader_epoch, state.partition_epoch) == (0, 0)
    # Leaders of the whole topic stay spread evenly over the brokers.
    assert Counter(s.leader for s in topic.partitions.values()) == {0: 3, 1: 3, 2: 3}


@pytest.mark.parametrize(
    ("count", "error", "message"),
    [
        (3, InvalidPartitionsError, "Topic already has 3 partition(s)."),
        (2, InvalidPartitionsError, "currently has 3 partition(s); 2 would not be an increase"),
        (MAX_PARTITIONS + 1, InvalidPartitionsError, "at most"),
    ],
)
def test_the_count_must_grow_within_limits(
    count: int, error: type[LograftError], message: str
) -> None:
    cluster = _cluster()
    cluster.create("orders", 3, 1)
    decision = create_partitions(cluster.image, [NewPartitions("orders", count)], cluster.rng)
    assert decision.records == ()
    found = decision.result[0].error
    assert isinstance(found, error) and message in found.message


def test_unknown_duplicate_and_offsets_topics_are_refused_each_on_its_own() -> None:
    cluster = _cluster()
    cluster.create("a", 1, 1)
    cluster.create("__consumer_offsets", 2, 1)
    decision = create_partitions(
        cluster.image,
        [
            NewPartitions("a", 2),
            NewPartitions("missing", 2),
            NewPartitions("dup", 2),
            NewPartitions("dup", 3),
            NewPartitions("__consumer_offsets", 4),
        ],
        cluster.rng,
    )
    errors = [type(r.error) if r.error else None for r in decision.result]
    assert errors == [
        None,
        UnknownTopicOrPartitionError,
        InvalidRequestError,
        InvalidRequestError,
        InvalidRequestError,
    ]
    assert len(decision.records) == 1  # only a's new partition


def test_too_few_active_brokers_for_the_replication_factor() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 3)
    cluster.commit(fence_brokers(cluster.image, [2]))
    decision = create_partitions(cluster.image, [NewPartitions("orders", 2)], cluster.rng)
    assert isinstance(decision.result[0].error, InvalidReplicationFactorError)


def test_validate_only_checks_and_appends_nothing() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    decision = create_partitions(
        cluster.image, [NewPartitions("orders", 4)], cluster.rng, validate_only=True
    )
    assert decision.records == () and decision.result[0].error is None


def test_manual_assignments_are_used_and_the_isr_is_their_active_brokers() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 2)
    cluster.commit(fence_brokers(cluster.image, [0]))
    decision = create_partitions(
        cluster.image, [NewPartitions("orders", 3, ((2, 1), (0, 2)))], cluster.rng
    )
    assert decision.result[0].error is None
    cluster.commit(decision)
    assert cluster.state("orders", 1).replicas == (2, 1)
    assert (cluster.state("orders", 1).leader, cluster.state("orders", 1).isr) == (2, (2, 1))
    # Broker 0 is fenced: it is a replica but neither leads nor starts in the ISR.
    assert cluster.state("orders", 2).replicas == (0, 2)
    assert (cluster.state("orders", 2).leader, cluster.state("orders", 2).isr) == (2, (2,))


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (((1, 2),), "only 1 assignment(s)"),
        (((1, 2), (1, 1)), "broker 1 more than once"),
        (((1, 2), (1, 7)), "broker 7, but no such broker is registered"),
        (((1, 2), (1,)), "1 replica(s), but this is not consistent"),
        (((1, 2), ()), "empty replica list"),
    ],
)
def test_bad_manual_assignments(assignments: tuple[tuple[int, ...], ...], message: str) -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 2)
    decision = create_partitions(
        cluster.image, [NewPartitions("orders", 3, assignments)], cluster.rng
    )
    error = decision.result[0].error
    assert isinstance(error, InvalidReplicaAssignmentError) and message in error.message


def test_manual_assignment_of_only_fenced_brokers_is_refused() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    cluster.commit(fence_brokers(cluster.image, [1]))
    decision = create_partitions(cluster.image, [NewPartitions("orders", 2, ((1,),))], cluster.rng)
    error = decision.result[0].error
    assert isinstance(error, InvalidReplicaAssignmentError) and "fenced" in error.message


# ---- IncrementalAlterConfigs ----------------------------------------------------------------


def _decide_alter(
    cluster: Cluster, name: str, *ops: AlterConfigOp, validate_only: bool = False
) -> Decision[list[AlterConfigsResult]]:
    return incremental_alter_configs(
        cluster.image, [AlterConfigsResource(_topic(name), ops)], validate_only=validate_only
    )


def _alter(
    cluster: Cluster, name: str, *ops: AlterConfigOp, validate_only: bool = False
) -> LograftError | None:
    decision = _decide_alter(cluster, name, *ops, validate_only=validate_only)
    if decision.result[0].error is not None:
        assert decision.records == ()
    cluster.commit(decision)
    return decision.result[0].error


def test_set_and_delete_write_config_records_and_change_the_image() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1, {"retention.ms": "1000"})
    decision = _decide_alter(
        cluster,
        "orders",
        AlterConfigOp("min.insync.replicas", SET, "3"),
        AlterConfigOp("retention.ms", DELETE),
    )
    assert decision.records == (
        ConfigRecord(ConfigResourceType.TOPIC, "orders", "min.insync.replicas", "3"),
        ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", None),
    )
    assert cluster.commit(decision)[0].error is None
    assert cluster.image.topic_configs("orders") == {"min.insync.replicas": "3"}


def test_operations_that_change_nothing_append_nothing() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1, {"retention.ms": "1000"})
    decision = _decide_alter(
        cluster,
        "orders",
        AlterConfigOp("retention.ms", SET, "1000"),
        AlterConfigOp("segment.bytes", DELETE),
    )
    assert decision.records == () and decision.result[0].error is None


@pytest.mark.parametrize(
    ("op", "error", "message"),
    [
        (AlterConfigOp("no.such.config", SET, "1"), InvalidConfigError, "unknown topic config"),
        (AlterConfigOp("no.such.config", DELETE), InvalidConfigError, "unknown topic config"),
        (AlterConfigOp("retention.ms", SET, "soon"), InvalidConfigError, "integer >= -1"),
        (AlterConfigOp("min.insync.replicas", SET, "0"), InvalidConfigError, "integer >= 1"),
        (AlterConfigOp("retention.ms", SET, None), InvalidRequestError, "Null value"),
        (
            AlterConfigOp("retention.ms", AlterConfigOpType.APPEND, "5"),
            InvalidConfigError,
            "Can't APPEND to key retention.ms because its type is not LIST.",
        ),
        (AlterConfigOp("retention.ms", SET, "1" * 40000), InvalidConfigError, "longer than"),
        (AlterConfigOp("", SET, "1"), InvalidRequestError, "config names"),
    ],
)
def test_bad_operations_are_refused_as_create_topics_refuses_them(
    op: AlterConfigOp, error: type[LograftError], message: str
) -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    found = _alter(cluster, "orders", AlterConfigOp("segment.bytes", SET, "1048576"), op)
    assert isinstance(found, error) and message in found.message
    # All or none: the valid operation next to it was not applied either.
    assert cluster.image.topic_configs("orders") == {}


def test_the_same_messages_as_create_topics() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    refused = create_topics(
        cluster.image, [NewTopic("x", 1, 1, {"retention.ms": "soon"})], cluster.rng
    )
    created = refused.result[0].error
    altered = _alter(cluster, "orders", AlterConfigOp("retention.ms", SET, "soon"))
    assert created is not None and altered is not None
    assert (type(created), created.message) == (type(altered), altered.message)


def test_unknown_topic_duplicates_and_validate_only() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    assert isinstance(
        _alter(cluster, "missing", AlterConfigOp("retention.ms", SET, "1")),
        UnknownTopicOrPartitionError,
    )
    twice = _alter(
        cluster,
        "orders",
        AlterConfigOp("retention.ms", SET, "1"),
        AlterConfigOp("retention.ms", DELETE),
    )
    assert isinstance(twice, InvalidRequestError)
    resource = AlterConfigsResource(_topic("orders"), (AlterConfigOp("retention.ms", SET, "1"),))
    decision = incremental_alter_configs(cluster.image, [resource, resource])
    assert [type(r.error) for r in decision.result] == [InvalidRequestError] * 2
    assert (
        _alter(cluster, "orders", AlterConfigOp("retention.ms", SET, "1"), validate_only=True)
        is None
    )
    assert cluster.image.topic_configs("orders") == {}


def test_broker_configs_are_static() -> None:
    cluster = _cluster()
    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    decision = incremental_alter_configs(
        cluster.image,
        [AlterConfigsResource(broker, (AlterConfigOp("log.retention.ms", SET, "1"),))],
    )
    error = decision.result[0].error
    assert isinstance(error, InvalidConfigError)
    assert "Cannot update these configs dynamically" in error.message
    bad_id = ConfigResource(ConfigResourceType.BROKER, "one")
    decision = incremental_alter_configs(cluster.image, [AlterConfigsResource(bad_id, ())])
    assert isinstance(decision.result[0].error, InvalidRequestError)


@pytest.mark.skipif("cleanup.policy" not in TOPIC_CONFIGS, reason="no list-typed topic config")
def test_append_and_subtract_on_a_list_config() -> None:
    cluster = _cluster()
    cluster.create("orders", 1, 1)
    append = AlterConfigOp("cleanup.policy", AlterConfigOpType.APPEND, "compact")
    assert _alter(cluster, "orders", append) is None
    assert cluster.image.topic_configs("orders") == {"cleanup.policy": "delete,compact"}
    subtract = AlterConfigOp("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")
    assert _alter(cluster, "orders", subtract) is None
    assert cluster.image.topic_configs("orders") == {"cleanup.policy": "compact"}
    emptied = AlterConfigOp("cleanup.policy", AlterConfigOpType.SUBTRACT, "compact")
    assert isinstance(_alter(cluster, "orders", emptied), InvalidConfigError)


# ---- DescribeConfigs ----------------------------------------------------------------------


def test_a_topic_lists_every_config_with_its_source() -> None:
    node_defaults = LogConfig().with_overrides({"segment.bytes": "1048576"})
    described = {
        d.name: d
        for d in describe_topic_configs(
            {"retention.ms": "1000"}, node_defaults, include_synonyms=True
        )
    }
    assert set(described) == set(TOPIC_CONFIGS)
    assert (described["retention.ms"].value, described["retention.ms"].source) == (
        "1000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
    )
    assert [(s.name, s.value, s.source) for s in described["retention.ms"].synonyms] == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert (described["segment.bytes"].value, described["segment.bytes"].source) == (
        "1048576",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert described["min.insync.replicas"].source is ConfigSource.DEFAULT_CONFIG
    assert described["min.insync.replicas"].config_type is ConfigType.INT
    assert not any(d.read_only or d.sensitive for d in described.values())


def test_describe_picks_keys_and_documentation_on_request() -> None:
    described = describe_topic_configs(
        {}, LogConfig(), keys={"retention.ms", "nope"}, include_documentation=True
    )
    assert [d.name for d in described] == ["retention.ms"]
    assert described[0].documentation == TOPIC_CONFIGS["retention.ms"].doc
    assert described[0].synonyms == ()


def test_a_broker_lists_its_settings_read_only(tmp_path: Path) -> None:
    config = NodeConfig.build(
        2,
        tmp_path,
        "127.0.0.1:9093",
        overrides={"log.retention.ms": "5000", "replica.lag.time.max.ms": "3000"},
        rack="r1",
    )
    described = {d.name: d for d in describe_broker_configs(config)}
    assert all(d.read_only for d in described.values())
    assert (described["node.id"].value, described["broker.rack"].value) == ("2", "r1")
    assert described["log.retention.ms"].value == "5000"
    assert described["log.retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert described["replica.lag.time.max.ms"].value == "3000"
    assert described["num.partitions"].source is ConfigSource.DEFAULT_CONFIG
    assert set(NODE_CONFIGS) <= set(described)
    cleaner = described["log.cleaner.enable"]
    assert (cleaner.value, cleaner.config_type) == ("true", ConfigType.BOOLEAN)


def test_every_node_config_has_a_field() -> None:
    assert set(NODE_CONFIG_FIELDS) == set(NODE_CONFIGS)
    config = NodeConfig(node_id=1, data_dir=Path("/nonexistent"))
    for name, (default, _, _) in NODE_CONFIGS.items():
        assert getattr(config, NODE_CONFIG_FIELDS[name]) == default, name
