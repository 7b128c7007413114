"""A broker inside a controller quorum: registration, heartbeats, and the image it serves.

The broker follows the metadata log as a Raft observer (or as a voter, on a combined node)
and acts only as its image says: it opens a log for every partition that lists it as a
replica, leads the ones whose leader it is, applies topic config changes to the logs it
hosts as they arrive, answers Metadata, DescribeCluster and DescribeConfigs from the image,
and forwards CreateTopics, DeleteTopics, CreatePartitions and IncrementalAlterConfigs to
the active controller. It registers with the controller
once per process start (a new incarnation) and heartbeats; the controller unfences it once
its metadata has caught up with its own registration.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from cluster.error_responses import (
    alter_configs_failed,
    create_partitions_failed,
    create_topics_failed,
    delete_topics_failed,
)
from cluster.errors import (
    BrokerIdNotRegisteredError,
    CoordinatorNotAvailableError,
    InvalidConfigError,
    InvalidRequestError,
    InvariantError,
    LograftError,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from cluster.node_config import NodeConfig
from cluster.wire import broker_pb2 as pb
from cluster.wire import controller_pb2 as cpb
from cluster.wire import controller_pb2_grpc as cpb_grpc
from controller.logic.configs import (
    AlterConfigOpType,
    DescribedConfig,
    describe_broker_configs,
    describe_topic_configs,
    parse_broker_resource_name,
)
from controller.logic.topic_configs import validate_topic_configs
from controller.metadata import ConfigResourceType, MetadataImage
from controller.quorum.driver import CHANNEL_OPTIONS, RaftDriver
from controller.quorum.metadata_machine import MetadataStateMachine
from replica.broker_service import BrokerEndpoint
from replica.fetcher import FollowedPartition, ReplicaFetcherManager
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC, GroupService
from replica.log.config import LogConfig
from replica.log_manager import LogManager, remove_directories
from replica.partition import Partition
from replica.partition_roles import (
    Follow,
    Lead,
    PartitionRole,
    local_partition_roles,
    partitions_to_stop,
)
from replica.producer_ids import ProducerIdAllocator
from replica.replication import IsrProposal
from replica.topic_partition import TopicPartition

__all__ = ["ControllerClient", "KRaftBroker"]

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 0.4
CONTROLLED_SHUTDOWN_TIMEOUT_S = 2.5
"""Enough when a quorum answers (~0.1 s); bounded because the last node of a stopping
cluster has none to answer."""
HEARTBEAT_CALL_TIMEOUT_S = 2.0
CONTROLLER_CALL_TIMEOUT_S = 60.0
READ_YOUR_WRITES_TIMEOUT_S = 5.0
ALTER_PARTITION_TIMEOUT_S = 5.0
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 10_000
RETRY_BACKOFF_S = 0.2


class ControllerClient:
    """Calls the ``Controller`` service of the active controller, following NOT_CONTROLLER."""

    def __init__(self, voters: Mapping[int, str], driver: RaftDriver) -> None:
        self._voters = dict(voters)
        self._driver = driver
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._hint: int | None = None

    def _stub(self, node_id: int) -> cpb_grpc.ControllerStub:
        channel = self._channels.get(node_id)
        if channel is None:
            channel = grpc.aio.insecure_channel(self._voters[node_id], options=CHANNEL_OPTIONS)
            self._channels[node_id] = channel
        return cpb_grpc.ControllerStub(channel)

    def _candidates(self) -> list[int]:
        leader = self._driver.status().leader_id
        order = [n for n in (leader, self._hint) if n is not None and n in self._voters]
        return order + [n for n in sorted(self._voters) if n not in order]

    async def call(
        self, method: str, request: Any, timeout_s: float = CONTROLLER_CALL_TIMEOUT_S
    ) -> Any:
        """Call ``method`` on the active controller; retry others until ``timeout_s``.

        Returns the first response that is not NOT_CONTROLLER (for responses that carry a
        top-level ``error_code``) or an error-free one; raises ``NotControllerError`` when no
        controller answered as active in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error = "no controller reachable"
        while loop.time() < deadline:
            for node_id in self._candidates():
                try:
                    response = await getattr(self._stub(node_id), method)(
                        request, timeout=max(0.1, deadline - loop.time())
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                        # The controller may have acted on it: retrying could repeat it.
                        raise RequestTimedOutError(
                            f"controller {node_id} did not answer {method} in time"
                        ) from None
                    last_error = f"controller {node_id}: {exc.code().name}"
                    continue
                if _not_controller(response):
                    self._hint = (
                        response.leader_id if getattr(response, "leader_id", -1) >= 0 else None
                    )
                    last_error = f"controller {node_id} is not active"
                    continue
                self._hint = node_id
                return response
            await asyncio.sleep(RETRY_BACKOFF_S)
        raise NotControllerError(last_error)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _coordinator_error(error: LograftError) -> pb.FindCoordinatorResponse:
    return pb.FindCoordinatorResponse(
        error_code=error.code, error_message=error.message, node_id=-1
    )


def _not_controller(response: Any) -> bool:
    code = getattr(response, "error_code", None)
    if code == NotControllerError.code:
        return True
    # Per-item answers: topics (CreateTopics), results (CreatePartitions), responses
    # (IncrementalAlterConfigs); a non-active controller answers every item alike.
    for field in ("topics", "results", "responses"):
        items = list(getattr(response, field, ()))
        if items:
            return all(i.error_code == NotControllerError.code for i in items)
    return False


class KRaftBroker:
    """The broker role of a node in a quorum; also the broker service's ``ClusterFrontend``."""

    def __init__(
        self,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        logs: LogManager,
        machine: MetadataStateMachine,
        driver: RaftDriver,
        controllers: ControllerClient,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        offsets_topic_partitions: int = 50,
        offsets_topic_replication_factor: int = 3,
        node_config: NodeConfig | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._node_config = node_config
        self._offsets_topic_partitions = offsets_topic_partitions
        self._offsets_topic_replication_factor = offsets_topic_replication_factor
        self._replica_lag_time_max_ms = replica_lag_time_max_ms
        self._isr_calls: dict[TopicPartition, asyncio.Task[None]] = {}
        self._isr_task: asyncio.Task[None] | None = None
        self._producer_ids = ProducerIdAllocator(self._allocate_producer_ids)
        self._cluster_id = cluster_id
        self._logs = logs
        self._machine = machine
        self._driver = driver
        self._controllers = controllers
        self._incarnation = uuid.uuid4()
        self.broker_epoch = -1
        self.is_fenced = True
        self._task: asyncio.Task[None] | None = None
        self._latest_image = machine.image
        self._sync_wanted = asyncio.Event()
        self._sync_task: asyncio.Task[None] | None = None
        self._image_waiters: list[asyncio.Future[None]] = []
        self._fetchers = ReplicaFetcherManager(endpoint.node_id, logs, _wall_clock_ms)
        self.groups = GroupService(logs, lambda: self._topic_counts)
        """Group coordinators for the ``__consumer_offsets`` partitions led here."""
        self._topic_counts: dict[str, int] = {}
        machine.add_listener(self._on_image)

    @property
    def node_id(self) -> int:
        return self._endpoint.node_id

    async def start(self) -> None:
        """Start registering, heartbeating and following the image."""
        self._latest_image = self._machine.image
        self._sync_wanted.set()
        self._sync_task = asyncio.create_task(self._sync_loop(), name="broker-image-sync")
        self._task = asyncio.create_task(self._lifecycle(), name="broker-lifecycle")
        self._isr_task = asyncio.create_task(self._isr_expiration(), name="isr-expiration")
        self.groups.start()

    async def stop(self) -> None:
        """Controlled shutdown, then stop heartbeating.

        The broker asks the controller to move leadership of its partitions elsewhere and
        waits (bounded) until the controller says it may go, so clients switch leaders
        before the process exits instead of waiting for the session to expire.
        """
        for task in (self._task, self._sync_task, self._isr_task, *self._isr_calls.values()):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._fetchers.stop()
        await self.groups.stop()
        if self.broker_epoch >= 0:
            try:
                await asyncio.wait_for(self._controlled_shutdown(), CONTROLLED_SHUTDOWN_TIMEOUT_S)
            except (TimeoutError, LograftError) as exc:
                log.warning("controlled shutdown incomplete node_id=%d error=%r", self.node_id, exc)
        await self._controllers.close()

    async def _controlled_shutdown(self) -> None:
        while True:
            response = await self._controllers.call(
                "BrokerHeartbeat",
                cpb.BrokerHeartbeatRequest(
                    broker_id=self.node_id,
                    broker_epoch=self.broker_epoch,
                    current_metadata_offset=self._machine.applied_end_offset,
                    want_shut_down=True,
                ),
                timeout_s=CONTROLLED_SHUTDOWN_TIMEOUT_S,
            )
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message)
            if response.should_shut_down:
                log.info("controlled shutdown complete node_id=%d", self.node_id)
                return
            await asyncio.sleep(HEARTBEAT_INTERVAL_S / 4)

    # ---- registration and heartbeats ----------------------------------------------------

    async def _lifecycle(self) -> None:
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                await self._heartbeat()
            except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as exc:
                log.warning("broker must register again node_id=%d reason=%s", self.node_id, exc)
                self.broker_epoch = -1
                continue
            except LograftError as exc:
                log.info("controller call failed node_id=%d error=%s", self.node_id, exc)
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def _register(self) -> None:
        response = await self._controllers.call(
            "RegisterBroker",
            timeout_s=HEARTBEAT_CALL_TIMEOUT_S,
            request=cpb.RegisterBrokerRequest(
                cluster_id=self._cluster_id,
                broker_id=self.node_id,
                incarnation_id=str(self._incarnation),
                host=self._endpoint.host,
                port=self._endpoint.port,
                rack=self._endpoint.rack,
            ),
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
        self.broker_epoch = response.broker_epoch
        log.info("broker registered node_id=%d broker_epoch=%d", self.node_id, self.broker_epoch)

    async def _heartbeat(self) -> None:
        response = await self._controllers.call(
            "BrokerHeartbeat",
            cpb.BrokerHeartbeatRequest(
                broker_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self._machine.applied_end_offset,
            ),
            timeout_s=HEARTBEAT_CALL_TIMEOUT_S,
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
        if response.is_fenced != self.is_fenced:
            log.info(
                "broker %s node_id=%d", "fenced" if response.is_fenced else "unfenced", self.node_id
            )
        self.is_fenced = response.is_fenced

    # ---- the image decides what this broker hosts and leads -----------------------------

    def _on_image(self, previous: MetadataImage, image: MetadataImage) -> None:
        self._latest_image = image
        self._sync_wanted.set()
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
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                continue

    async def _sync_loop(self) -> None:
        """Bring the hosted partitions in line with the newest image, one change at a time.

        Opening thousands of logs is disk work: it runs on a worker thread, so Raft ticks and
        heartbeats on the event loop go on meanwhile. Image changes that arrive during a
        sync are coalesced into the next one.
        """
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted.clear()
            try:
                await self._sync(self._latest_image)
            except LograftError as exc:
                log.error("syncing partitions with the metadata image failed error=%s", exc)

    async def _sync(self, image: MetadataImage) -> None:
        loop = asyncio.get_running_loop()
        wanted = local_partition_roles(image, self.node_id)
        missing = [
            (tp, local.topic_id, local.configs)
            for tp, local in wanted.items()
            if tp not in self._logs.partitions
        ]
        if missing:
            opened = await loop.run_in_executor(None, self._open_all, missing)
            for new_partition in opened:
                self._logs.adopt_partition(new_partition)
            log.info("partitions opened count=%d", len(opened))
        now_ms = _wall_clock_ms()
        log_configs: dict[str, LogConfig | None] = {}
        reconfigured: dict[str, int] = {}
        followed: dict[TopicPartition, FollowedPartition] = {}
        for tp, local in wanted.items():
            partition = self._logs.partitions.get(tp)
            if partition is None:
                continue
            if tp.topic not in log_configs:
                log_configs[tp.topic] = self._log_config(tp.topic, local.configs)
            config = log_configs[tp.topic]
            if config is not None and partition.log.config != config:
                # An altered topic config takes effect at once (IncrementalAlterConfigs).
                partition.update_config(config)
                reconfigured[tp.topic] = reconfigured.get(tp.topic, 0) + 1
            self._apply_role(partition, local.role, now_ms)
            if isinstance(local.role, Follow):
                followed[tp] = FollowedPartition(local.role.leader_id, local.role.leader_epoch)
        for name, count in reconfigured.items():
            log.info("topic config applied topic=%s partitions=%d", name, count)
        addresses = {
            b.broker_id: f"{b.listeners[0].host}:{b.listeners[0].port}"
            for b in image.unfenced_brokers()
        }
        await self._fetchers.update(followed, addresses)
        # Partition counts are kept per image, not recomputed for every group request.
        counts = {t.name: len(t.partitions) for t in image.topics_by_name.values()}
        changed = counts != self._topic_counts
        self._topic_counts = counts
        self.groups.sync()
        if changed:
            self.groups.on_topics_changed()
        stale = partitions_to_stop(list(self._logs.partitions), wanted)
        doomed = [d for tp in stale if (d := self._logs.unhost_partition(tp)) is not None]
        if doomed:
            log.info("partitions removed count=%d", len(doomed))
            await loop.run_in_executor(None, remove_directories, doomed)

    def _log_config(self, topic: str, configs: Mapping[str, str]) -> LogConfig | None:
        """The effective log config of ``topic``; None (logged) if this node rejects it."""
        try:
            return self._logs.log_config_for(configs)
        except InvalidConfigError as exc:
            # The controller validated it; a node of another version may still disagree.
            log.error("topic config not applicable topic=%s error=%s", topic, exc)
            return None

    def _apply_role(self, partition: Partition, role: PartitionRole, now_ms: int) -> None:
        """Lead or follow ``partition`` as the image's registration says."""
        if isinstance(role, Lead):
            partition.become_leader(
                replica_id=self.node_id,
                replicas=role.replicas,
                isr=role.isr,
                leader_epoch=role.leader_epoch,
                partition_epoch=role.partition_epoch,
                now_ms=now_ms,
                propose_isr=self._propose_isr,
            )
        elif isinstance(role, Follow):
            partition.become_follower(
                role.leader_epoch,
                replica_id=self.node_id,
                leader_id=role.leader_id,
                unclean_leader_election=role.unclean_leader_election,
            )
        elif partition.is_leader or partition.leader_epoch != role.leader_epoch:
            partition.become_follower(role.leader_epoch)

    # ---- ISR changes (AlterPartition) ---------------------------------------------------

    def _propose_isr(self, partition: Partition, proposal: IsrProposal) -> None:
        """Send a leader's ISR proposal to the controller; one call per partition at a time."""
        tp = partition.topic_partition
        running = self._isr_calls.get(tp)
        if running is not None and not running.done():
            return
        self._isr_calls[tp] = asyncio.create_task(
            self._alter_partition(partition, proposal), name=f"alter-partition-{tp}"
        )

    async def _alter_partition(self, partition: Partition, proposal: IsrProposal) -> None:
        tp = partition.topic_partition
        request = cpb.AlterPartitionRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            topic=tp.topic,
            partition=tp.partition,
            leader_epoch=proposal.leader_epoch,
            partition_epoch=proposal.partition_epoch,
            new_isr=list(proposal.new_isr),
        )
        try:
            response = await self._controllers.call(
                "AlterPartition", request, timeout_s=ALTER_PARTITION_TIMEOUT_S
            )
        except LograftError as exc:
            log.info("alter partition failed partition=%s error=%s", tp, exc.error_name)
            partition.on_isr_change_failed(proposal.leader_epoch, exc)
            return
        finally:
            self._isr_calls.pop(tp, None)
        if response.error_code:
            error = error_for_code(response.error_code, response.error_message)
            log.info("alter partition refused partition=%s error=%s", tp, error.error_name)
            partition.on_isr_change_failed(proposal.leader_epoch, error)
            return
        if response.leader_epoch == proposal.leader_epoch:
            partition.on_isr_committed(
                response.leader_epoch, tuple(response.isr), response.partition_epoch
            )

    async def _isr_expiration(self) -> None:
        """Kafka's isr-expiration task: drop lagging followers every lag.time.max / 2."""
        interval_s = max(self._replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval_s)
            now_ms = _wall_clock_ms()
            for partition in list(self._logs.partitions.values()):
                if not partition.is_leader:
                    continue
                try:
                    partition.maybe_shrink_isr(now_ms, self._replica_lag_time_max_ms)
                    if partition.topic_partition not in self._isr_calls:
                        partition.resend_pending_proposal()
                except InvariantError:
                    raise  # the node halts (cluster.halt)
                except Exception:
                    # One partition's failure must not stop ISR expiration for the others.
                    log.exception("isr expiration failed partition=%s", partition.topic_partition)

    # ---- producer ids -------------------------------------------------------------------

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        response = await self._controllers.call(
            "AllocateProducerIds",
            cpb.AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=self.broker_epoch),
            timeout_s=ALTER_PARTITION_TIMEOUT_S,
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
        return response.producer_id_start, response.producer_id_len

    async def next_producer_id(self) -> int:
        """A producer id from this broker's current block (a new block when it runs out)."""
        return await self._producer_ids.next_producer_id()

    def _open_all(
        self, missing: list[tuple[TopicPartition, str, Mapping[str, str]]]
    ) -> list[Partition]:
        opened = []
        for tp, topic_id, configs in missing:
            try:
                opened.append(self._logs.open_partition(tp, topic_id, configs))
            except LograftError as exc:
                log.error("cannot host partition partition=%s error=%s", tp, exc)
        return opened

    # ---- ClusterFrontend ----------------------------------------------------------------

    async def metadata(self, request: pb.MetadataRequest) -> pb.MetadataResponse:
        """Unfenced brokers, the active controller, and topics from the metadata image."""
        image = self._machine.image
        leader = self._driver.status().leader_id
        response = pb.MetadataResponse(
            cluster_id=self._cluster_id, controller_id=-1 if leader is None else leader
        )
        for broker in image.unfenced_brokers():
            listener = broker.listeners[0]
            response.brokers.add(
                node_id=broker.broker_id,
                host=listener.host,
                port=listener.port,
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
            topic_metadata = response.topics.add(name=name)
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

    async def find_coordinator(self, group_id: str) -> pb.FindCoordinatorResponse:
        """The broker leading ``group_id``'s partition of ``__consumer_offsets``.

        The topic is created on first use (``offsets.topic.num.partitions`` partitions,
        ``offsets.topic.replication.factor`` replicas); until it has a leader for the
        group's partition the answer is the retriable COORDINATOR_NOT_AVAILABLE.
        """
        image = self._machine.image
        topic = image.topic(OFFSETS_TOPIC)
        if topic is None:
            await self._create_offsets_topic()
            image = self._machine.image
            topic = image.topic(OFFSETS_TOPIC)
            if topic is None:
                return _coordinator_error(
                    CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created")
                )
        partition = partition_for_group(group_id, len(topic.partitions))
        state = topic.partitions[partition]
        broker = image.broker(state.leader) if state.leader >= 0 else None
        if broker is None or broker.fenced:
            return _coordinator_error(
                CoordinatorNotAvailableError(f"{OFFSETS_TOPIC}-{partition} has no leader")
            )
        listener = broker.listeners[0]
        return pb.FindCoordinatorResponse(
            node_id=broker.broker_id, host=listener.host, port=listener.port
        )

    async def _create_offsets_topic(self) -> None:
        request = pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=OFFSETS_TOPIC,
                    num_partitions=self._offsets_topic_partitions,
                    replication_factor=self._offsets_topic_replication_factor,
                    # Compacted, never deleted: the latest record of every group key
                    # (its committed offsets among them) stays; the rest is cleaned away.
                    configs={
                        "cleanup.policy": "compact",
                        "segment.bytes": str(
                            self._node_config.offsets_topic_segment_bytes
                            if self._node_config is not None
                            else 100 * 1024 * 1024
                        ),
                    },
                )
            ]
        )
        response = await self.create_topics(request)
        result = response.topics[0]
        if result.error_code and result.error_code != TopicAlreadyExistsError.code:
            log.warning(
                "cannot create %s yet error=%s",
                OFFSETS_TOPIC,
                error_for_code(result.error_code, result.error_message),
            )
        elif not result.error_code:
            log.info(
                "created %s partitions=%d replication_factor=%d",
                OFFSETS_TOPIC,
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
        self, request: pb.DescribeClusterRequest
    ) -> pb.DescribeClusterResponse:
        """Cluster id, the active controller and the registered brokers, from the image."""
        image = self._machine.image
        leader = self._driver.status().leader_id
        response = pb.DescribeClusterResponse(
            cluster_id=self._cluster_id, controller_id=-1 if leader is None else leader
        )
        for broker_id, broker in sorted(image.brokers.items()):
            if broker.fenced and not request.include_fenced_brokers:
                continue
            listener = broker.listeners[0]
            response.brokers.add(
                broker_id=broker_id,
                host=listener.host,
                port=listener.port,
                rack=broker.rack or "",
                is_fenced=broker.fenced,
            )
        return response


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
