"""The AdminClient's config and cluster values, and their wire conversions (no cluster)."""

from __future__ import annotations

import pytest

from cluster.client import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    NewPartitions,
)
from cluster.client._config_admin import (
    alter_configs_request,
    alter_results,
    cluster_description,
    configs_from_pb,
    create_partitions_request,
)
from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.wire import broker_pb2 as pb

ORDERS = ConfigResource(ConfigResourceType.TOPIC, "orders")


def test_alter_config_op_takes_a_name_or_a_config_entry() -> None:
    assert AlterConfigOp("retention.ms", "1") == AlterConfigOp(ConfigEntry("retention.ms", "1"))
    deleted = AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE)
    assert (deleted.value, deleted.op_type) == (None, AlterConfigOpType.DELETE)
    assert AlterConfigOp("segment.bytes", 1024).value == "1024"  # type: ignore[arg-type]
    assert ConfigResource(2, "t") == ConfigResource(ConfigResourceType.TOPIC, "t")  # type: ignore[arg-type]


def test_alter_request_carries_null_for_delete_and_results_follow_the_request() -> None:
    configs = {
        ORDERS: [
            AlterConfigOp("retention.ms", "1"),
            AlterConfigOp("flush.ms", op_type=AlterConfigOpType.DELETE),
        ],
        ConfigResource(ConfigResourceType.TOPIC, "gone"): [AlterConfigOp("retention.ms", "1")],
    }
    request = alter_configs_request(configs, validate_only=True)
    assert request.validate_only
    first = request.resources[0]
    assert (first.resource_type, first.resource_name) == (2, "orders")
    assert [(c.name, c.config_operation, c.HasField("value")) for c in first.configs] == [
        ("retention.ms", 0, True),
        ("flush.ms", 1, False),
    ]
    response = pb.IncrementalAlterConfigsResponse(
        responses=[
            pb.AlterConfigsResourceResponse(resource_type=2, resource_name="orders"),
            pb.AlterConfigsResourceResponse(
                resource_type=2, resource_name="gone", error_code=3, error_message="no topic"
            ),
        ]
    )
    results = alter_results(configs, response)
    assert results[ORDERS] is None
    assert isinstance(
        results[ConfigResource(ConfigResourceType.TOPIC, "gone")], UnknownTopicOrPartitionError
    )
    missing = alter_results({ORDERS: []}, pb.IncrementalAlterConfigsResponse())
    assert isinstance(missing[ORDERS], InvalidRequestError)


def test_a_single_op_instead_of_a_list_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        alter_configs_request({ORDERS: AlterConfigOp("a", "1")}, False)  # type: ignore[dict-item]


def test_described_configs_are_a_read_only_mapping() -> None:
    result = pb.DescribeConfigsResult(resource_type=2, resource_name="orders")
    entry = result.configs.add(name="retention.ms", value="1", config_source=1, config_type=5)
    entry.synonyms.add(name="retention.ms", value="1", source=1)
    entry.synonyms.add(name="log.retention.ms", source=5)
    result.configs.add(name="broker.rack", config_source=5, read_only=True)
    config = configs_from_pb(result)
    assert list(config) == ["retention.ms", "broker.rack"]
    retention = config["retention.ms"]
    assert (retention.value, retention.source, retention.type) == (
        "1",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        "LONG",
    )
    assert not retention.is_default and config["broker.rack"].is_default
    assert config["broker.rack"].value is None and config["broker.rack"].is_read_only
    assert [s.value for s in retention.synonyms] == ["1", None]
    failed = pb.DescribeConfigsResult(error_code=40, error_message="bad")
    with pytest.raises(InvalidConfigError):
        configs_from_pb(failed)


def test_create_partitions_request_and_cluster_description() -> None:
    request = create_partitions_request(
        {"a": NewPartitions(3), "b": NewPartitions(2, [[1, 2]])}, 5000, False
    )
    assert [
        (t.name, t.count, [list(x.broker_ids) for x in t.assignments]) for t in request.topics
    ] == [
        ("a", 3, []),
        ("b", 2, [[1, 2]]),
    ]
    described = cluster_description(
        pb.DescribeClusterResponse(
            cluster_id="c",
            controller_id=4,
            brokers=[
                pb.DescribeClusterBroker(broker_id=2, host="h", port=2, is_fenced=True),
                pb.DescribeClusterBroker(broker_id=1, host="h", port=1, rack="r"),
            ],
        )
    )
    assert [n.id for n in described.nodes] == [1, 2]
    assert described.nodes[1].is_fenced and described.nodes[0].rack == "r"
    # A controller-only node is known by id, with no client address.
    assert described.controller is not None and described.controller.id == 4
    assert described.controller.port == -1
