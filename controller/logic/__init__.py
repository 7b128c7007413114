"""Controller decisions as pure functions: image + request -> records to append + result.

A decision never changes the image: its records are appended to the metadata log as one
batch, and the image changes when they are committed and replayed. Decisions must be made
against the image that includes every record this controller has already appended, even
those not committed yet (Kafka's controller works on such a speculative image, and rolls
it back to the committed one when it loses leadership); otherwise two decisions in flight
could both hand out the same broker epoch, producer-id block or topic name, and replay
would refuse the second.

Nothing here reads a clock or a global random generator: time is ``now_ms``, randomness a
``random.Random``.
"""

from controller.logic.brokers import (
    BrokerHeartbeatManager,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResult,
    BrokerRegistrationRequest,
    BrokerRegistrationResult,
    broker_heartbeat,
    check_broker_epoch,
    controlled_shutdown,
    fence_brokers,
    fence_expired_brokers,
    granted_session_ms,
    record_heartbeat_contact,
    register_broker,
    unregister_broker,
)
from controller.logic.configs import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    DescribedConfig,
    describe_broker_configs,
    describe_topic_configs,
    incremental_alter_configs,
    parse_broker_resource_name,
)
from controller.logic.decision import DEFAULT_CONFIG, ControllerConfig, Decision
from controller.logic.partitions import (
    AlterPartitionRequest,
    AlterPartitionResult,
    ElectionResult,
    alter_partition,
    elect_preferred_leaders,
)
from controller.logic.placement import PlacementBroker, place_replicas
from controller.logic.producer_ids import ProducerIdBlock, allocate_producer_ids
from controller.logic.topics import (
    CreatePartitionsResult,
    CreateTopicResult,
    DeleteTopicResult,
    NewPartitions,
    NewTopic,
    create_partitions,
    create_topics,
    delete_topics,
)
from lograft.metadata.topic_configs import (
    UNCLEAN_LEADER_ELECTION_ENABLE,
    unclean_leader_election_enabled,
    validate_topic_configs,
)
from lograft.protocol.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    UnknownTopicIdError,
)

__all__ = [
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
    "incremental_alter_configs",
    "parse_broker_resource_name",
    "place_replicas",
    "record_heartbeat_contact",
    "register_broker",
    "unclean_leader_election_enabled",
    "unregister_broker",
    "validate_topic_configs",
]
