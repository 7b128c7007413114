"""``AdminClient``: create, delete, list and describe topics; look up offsets.

Results, as in Kafka's Python clients:

* ``create_topics`` and ``delete_topics`` change several topics in one request, and each topic
  may fail on its own; they return ``{topic name: Future}``. The futures are already done when
  the call returns (the client is synchronous): ``future.result()`` is ``None`` on success and
  raises the topic's typed error (``TopicAlreadyExistsError``, ``InvalidPartitionsError``,
  ``UnknownTopicOrPartitionError``, ...) otherwise. A failure of the whole request (no broker
  reachable, timeout) is raised by the call itself.
* ``list_topics``, ``describe_topics`` and ``list_offsets`` are queries: they return plain
  values and raise the first typed error they meet.
* Partitions, configs and the cluster, as Kafka's ``Admin``: ``create_partitions``
  (``{topic: Future}``; ``InvalidPartitionsError`` when the count does not grow) and
  ``incremental_alter_configs`` (``{ConfigResource: Future}``; ``InvalidConfigError`` for an
  unknown name or a bad value) change things through the controller quorum;
  ``describe_configs`` (``{ConfigResource: Config}``) and ``describe_cluster`` are queries.
* Consumer groups, as Kafka's ``Admin`` and ``kafka-consumer-groups``:
  ``list_consumer_groups``, ``describe_consumer_groups`` (``GroupIdNotFoundError`` for an
  unknown group), ``list_consumer_group_offsets``, ``consumer_group_lag`` (queries), and
  ``delete_consumer_groups`` (``{group: Future}``, ``GroupNotEmptyError`` while it has
  members), ``alter_consumer_group_offsets`` (``{partition: Future}``; only while the
  group has no members, else ``UnknownMemberIdError`` as Kafka answers) and
  ``delete_consumer_group_offsets`` (``GroupSubscribedToTopicError`` for a topic its members
  subscribe to). Groups need a controller quorum; the calls go to each group's coordinator.

Retriable errors (no leader, not the leader, network) are retried with ``retry.backoff.ms``
pauses and a metadata refresh until ``default.api.timeout.ms`` passes. Not thread-safe for
concurrent ``close``; otherwise the calls may be used from several threads.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Literal

from lograft.protocol.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    LograftError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from lograft.protocol.wire import broker_pb2 as pb

from ._admin_calls import AdminCalls, done, topic_futures
from ._client_config import ClientConfig, ConfigDef, int_at_least, setting
from ._config_admin import (
    AlterConfigOp,
    AlterConfigOpType,
    ClusterDescription,
    Config,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    NewPartitions,
    Node,
    alter_configs_request,
    alter_results,
    cluster_description,
    configs_from_pb,
    create_partitions_request,
    describe_configs_request,
)
from ._connection import Connections, PartitionInfo, TopicPartition
from ._group_admin import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupPartitionLag,
    OffsetAndMetadata,
    group_lag,
)
from ._group_admin_calls import GroupAdminCalls
from ._list_offsets import list_offsets
from ._txn_admin import TransactionAdminCalls, TransactionDescription, TransactionListing

__all__ = [
    "ADMIN_CONFIGS",
    "AdminClient",
    "AdminConfig",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "Config",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "GroupPartitionLag",
    "ListOffsetsResult",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetSpec",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AdminConfig(ClientConfig):
    """Every config ``AdminClient`` accepts, parsed, with its default."""

    KIND: ClassVar[str] = "admin"

    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms",
        60000,
        int_at_least(1),
        "how long one admin call may take, retries included",
    )


ADMIN_CONFIGS: tuple[ConfigDef[Any], ...] = AdminConfig.definitions()
"""Every config ``AdminClient`` accepts, with its default (the table of ``AdminConfig``)."""

OffsetSpec = Literal["earliest", "latest", "max_timestamp"] | int
"""What ``list_offsets`` looks up: the first offset, the end offset, the offset of the record
with the largest timestamp, or (an int) the first offset whose timestamp is at or after that
many milliseconds since the epoch."""

_SPEC_TIMESTAMPS = {"latest": -1, "earliest": -2, "max_timestamp": -3}


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: its name, partition count, replication factor and topic configs."""

    name: str
    num_partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's partitions (leader, replicas, ISR) and its configs."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """An offset found by ``list_offsets``; ``offset`` is -1 when no record matched."""

    offset: int
    timestamp: int
    leader_epoch: int


