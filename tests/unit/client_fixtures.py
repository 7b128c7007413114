"""An in-memory single-node broker behind a real gRPC server, for the client's tests."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from lograft.protocol.batch_header import assign_offsets, iter_headers, validate_batches
from lograft.protocol.errors import (
    OffsetOutOfRangeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc


class FakeBroker(pb_grpc.BrokerServicer):  # type: ignore[misc]
    """An in-memory single-node broker speaking ``lograft.v1.Broker``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.port = 0
        self.topics: dict[str, int] = {}
        self.batches: dict[tuple[str, int], list[tuple[int, int, bytes]]] = {}
        self.end: dict[tuple[str, int], int] = {}
        self.produce_errors: deque[int] = deque()
        self.produce_requests = 0

    def add_topic(self, name: str, partitions: int) -> None:
        with self.cond:
            self.topics[name] = partitions
            for p in range(partitions):
                self.batches[(name, p)] = []
                self.end[(name, p)] = 0

    def Produce(self, request: Any, context: Any) -> Any:
        response = pb.ProduceResponse()
        with self.cond:
            self.produce_requests += 1
            for topic in request.topics:
                topic_response = response.topics.add(name=topic.name)
                for data in topic.partitions:
                    result = topic_response.partitions.add(
                        partition=data.partition, base_offset=-1, log_append_time_ms=-1
                    )
                    key = (topic.name, data.partition)
                    if key not in self.end:
                        result.error_code = UnknownTopicOrPartitionError.code
                        continue
                    if self.produce_errors:
                        result.error_code = self.produce_errors.popleft()
                        continue
                    buf = bytearray(data.records)
                    headers = validate_batches(buf, 1 << 30)
                    base = self.end[key]
                    self.end[key] = assign_offsets(buf, headers, base, 0)
                    for header in iter_headers(buf):
                        chunk = bytes(buf[header.position : header.position + header.size])
                        self.batches[key].append((header.base_offset, header.next_offset, chunk))
                    result.base_offset = base
            self.cond.notify_all()
        return response

    def Fetch(self, request: Any, context: Any) -> Any:
        with self.cond:
            response = self._read(request)
            if not any(p.records for t in response.topics for p in t.partitions):
                self.cond.wait(request.max_wait_ms / 1000.0)
                response = self._read(request)
        return response

    def _read(self, request: Any) -> Any:
        response = pb.FetchResponse()
        for topic in request.topics:
            topic_response = response.topics.add(name=topic.name)
            for wanted in topic.partitions:
                key = (topic.name, wanted.partition)
                result = topic_response.partitions.add(partition=wanted.partition)
                if key not in self.end:
                    result.error_code = UnknownTopicOrPartitionError.code
                    continue
                result.high_watermark = self.end[key]
                if wanted.fetch_offset > self.end[key]:
                    result.error_code = OffsetOutOfRangeError.code
                    continue
                chunks: list[bytes] = []
                size = 0
                for _, next_offset, chunk in self.batches[key]:
                    if next_offset <= wanted.fetch_offset:
                        continue
                    if chunks and size + len(chunk) > wanted.partition_max_bytes:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                result.records = b"".join(chunks)
        return response

    def ListOffsets(self, request: Any, context: Any) -> Any:
        response = pb.ListOffsetsResponse()
        with self.cond:
            for topic in request.topics:
                topic_response = response.topics.add(name=topic.name)
                for wanted in topic.partitions:
                    key = (topic.name, wanted.partition)
                    result = topic_response.partitions.add(partition=wanted.partition, offset=-1)
                    if key not in self.end:
                        result.error_code = UnknownTopicOrPartitionError.code
                    elif wanted.timestamp == -2:
                        result.offset = 0
                    else:
                        result.offset = self.end[key]
        return response

    def Metadata(self, request: Any, context: Any) -> Any:
        response = pb.MetadataResponse(
            cluster_id="fake",
            controller_id=1,
            brokers=[pb.BrokerMetadata(node_id=1, host="127.0.0.1", port=self.port)],
        )
        with self.cond:
            for name in list(request.topics) or sorted(self.topics):
                if name not in self.topics:
                    response.topics.add(name=name, error_code=UnknownTopicOrPartitionError.code)
                    continue
                topic = response.topics.add(name=name)
                topic.configs["retention.ms"] = "604800000"
                for p in range(self.topics[name]):
                    topic.partitions.add(partition=p, leader_id=1, replica_nodes=[1], isr_nodes=[1])
        return response

    def CreateTopics(self, request: Any, context: Any) -> Any:
        response = pb.CreateTopicsResponse()
        for topic in request.topics:
            result = response.topics.add(name=topic.name)
            if topic.name in self.topics:
                result.error_code = TopicAlreadyExistsError.code
            else:
                self.add_topic(topic.name, topic.num_partitions)
        return response

    def DeleteTopics(self, request: Any, context: Any) -> Any:
        response = pb.DeleteTopicsResponse()
        with self.cond:
            for name in request.topic_names:
                result = response.topics.add(name=name)
                if self.topics.pop(name, None) is None:
                    result.error_code = UnknownTopicOrPartitionError.code
        return response

    def InitProducerId(self, request: Any, context: Any) -> Any:
        # Idempotent producers ask for an id first; this fake does not check sequences.
        return pb.InitProducerIdResponse(producer_id=1000, producer_epoch=0)
