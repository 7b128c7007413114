"""What every controller decision returns, and the controller's own settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from lograft.metadata.records import MetadataRecord
from lograft.protocol.topic_partition import TopicPartition

__all__ = ["DEFAULT_CONFIG", "ControllerConfig", "Decision"]

R_co = TypeVar("R_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Decision(Generic[R_co]):
    """The outcome of a controller decision.

    ``records`` are to be appended to the metadata log as one batch (atomically); the image
    changes only when they are committed and replayed. ``result`` is what to answer once
    they are committed (straight away when there are no records). ``unclean_elections``
    lists partitions that got a leader from outside the ISR (``unclean.leader.election
    .enable``): committed data may be lost there, and the shell must log each one loudly.
    """

    records: tuple[MetadataRecord, ...]
    result: R_co
    unclean_elections: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings, with Kafka's names and defaults."""

    broker_session_timeout_ms: int = 9000
    """``broker.session.timeout.ms``: a broker silent this long is fenced."""
    num_partitions: int = 1
    """``num.partitions``: partitions of a topic created without a count."""
    default_replication_factor: int = 1
    """``default.replication.factor``: replicas of a topic created without a factor."""
    producer_id_block_size: int = 1000
    """Producer ids handed to a broker per AllocateProducerIds (Kafka's block size)."""


DEFAULT_CONFIG = ControllerConfig()
"""Kafka's defaults."""
