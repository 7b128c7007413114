"""The Kafka APIs a listener serves, each a translation to the Broker service and back.

Every rule stays where it is: a Kafka request becomes the ``lograft.v1`` request the gRPC and
framed paths send, the Broker service's own handler answers it, and the answer is written in
Kafka's shape. Nothing here decides anything about topics, partitions or leaders.

Served so far: ApiVersions (0-4) and Metadata (0-12), what a client needs to connect and find
the cluster's brokers, topics and leaders (``kcat -L``, ``list_topics``), and the data plane
(:mod:`lograft.protocol.kafka.data_apis`): Produce, Fetch, ListOffsets, InitProducerId; and a
group's coordinator and offsets (:mod:`lograft.protocol.kafka.offset_apis`). The versions are
Kafka 4's minimums (KIP-896) up to what librdkafka 2.x, kafka-python and aiokafka ask for;
Metadata 13 only adds a top-level error code, and waits for the APIs that need it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lograft.protocol.kafka.data_apis import fetch, init_producer_id, list_offsets, produce
from lograft.protocol.kafka.frames import BrokerCall, RequestHeader
from lograft.protocol.kafka.offset_apis import find_coordinator, offset_commit, offset_fetch
from lograft.protocol.kafka.schema import MessageSchema, message
from lograft.protocol.wire import broker_pb2 as pb

__all__ = ["SERVED", "BrokerCall", "ServedApi", "served_api"]

UNSUPPORTED_VERSION = 35
NO_AUTHORIZED_OPERATIONS = -(2**31)
"""Kafka's value for "authorized operations not asked for"."""
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class ServedApi:
    """One API: its request and response definitions, the versions served, its handler."""

    key: int
    name: str
    min_version: int
    max_version: int
    serve: Callable[[RequestHeader, dict[str, Any], BrokerCall], Awaitable[dict[str, Any] | None]]
    """Answers a decoded request (``None``: no answer, as for Produce with ``acks=0``)."""

    @property
    def request(self) -> MessageSchema:
        return message(f"{self.name}Request")

    @property
    def response(self) -> MessageSchema:
        return message(f"{self.name}Response")


async def _api_versions(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    return api_versions_answer(0)


def api_versions_answer(error_code: int) -> dict[str, Any]:
    """The ApiVersions answer: every API served with its versions (and ``error_code``)."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in SERVED.values()
        ],
        "throttle_time_ms": 0,
    }


async def _metadata(
    header: RequestHeader, request: dict[str, Any], broker: BrokerCall
) -> dict[str, Any]:
    asked = request.get("topics")
    every_topic = asked is None or (header.api_version == 0 and not asked)
    names = [] if every_topic else [t["name"] for t in asked or () if t.get("name")]
    answer: pb.MetadataResponse = await broker("Metadata", pb.MetadataRequest(topics=names))
    topics = [_topic(topic) for topic in answer.topics]
    by_id = [t for t in asked or () if not t.get("name") and t.get("topic_id")]
    if by_id:  # topics named by id only (Metadata 10+): found among all of them
        everything: pb.MetadataResponse = await broker("Metadata", pb.MetadataRequest())
        known = {topic.topic_id: topic for topic in everything.topics}
        for wanted in by_id:
            found = known.get(wanted["topic_id"])
            topics.append(
                _topic(found)
                if found is not None
                else {"error_code": 100, "name": None, "topic_id": wanted["topic_id"]}
            )
    return {
        "throttle_time_ms": 0,
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack or None}
            for b in answer.brokers
        ],
        "cluster_id": answer.cluster_id or None,
        "controller_id": answer.controller_id,
        "topics": topics,
        "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _topic(topic: pb.TopicMetadata) -> dict[str, Any]:
    return {
        "error_code": topic.error_code,
        "name": topic.name,
        "topic_id": bytes(topic.topic_id) or bytes(16),
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": [
            {
                "error_code": p.error_code,
                "partition_index": p.partition,
                "leader_id": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replica_nodes),
                "isr_nodes": list(p.isr_nodes),
                "offline_replicas": list(p.offline_replicas),
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


SERVED: Mapping[int, ServedApi] = {
    api.key: api
    for api in (
        ServedApi(18, "ApiVersions", 0, 4, _api_versions),
        ServedApi(3, "Metadata", 0, 12, _metadata),
        # Topics by name: Produce 13 and Fetch 13 name them by id only.
        ServedApi(0, "Produce", 3, 12, produce),
        ServedApi(1, "Fetch", 4, 12, fetch),
        ServedApi(2, "ListOffsets", 1, 7, list_offsets),
        ServedApi(22, "InitProducerId", 0, 5, init_producer_id),
        ServedApi(10, "FindCoordinator", 0, 6, find_coordinator),
        # Topics by name: OffsetCommit 10 and OffsetFetch 10 name them by id only.
        ServedApi(8, "OffsetCommit", 2, 9, offset_commit),
        ServedApi(9, "OffsetFetch", 1, 9, offset_fetch),
    )
}
"""API key → what is served of it; ApiVersions answers with this table."""


def served_api(api_key: int) -> ServedApi | None:
    """The API of ``api_key`` if this listener serves it."""
    return SERVED.get(api_key)
