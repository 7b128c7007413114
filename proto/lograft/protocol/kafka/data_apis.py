"""Kafka's data-plane APIs: Produce, Fetch, ListOffsets and InitProducerId, translated.

Each becomes the ``lograft.v1`` request of the same name, which the Broker service's own
handler answers (acks, ``min.insync.replicas``, idempotent sequencing, the high watermark,
the last stable offset and aborted transactions are its rules); record batches pass through
as the bytes the client sent and the log holds.

Fetch is served without fetch sessions (KIP-227 allows it): every answer has session id 0,
so a client sends its full partition list each time.
"""

from __future__ import annotations

from typing import Any

from lograft.protocol.kafka.frames import BrokerCall, RequestHeader
from lograft.protocol.wire import broker_pb2 as pb

__all__ = ["fetch", "init_producer_id", "list_offsets", "produce"]


async def produce(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any] | None:
    """Produce: appended by the partitions' leaders; ``None`` (no answer) for ``acks=0``."""
    answer: pb.ProduceResponse = await broker(
        "Produce",
        pb.ProduceRequest(
            acks=request["acks"],
            timeout_ms=request["timeout_ms"],
            transactional_id=request.get("transactional_id") or "",
            topics=[
                pb.TopicProduceData(
                    name=topic["name"],
                    partitions=[
                        pb.PartitionProduceData(
                            partition=data["index"], records=bytes(data["records"] or b"")
                        )
                        for data in topic["partition_data"]
                    ],
                )
                for topic in request["topic_data"]
            ],
        ),
    )
    if request["acks"] == 0:
        return None
    return {
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    {
                        "index": p.partition,
                        "error_code": p.error_code,
                        "base_offset": p.base_offset,
                        "log_append_time_ms": p.log_append_time_ms,
                        "log_start_offset": p.log_start_offset,
                        "record_errors": [],
                        "error_message": p.error_message or None,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in answer.topics
        ],
        "throttle_time_ms": 0,
    }


async def fetch(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """Fetch, as a consumer's (a Kafka follower is not served here), sessionless."""
    answer: pb.FetchResponse = await broker(
        "Fetch",
        pb.FetchRequest(
            max_wait_ms=request["max_wait_ms"],
            min_bytes=request["min_bytes"],
            max_bytes=request.get("max_bytes", 0),
            replica_id=-1,
            isolation_level=request.get("isolation_level", 0),
            topics=[
                pb.FetchTopic(
                    name=topic["topic"],
                    partitions=[
                        pb.FetchPartition(
                            partition=p["partition"],
                            fetch_offset=p["fetch_offset"],
                            partition_max_bytes=p["partition_max_bytes"],
                            current_leader_epoch=-1,
                        )
                        for p in topic["partitions"]
                    ],
                )
                for topic in request["topics"]
            ],
        ),
    )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": p.error_code,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in p.aborted_transactions
                        ],
                        "preferred_read_replica": -1,
                        "records": p.records,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in answer.topics
        ],
    }


async def list_offsets(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or by timestamp."""
    answer: pb.ListOffsetsResponse = await broker(
        "ListOffsets",
        pb.ListOffsetsRequest(
            isolation_level=request.get("isolation_level", 0),
            topics=[
                pb.ListOffsetsTopic(
                    name=topic["name"],
                    partitions=[
                        pb.ListOffsetsPartition(
                            partition=p["partition_index"], timestamp=p["timestamp"]
                        )
                        for p in topic["partitions"]
                    ],
                )
                for topic in request["topics"]
            ],
        ),
    )
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": p.error_code,
                        "timestamp": p.timestamp,
                        "offset": p.offset,
                        "leader_epoch": p.leader_epoch,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in answer.topics
        ],
    }


async def init_producer_id(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """InitProducerId: an idempotent producer's id, or a transactional id's (new epoch)."""
    answer: pb.InitProducerIdResponse = await broker(
        "InitProducerId",
        pb.InitProducerIdRequest(
            transactional_id=request.get("transactional_id") or "",
            transaction_timeout_ms=request["transaction_timeout_ms"],
        ),
    )
    return {
        "throttle_time_ms": 0,
        "error_code": answer.error_code,
        "producer_id": answer.producer_id,
        "producer_epoch": answer.producer_epoch,
    }
