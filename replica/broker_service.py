"""The client API of a broker (``lograft.v1.Broker``): produce, fetch, offsets, metadata, topics.

Runs on the node's event loop. Record data is never decoded on the produce or fetch path:
batches are validated by header and CRC, given offsets in place, and appended; fetches hand
back log bytes. Per-partition failures are answered with Kafka's error codes; a request that
is malformed as a whole is refused with ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from cluster.error_responses import (
    alter_configs_failed,
    create_partitions_failed,
    describe_configs_failed,
)
from cluster.errors import (
    InvalidGroupIdError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    KafkaStorageError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from replica.batch_header import check_produced_attributes, iter_headers, validate_batches
from replica.group import GroupCoordinator, GroupDescription, GroupRecord, OffsetAndMetadata
from replica.group_service import GroupService
from replica.log.config import FlushPolicy
from replica.log_manager import LogManager, remove_directories
from replica.partition import Partition, TopicPartition
from replica.producer_ids import LocalProducerIdBlocks, ProducerIdAllocator
from replica.records import check_compressed_records, decode_records
from replica.replication import DivergingEpoch

__all__ = ["BrokerEndpoint", "BrokerService"]

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
MAX_FETCH_WAIT_MS = 60_000
MAX_PRODUCE_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """How clients reach this broker."""

    node_id: int
    host: str
    port: int
    rack: str = ""


class ClusterFrontend(Protocol):
    """Where a broker that is part of a controller quorum gets cluster-wide answers."""

    async def metadata(self, request: pb.MetadataRequest) -> pb.MetadataResponse:
        """Brokers, topics and partitions from the metadata image."""
        ...

    async def create_topics(self, request: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
        """Forwarded to the active controller."""
        ...

    async def delete_topics(self, request: pb.DeleteTopicsRequest) -> pb.DeleteTopicsResponse:
        """Forwarded to the active controller."""
        ...

    async def next_producer_id(self) -> int:
        """A producer id from a block the active controller allocated to this broker."""
        ...

    async def find_coordinator(self, group_id: str) -> pb.FindCoordinatorResponse:
        """The broker coordinating ``group_id``."""
        ...

    async def create_partitions(
        self, request: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse:
        """Forwarded to the active controller."""
        ...

    async def incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        """Forwarded to the active controller."""
        ...

    def describe_configs(self, request: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
        """Topic configs from the metadata image, this broker's own settings."""
        ...

    async def describe_cluster(
        self, request: pb.DescribeClusterRequest
    ) -> pb.DescribeClusterResponse:
        """Cluster id, active controller and brokers from the metadata image."""
        ...


def _error_fields(exc: LograftError) -> dict[str, Any]:
    return {"error_code": exc.code, "error_message": exc.message}


