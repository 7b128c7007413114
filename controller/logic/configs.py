"""Config administration: IncrementalAlterConfigs decisions and DescribeConfigs answers.

Kafka's model, by its names and numbers: a config belongs to a resource (a TOPIC by name, a
BROKER by id); an alter is a list of operations (``SET``, ``DELETE``, ``APPEND``,
``SUBTRACT``) per resource, and each resource succeeds or fails on its own. Topic configs
are checked exactly as CreateTopics checks them (:func:`validate_topic_configs`) and stored
as ConfigRecords. Broker settings are static in lograft (given on the node's command line),
so altering one is refused with Kafka's answer for non-dynamic configs (``INVALID_CONFIG``),
while describing one works.

Describing a topic lists every topic config with where its value comes from, as Kafka
does: the topic's own override (``DYNAMIC_TOPIC_CONFIG``), the broker default set on the
node (``STATIC_BROKER_CONFIG``, e.g. ``log.retention.ms`` for ``retention.ms``) or the
built-in default (``DEFAULT_CONFIG``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from controller.logic.decision import Decision
from lograft.metadata.image import ConfigResource, MetadataImage
from lograft.metadata.records import ConfigRecord, ConfigResourceType, MetadataRecord
from lograft.metadata.topic_configs import validate_topic_configs
from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidRequestError,
    LograftError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.node_config import BROKER_TO_TOPIC_CONFIG, NODE_CONFIGS, NodeConfig
from lograft.protocol.topic_config import TOPIC_CONFIGS, LogConfig

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "AlterConfigsResource",
    "AlterConfigsResult",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "DescribedConfig",
    "describe_broker_configs",
    "describe_topic_configs",
    "incremental_alter_configs",
    "parse_broker_resource_name",
]

MAX_CONFIG_NAME_LENGTH = 255
MAX_CONFIG_VALUE_LENGTH = 32 * 1024
"""Longest value accepted: no topic config needs more, and values live in every image."""


class ConfigSource(enum.IntEnum):
    """Where a config's value comes from (Kafka's ``ConfigEntry.ConfigSource``, same numbers)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """A config's value type (Kafka's ``ConfigEntry.ConfigType``, same numbers)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


class AlterConfigOpType(enum.IntEnum):
    """What an alter does to one config (Kafka's ``AlterConfigOp.OpType``, same numbers)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# Kafka's types of the topic configs it shares with lograft; flush.policy is lograft's own.
_TOPIC_CONFIG_TYPES: dict[str, ConfigType] = {
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "retention.bytes": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "segment.index.bytes": ConfigType.INT,
    "max.message.bytes": ConfigType.INT,
    "flush.policy": ConfigType.STRING,
    "flush.ms": ConfigType.LONG,
    "message.timestamp.type": ConfigType.STRING,
    "min.insync.replicas": ConfigType.INT,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
    "cleanup.policy": ConfigType.LIST,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "delete.retention.ms": ConfigType.LONG,
    "min.compaction.lag.ms": ConfigType.LONG,
    "max.compaction.lag.ms": ConfigType.LONG,
}

_TOPIC_TO_BROKER_CONFIG = {topic: broker for broker, topic in BROKER_TO_TOPIC_CONFIG.items()}

NODE_CONFIG_FIELDS: dict[str, str] = {
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "socket.request.max.bytes": "socket_request_max_bytes",
    "controller.quorum.election.timeout.ms": "election_timeout_ms",
    "metadata.log.max.record.bytes.between.snapshots": "metadata_snapshot_bytes",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "default.replication.factor": "default_replication_factor",
    "num.partitions": "num_partitions",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offsets.topic.replication.factor": "offsets_topic_replication_factor",
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.high.watermark.checkpoint.interval.ms": (
        "replica_high_watermark_checkpoint_interval_ms"
    ),
    "log.cleaner.enable": "log_cleaner_enable",
    "log.cleaner.backoff.ms": "log_cleaner_backoff_ms",
    "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "transaction.two.phase.commit.enable": "transaction_two_phase_commit_enable",
    "transactional.id.expiration.ms": "transactional_id_expiration_ms",
}
"""Each of ``NODE_CONFIGS`` → the ``NodeConfig`` field holding its value."""


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One operation on one config; ``value`` None is Kafka's null (only DELETE takes it)."""

    name: str
    op: AlterConfigOpType
    value: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    """The operations on one resource."""

    resource: ConfigResource
    ops: tuple[AlterConfigOp, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    """One resource's outcome: altered (``error`` None) or refused with a typed error."""

    resource: ConfigResource
    error: LograftError | None


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """A config that sets the same thing at another level, in order of precedence."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One config of a resource as DescribeConfigs answers it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.STRING
    documentation: str = ""


def parse_broker_resource_name(name: str) -> int | None:
    """A BROKER resource's id; None for "" (the cluster-wide default). ``INVALID_REQUEST``
    when it is not a decimal broker id."""
    if name == "":
        return None
    if not name.isascii() or not name.isdigit() or len(name) > 10:
        raise InvalidRequestError(f"broker resource name {name!r} is not a broker id")
    return int(name)


def incremental_alter_configs(
    image: MetadataImage,
    resources: Sequence[AlterConfigsResource],
    *,
    validate_only: bool = False,
) -> Decision[list[AlterConfigsResult]]:
    """Check and apply config operations, one result per resource (Kafka's checks).

    Per resource: listed twice (``INVALID_REQUEST``); an unsupported resource type
    (``INVALID_REQUEST``); a topic that does not exist (``UNKNOWN_TOPIC_OR_PARTITION``);
    a config named twice, or SET without a value (``INVALID_REQUEST``); an unknown config
    name, a bad value, or APPEND/SUBTRACT on a config that is not a list (``INVALID_CONFIG``,
    with the same messages as CreateTopics). APPEND adds the items of its value that a list
    config (``cleanup.policy``) lacks, SUBTRACT removes them, starting from the override or
    else the default, as in Kafka. Broker configs are static: any operation on a BROKER
    resource is ``INVALID_CONFIG``. A topic's operations are applied all or none, as
    one ConfigRecord each (value absent for DELETE); operations that change nothing append
    nothing. ``validate_only`` checks and answers but appends nothing.
    """
    counts: dict[ConfigResource, int] = {}
    for entry in resources:
        counts[entry.resource] = counts.get(entry.resource, 0) + 1
    records: list[MetadataRecord] = []
    results: list[AlterConfigsResult] = []
    for entry in resources:
        try:
            if counts[entry.resource] > 1:
                raise InvalidRequestError(
                    f"resource {_describe(entry.resource)} is listed more than once"
                )
            changes = _check(image, entry)
        except LograftError as error:
            results.append(AlterConfigsResult(entry.resource, error))
            continue
        if not validate_only:
            records.extend(changes)
        results.append(AlterConfigsResult(entry.resource, None))
    return Decision(tuple(records), results)


def _describe(resource: ConfigResource) -> str:
    kind = resource.resource_type.name.lower()
    return f"{kind} {resource.name!r}"


def _check(image: MetadataImage, entry: AlterConfigsResource) -> list[ConfigRecord]:
    resource = entry.resource
    names: set[str] = set()
    for op in entry.ops:
        if op.name in names:
            raise InvalidRequestError(f"config {op.name!r} is named more than once")
        names.add(op.name)
        if not op.name or len(op.name) > MAX_CONFIG_NAME_LENGTH:
            raise InvalidRequestError(
                f"config names must be 1 to {MAX_CONFIG_NAME_LENGTH} characters long"
            )
        if op.value is None and op.op is not AlterConfigOpType.DELETE:
            raise InvalidRequestError(f"Null value not supported for : {op.name}")
        if op.value is not None and len(op.value) > MAX_CONFIG_VALUE_LENGTH:
            raise InvalidConfigError(
                f"{op.name}: value of {len(op.value)} characters is longer than "
                f"{MAX_CONFIG_VALUE_LENGTH}"
            )
    if resource.resource_type is ConfigResourceType.BROKER:
        parse_broker_resource_name(resource.name)
        if entry.ops:
            raise InvalidConfigError(
                "Cannot update these configs dynamically: "
                f"{sorted(names)}: lograft's broker configs are static; set them on the "
                "node's command line (lograft node --config NAME=VALUE) and restart it"
            )
        return []
    if resource.resource_type is not ConfigResourceType.TOPIC:
        raise InvalidRequestError(f"unsupported config resource type {resource.resource_type}")
    if image.topic(resource.name) is None:
        raise UnknownTopicOrPartitionError(f"topic {resource.name!r} does not exist")
    current = image.topic_configs(resource.name)
    to_set: dict[str, str] = {}
    for op in entry.ops:
        if op.name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {op.name!r}")
        if op.op in (AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT):
            if _TOPIC_CONFIG_TYPES.get(op.name) is not ConfigType.LIST:
                raise InvalidConfigError(
                    f"Can't {op.op.name} to key {op.name} because its type is not LIST."
                )
            assert op.value is not None
            to_set[op.name] = _list_op(op, current.get(op.name))
        elif op.op is AlterConfigOpType.SET:
            assert op.value is not None
            to_set[op.name] = op.value
    checked = validate_topic_configs(to_set)
    changes: list[ConfigRecord] = []
    for op in entry.ops:
        if op.op is not AlterConfigOpType.DELETE:
            value = checked[op.name]
            if current.get(op.name) != value:
                changes.append(
                    ConfigRecord(ConfigResourceType.TOPIC, resource.name, op.name, value)
                )
        elif op.name in current:
            changes.append(ConfigRecord(ConfigResourceType.TOPIC, resource.name, op.name, None))
    return changes


def _list_op(op: AlterConfigOp, override: str | None) -> str:
    """The value of a list config after APPEND or SUBTRACT of ``op.value``'s items."""
    base = override if override is not None else LogConfig().to_topic_configs()[op.name]
    items = [item.strip() for item in base.split(",") if item.strip()]
    changes = [item.strip() for item in (op.value or "").split(",") if item.strip()]
    if op.op is AlterConfigOpType.APPEND:
        items.extend(item for item in changes if item not in items)
    else:
        items = [item for item in items if item not in changes]
    return ",".join(items)


def describe_topic_configs(
    overrides: Mapping[str, str],
    broker_defaults: LogConfig,
    *,
    keys: Collection[str] = (),
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[DescribedConfig]:
    """Every topic config (or those in ``keys``) with its value and source.

    ``overrides`` are the topic's own configs; ``broker_defaults`` the node's defaults for
    topic configs (its ``log.*`` settings). A broker default that differs from the built-in
    one counts as set on the node (``STATIC_BROKER_CONFIG``). Synonyms, when asked for,
    list every level that has a value, the winning one first (Kafka's order).
    """
    built_in = LogConfig().to_topic_configs()
    node = broker_defaults.to_topic_configs()
    described: list[DescribedConfig] = []
    for name, definition in TOPIC_CONFIGS.items():
        if keys and name not in keys:
            continue
        broker_name = _TOPIC_TO_BROKER_CONFIG.get(name)
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            synonyms.append(ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_name is not None and node[name] != built_in[name]:
            synonyms.append(
                ConfigSynonym(broker_name, node[name], ConfigSource.STATIC_BROKER_CONFIG)
            )
        synonyms.append(
            ConfigSynonym(broker_name or name, built_in[name], ConfigSource.DEFAULT_CONFIG)
        )
        winner = synonyms[0]
        described.append(
            DescribedConfig(
                name=name,
                value=winner.value,
                source=winner.source,
                read_only=False,
                sensitive=False,
                synonyms=tuple(synonyms) if include_synonyms else (),
                config_type=_TOPIC_CONFIG_TYPES.get(name, ConfigType.STRING),
                documentation=definition.doc if include_documentation else "",
            )
        )
    return described


# Over 70 lines: one table of the node's entries read top to bottom, then one pass over it.
def describe_broker_configs(
    config: NodeConfig,
    *,
    keys: Collection[str] = (),
    include_synonyms: bool = False,
    include_documentation: bool = False,
) -> list[DescribedConfig]:
    """Every setting of a node (or those in ``keys``): identity, topic defaults, node-wide.

    All are read-only (static): ``STATIC_BROKER_CONFIG`` where the value differs from the
    built-in default (it was set on the command line), else ``DEFAULT_CONFIG``.
    """
    entries: list[tuple[str, str | None, bool, ConfigType, str]] = [
        ("node.id", str(config.node_id), True, ConfigType.INT, "This node's id."),
        (
            "process.roles",
            ",".join(sorted(config.process_roles)),
            True,
            ConfigType.LIST,
            "The node's roles: broker, controller or both.",
        ),
        (
            "controller.quorum.voters",
            ",".join(f"{n}@{a}" for n, a in sorted((config.quorum_voters or {}).items())),
            config.quorum_voters is not None,
            ConfigType.LIST,
            "The voters of the controller quorum (id@host:port); empty: standalone.",
        ),
        (
            "listeners",
            ",".join(f"{x.name}://{x.bind_address}" for x in config.listeners),
            True,
            ConfigType.LIST,
            "Where the node listens.",
        ),
        (
            "advertised.listeners",
            ",".join(f"{x.name}://{x.advertised_address}" for x in config.listeners),
            True,
            ConfigType.LIST,
            "The address clients and other brokers are given, per listener.",
        ),
        (
            "inter.broker.listener.name",
            config.inter_broker_listener_name,
            True,
            ConfigType.STRING,
            "The listener brokers use to reach each other.",
        ),
        (
            "broker.rack",
            config.rack or None,
            bool(config.rack),
            ConfigType.STRING,
            "The rack of the broker; replicas of a partition are spread over racks.",
        ),
        ("log.dirs", str(config.data_dir), True, ConfigType.STRING, "The data directory."),
    ]
    built_in = LogConfig().to_topic_configs()
    node_topic_defaults = config.log_defaults.to_topic_configs()
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        value = node_topic_defaults[topic_name]
        entries.append(
            (
                broker_name,
                value,
                value != built_in[topic_name],
                _TOPIC_CONFIG_TYPES.get(topic_name, ConfigType.STRING),
                f"The default of the topic config {topic_name}: " + TOPIC_CONFIGS[topic_name].doc,
            )
        )
    for name, (default, _, doc) in NODE_CONFIGS.items():
        node_value = getattr(config, NODE_CONFIG_FIELDS[name])
        if isinstance(default, bool):
            shown, node_type = str(node_value).lower(), ConfigType.BOOLEAN
        else:
            shown = str(node_value)
            node_type = ConfigType.LONG if name.endswith((".ms", ".bytes")) else ConfigType.INT
        entries.append((name, shown, node_value != default, node_type, doc))
    described: list[DescribedConfig] = []
    for entry_name, entry_value, is_set, config_type, doc in entries:
        if keys and entry_name not in keys:
            continue
        source = ConfigSource.STATIC_BROKER_CONFIG if is_set else ConfigSource.DEFAULT_CONFIG
        described.append(
            DescribedConfig(
                name=entry_name,
                value=entry_value,
                source=source,
                read_only=True,
                sensitive=False,
                synonyms=(
                    (ConfigSynonym(entry_name, entry_value, source),) if include_synonyms else ()
                ),
                config_type=config_type,
                documentation=doc if include_documentation else "",
            )
        )
    return described
