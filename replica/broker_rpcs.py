"""What the parts of the broker's client API (``lograft.v1.Broker``) share.

:class:`~replica.broker_service.BrokerService` is composed of one class per concern
(:mod:`replica.data_plane_rpcs`, :mod:`replica.admin_rpcs`, :mod:`replica.group_rpcs`);
each builds on :class:`BrokerRpcs`, which holds what they read: the logs, this broker's
endpoint, the clock, and, in a quorum, the :class:`ClusterFrontend`, the group service and the
transaction service.

A node serves the broker API on each of its listeners with one servicer per listener (gRPC
does not tell a servicer which port a call arrived on); the servicers share the node's state,
and each answers with the brokers' addresses on its own listener.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from lograft.protocol.errors import LograftError
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.clocks import interval_clock_ms, wall_clock_ms
from replica.group_service import GroupService
from replica.log_manager import LogManager
from replica.producer_ids import LocalProducerIdBlocks, ProducerIdAllocator
from replica.txn_service import TransactionService

__all__ = [
    "BrokerEndpoint",
    "BrokerRpcs",
    "ClusterFrontend",
    "error_fields",
    "partitions_of",
    "topic_partitions",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """How clients on one listener reach this broker."""

    node_id: int
    host: str
    port: int
    rack: str = ""
    listener: str = "PLAINTEXT"
    """The listener's name (Kafka's ``listeners``): answers give addresses on this one."""


class ClusterFrontend(Protocol):
    """Where a broker that is part of a controller quorum gets cluster-wide answers."""

    async def metadata(self, request: pb.MetadataRequest, listener: str) -> pb.MetadataResponse:
        """Brokers (their addresses on ``listener``), topics and partitions from the image."""
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

    async def find_coordinator(
        self, key: str, listener: str, key_type: int = 0
    ) -> pb.FindCoordinatorResponse:
        """The broker coordinating ``key`` (a group, or with ``key_type`` 1 a transactional
        id), its address on ``listener``."""
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
        self, request: pb.DescribeClusterRequest, listener: str
    ) -> pb.DescribeClusterResponse:
        """Cluster id, active controller and brokers (addresses on ``listener``)."""
        ...


def error_fields(exc: LograftError) -> dict[str, Any]:
    """``error_code`` and ``error_message`` of a response message, from ``exc``."""
    return {"error_code": exc.code, "error_message": exc.message}


def partitions_of(topics: Any) -> list[TopicPartition]:
    """The partitions a ``repeated TopicPartitions`` field names."""
    return [TopicPartition(t.topic, p) for t in topics for p in t.partitions]


def topic_partitions(partitions: Iterable[TopicPartition]) -> list[pb.TopicPartitions]:
    """``partitions`` as ``TopicPartitions`` messages, by topic, sorted."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]


class BrokerRpcs:
    """The state of the broker servicer; its parts subclass this (one instance per listener).

    ``local_producer_ids`` (a standalone node's producer-id blocks) must be shared by the
    servicers of one node's listeners; by default each instance makes its own.
    """

    def __init__(
        self,
        logs: LogManager,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        now_ms: Callable[[], int] = wall_clock_ms,
        frontend: ClusterFrontend | None = None,
        groups: GroupService | None = None,
        local_producer_ids: ProducerIdAllocator | None = None,
        interval_clock_ms: Callable[[], int] = interval_clock_ms,
        transactions: TransactionService | None = None,
    ) -> None:
        self._logs = logs
        self._transactions = transactions
        self._endpoint = endpoint
        self._cluster_id = cluster_id
        self._now_ms = now_ms
        self._interval_clock_ms = interval_clock_ms
        self._frontend = frontend
        self._groups = groups
        self._local_producer_ids = local_producer_ids or ProducerIdAllocator(
            LocalProducerIdBlocks(logs.data_dir)
        )
