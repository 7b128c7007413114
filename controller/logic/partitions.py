"""Partition decisions asked for by brokers and operators: AlterPartition, preferred leaders.

Leader changes caused by brokers coming and going are planned in :mod:`.brokers`; here
the ISR changes a leader proposes (Kafka's AlterPartition, with its checks in Kafka's
order) and preferred-leader elections (Kafka's ElectLeaders with type PREFERRED).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.logic.brokers import check_broker_epoch
from controller.logic.decision import Decision
from lograft.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from lograft.metadata.records import MetadataRecord, PartitionChangeRecord
from lograft.protocol.errors import (
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    LograftError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "AlterPartitionRequest",
    "AlterPartitionResult",
    "ElectionResult",
    "alter_partition",
    "elect_preferred_leaders",
]


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A partition leader proposes a new ISR, based on the epochs it knows."""

    broker_id: int
    broker_epoch: int
    topic_id: uuid.UUID
    partition_id: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The partition state once the change is committed (the leader adopts its epochs)."""

    topic_id: uuid.UUID
    partition_id: int
    state: PartitionRegistration


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """Outcome of a preferred-leader election for one partition (``error`` None: elected)."""

    topic_partition: TopicPartition
    error: LograftError | None


def alter_partition(
    image: MetadataImage, request: AlterPartitionRequest
) -> Decision[AlterPartitionResult]:
    """Check and commit an ISR change proposed by the partition's leader.

    Errors, in Kafka's order: ``STALE_BROKER_EPOCH`` (the leader's broker epoch is not
    current), ``UNKNOWN_TOPIC_ID`` / ``UNKNOWN_TOPIC_OR_PARTITION``, ``NOT_CONTROLLER``
    (the request knows newer epochs than this image: we are behind), ``FENCED_LEADER_EPOCH``
    (older leader epoch), ``INVALID_REQUEST`` (not from the leader, or an ISR that is empty,
    has duplicates, is not within the replicas or lacks the leader),
    ``INVALID_UPDATE_VERSION`` (older partition epoch), ``INELIGIBLE_REPLICA`` (an ISR member
    is fenced, shutting down or not registered). An unchanged ISR appends nothing.
    """
    check_broker_epoch(image, request.broker_id, request.broker_epoch)
    topic = image.topics.get(request.topic_id)
    if topic is None:
        raise UnknownTopicIdError(f"no topic with id {request.topic_id}")
    state = topic.partitions.get(request.partition_id)
    if state is None:
        raise UnknownTopicOrPartitionError(f"{topic.name} has no partition {request.partition_id}")
    where = f"{topic.name}-{request.partition_id}"
    if request.leader_epoch > state.leader_epoch or request.partition_epoch > state.partition_epoch:
        raise NotControllerError(
            f"{where}: the request's epochs ({request.leader_epoch}, {request.partition_epoch}) "
            f"are newer than this controller's ({state.leader_epoch}, {state.partition_epoch})"
        )
    if request.leader_epoch < state.leader_epoch:
        raise FencedLeaderEpochError(
            f"{where}: leader epoch {request.leader_epoch} < current {state.leader_epoch}"
        )
    if request.broker_id != state.leader:
        raise InvalidRequestError(
            f"{where}: broker {request.broker_id} is not the leader ({state.leader})"
        )
    if request.partition_epoch < state.partition_epoch:
        raise InvalidUpdateVersionError(
            f"{where}: partition epoch {request.partition_epoch} < current {state.partition_epoch}"
        )
    proposed = request.new_isr
    if not proposed or len(set(proposed)) != len(proposed):
        raise InvalidRequestError(f"{where}: ISR {proposed} is empty or has duplicates")
    if not set(proposed) <= set(state.replicas) or state.leader not in proposed:
        raise InvalidRequestError(
            f"{where}: ISR {proposed} must be within replicas {state.replicas} and hold the leader"
        )
    ineligible = [b for b in proposed if not _active(image, b)]
    if ineligible:
        raise IneligibleReplicaError(
            f"{where}: brokers {ineligible} are fenced, shutting down or not registered"
        )
    # Stored in replica order, so equal sets are equal ISRs whatever order the leader sent.
    new_isr = tuple(b for b in state.replicas if b in set(proposed))
    if new_isr == state.isr:
        return Decision((), AlterPartitionResult(request.topic_id, request.partition_id, state))
    change = PartitionChangeRecord(request.topic_id, request.partition_id, isr=new_isr)
    return Decision(
        (change,),
        AlterPartitionResult(request.topic_id, request.partition_id, state.merge(change)),
    )


def _active(image: MetadataImage, broker_id: int) -> bool:
    broker = image.broker(broker_id)
    return broker is not None and broker.active


def elect_preferred_leaders(
    image: MetadataImage, partitions: Sequence[TopicPartition] | None = None
) -> Decision[list[ElectionResult]]:
    """Move leadership back to each partition's first replica (its preferred leader).

    With ``partitions`` None, every partition that needs it and can have it (Kafka's auto
    leader rebalance); only elected partitions are listed. Otherwise one result each:
    elected, ``ELECTION_NOT_NEEDED``, ``PREFERRED_LEADER_NOT_AVAILABLE`` (not live or not in
    the ISR) or ``UNKNOWN_TOPIC_OR_PARTITION``.
    """
    targets: Iterable[tuple[TopicPartition, TopicImage | None]]
    if partitions is None:
        targets = (
            (TopicPartition(topic.name, pid), topic) for topic, pid, _ in image.iter_partitions()
        )
    else:
        targets = ((tp, image.topic(tp.topic)) for tp in partitions)
    records: list[MetadataRecord] = []
    results: list[ElectionResult] = []
    done: set[TopicPartition] = set()
    for tp, topic in targets:
        state = None if topic is None else topic.partitions.get(tp.partition)
        error: LograftError | None = None
        if topic is None or state is None:
            error = UnknownTopicOrPartitionError(f"no partition {tp}")
        elif state.leader == state.replicas[0] or tp in done:
            error = ElectionNotNeededError(f"{tp}: the preferred replica leads already")
        elif state.replicas[0] not in state.isr or not _active(image, state.replicas[0]):
            error = PreferredLeaderNotAvailableError(
                f"{tp}: preferred replica {state.replicas[0]} is not live and in the ISR"
            )
        else:
            records.append(
                PartitionChangeRecord(topic.topic_id, tp.partition, leader=state.replicas[0])
            )
            done.add(tp)
        if partitions is not None or error is None:
            results.append(ElectionResult(tp, error))
    return Decision(tuple(records), results)