class BrokerService(pb_grpc.BrokerServicer):  # type: ignore[misc]
    """gRPC servicer; one instance per node."""

    def __init__(
        self,
        logs: LogManager,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        frontend: ClusterFrontend | None = None,
        groups: GroupService | None = None,
    ) -> None:
        self._logs = logs
        self._endpoint = endpoint
        self._cluster_id = cluster_id
        self._now_ms = now_ms
        self._frontend = frontend
        self._groups = groups
        self._local_producer_ids = ProducerIdAllocator(LocalProducerIdBlocks(logs.data_dir))

    def _leader_partition(self, topic: str, index: int) -> Partition:
        partition = self._logs.partition(topic, index)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(
                f"{partition.topic_partition} is led by another broker "
                f"(leader epoch {partition.leader_epoch})"
            )
        return partition

    # ---- Produce ------------------------------------------------------------------------

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ProduceResponse:
        """Append each partition's batches; answer after the append (and its fsync)."""
        if request.acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, got {request.acks}")
            return pb.ProduceResponse(
                topics=[
                    pb.TopicProduceResponse(
                        name=topic.name,
                        partitions=[
                            pb.PartitionProduceResponse(
                                partition=p.partition, base_offset=-1, **_error_fields(error)
                            )
                            for p in topic.partitions
                        ],
                    )
                    for topic in request.topics
                ]
            )
        timeout_s = min(max(request.timeout_ms, 0) or 30_000, MAX_PRODUCE_TIMEOUT_MS) / 1000
        pending: list[tuple[pb.PartitionProduceResponse, Partition, int]] = []
        response = pb.ProduceResponse()
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = topic_response.partitions.add(partition=data.partition, base_offset=-1)
                try:
                    partition = self._leader_partition(topic.name, data.partition)
                    required_offset = self._append(partition, data.records, request.acks, result)
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                if request.acks == -1 or partition.log.config.flush_policy == FlushPolicy.FSYNC:
                    pending.append((result, partition, required_offset))
        if pending:
            await self._await_acks(pending, request.acks, timeout_s)
        return response

    def _append(
        self, partition: Partition, records: bytes, acks: int, result: pb.PartitionProduceResponse
    ) -> int:
        config = partition.log.config
        buffer = bytearray(records)
        headers = validate_batches(buffer, config.max_message_bytes)
        for header in headers:
            check_produced_attributes(header)
            if header.compression:
                check_compressed_records(buffer, header)
            if config.compact:
                # Kafka's rule; the only produce path that decodes records (compacted only).
                for record in decode_records(buffer, header):
                    if record.key is None:
                        raise InvalidRecordError(
                            f"compacted topic cannot accept a record without a key in "
                            f"{partition.topic_partition} (offset delta "
                            f"{record.offset - header.base_offset})"
                        )
        appended = partition.append_as_leader(buffer, headers, acks, self._now_ms())
        result.base_offset = appended.batch_base_offsets[0]
        if len(appended.batch_base_offsets) > 1:
            result.batch_base_offsets.extend(appended.batch_base_offsets)
        result.log_append_time_ms = appended.log_append_time_ms
        result.log_start_offset = partition.log.log_start_offset
        return appended.required_offset

    async def _await_acks(
        self,
        pending: list[tuple[pb.PartitionProduceResponse, Partition, int]],
        acks: int,
        timeout_s: float,
    ) -> None:
        """Wait for each partition's acks: its flush (acks=1 under fsync) or its HW (all)."""
        outcomes = await asyncio.gather(
            *(
                asyncio.wait_for(partition.wait_acked(offset, acks), timeout_s)
                for _, partition, offset in pending
            ),
            return_exceptions=True,
        )
        for (result, partition, _), outcome in zip(pending, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                error: LograftError
                if isinstance(outcome, TimeoutError):
                    error = RequestTimedOutError(
                        "the records were not replicated and flushed within timeout_ms"
                    )
                elif isinstance(outcome, LograftError):
                    error = outcome
                else:
                    error = KafkaStorageError(f"flush failed: {outcome}")
                log.warning(
                    "produce not acknowledged partition=%s error=%s",
                    partition.topic_partition,
                    error.error_name,
                )
                result.error_code = error.code
                result.error_message = error.message
                result.base_offset = -1
                del result.batch_base_offsets[:]

    # ---- Fetch --------------------------------------------------------------------------

    async def Fetch(
        self, request: pb.FetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.FetchResponse:
        """Read below the high watermark; long-poll until ``min_bytes`` or ``max_wait_ms``."""
        max_wait_s = min(max(request.max_wait_ms, 0), MAX_FETCH_WAIT_MS) / 1000
        deadline = asyncio.get_running_loop().time() + max_wait_s
        while True:
            response, total_bytes, partitions = self._read_all(request)
            remaining = deadline - asyncio.get_running_loop().time()
            if total_bytes >= max(request.min_bytes, 1) or remaining <= 0 or not partitions:
                return response
            waiters = [p.data_waiter(replica=request.replica_id >= 0) for p in partitions]
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when="FIRST_COMPLETED")
            finally:
                for partition, waiter in zip(partitions, waiters, strict=True):
                    partition.discard_waiter(waiter)
                    waiter.cancel()

    def _read_all(self, request: pb.FetchRequest) -> tuple[pb.FetchResponse, int, list[Partition]]:
        response = pb.FetchResponse()
        budget = request.max_bytes if request.max_bytes > 0 else 50 * 1024 * 1024
        total_bytes = 0
        readable: list[Partition] = []
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                result = topic_response.partitions.add(
                    partition=wanted.partition, high_watermark=-1, log_start_offset=-1
                )
                try:
                    partition = self._leader_partition(topic.name, wanted.partition)
                    high_watermark = partition.high_watermark
                    result.high_watermark = high_watermark
                    result.log_start_offset = partition.log.log_start_offset
                    upper_bound: int | None = high_watermark
                    if request.replica_id >= 0:
                        # A follower reads past the high watermark (that is how it moves),
                        # after its epoch and its log's divergence are checked.
                        decision = partition.on_follower_fetch(
                            request.replica_id,
                            wanted.fetch_offset,
                            wanted.last_fetched_epoch,
                            wanted.current_leader_epoch,
                            self._now_ms(),
                        )
                        result.high_watermark = partition.high_watermark
                        if isinstance(decision, DivergingEpoch):
                            result.diverging_epoch.epoch = decision.diverging.epoch
                            result.diverging_epoch.end_offset = decision.diverging.end_offset
                            continue
                        upper_bound = None
                    elif wanted.fetch_offset > high_watermark and (
                        wanted.fetch_offset <= partition.log.log_end_offset
                    ):
                        # Between the high watermark and the log end: not readable yet.
                        readable.append(partition)
                        continue
                    limit = wanted.partition_max_bytes or 1024 * 1024
                    # Kafka's rule: the first batch is always returned whole, whatever the
                    # budget says, so a batch larger than max_bytes cannot block a consumer.
                    if total_bytes > 0:
                        limit = min(limit, budget - total_bytes)
                    if limit <= 0:
                        readable.append(partition)
                        continue
                    data = partition.log.read(wanted.fetch_offset, limit, upper_bound)
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                result.records = data
                total_bytes += len(data)
                readable.append(partition)
        return response, total_bytes, readable

    # ---- ListOffsets --------------------------------------------------------------------

    async def ListOffsets(
        self, request: pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListOffsetsResponse:
        """Earliest (-2), latest (-1), max timestamp (-3), or the first offset at a time."""
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                result = topic_response.partitions.add(
                    partition=wanted.partition, offset=-1, timestamp=-1
                )
                try:
                    partition = self._leader_partition(topic.name, wanted.partition)
                    offset, timestamp = self._offset_for(partition, wanted.timestamp)
                except LograftError as exc:
                    result.error_code = exc.code
                    result.error_message = exc.message
                    continue
                result.offset = offset
                result.timestamp = timestamp
                result.leader_epoch = partition.leader_epoch
        return response

    def _offset_for(self, partition: Partition, timestamp: int) -> tuple[int, int]:
        if timestamp == EARLIEST_TIMESTAMP:
            return partition.log.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return partition.high_watermark, -1
        if timestamp == MAX_TIMESTAMP:
            found = partition.log.max_timestamp_offset()
            if found is None or found[0] >= partition.high_watermark:
                return -1, -1
            # The log knows the batch; the record is the first in it with that timestamp.
            return self._first_record_at_or_after(partition, found[0], found[1])
        if timestamp < 0:
            raise InvalidRequestError(f"timestamp {timestamp} is neither -1, -2, -3 nor >= 0")
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None:
            return -1, -1
        return self._first_record_at_or_after(partition, found[0], timestamp)

    def _first_record_at_or_after(
        self, partition: Partition, batch_offset: int, timestamp: int
    ) -> tuple[int, int]:
        # The time index finds the batch; the record is found inside it (off the hot path),
        # or in a later batch, as Kafka's segment search does: a compacted batch may be
        # empty (kept for its producer) or have lost the record that made its timestamp.
        offset = batch_offset
        while offset < partition.high_watermark:
            data = partition.log.read(offset, 64 * 1024, partition.high_watermark)
            headers = list(iter_headers(data))
            if not headers:
                break
            for header in headers:
                if header.max_timestamp < timestamp or not header.records_count:
                    continue
                for record in decode_records(data, header):
                    if record.timestamp >= timestamp and record.offset >= batch_offset:
                        return record.offset, record.timestamp
            offset = headers[-1].next_offset
        return -1, -1

    # ---- Metadata and topics ------------------------------------------------------------

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        """Brokers and the topics asked for (all when none named).

        Standalone, this node is the only broker; in a quorum, the metadata image answers.
        """
        if self._frontend is not None:
            return await self._frontend.metadata(request)
        node = self._endpoint
        response = pb.MetadataResponse(
            cluster_id=self._cluster_id,
            controller_id=node.node_id,
            brokers=[
                pb.BrokerMetadata(
                    node_id=node.node_id, host=node.host, port=node.port, rack=node.rack
                )
            ],
        )
        names = list(request.topics) or sorted(self._logs.topics)
        for name in names:
            topic = self._logs.topics.get(name)
            if topic is None:
                error = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                response.topics.add(name=name, **_error_fields(error))
                continue
            topic_metadata = response.topics.add(name=name)
            topic_metadata.configs.update(
                self._logs.log_config_for(topic.configs).to_topic_configs()
            )
            for index in range(topic.num_partitions):
                partition = self._logs.partitions.get(TopicPartition(name, index))
                topic_metadata.partitions.add(
                    partition=index,
                    leader_id=node.node_id,
                    leader_epoch=partition.leader_epoch if partition else 0,
                    replica_nodes=[node.node_id],
                    isr_nodes=[node.node_id],
                )
        return response

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        """Create topics: through the active controller, or local to a standalone node."""
        if self._frontend is not None:
            return await self._frontend.create_topics(request)
        response = pb.CreateTopicsResponse()
        for topic in request.topics:
            result = response.topics.add(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
            )
            # -1 means "the broker default", as in Kafka's CreateTopics v4+.
            num_partitions = topic.num_partitions if topic.num_partitions != -1 else 1
            replication_factor = topic.replication_factor if topic.replication_factor != -1 else 1
            result.num_partitions = num_partitions
            result.replication_factor = replication_factor
            try:
                if request.validate_only:
                    self._logs.validate_new_topic(
                        topic.name, num_partitions, replication_factor, dict(topic.configs)
                    )
                else:
                    # Opening many logs is disk work: off the loop; publishing is on it.
                    prepared = await asyncio.get_running_loop().run_in_executor(
                        None,
                        self._logs.prepare_topic,
                        topic.name,
                        num_partitions,
                        replication_factor,
                        dict(topic.configs),
                    )
                    self._logs.commit_topic(*prepared)
            except LograftError as exc:
                result.error_code = exc.code
                result.error_message = exc.message
        return response

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        """Delete topics; standalone, their files are removed off the event loop."""
        if self._frontend is not None:
            return await self._frontend.delete_topics(request)
        response = pb.DeleteTopicsResponse()
        doomed = []
        for name in request.topic_names:
            result = response.topics.add(name=name)
            try:
                doomed.extend(self._logs.delete_topic(name))
            except LograftError as exc:
                result.error_code = exc.code
                result.error_message = exc.message
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, remove_directories, doomed)
        return response

    # ---- InitProducerId -----------------------------------------------------------------

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        """A new producer id at epoch 0 for an idempotent producer."""
        try:
            if self._frontend is not None:
                producer_id = await self._frontend.next_producer_id()
            else:
                producer_id = await self._local_producer_ids.next_producer_id()
        except LograftError as exc:
            return pb.InitProducerIdResponse(
                error_code=exc.code, error_message=exc.message, producer_id=-1, producer_epoch=-1
            )
        except OSError as exc:
            error = KafkaStorageError(f"cannot reserve producer ids: {exc}")
            return pb.InitProducerIdResponse(
                error_code=error.code,
                error_message=error.message,
                producer_id=-1,
                producer_epoch=-1,
            )
        log.info("producer id assigned producer_id=%d", producer_id)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    # ---- Cluster and config administration ------------------------------------------------

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        """Add partitions to topics, through the active controller."""
        if self._frontend is not None:
            return await self._frontend.create_partitions(request)
        return create_partitions_failed(request, _admin_needs_quorum("CreatePartitions"))

    async def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        """Alter topic configs, through the active controller."""
        if self._frontend is not None:
            return await self._frontend.incremental_alter_configs(request)
        return alter_configs_failed(request, _admin_needs_quorum("IncrementalAlterConfigs"))

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        """Every config of topics and of this broker, with value, source and flags."""
        if self._frontend is not None:
            return self._frontend.describe_configs(request)
        return describe_configs_failed(request, _admin_needs_quorum("DescribeConfigs"))

    async def DescribeCluster(
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeClusterResponse:
        """Cluster id, controller and brokers; standalone, this node is all three."""
        if self._frontend is not None:
            return await self._frontend.describe_cluster(request)
        node = self._endpoint
        return pb.DescribeClusterResponse(
            cluster_id=self._cluster_id,
            controller_id=node.node_id,
            brokers=[
                pb.DescribeClusterBroker(
                    broker_id=node.node_id, host=node.host, port=node.port, rack=node.rack
                )
            ],
        )

    # ---- Consumer groups ----------------------------------------------------------------

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The broker that coordinates ``group_id`` (the leader of its offsets partition)."""
        error: LograftError
        if not request.group_id:
            error = InvalidGroupIdError("group_id must not be empty")
        elif self._frontend is None:
            error = _no_quorum()
        else:
            return await self._frontend.find_coordinator(request.group_id)
        return pb.FindCoordinatorResponse(
            error_code=error.code, error_message=error.message, node_id=-1
        )

    def _group_service(self) -> GroupService:
        if self._groups is None:
            raise _no_quorum()
        return self._groups

    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupHeartbeatResponse:
        """Join, heartbeat or leave (KIP-848); the answer carries the member's assignment."""
        subscribed = (
            list(request.subscribed_topic_names.names)
            if request.HasField("subscribed_topic_names")
            else None
        )
        owned = (
            _partitions_of(request.owned_partitions.topics)
            if request.HasField("owned_partitions")
            else None
        )
        now_ms = self._now_ms()

        def heartbeat(coordinator: GroupCoordinator) -> Any:
            return coordinator.heartbeat(
                request.group_id,
                request.member_id,
                request.member_epoch,
                now_ms=now_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                subscribed_topics=subscribed,
                assignor=request.server_assignor or None,
                owned_partitions=owned,
                session_timeout_ms=request.session_timeout_ms or None,
                client_id=request.client_id or None,
                client_host=_client_host(context),
            )

        try:
            result = await self._group_service().call(
                request.group_id, heartbeat, lambda r: r.records
            )
        except LograftError as exc:
            return pb.ConsumerGroupHeartbeatResponse(
                member_id=request.member_id, member_epoch=-1, **_error_fields(exc)
            )
        response = pb.ConsumerGroupHeartbeatResponse(
            member_id=result.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval_ms=result.heartbeat_interval_ms,
        )
        if result.assignment is not None:
            response.assignment.SetInParent()
            response.assignment.topics.extend(_topic_partitions(result.assignment))
        return response

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetCommitResponse:
        """Commit offsets for a member (at its current epoch) or for an empty group."""
        offsets = {
            TopicPartition(topic.name, p.partition): OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch, p.metadata
            )
            for topic in request.topics
            for p in topic.partitions
        }
        now_ms = self._now_ms()
        try:
            result = await self._group_service().call(
                request.group_id,
                lambda c: c.commit_offsets(
                    request.group_id, request.member_id, request.member_epoch, offsets, now_ms
                ),
                lambda r: r.records,
            )
        except LograftError as exc:
            return pb.OffsetCommitResponse(**_error_fields(exc))
        response = pb.OffsetCommitResponse()
        _add_partition_errors(response.topics, result.errors)
        return response

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetFetchResponse:
        """Committed offsets of a group (-1: nothing committed)."""
        wanted = _partitions_of(request.topics) if request.topics else None
        try:
            found = self._group_service().read(
                request.group_id, lambda c: c.fetch_offsets(request.group_id, wanted)
            )
        except LograftError as exc:
            return pb.OffsetFetchResponse(**_error_fields(exc))
        response = pb.OffsetFetchResponse()
        by_topic: dict[str, pb.OffsetFetchTopic] = {}
        for tp, value in sorted(found.items()):
            topic_response = by_topic.get(tp.topic)
            if topic_response is None:
                topic_response = by_topic[tp.topic] = response.topics.add(name=tp.topic)
            if value is None:
                topic_response.partitions.add(
                    partition=tp.partition, committed_offset=-1, committed_leader_epoch=-1
                )
            else:
                topic_response.partitions.add(
                    partition=tp.partition,
                    committed_offset=value.offset,
                    committed_leader_epoch=value.leader_epoch,
                    metadata=value.metadata,
                )
        return response

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        """The groups this broker coordinates (ask every broker for all of them)."""
        try:
            coordinators = self._group_service().all_coordinators()
        except LograftError as exc:
            return pb.ListGroupsResponse(**_error_fields(exc))
        response = pb.ListGroupsResponse()
        for coordinator in coordinators:
            for listing in coordinator.list_groups():
                response.groups.add(group_id=listing.group_id, state=listing.state.value)
        return response

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeGroupsResponse:
        """Members, epochs and assignments of the groups asked for."""
        response = pb.DescribeGroupsResponse()
        for group_id in request.group_ids:
            try:
                described = self._group_service().read(
                    group_id, functools.partial(_describe, group_id)
                )
            except LograftError as exc:
                response.groups.add(group_id=group_id, **_error_fields(exc))
                continue
            group = response.groups.add(
                group_id=group_id,
                state=described.state.value,
                group_epoch=described.group_epoch,
                assignment_epoch=described.assignment_epoch,
                assignor=described.assignor,
                coordinator_id=self._endpoint.node_id,
            )
            for member in described.members:
                group.members.add(
                    member_id=member.member_id,
                    client_id=member.client_id,
                    member_epoch=member.member_epoch,
                    subscribed_topic_names=list(member.subscribed_topics),
                    assignment=_topic_partitions(member.assignment),
                    target_assignment=_topic_partitions(member.target_assignment),
                    client_host=member.client_host,
                )
        return response

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupsResponse:
        """Delete groups without members, with their committed offsets."""
        response = pb.DeleteGroupsResponse()
        for group_id in request.group_ids:
            try:
                await self._group_service().call(
                    group_id, functools.partial(_delete_group, group_id), _records
                )
            except LograftError as exc:
                response.groups.add(group_id=group_id, **_error_fields(exc))
                continue
            response.groups.add(group_id=group_id)
        return response

    async def OffsetDelete(
        self, request: pb.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetDeleteResponse:
        """Delete committed offsets of topics the group's members do not subscribe to."""
        wanted = _partitions_of(request.topics)
        try:
            result = await self._group_service().call(
                request.group_id,
                lambda c: c.delete_offsets(request.group_id, wanted),
                lambda r: r.records,
            )
        except LograftError as exc:
            return pb.OffsetDeleteResponse(**_error_fields(exc))
        response = pb.OffsetDeleteResponse()
        _add_partition_errors(response.topics, result.errors)
        return response


def _admin_needs_quorum(api: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{api} needs a controller quorum: start nodes with --controller-quorum-voters "
        "(lograft cluster up does); a standalone node keeps its topics in topics.json"
    )


def _no_quorum() -> InvalidRequestError:
    # Not retriable: a standalone node never gets a coordinator, so a consumer or an admin
    # call should fail at once with this message instead of retrying until it times out.
    return InvalidRequestError(
        "consumer groups need a controller quorum: start nodes with "
        "--controller-quorum-voters (lograft cluster up does)"
    )


def _client_host(context: grpc.aio.ServicerContext | None) -> str | None:
    """The caller's address as Kafka shows a member's host (``/127.0.0.1``); None if unknown.

    gRPC names peers ``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000`` or ``unix:path``.
    """
    peer = context.peer() if context is not None else None
    if not isinstance(peer, str):
        return None
    kind, _, address = peer.partition(":")
    address = urllib.parse.unquote(address)  # newer gRPC writes ipv6:%5B::1%5D:5000
    if kind == "ipv4":
        return "/" + address.rsplit(":", 1)[0]
    if kind == "ipv6":
        return "/" + address.rsplit(":", 1)[0].strip("[]")
    return None


def _add_partition_errors(
    topics: Any, errors: Mapping[TopicPartition, LograftError | None]
) -> None:
    """Fill ``repeated OffsetCommitTopicResponse``: per partition 0 or its error."""
    by_topic: dict[str, pb.OffsetCommitTopicResponse] = {}
    for tp, error in sorted(errors.items()):
        topic_response = by_topic.get(tp.topic)
        if topic_response is None:
            topic_response = by_topic[tp.topic] = topics.add(name=tp.topic)
        topic_response.partitions.add(
            partition=tp.partition,
            error_code=0 if error is None else error.code,
            error_message="" if error is None else error.message,
        )


def _partitions_of(topics: Any) -> list[TopicPartition]:
    return [TopicPartition(t.topic, p) for t in topics for p in t.partitions]


def _topic_partitions(partitions: Any) -> list[pb.TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]


def _describe(group_id: str, coordinator: GroupCoordinator) -> GroupDescription:
    return coordinator.describe(group_id)


def _delete_group(group_id: str, coordinator: GroupCoordinator) -> tuple[GroupRecord, ...]:
    return coordinator.delete_group(group_id)


def _records(records: tuple[GroupRecord, ...]) -> tuple[GroupRecord, ...]:
    return records
