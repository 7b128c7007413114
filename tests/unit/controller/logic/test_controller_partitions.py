"""AlterPartition (ISR changes from leaders), preferred-leader election, producer-id blocks."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from controller.logic import (
    AlterPartitionRequest,
    ElectionNotNeededError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidUpdateVersionError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    StaleBrokerEpochError,
    UnknownTopicIdError,
    allocate_producer_ids,
    alter_partition,
    elect_preferred_leaders,
    fence_brokers,
)
from controller.logic.producer_ids import MAX_PRODUCER_ID
from lograft.metadata import (
    MetadataImage,
    PartitionChangeRecord,
    ProducerIdsRecord,
    decode_snapshot,
    encode_snapshot,
)
from lograft.protocol.errors import (
    InvalidRequestError,
    LograftError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.controller_fixtures import Cluster


def _cluster(brokers: int = 3) -> Cluster:
    cluster = Cluster(seed=9)
    for broker_id in range(brokers):
        cluster.register(broker_id)
    return cluster


def _alter(
    cluster: Cluster, new_isr: tuple[int, ...], **overrides: object
) -> AlterPartitionRequest:
    topic = cluster.image.topic("t")
    assert topic is not None
    state = topic.partitions[0]
    request = AlterPartitionRequest(
        broker_id=state.leader,
        broker_epoch=cluster.epochs[state.leader],
        topic_id=topic.topic_id,
        partition_id=0,
        leader_epoch=state.leader_epoch,
        partition_epoch=state.partition_epoch,
        new_isr=new_isr,
    )
    return dataclasses.replace(request, **overrides)  # type: ignore[arg-type]


def test_shrink_and_expand_isr() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    state = cluster.state("t")
    leader, f1, f2 = state.replicas
    shrink = alter_partition(cluster.image, _alter(cluster, (leader, f1)))
    (record,) = shrink.records
    assert isinstance(record, PartitionChangeRecord) and record.leader is None
    result = cluster.commit(shrink)
    assert cluster.state("t") == result.state
    assert (result.state.isr, result.state.partition_epoch, result.state.leader_epoch) == (
        (leader, f1),
        1,
        0,
    )
    # Expand, with members in any order: stored in replica order.
    grow = cluster.commit(alter_partition(cluster.image, _alter(cluster, (f2, leader, f1))))
    assert grow.state.isr == state.replicas and grow.state.partition_epoch == 2


def test_unchanged_isr_appends_nothing() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    decision = alter_partition(cluster.image, _alter(cluster, cluster.state("t").isr))
    assert decision.records == () and decision.result.state == cluster.state("t")


@pytest.mark.parametrize(
    ("overrides", "error", "code"),
    [
        ({"broker_epoch": 0}, StaleBrokerEpochError, 77),
        ({"broker_id": 42}, StaleBrokerEpochError, 77),
        ({"topic_id": uuid.UUID(int=5)}, UnknownTopicIdError, 100),
        ({"partition_id": 3}, UnknownTopicOrPartitionError, 3),
        ({"leader_epoch": 1}, NotControllerError, 41),
        ({"partition_epoch": 9}, NotControllerError, 41),
        ({"new_isr": ()}, InvalidRequestError, 42),
        ({"new_isr": (0, 0)}, InvalidRequestError, 42),
        ({"new_isr": (0, 1, 2, 9)}, InvalidRequestError, 42),
    ],
)
def test_alter_partition_errors(
    overrides: dict[str, object], error: type[LograftError], code: int
) -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    request = dataclasses.replace(_alter(cluster, cluster.state("t").replicas), **overrides)  # type: ignore[arg-type]
    with pytest.raises(error) as info:
        alter_partition(cluster.image, request)
    assert info.value.code == code


def test_stale_partition_epoch_is_invalid_update_version() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    old = _alter(cluster, cluster.state("t").replicas[:2])
    cluster.commit(alter_partition(cluster.image, old))
    with pytest.raises(InvalidUpdateVersionError) as info:
        alter_partition(cluster.image, old)
    assert info.value.code == 95 and not info.value.retriable


def test_old_leader_epoch_is_fenced_leader_epoch() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    old = _alter(cluster, cluster.state("t").replicas[:2])
    cluster.commit(fence_brokers(cluster.image, [old.broker_id]))
    with pytest.raises(FencedLeaderEpochError) as info:
        alter_partition(cluster.image, old)
    assert info.value.code == 74 and info.value.retriable


def test_request_from_a_follower_is_invalid() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    follower = cluster.state("t").replicas[1]
    request = _alter(
        cluster,
        cluster.state("t").replicas,
        broker_id=follower,
        broker_epoch=cluster.epochs[follower],
    )
    with pytest.raises(InvalidRequestError):
        alter_partition(cluster.image, request)


def test_isr_without_the_leader_is_invalid() -> None:
    cluster = _cluster()
    cluster.create("t", 1, 3)
    with pytest.raises(InvalidRequestError):
        alter_partition(cluster.image, _alter(cluster, cluster.state("t").replicas[1:]))


def test_isr_with_a_fenced_or_shutting_down_broker_is_ineligible() -> None:
    cluster = _cluster(4)
    cluster.create("t", 1, 3)
    replicas = cluster.state("t").replicas
    cluster.commit(fence_brokers(cluster.image, [replicas[2]]))
    with pytest.raises(IneligibleReplicaError) as info:
        alter_partition(cluster.image, _alter(cluster, replicas))
    assert info.value.code == 107
    cluster.heartbeat(replicas[2])
    cluster.heartbeat(replicas[1], want_shut_down=True)
    with pytest.raises(IneligibleReplicaError):
        alter_partition(cluster.image, _alter(cluster, replicas))


# ---- preferred leaders -----------------------------------------------------------------------


def test_preferred_leader_election() -> None:
    cluster = _cluster()
    cluster.create("t", 3, 3)
    preferred = {p: cluster.state("t", p).replicas[0] for p in range(3)}
    cluster.commit(fence_brokers(cluster.image, [preferred[0]]))
    cluster.heartbeat(preferred[0])  # back, but not in the ISR: leader stays away
    tp0 = TopicPartition("t", 0)
    result = elect_preferred_leaders(cluster.image, [tp0, TopicPartition("t", 9)])
    assert isinstance(result.result[0].error, PreferredLeaderNotAvailableError)
    assert isinstance(result.result[1].error, UnknownTopicOrPartitionError)
    assert result.records == ()
    # The leader adds it back to the ISR; now it can lead again.
    state = cluster.state("t", 0)
    topic = cluster.image.topic("t")
    assert topic is not None
    cluster.commit(
        alter_partition(
            cluster.image,
            AlterPartitionRequest(
                state.leader,
                cluster.epochs[state.leader],
                topic.topic_id,
                0,
                state.leader_epoch,
                state.partition_epoch,
                state.replicas,
            ),
        )
    )
    decision = elect_preferred_leaders(cluster.image)
    assert [r.topic_partition for r in decision.result] == [tp0]
    assert all(r.error is None for r in decision.result)
    cluster.commit(decision)
    assert cluster.state("t", 0).leader == preferred[0]
    assert cluster.state("t", 0).leader_epoch == state.leader_epoch + 1
    again = elect_preferred_leaders(cluster.image, [tp0])
    assert isinstance(again.result[0].error, ElectionNotNeededError) and again.records == ()
    assert elect_preferred_leaders(cluster.image).records == ()


# ---- producer ids ----------------------------------------------------------------------------


def test_producer_id_blocks_increase_and_survive_failover() -> None:
    cluster = _cluster(2)
    first = cluster.commit(allocate_producer_ids(cluster.image, 0, cluster.epochs[0]))
    second = cluster.commit(allocate_producer_ids(cluster.image, 1, cluster.epochs[1]))
    assert (first.first_producer_id, first.size, first.last_producer_id) == (0, 1000, 999)
    assert second.first_producer_id == 1000
    # A new controller rebuilds the image from a snapshot: the next block continues.
    restored = decode_snapshot(encode_snapshot(cluster.image))
    third = allocate_producer_ids(restored, 0, cluster.epochs[0])
    assert third.result.first_producer_id == 2000
    assert third.records == (ProducerIdsRecord(0, cluster.epochs[0], 3000),)


def test_producer_ids_need_the_current_broker_epoch() -> None:
    cluster = _cluster(1)
    with pytest.raises(StaleBrokerEpochError):
        allocate_producer_ids(cluster.image, 0, cluster.epochs[0] + 1)
    with pytest.raises(StaleBrokerEpochError):
        allocate_producer_ids(cluster.image, 5, 1)


def test_producer_ids_exhausted() -> None:
    cluster = _cluster(1)
    image = cluster.image.apply(ProducerIdsRecord(0, 1, MAX_PRODUCER_ID - 10), cluster.offset + 1)
    with pytest.raises(UnknownServerError):
        allocate_producer_ids(image, 0, cluster.epochs[0])
    assert isinstance(MetadataImage.empty().next_producer_id, int)
