"""Metadata records as typed values: what the controller appends and every node replays.

Each class mirrors one message of ``proto/metadata.proto`` (and one of Kafka's KRaft
records of the same name); :mod:`lograft.metadata.codec` converts between the two. Values
here are what the pure code works with, so a record can be built, compared and matched on
without touching protobuf.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

__all__ = [
    "NO_LEADER",
    "BrokerRegistrationChangeRecord",
    "ConfigRecord",
    "ConfigResourceType",
    "FenceBrokerRecord",
    "Listener",
    "MetadataRecord",
    "NoOpRecord",
    "PartitionChangeRecord",
    "PartitionRecord",
    "ProducerIdsRecord",
    "RegisterBrokerRecord",
    "RemoveTopicRecord",
    "TopicRecord",
    "UnfenceBrokerRecord",
    "UnregisterBrokerRecord",
]

NO_LEADER = -1
"""The leader of a partition that has none (offline), as in Kafka."""


@dataclass(frozen=True, slots=True)
class Listener:
    """An address of a broker (``name`` is the listener name, e.g. ``PLAINTEXT``)."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker incarnation registered; replaces any earlier registration of ``broker_id``."""

    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    listeners: tuple[Listener, ...]
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    """A broker was removed from the cluster."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    """A broker may no longer lead or be in an ISR (missed heartbeats, or shut down)."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    """A broker caught up with the metadata log and may lead and join ISRs again."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationChangeRecord:
    """A change of a broker's state; ``None`` fields are unchanged."""

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic was created (its partitions follow as :class:`PartitionRecord`)."""

    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition as created, with its full state."""

    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A change of a partition; ``None`` fields are unchanged.

    Replaying it bumps the partition epoch by one, and the leader epoch by one when
    ``leader`` is given (Kafka's rule: epochs are implied, so a record cannot move them back).
    """

    topic_id: uuid.UUID
    partition_id: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """A topic was deleted, with its partitions and its configs."""

    topic_id: uuid.UUID


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource types, with Kafka's numbers."""

    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A config of a topic or broker was set (``value``) or deleted (``value is None``)."""

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids went to a broker; the next block starts at ``next_producer_id``."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class NoOpRecord:
    """Changes nothing but the offset (written by a newly elected active controller)."""


MetadataRecord = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerRegistrationChangeRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | ProducerIdsRecord
    | NoOpRecord
)
"""Any metadata record."""