def _isolation(level: str) -> int:
    if level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(f"isolation level {level!r}: read_uncommitted or read_committed")
    return 1 if level == "read_committed" else 0


def _spec_timestamp(spec: OffsetSpec) -> int:
    if isinstance(spec, bool):
        raise InvalidRequestError(f"bad offset spec {spec!r}")
    if isinstance(spec, int):
        if spec < 0:
            raise InvalidRequestError(f"timestamp {spec} is negative")
        return spec
    try:
        return _SPEC_TIMESTAMPS[spec]
    except KeyError:
        raise InvalidRequestError(
            f"bad offset spec {spec!r}: expected earliest, latest, max_timestamp or a timestamp"
        ) from None


class AdminClient:
    """Administers topics of a lograft cluster.

    ``AdminClient({"bootstrap.servers": "127.0.0.1:9092"})`` or
    ``AdminClient(bootstrap_servers="127.0.0.1:9092")``; see ``ADMIN_CONFIGS``.
    Unknown config names and bad values raise ``InvalidConfigError``.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self.config = settings = AdminConfig.resolve(config, overrides)
        self._api_timeout_ms = settings.default_api_timeout_ms
        self._conn = Connections.from_config(settings)
        self._calls = AdminCalls(
            self._conn,
            api_timeout_ms=self._api_timeout_ms,
            retry_backoff_ms=settings.retry_backoff_ms,
        )
        self._groups = GroupAdminCalls(self._calls, retry_backoff_ms=settings.retry_backoff_ms)
        self._transactions = TransactionAdminCalls(
            self._calls, retry_backoff_ms=settings.retry_backoff_ms
        )

    # -- lifecycle

    def close(self) -> None:
        """Close the connections."""
        self._conn.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- topics

    def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        """Create topics; returns ``{name: done Future}`` (see the module docstring)."""
        request = pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs={str(k): str(v) for k, v in t.configs.items()},
                )
                for t in new_topics
            ],
            timeout_ms=timeout_ms if timeout_ms is not None else self._conn.request_timeout_ms,
            validate_only=validate_only,
        )
        response = self._calls.controller_call("CreateTopics", request)
        results = topic_futures(response.topics, [t.name for t in new_topics])
        if not validate_only:
            self._await_metadata(
                [n for n, f in results.items() if f.exception() is None], present=True
            )
        logger.info(
            "create_topics topics=%s failed=%s",
            ",".join(t.name for t in new_topics),
            ",".join(n for n, f in results.items() if f.exception() is not None) or "-",
        )
        return results

    def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, Future[None]]:
        """Delete topics; returns ``{name: done Future}`` (see the module docstring)."""
        request = pb.DeleteTopicsRequest(
            topic_names=list(names),
            timeout_ms=timeout_ms if timeout_ms is not None else self._conn.request_timeout_ms,
        )
        response = self._calls.controller_call("DeleteTopics", request)
        results = topic_futures(response.topics, names)
        self._await_metadata(
            [n for n, f in results.items() if f.exception() is None], present=False
        )
        logger.info("delete_topics topics=%s", ",".join(names))
        return results

    def _await_metadata(self, names: Sequence[str], *, present: bool) -> None:
        """Wait until the brokers this client asks see ``names`` created (or deleted).

        The controller answers once the change is committed; brokers apply it a moment later.
        Waiting here gives read-your-writes to whoever uses this client next (a describe, a
        producer's first send), as a user expects. Bounded by ``default.api.timeout.ms``; a
        change still not visible then is logged, not raised: it did happen.
        """
        if not names:
            return
        deadline = time.monotonic() + self._api_timeout_ms / 1000.0
        while True:
            try:
                metadata = self._conn.refresh_metadata(names)
                visible = {n for n, info in metadata.topics.items() if info.error_code == 0}
                if all((n in visible) is present for n in names):
                    return
            except LograftError as exc:
                if not exc.retriable:
                    raise
            if time.monotonic() >= deadline:
                logger.warning(
                    "topics not yet %s in metadata topics=%s",
                    "created" if present else "deleted",
                    ",".join(names),
                )
                return
            time.sleep(self._calls.backoff_s)

    def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        metadata = self._calls.with_retry(lambda: self._conn.refresh_metadata())
        return sorted(name for name, info in metadata.topics.items() if info.error_code == 0)

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Partitions (leader, replicas, ISR) and configs of ``names`` (``None``: every topic).

        Raises the typed error of the first topic that cannot be described (for example
        ``UnknownTopicOrPartitionError``).
        """
        wanted = list(names) if names is not None else None
        metadata = self._calls.with_retry(lambda: self._conn.refresh_metadata(wanted))
        order = wanted if wanted is not None else sorted(metadata.topics)
        descriptions: list[TopicDescription] = []
        for name in order:
            info = metadata.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if info.error_code != 0:
                raise error_for_code(info.error_code, info.error_message or name)
            descriptions.append(TopicDescription(name, info.partitions, dict(info.configs)))
        return descriptions

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec],
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Offsets of partitions by spec: ``"earliest"``, ``"latest"``, ``"max_timestamp"``,
        or a timestamp in ms. Asks each partition's leader; raises the first typed error.
        With ``isolation_level="read_committed"`` latest is the last stable offset."""
        timestamps = {tp: _spec_timestamp(spec) for tp, spec in specs.items()}
        found = list_offsets(
            self._conn, timestamps, self._api_timeout_ms, _isolation(isolation_level)
        )
        return {tp: ListOffsetsResult(*found[tp]) for tp in timestamps}

    # -- partitions, configs and the cluster

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        """Grow topics to more partitions: ``{"orders": NewPartitions(6)}``.

        Returns ``{topic: done Future}``: ``None`` once the partitions exist and have
        leaders (as the controller placed them), else the topic's typed error:
        ``InvalidPartitionsError`` (the count does not grow), ``UnknownTopicOrPartitionError``,
        ``InvalidReplicationFactorError`` (too few live brokers),
        ``InvalidReplicaAssignmentError``. Producers and consumers see the new partitions
        at their next metadata refresh. Keyed records may then map to other partitions.
        """
        request = create_partitions_request(
            new_partitions,
            timeout_ms if timeout_ms is not None else self._conn.request_timeout_ms,
            validate_only,
        )
        response = self._calls.controller_call("CreatePartitions", request)
        results = topic_futures(response.results, list(new_partitions))
        logger.info(
            "create_partitions topics=%s validate_only=%s failed=%s",
            ",".join(new_partitions),
            validate_only,
            ",".join(n for n, f in results.items() if f.exception() is not None) or "-",
        )
        return results

    def describe_configs(
        self,
        resources: Sequence[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, Config]:
        """Every config of topics and brokers, with value, source and flags.

        ``describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")])`` returns
        ``{resource: Config}``, a mapping of config name to ``ConfigEntry``. A topic lists
        every topic config: its override (``DYNAMIC_TOPIC_CONFIG``), the node's default
        (``STATIC_BROKER_CONFIG``) or the built-in one (``DEFAULT_CONFIG``). A broker
        (``ConfigResource(ConfigResourceType.BROKER, "1")``) is asked itself and lists its
        settings, all read-only. Raises the first resource's typed error
        (``UnknownTopicOrPartitionError``, ``BrokerNotAvailableError`` for a broker the
        cluster does not list, ...). Topics are described by the broker on the active
        controller's node when there is one: the node ``incremental_alter_configs`` answered
        from, so a change is seen as soon as it was acknowledged.
        """
        topics = [r for r in resources if r.resource_type == ConfigResourceType.TOPIC]
        by_broker: dict[int | None, list[ConfigResource]] = {}
        for resource in resources:
            if resource.resource_type != ConfigResourceType.TOPIC:
                by_broker.setdefault(self._broker_of(resource), []).append(resource)
        found: dict[ConfigResource, Config] = {}
        controller = self._conn.metadata.controller_id
        topic_node = controller if controller in self._conn.metadata.brokers else None
        for node_id, wanted in [(topic_node, topics), *by_broker.items()]:
            if not wanted:
                continue
            request = describe_configs_request(wanted, include_synonyms, include_documentation)
            response = self._calls.with_retry(
                functools.partial(self._conn.call, "DescribeConfigs", request, node_id=node_id)
            )
            answered = {(r.resource_type, r.resource_name): r for r in response.results}
            for resource in wanted:
                result = answered.get((int(resource.resource_type), resource.name))
                if result is None:
                    raise InvalidRequestError(f"no result for {resource.name!r}")
                found[resource] = configs_from_pb(result)
        return {resource: found[resource] for resource in resources}

    def _broker_of(self, resource: ConfigResource) -> int | None:
        """The broker a BROKER resource is described by: itself (any broker for "")."""
        if resource.name == "":
            return None
        try:
            broker_id = int(resource.name)
        except ValueError:
            raise InvalidRequestError(
                f"broker resource {resource.name!r} is not a broker id"
            ) from None
        if broker_id not in self._conn.metadata.brokers:
            self._calls.with_retry(lambda: self._conn.refresh_metadata())
        if broker_id not in self._conn.metadata.brokers:
            known = ",".join(map(str, sorted(self._conn.metadata.brokers))) or "none"
            raise BrokerNotAvailableError(f"broker {broker_id} is not live (brokers: {known})")
        return broker_id

    def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, Future[None]]:
        """Change configs, e.g. set one and remove another override of a topic::

            orders = ConfigResource(ConfigResourceType.TOPIC, "orders")
            admin.incremental_alter_configs(
                {
                    orders: [
                        AlterConfigOp("retention.ms", "60000"),
                        AlterConfigOp("min.insync.replicas", op_type=AlterConfigOpType.DELETE),
                    ]
                }
            )[orders].result()

        Returns ``{resource: done Future}``: ``None`` once the change is committed to the
        cluster metadata, else the resource's typed error. Brokers apply a committed change
        without restart, each as its metadata catches up (within moments): until then a
        partition may still act on the old value (for example refuse ``acks=all`` with a
        retriable ``NOT_ENOUGH_REPLICAS`` right after ``min.insync.replicas`` was lowered).
        Errors:
        ``InvalidConfigError`` (unknown name, bad value, APPEND/SUBTRACT of a config that is
        not a list, any broker config: they are static), ``UnknownTopicOrPartitionError``,
        ``InvalidRequestError``. A resource's operations apply all or none.
        """
        request = alter_configs_request(configs, validate_only)
        response = self._calls.controller_call("IncrementalAlterConfigs", request)
        results = {
            resource: done(error) for resource, error in alter_results(configs, response).items()
        }
        logger.info(
            "incremental_alter_configs resources=%s validate_only=%s failed=%s",
            ",".join(f"{r.resource_type.name}:{r.name}" for r in configs),
            validate_only,
            ",".join(r.name for r, f in results.items() if f.exception() is not None) or "-",
        )
        return results

    def describe_cluster(self, *, include_fenced_brokers: bool = False) -> ClusterDescription:
        """The cluster id, the active controller and the brokers (fenced ones too, marked
        ``is_fenced``, with ``include_fenced_brokers``)."""
        request = pb.DescribeClusterRequest(include_fenced_brokers=include_fenced_brokers)
        response = self._calls.with_retry(lambda: self._conn.call("DescribeCluster", request))
        return cluster_description(response)

    # -- transactions

    def list_transactions(self, states: Collection[str] = ()) -> list[TransactionListing]:
        """Every transactional id of the cluster, sorted (each broker lists the ids it
        coordinates; all are asked), optionally only those in ``states`` (Kafka's names:
        ``Ongoing``, ``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``,
        ``CompleteAbort``, ``Empty``)."""
        return self._transactions.list_transactions(states)

    def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> dict[str, TransactionDescription]:
        """State, producer, timeout, start time and partitions of each transactional id;
        raises ``TransactionalIdNotFoundError`` for an id no coordinator knows."""
        return self._transactions.describe_transactions(transactional_ids)

    def force_terminate_transaction(self, transactional_id: str) -> None:
        """Fence the id's producer and abort its open transaction, prepared (KIP-939) or
        not, as a new producer's ``init_transactions`` does (Kafka's
        ``forceTerminateTransaction``): how a hanging transaction is ended."""
        self._transactions.force_terminate_transaction(transactional_id)

    # -- consumer groups

    def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Every consumer group of the cluster, sorted by id (each broker lists the groups
        it coordinates; all are asked). Retries while a coordinator is loading."""
        return self._groups.list_consumer_groups()

    def describe_consumer_groups(
        self, group_ids: Sequence[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """State, epochs, assignor, coordinator and members (with their assignments) of each
        group, in the order asked. Raises the first typed error, ``GroupIdNotFoundError``
        for a group that does not exist."""
        return self._groups.describe_consumer_groups(group_ids)

    def delete_consumer_groups(self, group_ids: Sequence[str]) -> dict[str, Future[None]]:
        """Delete groups and their committed offsets; ``{group: done Future}`` failing with
        ``GroupIdNotFoundError`` or ``GroupNotEmptyError`` (it has members)."""
        return self._groups.delete_consumer_groups(group_ids)

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets: of ``partitions`` (``None`` for one without a
        committed offset), or of every partition it has committed. A group that does not
        exist has none."""
        return self._groups.list_consumer_group_offsets(group_id, partitions)

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> dict[TopicPartition, Future[None]]:
        """Set the group's committed offsets (the next offset each partition will be read
        from); creates the group if it does not exist. ``{partition: done Future}``.

        Only while the group has no members: otherwise every future fails with
        ``UnknownMemberIdError``, as Kafka answers (stop the group's consumers first).
        """
        return self._groups.alter_consumer_group_offsets(group_id, offsets)

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Future[None]]:
        """Delete the group's committed offsets of ``partitions``.

        Returns ``{partition: done Future}``, failing with ``GroupIdNotFoundError`` for an
        unknown group, and per partition with ``GroupSubscribedToTopicError`` while a member
        subscribes to its topic.
        """
        return self._groups.delete_consumer_group_offsets(group_id, partitions)

    def consumer_group_lag(
        self,
        group_id: str,
        description: ConsumerGroupDescription | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> tuple[GroupPartitionLag, ...]:
        """Per partition the group owns or has committed: committed offset, log end offset
        (``list_offsets`` latest), lag and owning member, sorted (what ``lograft groups
        describe`` prints). ``description`` saves describing the group again;
        ``GroupIdNotFoundError`` if it does not exist. For a group of ``read_committed``
        consumers pass that isolation level: the end is then the last stable offset, which
        is as far as they can read."""
        if description is None:
            description = self.describe_consumer_groups([group_id])[group_id]
        committed = {
            tp: (oam.offset if oam is not None else None)
            for tp, oam in self.list_consumer_group_offsets(group_id).items()
        }
        partitions = set(committed) | {tp for m in description.members for tp in m.assignment}
        ends: dict[TopicPartition, int] = {}
        if partitions:
            # A committed offset can outlive its topic: ask only for partitions that exist.
            metadata = self._calls.with_retry(
                lambda: self._conn.refresh_metadata({tp.topic for tp in partitions})
            )
            existing = {tp for tp in partitions if metadata.partition(tp.topic, tp.partition)}
            found = self.list_offsets(dict.fromkeys(existing, "latest"), isolation_level)
            ends = {tp: result.offset for tp, result in found.items()}
        return group_lag(description, committed, ends)
