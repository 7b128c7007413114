"""Value types and wire conversions of the AdminClient's partition, config and cluster calls.

The names and shapes are Kafka's ``Admin`` API (``NewPartitions``, ``ConfigResource``,
``ConfigEntry``, ``AlterConfigOp``, ``DescribeClusterResult``) as Python clients spell them;
enum numbers are Kafka's protocol numbers.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from lograft.protocol.errors import InvalidRequestError, LograftError, error_for_code
from lograft.protocol.wire import broker_pb2 as pb

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "Config",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "NewPartitions",
    "Node",
    "alter_configs_request",
    "alter_results",
    "cluster_description",
    "configs_from_pb",
    "create_partitions_request",
    "describe_configs_request",
]


class ConfigResourceType(enum.IntEnum):
    """What a config belongs to (Kafka's ``ConfigResource.Type``, same numbers)."""

    TOPIC = 2
    BROKER = 4


class ConfigSource(enum.IntEnum):
    """Where a config's value comes from (Kafka's ``ConfigEntry.ConfigSource``)."""

    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    """The topic's own override, set with ``create_topics`` or ``incremental_alter_configs``."""
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    """Set on the node's command line (``lograft node --config``)."""
    DEFAULT_CONFIG = 5
    """The built-in default."""


class AlterConfigOpType(enum.IntEnum):
    """What ``incremental_alter_configs`` does to a config (Kafka's ``AlterConfigOp.OpType``).

    ``SET`` a value, ``DELETE`` the override (back to the default), ``APPEND`` to or
    ``SUBTRACT`` from a list-typed config (``cleanup.policy``); on any other config
    ``APPEND`` and ``SUBTRACT`` fail with ``InvalidConfigError``.
    """

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A topic (by name) or a broker (by id, as a string) whose configs are described or
    altered: ``ConfigResource(ConfigResourceType.TOPIC, "orders")``."""

    resource_type: ConfigResourceType
    name: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ConfigResourceType(self.resource_type))
        object.__setattr__(self, "name", str(self.name))


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """Another level that sets the same config, e.g. the broker default ``log.retention.ms``
    under the topic config ``retention.ms``."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config: its name and value, and (when described) where the value comes from.

    ``synonyms`` lists every level that has a value, the winning one first;
    ``type`` is Kafka's config type name (``INT``, ``LONG``, ``STRING``, ``BOOLEAN``, ...).
    """

    name: str
    value: str | None = None
    source: ConfigSource = ConfigSource.UNKNOWN_CONFIG
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    type: str = "UNKNOWN"
    documentation: str = ""

    @property
    def is_default(self) -> bool:
        """Whether the value is the built-in default (nothing overrides it)."""
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class Config(Mapping[str, ConfigEntry]):
    """The described configs of one resource, by name (a read-only mapping, in the order the
    broker listed them)."""

    entries: tuple[ConfigEntry, ...] = ()
    _by_name: Mapping[str, ConfigEntry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {e.name: e for e in self.entries})

    def __getitem__(self, name: str) -> ConfigEntry:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)


@dataclass(frozen=True, slots=True, init=False)
class AlterConfigOp:
    """One operation of ``incremental_alter_configs``.

    ``AlterConfigOp("retention.ms", "60000")`` sets a value (``op_type`` defaults to SET);
    ``AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE)`` removes the
    override; Kafka's form ``AlterConfigOp(ConfigEntry("retention.ms", "60000"),
    op_type=...)`` works too.
    """

    name: str
    value: str | None
    op_type: AlterConfigOpType

    def __init__(
        self,
        config: ConfigEntry | str,
        value: str | None = None,
        op_type: AlterConfigOpType = AlterConfigOpType.SET,
    ) -> None:
        if isinstance(config, ConfigEntry):
            name, value = config.name, config.value if value is None else value
        else:
            name = config
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", None if value is None else str(value))
        object.__setattr__(self, "op_type", AlterConfigOpType(op_type))


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow a topic to ``total_count`` partitions.

    ``new_assignments`` optionally lists the replicas (broker ids, preferred leader first)
    of each new partition; by default the controller places them as for a new topic.
    """

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A broker of the cluster: its id, address, rack ("" for none) and whether the
    controller has fenced it (it missed heartbeats: it leads nothing)."""

    id: int
    host: str
    port: int
    rack: str = ""
    is_fenced: bool = False


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """What ``describe_cluster`` returns: the cluster id, the active controller (None when
    none is known) and the brokers."""

    cluster_id: str
    controller: Node | None
    nodes: tuple[Node, ...]


# ---- wire conversions -----------------------------------------------------------------------


def create_partitions_request(
    new_partitions: Mapping[str, NewPartitions], timeout_ms: int, validate_only: bool
) -> pb.CreatePartitionsRequest:
    """The CreatePartitions request for ``{topic: NewPartitions}``."""
    return pb.CreatePartitionsRequest(
        topics=[
            pb.CreatePartitionsTopic(
                name=topic,
                count=spec.total_count,
                assignments=[
                    pb.CreatePartitionsAssignment(broker_ids=list(replicas))
                    for replicas in spec.new_assignments or ()
                ],
            )
            for topic, spec in new_partitions.items()
        ],
        timeout_ms=timeout_ms,
        validate_only=validate_only,
    )


def describe_configs_request(
    resources: Sequence[ConfigResource], include_synonyms: bool, include_documentation: bool
) -> pb.DescribeConfigsRequest:
    """The DescribeConfigs request for ``resources`` (every config of each)."""
    return pb.DescribeConfigsRequest(
        resources=[
            pb.DescribeConfigsResource(resource_type=r.resource_type, resource_name=r.name)
            for r in resources
        ],
        include_synonyms=include_synonyms,
        include_documentation=include_documentation,
    )


def configs_from_pb(result: pb.DescribeConfigsResult) -> Config:
    """One resource's described configs; raises its typed error if it has one."""
    if result.error_code:
        raise error_for_code(result.error_code, result.error_message or result.resource_name)
    entries = []
    for c in result.configs:
        entries.append(
            ConfigEntry(
                name=c.name,
                value=c.value if c.HasField("value") else None,
                source=_source(c.config_source),
                is_read_only=c.read_only,
                is_sensitive=c.is_sensitive,
                synonyms=tuple(
                    ConfigSynonym(
                        s.name, s.value if s.HasField("value") else None, _source(s.source)
                    )
                    for s in c.synonyms
                ),
                type=_CONFIG_TYPES.get(c.config_type, "UNKNOWN"),
                documentation=c.documentation,
            )
        )
    return Config(tuple(entries))


