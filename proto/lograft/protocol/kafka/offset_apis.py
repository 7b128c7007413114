"""Kafka's coordinator and offset APIs: FindCoordinator, OffsetCommit, OffsetFetch, translated.

Each becomes the ``lograft.v1`` request the Broker service's own handler answers: the group
coordinator's rules (which broker coordinates a key, who may commit with which epoch) stay in
the coordinator. Without the classic group protocol (JoinGroup, SyncGroup: not served yet) a
Kafka client commits as a consumer outside any group generation does (generation -1, no
member id), which the coordinator accepts for a group with no members, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from lograft.protocol.kafka.frames import BrokerCall, RequestHeader
from lograft.protocol.wire import broker_pb2 as pb

__all__ = ["find_coordinator", "offset_commit", "offset_fetch"]


async def find_coordinator(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """The coordinator of a group (key type 0) or transactional id (1); from version 4 of
    several keys at once."""
    key_type = request.get("key_type", 0)
    batched = header.api_version >= 4
    keys = request["coordinator_keys"] if batched else [request["key"]]
    coordinators = []
    for key in keys:
        answer: pb.FindCoordinatorResponse = await broker(
            "FindCoordinator", pb.FindCoordinatorRequest(group_id=key, key_type=key_type)
        )
        coordinators.append(
            {
                "key": key,
                "node_id": answer.node_id if not answer.error_code else -1,
                "host": answer.host,
                "port": answer.port if not answer.error_code else -1,
                "error_code": answer.error_code,
                "error_message": answer.error_message or None,
            }
        )
    if batched:
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    return {"throttle_time_ms": 0, **{k: v for k, v in coordinators[0].items() if k != "key"}}


async def offset_commit(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """Commit offsets for a group; a request-wide refusal is each partition's error."""
    answer: pb.OffsetCommitResponse = await broker(
        "OffsetCommit",
        pb.OffsetCommitRequest(
            group_id=request["group_id"],
            member_id=request.get("member_id", ""),
            member_epoch=request.get("generation_id_or_member_epoch", -1),
            topics=[
                pb.OffsetCommitTopic(
                    name=topic["name"],
                    partitions=[
                        pb.OffsetCommitPartition(
                            partition=p["partition_index"],
                            committed_offset=p["committed_offset"],
                            committed_leader_epoch=p.get("committed_leader_epoch", -1),
                            metadata=p.get("committed_metadata") or "",
                        )
                        for p in topic["partitions"]
                    ],
                )
                for topic in request["topics"]
            ],
        ),
    )
    errors = {
        (topic.name, p.partition): p.error_code for topic in answer.topics for p in topic.partitions
    }
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": answer.error_code
                        or errors.get((topic["name"], p["partition_index"]), 0),
                    }
                    for p in topic["partitions"]
                ],
            }
            for topic in request["topics"]
        ],
    }


async def offset_fetch(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    """The committed offsets of one group (versions 1-7) or several (8+)."""
    if header.api_version < 8:
        group = await _group_offsets(broker, request["group_id"], request["topics"], request)
        return {"throttle_time_ms": 0, "topics": group["topics"], "error_code": group["error_code"]}
    groups = [
        await _group_offsets(broker, g["group_id"], g["topics"], request) for g in request["groups"]
    ]
    return {"throttle_time_ms": 0, "groups": groups}


async def _group_offsets(
    broker: BrokerCall,
    group_id: str,
    topics: list[dict[str, Any]] | None,
    request: dict[str, Any],
) -> dict[str, Any]:
    answer: pb.OffsetFetchResponse = await broker(
        "OffsetFetch",
        pb.OffsetFetchRequest(
            group_id=group_id,
            topics=[
                pb.TopicPartitions(topic=t["name"], partitions=t["partition_indexes"])
                for t in topics or ()
            ],
            require_stable=request.get("require_stable", False),
        ),
    )
    return {
        "group_id": group_id,
        "error_code": answer.error_code,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "committed_offset": p.committed_offset,
                        "committed_leader_epoch": p.committed_leader_epoch,
                        "metadata": p.metadata,
                        "error_code": p.error_code,
                    }
                    for p in topic.partitions
                ],
            }
            for topic in answer.topics
        ],
    }
