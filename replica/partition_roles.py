"""What the metadata image asks of this broker: lead, follow or stop, per local partition.

Pure (Kafka's ``ReplicaManager.applyDelta`` decisions without the I/O): given an image and
this broker's id, :func:`local_partition_roles` names every partition with a replica here
and the role the image gives it; :func:`partitions_to_stop` names hosted partitions the
image no longer places here. The broker's shell opens, leads, follows and removes
partitions accordingly, and points its replica fetchers at the leaders.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lograft.metadata import MetadataImage
from lograft.metadata.topic_configs import unclean_leader_election_enabled
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "Follow",
    "Lead",
    "LocalPartition",
    "NoLeader",
    "PartitionRole",
    "local_partition_roles",
    "partitions_to_stop",
]


@dataclass(frozen=True, slots=True)
class Lead:
    """Lead the partition at ``leader_epoch`` with this ISR (a new ISR: same epoch)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class Follow:
    """Fetch from ``leader_id`` at ``leader_epoch``."""

    leader_id: int
    leader_epoch: int
    unclean_leader_election: bool


@dataclass(frozen=True, slots=True)
class NoLeader:
    """The partition is offline (no live in-sync replica): keep the log, fetch nothing."""

    leader_epoch: int


PartitionRole = Lead | Follow | NoLeader
"""What the image asks of one local replica."""


@dataclass(frozen=True, slots=True)
class LocalPartition:
    """A partition with a replica on this broker, its topic's id and configs, and its role."""

    topic_partition: TopicPartition
    topic_id: str
    configs: Mapping[str, str]
    role: PartitionRole


def local_partition_roles(
    image: MetadataImage, broker_id: int
) -> dict[TopicPartition, LocalPartition]:
    """Every partition of ``image`` with a replica on ``broker_id``, and its role there."""
    roles: dict[TopicPartition, LocalPartition] = {}
    unclean: dict[str, bool] = {}
    for topic, partition_id, state in image.iter_partitions():
        if broker_id not in state.replicas:
            continue
        role: PartitionRole
        if state.leader == broker_id:
            role = Lead(
                tuple(state.replicas), tuple(state.isr), state.leader_epoch, state.partition_epoch
            )
        elif state.leader < 0:
            role = NoLeader(state.leader_epoch)
        else:
            if topic.name not in unclean:
                unclean[topic.name] = unclean_leader_election_enabled(image, topic.name)
            role = Follow(state.leader, state.leader_epoch, unclean[topic.name])
        tp = TopicPartition(topic.name, partition_id)
        roles[tp] = LocalPartition(tp, str(topic.topic_id), image.topic_configs(topic.name), role)
    return roles


def partitions_to_stop(
    hosted: Iterable[TopicPartition], wanted: Mapping[TopicPartition, LocalPartition]
) -> list[TopicPartition]:
    """Hosted partitions the image no longer places on this broker (deleted or moved)."""
    return [tp for tp in hosted if tp not in wanted]
