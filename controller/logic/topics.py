"""CreateTopics, DeleteTopics and CreatePartitions, validated against the image and its brokers.

Each topic of a request succeeds or fails on its own, as in Kafka; the records of all the
topics that succeed go into one batch.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from controller.logic.decision import DEFAULT_CONFIG, ControllerConfig, Decision
from controller.logic.placement import PlacementBroker, place_replicas
from lograft.metadata.image import MetadataImage
from lograft.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from lograft.metadata.topic_configs import validate_topic_configs
from lograft.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LograftError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import MAX_PARTITIONS, validate_topic_name

__all__ = [
    "CreatePartitionsResult",
    "CreateTopicResult",
    "DeleteTopicResult",
    "NewPartitions",
    "NewTopic",
    "create_partitions",
    "create_topics",
    "delete_topics",
]

# Kafka reserves these: the zero id means "no topic", and 0..01 is the metadata topic's.
_RESERVED_TOPIC_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})
# Groups are mapped to its partitions by a hash of the group id modulo their count: more
# partitions would move every group's coordinator and orphan its committed offsets.
_OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create; -1 takes ``num.partitions`` / ``default.replication.factor``."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow ``topic`` to ``total_count`` partitions.

    ``assignments`` (Kafka's manual assignment) lists the replicas of each new partition,
    preferred leader first; None lets the controller place them.
    """

    topic: str
    total_count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    """One topic's outcome: grown (``error`` None) or refused with a typed error."""

    topic: str
    error: LograftError | None


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


def _requested_sizes(topic: NewTopic, config: ControllerConfig) -> tuple[int, int]:
    """A new topic's partition count and replication factor; -1 asks for the default."""
    num_partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    replication_factor = (
        config.default_replication_factor
        if topic.replication_factor == -1
        else topic.replication_factor
    )
    return num_partitions, replication_factor


def _check_new_topic(
    image: MetadataImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    *,
    listed: int,
    collision_keys: Mapping[str, str],
    live_brokers: int,
) -> None:
    """Raise the typed error of the first check of :func:`create_topics` a topic fails.

    ``listed`` is how often the request names it, ``collision_keys`` the names taken so far
    by their :func:`_collision_key`, ``live_brokers`` the number of live, unfenced brokers.
    """
    if listed > 1:
        raise InvalidRequestError(f"topic {name!r} is listed more than once")
    validate_topic_name(name)
    if name in image.topics_by_name:
        raise TopicAlreadyExistsError(f"topic {name!r} already exists")
    other = collision_keys.get(_collision_key(name))
    if other is not None:
        raise InvalidTopicError(f"topic {name!r} collides with {other!r} ('.' and '_' are alike)")
    if not 1 <= num_partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"num_partitions must be between 1 and {MAX_PARTITIONS}, got {num_partitions}"
        )
    if replication_factor < 1:
        raise InvalidReplicationFactorError(
            f"replication factor must be at least 1, got {replication_factor}"
        )
    if replication_factor > live_brokers:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{live_brokers} live unfenced brokers"
        )