_CONFIG_TYPES = {
    1: "BOOLEAN",
    2: "STRING",
    3: "INT",
    4: "SHORT",
    5: "LONG",
    6: "DOUBLE",
    7: "LIST",
    8: "CLASS",
    9: "PASSWORD",
}


def _source(number: int) -> ConfigSource:
    try:
        return ConfigSource(number)
    except ValueError:
        return ConfigSource.UNKNOWN_CONFIG


def alter_configs_request(
    configs: Mapping[ConfigResource, Sequence[AlterConfigOp]], validate_only: bool
) -> pb.IncrementalAlterConfigsRequest:
    """The IncrementalAlterConfigs request for ``{resource: [AlterConfigOp, ...]}``."""
    request = pb.IncrementalAlterConfigsRequest(validate_only=validate_only)
    for resource, ops in configs.items():
        if isinstance(ops, AlterConfigOp):
            raise InvalidRequestError(
                f"the operations of {resource.name!r} must be a list of AlterConfigOp"
            )
        added = request.resources.add(
            resource_type=resource.resource_type, resource_name=resource.name
        )
        for op in ops:
            config = added.configs.add(name=op.name, config_operation=op.op_type)
            if op.value is not None:
                config.value = op.value
    return request


def alter_results(
    configs: Mapping[ConfigResource, Sequence[AlterConfigOp]],
    response: pb.IncrementalAlterConfigsResponse,
) -> dict[ConfigResource, LograftError | None]:
    """Each resource's outcome (None: altered) from the response, in request order."""
    answered: dict[tuple[int, str], LograftError | None] = {}
    for r in response.responses:
        answered[(r.resource_type, r.resource_name)] = (
            error_for_code(r.error_code, r.error_message or r.resource_name)
            if r.error_code
            else None
        )
    results: dict[ConfigResource, LograftError | None] = {}
    for resource in configs:
        key = (int(resource.resource_type), resource.name)
        results[resource] = (
            answered[key]
            if key in answered
            else InvalidRequestError(
                f"no result for {resource.resource_type.name} {resource.name!r}"
            )
        )
    return results


def cluster_description(response: pb.DescribeClusterResponse) -> ClusterDescription:
    """The ``ClusterDescription`` of a DescribeCluster response; raises its typed error."""
    if response.error_code:
        raise error_for_code(response.error_code, response.error_message)
    nodes = tuple(
        Node(b.broker_id, b.host, b.port, b.rack, b.is_fenced)
        for b in sorted(response.brokers, key=lambda b: b.broker_id)
    )
    controller = next((n for n in nodes if n.id == response.controller_id), None)
    if controller is None and response.controller_id >= 0:
        # A controller-only node is no broker: it has an id but no client address.
        controller = Node(response.controller_id, "", -1)
    return ClusterDescription(response.cluster_id, controller, nodes)
