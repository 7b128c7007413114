"""CreateTopics and DeleteTopics, validated against the image and its live brokers.

Each topic of a request succeeds or fails on its own, as in Kafka; the records of all the
topics that succeed go into one batch.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from cluster.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LograftError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from controller.logic.decision import DEFAULT_CONFIG, ControllerConfig, Decision
from controller.logic.placement import PlacementBroker, place_replicas
from controller.logic.topic_configs import validate_topic_configs
from controller.metadata.image import MetadataImage
from controller.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from replica.topic_partition import MAX_PARTITIONS, validate_topic_name

__all__ = [
    "CreateTopicResult",
    "DeleteTopicResult",
    "NewTopic",
    "create_topics",
    "delete_topics",
]

# Kafka reserves these: the zero id means "no topic", and 0..01 is the metadata topic's.
_RESERVED_TOPIC_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 takes ``num.partitions`` / ``default.replication.factor``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    """One topic's outcome: created (``error`` None) or refused with a typed error."""

    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    error: LograftError | None


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """One topic's outcome: deleted (``error`` None) or refused with a typed error."""

    name: str
    topic_id: uuid.UUID | None
    error: LograftError | None


def _new_topic_id(rng: random.Random, taken: set[uuid.UUID]) -> uuid.UUID:
    while True:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        if topic_id not in taken and topic_id not in _RESERVED_TOPIC_IDS:
            taken.add(topic_id)
            return topic_id


def _collision_key(name: str) -> str:
    # Kafka refuses names that differ only by '.' vs '_': metric names would collide.
    return name.replace(".", "_")


def create_topics(
    image: MetadataImage,
    topics: Sequence[NewTopic],
    rng: random.Random,
    *,
    validate_only: bool = False,
    config: ControllerConfig = DEFAULT_CONFIG,
) -> Decision[list[CreateTopicResult]]:
    """Create topics: a TopicRecord, one PartitionRecord a partition, a ConfigRecord a config.

    Checks, per topic: a name given twice in the request (``INVALID_REQUEST``), the name
    (``INVALID_TOPIC_EXCEPTION``, also when it collides with an existing name up to '.' vs
    '_'), an existing topic (``TOPIC_ALREADY_EXISTS``), 1..MAX_PARTITIONS partitions
    (``INVALID_PARTITIONS``), a replication factor of at least 1 and at most the number of
    live, unfenced brokers (``INVALID_REPLICATION_FACTOR``), and the configs
    (``INVALID_CONFIG``). Replicas are placed by :func:`place_replicas` with ``rng``; every
    replica starts in the ISR and the first leads, at epoch 0. ``validate_only`` checks and
    answers but appends nothing.
    """
    counts: dict[str, int] = {}
    for topic in topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    brokers = [PlacementBroker(b.broker_id, b.rack) for b in image.active_brokers()]
    taken_ids = set(image.topics)
    collision_keys = {_collision_key(name): name for name in image.topics_by_name}
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    for topic in topics:
        num_partitions = (
            config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        )
        replication_factor = (
            config.default_replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError(f"topic {topic.name!r} is listed more than once")
            validate_topic_name(topic.name)
            if topic.name in image.topics_by_name:
                raise TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
            other = collision_keys.get(_collision_key(topic.name))
            if other is not None:
                raise InvalidTopicError(
                    f"topic {topic.name!r} collides with {other!r} ('.' and '_' are alike)"
                )
            if not 1 <= num_partitions <= MAX_PARTITIONS:
                raise InvalidPartitionsError(
                    f"num_partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}"
                )
            if replication_factor < 1:
                raise InvalidReplicationFactorError(
                    f"replication factor must be at least 1, got {replication_factor}"
                )
            if replication_factor > len(brokers):
                raise InvalidReplicationFactorError(
                    f"replication factor {replication_factor} is larger than the "
                    f"{len(brokers)} live unfenced brokers"
                )
            configs = validate_topic_configs(topic.configs)
            placements = place_replicas(brokers, num_partitions, replication_factor, rng)
        except LograftError as error:
            results.append(
                CreateTopicResult(
                    topic.name,
                    None,
                    num_partitions,
                    replication_factor,
                    MappingProxyType({}),
                    error,
                )
            )
            continue
        collision_keys[_collision_key(topic.name)] = topic.name
        if validate_only:
            results.append(
                CreateTopicResult(
                    topic.name,
                    None,
                    num_partitions,
                    replication_factor,
                    MappingProxyType(configs),
                    None,
                )
            )
            continue
        topic_id = _new_topic_id(rng, taken_ids)
        records.append(TopicRecord(topic.name, topic_id))
        for partition_id, replicas in enumerate(placements):
            records.append(
                PartitionRecord(
                    topic_id=topic_id,
                    partition_id=partition_id,
                    replicas=replicas,
                    isr=replicas,
                    leader=replicas[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
        for name, value in sorted(configs.items()):
            records.append(ConfigRecord(ConfigResourceType.TOPIC, topic.name, name, value))
        results.append(
            CreateTopicResult(
                topic.name,
                topic_id,
                num_partitions,
                replication_factor,
                MappingProxyType(configs),
                None,
            )
        )
    return Decision(tuple(records), results)


def delete_topics(image: MetadataImage, names: Sequence[str]) -> Decision[list[DeleteTopicResult]]:
    """Delete topics by name: one RemoveTopicRecord each (partitions and configs go too).

    ``UNKNOWN_TOPIC_OR_PARTITION`` for a topic that does not exist, ``INVALID_REQUEST`` for a
    name listed twice.
    """
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    for name in names:
        topic = image.topic(name)
        if counts[name] > 1:
            error: LograftError = InvalidRequestError(f"topic {name!r} is listed more than once")
            results.append(DeleteTopicResult(name, None, error))
        elif topic is None:
            error = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            results.append(DeleteTopicResult(name, None, error))
        else:
            records.append(RemoveTopicRecord(topic.topic_id))
            results.append(DeleteTopicResult(name, topic.topic_id, None))
    return Decision(tuple(records), results)
