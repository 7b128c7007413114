"""The ``ClusterFrontend`` of a broker in a quorum: what the metadata image answers, and
the admin calls it forwards to the active controller.

Metadata, DescribeCluster, DescribeConfigs and FindCoordinator are answered from this
broker's image, each broker's address being the one it registered for the listener the
request arrived on (a broker without that listener is left out, as in Kafka);
CreateTopics, DeleteTopics, CreatePartitions and IncrementalAlterConfigs go to the active
controller, and are answered once this broker's image shows their effect
(read-your-writes, bounded). :class:`~cluster.kraft_broker.KRaftBroker` builds on
:class:`BrokerFrontend` and tells it of each new image (:meth:`BrokerFrontend._image_arrived`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from cluster.controller_client import ControllerClient
from controller.logic.configs import (
    AlterConfigOpType,
    DescribedConfig,
    describe_broker_configs,
    describe_topic_configs,
    parse_broker_resource_name,
)
from controller.quorum.driver import RaftDriver
from controller.quorum.metadata_machine import MetadataStateMachine
from lograft.metadata import ConfigResourceType, MetadataImage
from lograft.metadata.topic_configs import validate_topic_configs
from lograft.protocol.error_responses import (
    alter_configs_failed,
    create_partitions_failed,
    create_topics_failed,
    delete_topics_failed,
)
from lograft.protocol.errors import (
    CoordinatorNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    LograftError,
    NotControllerError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from lograft.protocol.node_config import NodeConfig
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_rpcs import BrokerEndpoint
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from replica.log_manager import LogManager
from replica.txn import partition_for_transactional_id
from replica.txn_service import TRANSACTION_STATE_TOPIC

__all__ = ["GROUP_KEY", "READ_YOUR_WRITES_TIMEOUT_S", "TRANSACTION_KEY", "BrokerFrontend"]

log = logging.getLogger(__name__)

READ_YOUR_WRITES_TIMEOUT_S = 5.0
"""How long (s) an admin call waits for this broker's image to show what the controller
committed (read-your-writes); after that it answers anyway and logs a warning."""
GROUP_KEY = 0
"""FindCoordinator's key type of a group id (Kafka's ``CoordinatorType.GROUP``)."""
TRANSACTION_KEY = 1
"""FindCoordinator's key type of a transactional id (Kafka's ``CoordinatorType.TRANSACTION``)."""


class BrokerFrontend:
    """Cluster-wide answers for the broker service, from the image and the controller."""

    def __init__(
        self,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        logs: LogManager,
        machine: MetadataStateMachine,
        driver: RaftDriver,
        controllers: ControllerClient,
        node_config: NodeConfig | None,
        offsets_topic_partitions: int,
        offsets_topic_replication_factor: int,
    ) -> None:
        self._endpoint = endpoint
        self._cluster_id = cluster_id
        self._logs = logs
        self._machine = machine
        self._driver = driver
        self._controllers = controllers
        self._node_config = node_config
        self._offsets_topic_partitions = offsets_topic_partitions
        self._offsets_topic_replication_factor = offsets_topic_replication_factor
        self._image_waiters: list[asyncio.Future[None]] = []

    @property
    def node_id(self) -> int:
        """This broker's node id."""
        return self._endpoint.node_id

    def _image_arrived(self) -> None:
        """A new image was applied: the read-your-writes waits look at it."""
        waiters, self._image_waiters = self._image_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _await_image(self, ready: Callable[[MetadataImage], bool]) -> None:
        """Wait (bounded) until this broker's image satisfies ``ready``.

        A topic the controller created is committed before it answers, but this broker
        learns of it a little later; waiting here gives the client read-your-writes.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_YOUR_WRITES_TIMEOUT_S
        while not ready(self._machine.image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("metadata image did not catch up with the controller in time")
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._image_waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                continue

    # ---- ClusterFrontend ----------------------------------------------------------------

    async def metadata(self, request: pb.MetadataRequest, listener: str) -> pb.MetadataResponse:
        """Unfenced brokers (their addresses on ``listener``), the active controller, and
        topics from the metadata image."""
        image = self._machine.image
        leader = self._driver.status().leader_id
        response = pb.MetadataResponse(
            cluster_id=self._cluster_id, controller_id=-1 if leader is None else leader
        )
        for broker in image.unfenced_brokers():
            address = broker.listener(listener)
            if address is None:
                continue
            response.brokers.add(
                node_id=broker.broker_id,
                host=address.host,
                port=address.port,
                rack=broker.rack or "",
            )
        names = list(request.topics) or sorted(image.topics_by_name)
        for name in names:
            topic = image.topic(name)
            if topic is None:
                response.topics.add(
                    name=name, error_code=3, error_message=f"topic {name!r} does not exist"
                )
                continue
            topic_metadata = response.topics.add(name=name, topic_id=topic.topic_id.bytes)
            topic_metadata.configs.update(
                self._logs.log_config_for(image.topic_configs(name)).to_topic_configs()
            )
            for partition_id, state in sorted(topic.partitions.items()):
                offline = [r for r in state.replicas if (b := image.broker(r)) is None or b.fenced]
                topic_metadata.partitions.add(
                    partition=partition_id,
                    error_code=5 if state.leader < 0 else 0,
                    leader_id=state.leader,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas),
                    isr_nodes=list(state.isr),
                    offline_replicas=offline,
                )
        return response

    async def find_coordinator(
        self, key: str, listener: str, key_type: int = GROUP_KEY
    ) -> pb.FindCoordinatorResponse:
        """The broker coordinating ``key``, its address on ``listener``: for a group
        (``key_type`` 0) the leader of its partition of ``__consumer_offsets``, for a
        transactional id (1) that of ``__transaction_state``.

        The topic is created on first use (``offsets.topic.num.partitions`` partitions,
        ``offsets.topic.replication.factor`` replicas, for both; Kafka sizes the second with
        ``transaction.state.log.*``, which default to the same); until it has a leader for
        the key's partition the answer is the retriable COORDINATOR_NOT_AVAILABLE.
        """
        partition_for: Callable[[str, int], int]
        if key_type == GROUP_KEY:
            topic_name, partition_for = OFFSETS_TOPIC, partition_for_group
        elif key_type == TRANSACTION_KEY:
            topic_name, partition_for = TRANSACTION_STATE_TOPIC, partition_for_transactional_id
        else:
            return _coordinator_error(InvalidRequestError(f"unknown key_type {key_type}"))
        image = self._machine.image
        topic = image.topic(topic_name)
        if topic is None:
            await self._create_internal_topic(topic_name)
            image = self._machine.image
            topic = image.topic(topic_name)
            if topic is None:
                return _coordinator_error(
                    CoordinatorNotAvailableError(f"{topic_name} is being created")
                )
        partition = partition_for(key, len(topic.partitions))
        state = topic.partitions[partition]
        broker = image.broker(state.leader) if state.leader >= 0 else None
        if broker is None or broker.fenced:
            return _coordinator_error(
                CoordinatorNotAvailableError(f"{topic_name}-{partition} has no leader")
            )
        address = broker.listener(listener)
        if address is None:
            return _coordinator_error(
                CoordinatorNotAvailableError(
                    f"the coordinator, broker {broker.broker_id}, has no listener {listener}"
                )
            )
        return pb.FindCoordinatorResponse(
            node_id=broker.broker_id, host=address.host, port=address.port
        )

    async def _create_internal_topic(self, name: str) -> None:
        # Compacted, never deleted: the latest record of every key (a group's committed
        # offsets, a transactional id's state) stays; the rest is cleaned away.
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(
                self._node_config.offsets_topic_segment_bytes
                if self._node_config is not None
                else 100 * 1024 * 1024
            ),
        }
        if name == TRANSACTION_STATE_TOPIC:
            # Kafka's transaction.state.log.min.isr: a decision must survive a lost broker.
            configs["min.insync.replicas"] = str(min(2, self._offsets_topic_replication_factor))
        request = pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=name,
                    num_partitions=self._offsets_topic_partitions,
                    replication_factor=self._offsets_topic_replication_factor,
                    configs=configs,
                )
            ]
        )
        response = await self.create_topics(request)
        result = response.topics[0]
        if result.error_code and result.error_code != TopicAlreadyExistsError.code:
            log.warning(
                "cannot create %s yet error=%s",
                name,
                error_for_code(result.error_code, result.error_message),
            )
        elif not result.error_code:
            log.info(
                "created %s partitions=%d replication_factor=%d",
                name,
                self._offsets_topic_partitions,
                self._offsets_topic_replication_factor,
            )

    async def create_topics(self, request: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
        """Forward to the active controller."""
        try:
            response: pb.CreateTopicsResponse = await self._controllers.call(
                "CreateTopics", request
            )
            if not request.validate_only:
                created = [t.name for t in response.topics if t.error_code == 0]
                await self._await_image(lambda image: all(image.topic(n) for n in created))
        except (NotControllerError, RequestTimedOutError) as exc:
            return create_topics_failed(request, exc)
        return response

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        """Forward to the active controller."""
        try:
            response: pb.DeleteTopicsResponse = await self._controllers.call(
                "DeleteTopics", request
            )
            deleted = [t.name for t in response.topics if t.error_code == 0]
            await self._await_image(lambda image: not any(image.topic(n) for n in deleted))
        except (NotControllerError, RequestTimedOutError) as exc:
            return delete_topics_failed(request, exc)
        return response

    # ---- partitions, configs and the cluster (admin APIs) -------------------------------

    async def create_partitions(
        self, request: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse:
        """Forward to the active controller; answer once this broker's image has them."""
        try:
            response: pb.CreatePartitionsResponse = await self._controllers.call(
                "CreatePartitions", request
            )
        except (NotControllerError, RequestTimedOutError) as exc:
            return create_partitions_failed(request, exc)
        if not request.validate_only:
            grown = {r.name for r in response.results if r.error_code == 0}
            counts = {t.name: t.count for t in request.topics if t.name in grown}
            await self._await_image(
                lambda image: all(
                    (topic := image.topic(name)) is not None and len(topic.partitions) >= count
                    for name, count in counts.items()
                )
            )
        return response

    async def incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        """Forward to the active controller; answer once this broker's image has them."""
        try:
            response: pb.IncrementalAlterConfigsResponse = await self._controllers.call(
                "IncrementalAlterConfigs", request
            )
        except (NotControllerError, RequestTimedOutError) as exc:
            return alter_configs_failed(request, exc)
        if not request.validate_only:
            expected = _expected_topic_configs(request, response)
            await self._await_image(
                lambda image: all(
                    all(image.topic_configs(topic).get(k) == v for k, v in wanted.items())
                    for topic, wanted in expected.items()
                )
            )
        return response

    def topic_config_overrides(self, topic: str) -> Mapping[str, str] | None:
        """The config overrides of ``topic`` in this broker's image; None if unknown."""
        image = self._machine.image
        if image.topic(topic) is None:
            return None
        return image.topic_configs(topic)

    def describe_configs(self, request: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
        """Topic configs from the image (with this node's defaults); this broker's settings.

        A BROKER resource must name this broker (the client sends it here) or be "" (the
        cluster-wide dynamic defaults, of which lograft has none), as in Kafka.
        """
        response = pb.DescribeConfigsResponse()
        for wanted in request.resources:
            result = response.results.add(
                resource_type=wanted.resource_type, resource_name=wanted.resource_name
            )
            try:
                described = self._describe_resource(wanted, request)
            except LograftError as exc:
                result.error_code = exc.code
                result.error_message = exc.message
                continue
            for entry in described:
                config = result.configs.add(
                    name=entry.name,
                    read_only=entry.read_only,
                    config_source=entry.source,
                    is_sensitive=entry.sensitive,
                    config_type=entry.config_type,
                    documentation=entry.documentation,
                )
                if entry.value is not None:
                    config.value = entry.value
                for synonym in entry.synonyms:
                    added = config.synonyms.add(name=synonym.name, source=synonym.source)
                    if synonym.value is not None:
                        added.value = synonym.value
        return response

    def _describe_resource(
        self, wanted: pb.DescribeConfigsResource, request: pb.DescribeConfigsRequest
    ) -> list[DescribedConfig]:
        keys = set(wanted.configuration_keys)
        if wanted.resource_type == ConfigResourceType.TOPIC:
            overrides = self.topic_config_overrides(wanted.resource_name)
            if overrides is None:
                raise UnknownTopicOrPartitionError(f"topic {wanted.resource_name!r} does not exist")
            return describe_topic_configs(
                overrides,
                self._logs.default_config,
                keys=keys,
                include_synonyms=request.include_synonyms,
                include_documentation=request.include_documentation,
            )
        if wanted.resource_type == ConfigResourceType.BROKER:
            broker_id = parse_broker_resource_name(wanted.resource_name)
            if broker_id is None:
                return []
            if broker_id != self.node_id or self._node_config is None:
                raise InvalidRequestError(
                    f"Unexpected broker id, expected {self.node_id} or empty string, but "
                    f"received {wanted.resource_name}"
                )
            return describe_broker_configs(
                self._node_config,
                keys=keys,
                include_synonyms=request.include_synonyms,
                include_documentation=request.include_documentation,
            )
        raise InvalidRequestError(
            f"unsupported config resource type {wanted.resource_type} (2: TOPIC, 4: BROKER)"
        )

    async def describe_cluster(
        self, request: pb.DescribeClusterRequest, listener: str
    ) -> pb.DescribeClusterResponse:
        """Cluster id, the active controller and the registered brokers (their addresses on
        ``listener``), from the image."""
        image = self._machine.image
        leader = self._driver.status().leader_id
        response = pb.DescribeClusterResponse(
            cluster_id=self._cluster_id, controller_id=-1 if leader is None else leader
        )
        for broker_id, broker in sorted(image.brokers.items()):
            address = broker.listener(listener)
            if address is None or (broker.fenced and not request.include_fenced_brokers):
                continue
            response.brokers.add(
                broker_id=broker_id,
                host=address.host,
                port=address.port,
                rack=broker.rack or "",
                is_fenced=broker.fenced,
            )
        return response


def _coordinator_error(error: LograftError) -> pb.FindCoordinatorResponse:
    return pb.FindCoordinatorResponse(
        error_code=error.code, error_message=error.message, node_id=-1
    )


def _expected_topic_configs(
    request: pb.IncrementalAlterConfigsRequest, response: pb.IncrementalAlterConfigsResponse
) -> dict[str, dict[str, str | None]]:
    """Per altered topic, each config's value once the change is in the image (None: gone)."""
    succeeded = {
        (r.resource_type, r.resource_name) for r in response.responses if r.error_code == 0
    }
    expected: dict[str, dict[str, str | None]] = {}
    for resource in request.resources:
        if resource.resource_type != ConfigResourceType.TOPIC:
            continue
        if (resource.resource_type, resource.resource_name) not in succeeded:
            continue
        wanted = expected.setdefault(resource.resource_name, {})
        for config in resource.configs:
            if config.config_operation == AlterConfigOpType.SET and config.HasField("value"):
                try:
                    # Stored as CreateTopics stores it (booleans in canonical spelling).
                    wanted[config.name] = validate_topic_configs({config.name: config.value})[
                        config.name
                    ]
                except InvalidConfigError:
                    continue
            elif config.config_operation == AlterConfigOpType.DELETE:
                wanted[config.name] = None
    return expected