def _topic_records(
    name: str,
    topic_id: uuid.UUID,
    placements: Sequence[tuple[int, ...]],
    configs: Mapping[str, str],
) -> list[MetadataRecord]:
    """A new topic's TopicRecord, one PartitionRecord a partition, a ConfigRecord a config."""
    records: list[MetadataRecord] = [TopicRecord(name, topic_id)]
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
    for key, value in sorted(configs.items()):
        records.append(ConfigRecord(ConfigResourceType.TOPIC, name, key, value))
    return records


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
    counts = Counter(topic.name for topic in topics)
    brokers = [PlacementBroker(b.broker_id, b.rack) for b in image.active_brokers()]
    taken_ids = set(image.topics)
    collision_keys = {_collision_key(name): name for name in image.topics_by_name}
    records: list[MetadataRecord] = []
    results: list[CreateTopicResult] = []
    for topic in topics:
        num_partitions, replication_factor = _requested_sizes(topic, config)
        try:
            _check_new_topic(
                image,
                topic.name,
                num_partitions,
                replication_factor,
                listed=counts[topic.name],
                collision_keys=collision_keys,
                live_brokers=len(brokers),
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
        topic_id = None
        if not validate_only:
            topic_id = _new_topic_id(rng, taken_ids)
            records.extend(_topic_records(topic.name, topic_id, placements, configs))
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


def create_partitions(
    image: MetadataImage,
    topics: Sequence[NewPartitions],
    rng: random.Random,
    *,
    validate_only: bool = False,
) -> Decision[list[CreatePartitionsResult]]:
    """Add partitions to existing topics: one PartitionRecord per new partition.

    Checks, per topic, in Kafka's order: a topic listed twice (``INVALID_REQUEST``), an
    unknown topic (``UNKNOWN_TOPIC_OR_PARTITION``), ``__consumer_offsets``
    (``INVALID_REQUEST``: groups are hashed onto its partitions), a count that does not grow
    or exceeds MAX_PARTITIONS (``INVALID_PARTITIONS``), manual assignments that are not one
    per new partition, not of the topic's replication factor, repeat or name unregistered
    brokers, or have no active broker (``INVALID_REPLICA_ASSIGNMENT``), and too few active
    brokers for the replication factor (``INVALID_REPLICATION_FACTOR``). New partitions take
    the replication factor of the topic's existing ones; placed replicas all start in the
    ISR and the first leads (manual ones: the active replicas, in order), at epoch 0.
    ``validate_only`` checks and answers but appends nothing.
    """
    counts: dict[str, int] = {}
    for request in topics:
        counts[request.topic] = counts.get(request.topic, 0) + 1
    brokers = [PlacementBroker(b.broker_id, b.rack) for b in image.active_brokers()]
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    for request in topics:
        try:
            if counts[request.topic] > 1:
                raise InvalidRequestError(f"topic {request.topic!r} is listed more than once")
            new_records = _new_partitions(image, request, brokers, rng)
        except LograftError as error:
            results.append(CreatePartitionsResult(request.topic, error))
            continue
        if not validate_only:
            records.extend(new_records)
        results.append(CreatePartitionsResult(request.topic, None))
    return Decision(tuple(records), results)


def _new_partitions(
    image: MetadataImage,
    request: NewPartitions,
    brokers: Sequence[PlacementBroker],
    rng: random.Random,
) -> list[PartitionRecord]:
    topic = image.topic(request.topic)
    if topic is None:
        raise UnknownTopicOrPartitionError(f"topic {request.topic!r} does not exist")
    if topic.name == _OFFSETS_TOPIC:
        raise InvalidRequestError(
            "The number of partitions for the offsets topic cannot be changed."
        )
    current = len(topic.partitions)
    if request.total_count < current:
        raise InvalidPartitionsError(
            f"The topic {topic.name} currently has {current} partition(s); "
            f"{request.total_count} would not be an increase."
        )
    if request.total_count == current:
        raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
    if request.total_count > MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"a topic may have at most {MAX_PARTITIONS} partitions, not {request.total_count}"
        )
    additional = request.total_count - current
    replication_factor = len(next(iter(topic.partitions.values())).replicas)
    first_id = max(topic.partitions) + 1
    if request.assignments is not None:
        if len(request.assignments) != additional:
            raise InvalidReplicaAssignmentError(
                f"Attempted to add {additional} additional partition(s), but only "
                f"{len(request.assignments)} assignment(s) were specified."
            )
        placements: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for index, replicas in enumerate(request.assignments):
            isr = _check_manual_assignment(image, replicas, replication_factor)
            if not isr:
                raise InvalidReplicaAssignmentError(
                    "All brokers specified in the manual partition assignment for partition "
                    f"{first_id + index} are fenced or in controlled shutdown."
                )
            placements.append((replicas, isr))
    else:
        if replication_factor > len(brokers):
            raise InvalidReplicationFactorError(
                f"Unable to replicate the partition {replication_factor} time(s): the topic's "
                f"replication factor cannot be reached because only {len(brokers)} broker(s) "
                "are active (registered, unfenced, not shutting down)."
            )
        # The new partitions are placed like a new topic's (random start), not relative to
        # where the existing leaders are, as Kafka's placer does.
        placed = place_replicas(brokers, request.total_count, replication_factor, rng)[current:]
        placements = [(replicas, replicas) for replicas in placed]
    return [
        PartitionRecord(
            topic_id=topic.topic_id,
            partition_id=first_id + index,
            replicas=replicas,
            isr=isr,
            leader=isr[0],
            leader_epoch=0,
            partition_epoch=0,
        )
        for index, (replicas, isr) in enumerate(placements)
    ]


def _check_manual_assignment(
    image: MetadataImage, replicas: tuple[int, ...], replication_factor: int
) -> tuple[int, ...]:
    """Kafka's validateManualPartitionAssignment; returns the active replicas (the ISR)."""
    if not replicas:
        raise InvalidReplicaAssignmentError(
            "The manual partition assignment includes an empty replica list."
        )
    seen: set[int] = set()
    for broker_id in replicas:
        if broker_id in seen:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        seen.add(broker_id)
        if image.broker(broker_id) is None:
            raise InvalidReplicaAssignmentError(
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered."
            )
    if len(replicas) != replication_factor:
        raise InvalidReplicaAssignmentError(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )
    return tuple(b for b in replicas if (broker := image.broker(b)) is not None and broker.active)
