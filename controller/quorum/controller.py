"""The active controller: decisions on the metadata image, committed through Raft.

Every controller node runs a ``QuorumController``; only the Raft leader's is *active*, and
only once it has replayed its own leader-change entry (everything committed before its
epoch is then in its image). Write operations are serialised by one lock: each decision is
made on the image with every earlier decision committed and replayed, which is the simple
way to meet ``controller.logic``'s rule that decisions see all appended records. Others
answer ``NOT_CONTROLLER`` with the leader's id.
"""

# Over 600 lines: one class whose writes are serialised by one lock, each next to the others.
from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from controller.logic import (
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterConfigsResult,
    AlterPartitionRequest,
    BrokerHeartbeatManager,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    Decision,
    NewPartitions,
    NewTopic,
    allocate_producer_ids,
    alter_partition,
    broker_heartbeat,
    create_partitions,
    create_topics,
    delete_topics,
    elect_preferred_leaders,
    fence_expired_brokers,
    granted_session_ms,
    incremental_alter_configs,
    record_heartbeat_contact,
    register_broker,
)
from controller.logic.decision import DEFAULT_CONFIG, ControllerConfig
from controller.quorum.driver import RaftDriver
from controller.quorum.metadata_machine import MetadataStateMachine
from controller.raft import Role
from lograft.metadata import ConfigResource, ConfigResourceType, Listener, encode_batch
from lograft.metadata.topic_configs import UNCLEAN_LEADER_ELECTION_ENABLE
from lograft.protocol.error_responses import (
    alter_configs_failed,
    create_partitions_failed,
    create_topics_failed,
    delete_topics_failed,
)
from lograft.protocol.errors import (
    InvalidRequestError,
    LograftError,
    NotControllerError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.wire import broker_pb2
from lograft.protocol.wire import controller_pb2 as pb
from lograft.protocol.wire import controller_pb2_grpc as pb_grpc

__all__ = ["ControllerOnListener", "QuorumController"]

log = logging.getLogger(__name__)

R = TypeVar("R")
#: The active controller's fencer sleeps until the first broker session may run out or the
#: next preferred-leader check, but at least the minimum (it cannot spin) and at most the
#: maximum (it notices brokers it has not heard from yet).
FENCE_CHECK_MIN_WAIT_S = 0.01
FENCE_CHECK_MAX_WAIT_S = 1.0
LEADER_IMBALANCE_CHECK_INTERVAL_MS = 5000
"""Kafka checks every 300 s; a small cluster can afford to restore leaders sooner."""


def _now_ms() -> int:
    # Monotonic: broker sessions are intervals. On the wall clock, a controller whose clock
    # jumped a day ahead fenced every broker at once, and one set back kept dead brokers'
    # sessions alive for the day (the chaos suite's clock-jump scenario).
    return int(time.monotonic() * 1000)


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class QuorumController(pb_grpc.ControllerServicer):  # type: ignore[misc]
    """Controller decisions for this node's Raft driver; the ``Controller`` gRPC service."""

    def __init__(
        self,
        driver: RaftDriver,
        machine: MetadataStateMachine,
        rng: random.Random,
        session_timeout_ms: int = 2000,
        now_ms: Callable[[], int] = _now_ms,
        config: ControllerConfig = DEFAULT_CONFIG,
    ) -> None:
        self._config = config
        self._driver = driver
        self._machine = machine
        self._rng = rng
        self._now_ms = now_ms
        self._session_timeout_ms = session_timeout_ms
        self._heartbeats = BrokerHeartbeatManager(session_timeout_ms)
        self._lock = asyncio.Lock()
        self._active_epoch = -1
        self._fencer: asyncio.Task[None] | None = None
        self._image_changed = asyncio.Event()
        """Set on every change of the metadata image: an inactive controller's fencer waits
        for it, since becoming active takes the leader-change entry of the new epoch."""
        machine.add_listener(lambda _previous, _image: self._image_changed.set())
        self._last_rebalance_ms = 0

    # ---- activity -----------------------------------------------------------------------

    def check_active(self) -> bool:
        """Leader of the quorum and caught up with everything committed before its epoch.

        On the first call of a new epoch it also starts every broker's session afresh.
        """
        status = self._driver.status()
        if status.role is not Role.LEADER:
            return False
        if self._active_epoch != status.epoch:
            changes = self._machine.leader_change_offsets
            if not changes or changes[-1][1] != status.epoch:
                return False
            # A new epoch: every broker gets a fresh session with this controller.
            self._active_epoch = status.epoch
            self._heartbeats = BrokerHeartbeatManager(self._session_timeout_ms)
            for broker in self._machine.image.unfenced_brokers():
                self._heartbeats.touch(broker.broker_id, self._now_ms())
            log.info(
                "controller active node_id=%d epoch=%d", self._driver.config.node_id, status.epoch
            )
        return True

    def leader_id(self) -> int:
        """The active controller's id as far as this node knows; -1 when unknown."""
        leader = self._driver.status().leader_id
        return -1 if leader is None else leader

    async def start(self) -> None:
        """Start fencing brokers whose sessions expire (while active)."""
        self._fencer = asyncio.create_task(self._fence_loop(), name="controller-fencer")

    async def stop(self) -> None:
        """Stop the fencing task."""
        if self._fencer is not None:
            self._fencer.cancel()
            await asyncio.gather(self._fencer, return_exceptions=True)

    def _fence_wait_s(self) -> float:
        """How long the active controller's fencer may sleep: until a session may run out or
        the next preferred-leader check, within ``FENCE_CHECK_{MIN,MAX}_WAIT_S``."""
        due = self._last_rebalance_ms + LEADER_IMBALANCE_CHECK_INTERVAL_MS
        expiry = self._heartbeats.next_expiry_ms(self._machine.image)
        if expiry is not None:
            due = min(due, expiry)
        wait_s = (due - self._now_ms()) / 1000
        return min(FENCE_CHECK_MAX_WAIT_S, max(FENCE_CHECK_MIN_WAIT_S, wait_s))

    async def _fence_loop(self) -> None:
        while True:
            if not self.check_active():
                # Only the active controller fences. An idle standby used to wake every
                # second to ask; it cannot become active without an image change.
                self._image_changed.clear()
                await self._image_changed.wait()
                continue
            await asyncio.sleep(self._fence_wait_s())
            if not self.check_active():
                continue
            try:
                fenced = await self._decide(
                    lambda: fence_expired_brokers(
                        self._machine.image, self._heartbeats, self._now_ms()
                    )
                )
            except LograftError as exc:
                log.warning("fencing expired brokers failed error=%s", exc)
                continue
            if fenced:
                log.warning("brokers fenced after session timeout broker_ids=%s", list(fenced))
            if self._now_ms() - self._last_rebalance_ms >= LEADER_IMBALANCE_CHECK_INTERVAL_MS:
                self._last_rebalance_ms = self._now_ms()
                try:
                    elected = await self._decide(
                        lambda: elect_preferred_leaders(self._machine.image)
                    )
                except LograftError as exc:
                    log.warning("preferred leader election failed error=%s", exc)
                    continue
                if elected:
                    log.info(
                        "preferred leaders restored partitions=%s",
                        [str(e.topic_partition) for e in elected],
                    )

    # ---- the decision pipeline ----------------------------------------------------------

    async def _decide(self, decide: Callable[[], Decision[R]]) -> R:
        """Run a decision on the current image; commit its records; return its result.

        The decision runs in a task of its own that keeps the lock until its records are
        committed and replayed (or leadership is lost), even when the caller gives up (gRPC
        cancels a handler whose deadline passed): the next decision must be made on an image
        that holds them. Released early, a second producer-id block was handed out from the
        same start, and every node replaying the log halted.
        """
        decision = asyncio.ensure_future(self._decide_serially(decide))
        decision.add_done_callback(_retrieved)  # a caller that gave up does not read it
        return await asyncio.shield(decision)

    async def _decide_serially(self, decide: Callable[[], Decision[R]]) -> R:
        async with self._lock:
            if not self.check_active():
                raise NotControllerError(f"the active controller is {self.leader_id()}")
            decision = decide()
            for tp in decision.unclean_elections:
                log.error(
                    "UNCLEAN leader election: acknowledged writes may be lost partition=%s", tp
                )
            if decision.records:
                await self._driver.propose(encode_batch(decision.records))
            return decision.result

    # ---- gRPC ---------------------------------------------------------------------------

    async def RegisterBroker(
        self, request: pb.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterBrokerResponse:
        """Register a broker incarnation (it starts fenced)."""
        try:
            incarnation = uuid.UUID(request.incarnation_id)
        except ValueError:
            error: LograftError = InvalidRequestError("incarnation_id is not a UUID")
            return pb.RegisterBrokerResponse(error_code=error.code, error_message=error.message)
        # A broker that names no listeners has one, PLAINTEXT, at host:port.
        listeners = tuple(Listener(x.name, x.host, x.port) for x in request.listeners) or (
            Listener("PLAINTEXT", request.host, request.port),
        )
        registration = BrokerRegistrationRequest(
            request.broker_id, incarnation, listeners, request.rack or None
        )
        try:
            result = await self._decide(
                lambda: register_broker(
                    self._machine.image, registration, self._heartbeats, self._now_ms()
                )
            )
        except LograftError as exc:
            return pb.RegisterBrokerResponse(
                error_code=exc.code, error_message=exc.message, leader_id=self.leader_id()
            )
        log.info(
            "broker registered broker_id=%d broker_epoch=%d listeners=%s",
            request.broker_id,
            result.broker_epoch,
            ",".join(f"{x.name}://{x.host}:{x.port}" for x in listeners),
        )
        return pb.RegisterBrokerResponse(
            broker_epoch=result.broker_epoch, leader_id=self.leader_id()
        )

    async def BrokerHeartbeat(
        self, request: pb.BrokerHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.BrokerHeartbeatResponse:
        """Renew a broker's session; unfence it once caught up."""
        heartbeat = BrokerHeartbeatRequest(
            request.broker_id,
            request.broker_epoch,
            request.current_metadata_offset,
            request.want_fence,
            request.want_shut_down,
        )
        renewed = False
        if self.check_active():  # the session counts from now, not from when it is decided
            renewed = record_heartbeat_contact(
                self._machine.image,
                request.broker_id,
                request.broker_epoch,
                self._heartbeats,
                self._now_ms(),
            )
        try:
            result = await self._decide(
                lambda: broker_heartbeat(
                    self._machine.image, heartbeat, self._heartbeats, self._now_ms()
                )
            )
        except LograftError as exc:
            return pb.BrokerHeartbeatResponse(
                error_code=exc.code, error_message=exc.message, leader_id=self.leader_id()
            )
        return pb.BrokerHeartbeatResponse(
            is_caught_up=result.is_caught_up,
            is_fenced=result.is_fenced,
            should_shut_down=result.should_shut_down,
            leader_id=self.leader_id(),
            # The broker's lease (cluster/broker_lease.py).
            session_timeout_ms=granted_session_ms(renewed, result, self._heartbeats),
        )

    async def CreateTopics(
        self, request: broker_pb2.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreateTopicsResponse:
        """Create topics: placement, validation and the records, committed before answering."""
        topics = [
            NewTopic(t.name, t.num_partitions, t.replication_factor, dict(t.configs))
            for t in request.topics
        ]
        for topic in topics:
            if topic.configs.get(UNCLEAN_LEADER_ELECTION_ENABLE, "").lower() == "true":
                log.warning(
                    "topic allows UNCLEAN leader election: if every in-sync replica is lost, "
                    "a lagging replica may lead and acknowledged writes be lost topic=%s",
                    topic.name,
                )
        try:
            results = await self._decide(
                lambda: create_topics(
                    self._machine.image,
                    topics,
                    self._rng,
                    validate_only=request.validate_only,
                    config=self._config,
                )
            )
        except LograftError as exc:
            return create_topics_failed(request, exc)
        return broker_pb2.CreateTopicsResponse(
            topics=[
                broker_pb2.CreatableTopicResult(
                    name=r.name,
                    error_code=r.error.code if r.error else 0,
                    error_message=r.error.message if r.error else "",
                    num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                )
                for r in results
            ]
        )

    async def DeleteTopics(
        self, request: broker_pb2.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicsResponse:
        """Delete topics by name."""
        names = list(request.topic_names)
        try:
            results = await self._decide(lambda: delete_topics(self._machine.image, names))
        except LograftError as exc:
            return delete_topics_failed(request, exc)
        return broker_pb2.DeleteTopicsResponse(
            topics=[
                broker_pb2.DeletableTopicResult(
                    name=r.name,
                    error_code=r.error.code if r.error else 0,
                    error_message=r.error.message if r.error else "",
                )
                for r in results
            ]
        )

    async def CreatePartitions(
        self, request: broker_pb2.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.CreatePartitionsResponse:
        """Add partitions to topics; the records are committed before answering."""
        topics = [
            NewPartitions(
                t.name,
                t.count,
                tuple(tuple(a.broker_ids) for a in t.assignments) if t.assignments else None,
            )
            for t in request.topics
        ]
        try:
            results = await self._decide(
                lambda: create_partitions(
                    self._machine.image, topics, self._rng, validate_only=request.validate_only
                )
            )
        except LograftError as exc:
            return create_partitions_failed(request, exc)
        for result, topic in zip(results, topics, strict=True):
            if result.error is None and not request.validate_only:
                log.info("partitions added topic=%s count=%d", topic.topic, topic.total_count)
        return broker_pb2.CreatePartitionsResponse(
            results=[
                broker_pb2.CreatePartitionsTopicResult(
                    name=r.topic,
                    error_code=r.error.code if r.error else 0,
                    error_message=r.error.message if r.error else "",
                )
                for r in results
            ]
        )

    async def IncrementalAlterConfigs(
        self,
        request: broker_pb2.IncrementalAlterConfigsRequest,
        context: grpc.aio.ServicerContext,
    ) -> broker_pb2.IncrementalAlterConfigsResponse:
        """Apply config operations per resource; the records are committed before answering."""
        answers: list[AlterConfigsResult | None] = []
        valid: list[AlterConfigsResource] = []
        for wanted in request.resources:
            try:
                resource = _alter_configs_resource(wanted)
            except LograftError as exc:
                answers.append(
                    AlterConfigsResult(
                        ConfigResource(ConfigResourceType.TOPIC, wanted.resource_name), exc
                    )
                )
                continue
            answers.append(None)
            valid.append(resource)
        try:
            decided = await self._decide(
                lambda: incremental_alter_configs(
                    self._machine.image, valid, validate_only=request.validate_only
                )
            )
        except LograftError as exc:
            return alter_configs_failed(request, exc)
        results = iter(decided)
        response = broker_pb2.IncrementalAlterConfigsResponse()
        for wanted, answer in zip(request.resources, answers, strict=True):
            result = answer if answer is not None else next(results)
            response.responses.add(
                error_code=result.error.code if result.error else 0,
                error_message=result.error.message if result.error else "",
                resource_type=wanted.resource_type,
                resource_name=wanted.resource_name,
            )
            if result.error is None and not request.validate_only:
                log.info(
                    "configs altered resource_type=%d resource_name=%s configs=%s",
                    wanted.resource_type,
                    wanted.resource_name,
                    ",".join(c.name for c in wanted.configs),
                )
                if any(
                    c.name == UNCLEAN_LEADER_ELECTION_ENABLE
                    and c.config_operation == AlterConfigOpType.SET
                    and c.value.strip().lower() == "true"
                    for c in wanted.configs
                ):
                    log.warning(
                        "topic allows UNCLEAN leader election: if every in-sync replica is "
                        "lost, a lagging replica may lead and acknowledged writes be lost "
                        "topic=%s",
                        wanted.resource_name,
                    )
        return response

    async def AlterPartition(
        self, request: pb.AlterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> pb.AlterPartitionResponse:
        """Check and commit a leader's ISR change (partition and leader epochs must match)."""
        topic = self._machine.image.topic(request.topic)
        if topic is None:
            error: LograftError = UnknownTopicOrPartitionError(f"topic {request.topic!r}")
            return pb.AlterPartitionResponse(error_code=error.code, error_message=error.message)
        change = AlterPartitionRequest(
            request.broker_id,
            request.broker_epoch,
            topic.topic_id,
            request.partition,
            request.leader_epoch,
            request.partition_epoch,
            tuple(request.new_isr),
        )
        try:
            result = await self._decide(lambda: alter_partition(self._machine.image, change))
        except LograftError as exc:
            return pb.AlterPartitionResponse(error_code=exc.code, error_message=exc.message)
        state = result.state
        return pb.AlterPartitionResponse(
            leader_id=state.leader,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            isr=list(state.isr),
        )

    async def AllocateProducerIds(
        self, request: pb.AllocateProducerIdsRequest, context: grpc.aio.ServicerContext
    ) -> pb.AllocateProducerIdsResponse:
        """Hand a broker the next block of producer ids (never reused: it is in the log)."""
        try:
            block = await self._decide(
                lambda: allocate_producer_ids(
                    self._machine.image, request.broker_id, request.broker_epoch
                )
            )
        except LograftError as exc:
            return pb.AllocateProducerIdsResponse(error_code=exc.code, error_message=exc.message)
        return pb.AllocateProducerIdsResponse(
            producer_id_start=block.first_producer_id, producer_id_len=block.size
        )

    async def DescribeQuorum(
        self, request: pb.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeQuorumResponse:
        """Leader, epoch, high watermark and each replica's lag (lags only on the leader)."""
        return self.describe_quorum(None)

    def describe_quorum(self, listener: str | None) -> pb.DescribeQuorumResponse:
        """DescribeQuorum's answer, each broker's address on ``listener`` (``None``, or a
        broker without it: its first registered listener)."""
        status = self._driver.status()
        voters = self._driver.config.voters
        response = pb.DescribeQuorumResponse(
            leader_id=-1 if status.leader_id is None else status.leader_id,
            leader_epoch=status.epoch,
            high_watermark=status.high_watermark,
        )
        replicas: dict[int, Any] = {r.replica_id: r for r in status.replicas}
        for voter in sorted(voters):
            known = replicas.get(voter)
            response.voters.add(
                replica_id=voter,
                log_end_offset=known.log_end_offset if known else -1,
                lag=known.lag if known else -1,
            )
        for replica_id, known in sorted(replicas.items()):
            if replica_id not in voters:
                response.observers.add(
                    replica_id=replica_id, log_end_offset=known.log_end_offset, lag=known.lag
                )
        image = self._machine.image
        response.metadata_offset = image.offset
        for broker_id, broker in sorted(image.brokers.items()):
            address = broker.listener(listener) or broker.listeners[0]
            response.brokers.add(
                broker_id=broker_id,
                broker_epoch=broker.broker_epoch,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
                host=address.host,
                port=address.port,
            )
        for topic, partition_id, state in image.iter_partitions():
            if state.leader < 0:
                response.offline_partitions.add(topic=topic.name, partition=partition_id)
        return response


class ControllerOnListener:
    """The ``Controller`` service as one listener serves it.

    gRPC does not tell a servicer which port a call arrived on, so each listener's server
    gets its own view: DescribeQuorum gives each broker's address on this listener; every
    other call is the controller's own (looked up on it, so a new RPC needs nothing here).
    """

    def __init__(self, controller: QuorumController, listener: str) -> None:
        self._controller = controller
        self._listener = listener

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)

    async def DescribeQuorum(
        self, request: pb.DescribeQuorumRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeQuorumResponse:
        """Like :meth:`QuorumController.DescribeQuorum`, with addresses on this listener."""
        return self._controller.describe_quorum(self._listener)


def _alter_configs_resource(wanted: broker_pb2.AlterConfigsResource) -> AlterConfigsResource:
    """A resource of an IncrementalAlterConfigs request; ``INVALID_REQUEST`` if malformed."""
    try:
        resource_type = ConfigResourceType(wanted.resource_type)
    except ValueError:
        raise InvalidRequestError(
            f"unsupported config resource type {wanted.resource_type} (2: TOPIC, 4: BROKER)"
        ) from None
    ops: list[AlterConfigOp] = []
    for config in wanted.configs:
        try:
            op = AlterConfigOpType(config.config_operation)
        except ValueError:
            raise InvalidRequestError(
                f"unknown config operation {config.config_operation} for {config.name!r}"
            ) from None
        ops.append(
            AlterConfigOp(config.name, op, config.value if config.HasField("value") else None)
        )
    return AlterConfigsResource(ConfigResource(resource_type, wanted.resource_name), tuple(ops))
