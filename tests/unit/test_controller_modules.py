"""The public names of the metadata and controller-logic packages are pinned.

Their purity is checked with every other layer rule in ``tests/unit/test_layers.py``.
"""

from __future__ import annotations

import pytest

import controller.logic
import controller.metadata


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
        "granted_session_ms",
        "record_heartbeat_contact",
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
