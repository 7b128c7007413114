"""The metadata and controller-logic packages stay pure, and their public names are pinned."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import controller.logic
import controller.metadata

ROOT = Path(__file__).resolve().parents[2]
PURE_FILES = sorted(
    [
        *(ROOT / "controller" / "metadata").glob("*.py"),
        *(ROOT / "controller" / "logic").glob("*.py"),
    ]
)
FORBIDDEN = {"asyncio", "grpc", "time", "os", "threading", "socket", "subprocess", "datetime"}


@pytest.mark.parametrize("path", PURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_pure_modules_import_no_io_clock_or_global_random(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] not in FORBIDDEN, f"{path.name}: {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            assert module not in FORBIDDEN, f"{path.name}: from {node.module}"
            if module == "random":
                # Only the class: randomness is always an injected random.Random.
                assert [a.name for a in node.names] == ["Random"], path.name
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "random"
        ):
            assert node.attr == "Random", f"{path.name}: random.{node.attr} uses the global RNG"


def test_public_names_are_pinned() -> None:
    assert set(controller.metadata.__all__) == {
        "NO_LEADER",
        "BrokerRegistration",
        "BrokerRegistrationChangeRecord",
        "ConfigRecord",
        "ConfigResource",
        "ConfigResourceType",
        "CorruptMetadataError",
        "FenceBrokerRecord",
        "Listener",
        "MetadataDelta",
        "MetadataImage",
        "MetadataInvariantError",
        "MetadataRecord",
        "NoOpRecord",
        "PartitionChangeRecord",
        "PartitionRecord",
        "PartitionRegistration",
        "ProducerIdsRecord",
        "RegisterBrokerRecord",
        "RemoveTopicRecord",
        "TopicImage",
        "TopicRecord",
        "UnfenceBrokerRecord",
        "UnregisterBrokerRecord",
        "decode_batch",
        "decode_record",
        "decode_snapshot",
        "encode_batch",
        "encode_record",
        "encode_snapshot",
    }
    assert set(controller.logic.__all__) == {
        "DEFAULT_CONFIG",
        "UNCLEAN_LEADER_ELECTION_ENABLE",
        "AlterConfigOp",
        "AlterConfigOpType",
        "AlterConfigsResource",
        "AlterConfigsResult",
        "AlterPartitionRequest",
        "AlterPartitionResult",
        "BrokerHeartbeatManager",
        "BrokerHeartbeatRequest",
        "BrokerHeartbeatResult",
        "BrokerIdNotRegisteredError",
        "BrokerRegistrationRequest",
        "BrokerRegistrationResult",
        "ConfigSource",
        "ConfigSynonym",
        "ConfigType",
        "ControllerConfig",
        "CreatePartitionsResult",
        "CreateTopicResult",
        "Decision",
        "DeleteTopicResult",
        "DescribedConfig",
        "DuplicateBrokerRegistrationError",
        "ElectionNotNeededError",
        "ElectionResult",
        "FencedLeaderEpochError",
        "IneligibleReplicaError",
        "InvalidUpdateVersionError",
        "NewPartitions",
        "NewTopic",
        "NotControllerError",
        "PlacementBroker",
        "PreferredLeaderNotAvailableError",
        "ProducerIdBlock",
        "StaleBrokerEpochError",
        "UnknownTopicIdError",
        "allocate_producer_ids",
        "alter_partition",
        "broker_heartbeat",
        "check_broker_epoch",
        "controlled_shutdown",
        "create_partitions",
        "create_topics",
        "delete_topics",
        "describe_broker_configs",
        "describe_topic_configs",
        "elect_preferred_leaders",
        "fence_brokers",
        "fence_expired_brokers",
        "incremental_alter_configs",
        "parse_broker_resource_name",
        "place_replicas",
        "register_broker",
        "unclean_leader_election_enabled",
        "unregister_broker",
        "validate_topic_configs",
    }
    for package in (controller.metadata, controller.logic):
        for name in package.__all__:
            assert hasattr(package, name), name


@pytest.mark.parametrize(
    ("name", "code", "retriable"),
    [
        ("NotControllerError", 41, True),
        ("FencedLeaderEpochError", 74, True),
        ("StaleBrokerEpochError", 77, False),
        ("PreferredLeaderNotAvailableError", 80, True),
        ("ElectionNotNeededError", 84, False),
        ("InvalidUpdateVersionError", 95, False),
        ("UnknownTopicIdError", 100, True),
        ("DuplicateBrokerRegistrationError", 101, False),
        ("BrokerIdNotRegisteredError", 102, False),
        ("IneligibleReplicaError", 107, False),
    ],
)
def test_new_errors_carry_kafkas_codes(name: str, code: int, retriable: bool) -> None:
    cls = getattr(controller.logic, name)
    assert (cls.code, cls.retriable) == (code, retriable)
    assert str(cls("detail")).startswith(cls.error_name)
