"""The client API of a broker (``lograft.v1.Broker``): produce, fetch, offsets, metadata, topics.

Runs on the node's event loop. Record data is never decoded on the produce or fetch path:
batches are validated by header and CRC, given offsets in place, and appended; fetches hand
back log bytes. Per-partition failures are answered with Kafka's error codes; a request that
is malformed as a whole is refused with ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from cluster.errors import (
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
from replica.batch_header import iter_headers, validate_batches
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
    ) -> None:
        self._logs = logs
        self._endpoint = endpoint
        self._cluster_id = cluster_id
        self._now_ms = now_ms
        self._frontend = frontend
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
            if header.compression:
                check_compressed_records(buffer, header)
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

        async def settle(partition: Partition, offset: int) -> None:
            if partition.log.config.flush_policy == FlushPolicy.FSYNC:
                await partition.wait_flushed(offset)
            if acks == -1:
                await partition.wait_acks_all(offset)

        outcomes = await asyncio.gather(
            *(
                asyncio.wait_for(settle(partition, offset), timeout_s)
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
        # The time index finds the batch; the record is found inside it (off the hot path).
        data = partition.log.read(batch_offset, 1, partition.high_watermark)
        for header in iter_headers(data):
            for record in decode_records(data, header):
                if record.timestamp >= timestamp and record.offset >= batch_offset:
                    return record.offset, record.timestamp
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
