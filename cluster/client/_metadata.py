"""The cluster metadata a client caches: brokers, topics, partitions and their leaders.

:class:`ClusterMetadata` is an immutable snapshot, replaced whole by each
``Connections.refresh_metadata``; :func:`topic_info` reads one topic of a Metadata response.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lograft.protocol import errors
from lograft.protocol.errors import LeaderNotAvailableError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["BrokerInfo", "ClusterMetadata", "PartitionInfo", "TopicInfo", "topic_info"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as the metadata lists it."""

    node_id: int
    host: str
    port: int
    rack: str = ""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition as the metadata describes it; ``leader`` is -1 when there is none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the metadata describes it; ``error_code`` is non-zero for a bad topic."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """An immutable snapshot of what the client knows about the cluster."""

    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str = ""

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions of ``topic``, or ``None`` if unknown or in error."""
        info = self.topics.get(topic)
        if info is None or info.error_code != 0 or not info.partitions:
            return None
        return len(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` whose leader is a known broker."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return [p.partition for p in info.partitions if p.leader in self.brokers]

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        """The metadata of one partition, if known."""
        info = self.topics.get(topic)
        if info is None:
            return None
        for p in info.partitions:
            if p.partition == partition:
                return p
        return None

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader's node id; raises the retriable error that says why there is none."""
        info = self.topics.get(tp.topic)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} not in metadata")
        if info.error_code != 0:
            raise errors.error_for_code(info.error_code, info.error_message or tp.topic)
        part = self.partition(tp.topic, tp.partition)
        if part is None:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition}")
        if part.leader < 0 or part.leader not in self.brokers:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition}")
        return part.leader


def topic_info(t: Any) -> TopicInfo:
    """A ``TopicMetadata`` of a Metadata response as a ``TopicInfo``, partitions sorted."""
    partitions = tuple(
        sorted(
            (
                PartitionInfo(
                    topic=t.name,
                    partition=p.partition,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    offline_replicas=tuple(p.offline_replicas),
                    error_code=p.error_code,
                )
                for p in t.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    return TopicInfo(
        name=t.name,
        partitions=partitions,
        configs=dict(t.configs),
        error_code=t.error_code,
        error_message=t.error_message,
    )
