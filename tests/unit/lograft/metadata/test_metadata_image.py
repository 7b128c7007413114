"""Replaying metadata records into a MetadataImage: state, invariants, sharing, queries."""

from __future__ import annotations

import uuid

import pytest

from lograft.metadata import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResource,
    ConfigResourceType,
    FenceBrokerRecord,
    Listener,
    MetadataDelta,
    MetadataImage,
    MetadataInvariantError,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRegistration,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from lograft.protocol.topic_partition import TopicPartition

T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)
INC = uuid.UUID(int=0xABC)


def _broker(broker_id: int, epoch: int = 1, fenced: bool = False) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id, INC, epoch, (Listener("PLAINTEXT", "h", 9092),), None, fenced
    )


def _image_with_topic() -> MetadataImage:
    image = MetadataImage.empty().apply_batch([_broker(b, b + 1) for b in range(3)], 1, 1)
    return image.apply_batch(
        [
            TopicRecord("t", T1),
            PartitionRecord(T1, 0, (0, 1, 2), (0, 1, 2), 0),
            PartitionRecord(T1, 1, (1, 2, 0), (1, 2, 0), 1),
        ],
        2,
        1,
    )


def test_empty_image() -> None:
    image = MetadataImage.empty()
    assert image.offset == -1 and image.epoch == -1
    assert not image.brokers and not image.topics and image.partition_count() == 0
    assert image.next_producer_id == 0


def test_broker_lifecycle_records() -> None:
    image = MetadataImage.empty().apply(_broker(5, 7, fenced=True), 10, 2)
    broker = image.brokers[5]
    assert (broker.fenced, broker.registration_offset, broker.broker_epoch) == (True, 10, 7)
    assert image.offset == 10 and image.epoch == 2 and image.last_broker_epoch == 7
    image = image.apply(UnfenceBrokerRecord(5, 7), 11)
    assert not image.brokers[5].fenced and image.brokers[5].active
    image = image.apply(BrokerRegistrationChangeRecord(5, 7, in_controlled_shutdown=True), 12)
    assert image.brokers[5].in_controlled_shutdown and not image.brokers[5].active
    image = image.apply(FenceBrokerRecord(5, 7), 13)
    assert image.brokers[5].fenced and image.brokers[5].in_controlled_shutdown
    image = image.apply(UnregisterBrokerRecord(5, 7), 14)
    assert 5 not in image.brokers
    assert image.last_broker_epoch == 7


def test_reregistration_needs_a_larger_epoch() -> None:
    image = MetadataImage.empty().apply(_broker(1, 5), 1)
    with pytest.raises(MetadataInvariantError):
        image.apply(_broker(1, 5), 2)
    assert image.apply(_broker(1, 6), 2).brokers[1].broker_epoch == 6


@pytest.mark.parametrize(
    "record",
    [
        FenceBrokerRecord(9, 1),
        FenceBrokerRecord(0, 99),
        UnfenceBrokerRecord(0, 99),
        UnregisterBrokerRecord(0, 2),
        BrokerRegistrationChangeRecord(4, 1, fenced=True),
    ],
)
def test_broker_records_must_name_the_current_epoch(record: object) -> None:
    image = MetadataImage.empty().apply(_broker(0, 1), 1)
    with pytest.raises(MetadataInvariantError):
        image.apply(record, 2)  # type: ignore[arg-type]


def test_topic_partition_and_change_replay() -> None:
    image = _image_with_topic()
    topic = image.topic("t")
    assert topic is not None and topic.topic_id == T1 and image.topics[T1] is topic
    state: PartitionRegistration | None = topic.partitions[0]
    assert state is not None
    assert (state.leader, state.isr, state.leader_epoch, state.partition_epoch) == (
        0,
        (0, 1, 2),
        0,
        0,
    )
    # ISR-only change: partition epoch + 1, leader epoch unchanged.
    image = image.apply(PartitionChangeRecord(T1, 0, isr=(0, 1)), 3)
    state = image.partition(T1, 0)
    assert state is not None
    assert (state.isr, state.leader_epoch, state.partition_epoch) == ((0, 1), 0, 1)
    # Leader change: both epochs + 1.
    image = image.apply(PartitionChangeRecord(T1, 0, leader=1), 4)
    state = image.partition(T1, 0)
    assert state is not None
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (1, 1, 2)
    # Offline: leader -1 is a leader change too.
    image = image.apply(PartitionChangeRecord(T1, 0, leader=-1, isr=(1,)), 5)
    assert image.leaderless_partitions() == [TopicPartition("t", 0)]


@pytest.mark.parametrize(
    "record",
    [
        PartitionChangeRecord(T1, 0, isr=()),  # ISR never empty
        PartitionChangeRecord(T1, 0, isr=(0, 7)),  # ISR within the replicas
        PartitionChangeRecord(T1, 0, isr=(1, 1)),  # no duplicates
        PartitionChangeRecord(T1, 0, isr=(1, 2)),  # leader 0 no longer in the ISR
        PartitionChangeRecord(T1, 0, leader=7),  # leader must be in the ISR
        PartitionChangeRecord(T1, 5, leader=1),  # unknown partition
        PartitionChangeRecord(T2, 0, leader=1),  # unknown topic
        PartitionRecord(T1, 0, (0,), (0,), 0),  # partition exists
        PartitionRecord(T1, 2, (), (), -1),  # no replicas
        PartitionRecord(T1, 2, (0, 0), (0,), 0),  # duplicate replicas
        PartitionRecord(T2, 0, (0,), (0,), 0),  # unknown topic
        TopicRecord("t", T2),  # name in use
        TopicRecord("u", T1),  # id in use
        TopicRecord("u", uuid.UUID(int=0)),  # zero id
        RemoveTopicRecord(T2),
        ConfigRecord(ConfigResourceType.TOPIC, "nope", "retention.ms", "1"),
        ProducerIdsRecord(0, 1, 0),  # must advance
    ],
)
def test_replay_refuses_records_that_break_invariants(record: object) -> None:
    image = _image_with_topic()
    with pytest.raises(MetadataInvariantError):
        image.apply(record, 3)  # type: ignore[arg-type]


def test_offsets_and_epochs_never_go_back() -> None:
    image = _image_with_topic()
    with pytest.raises(MetadataInvariantError):
        image.apply(NoOpRecord(), image.offset - 1)
    with pytest.raises(MetadataInvariantError):
        image.apply(NoOpRecord(), image.offset + 1, epoch=0)
    advanced = image.apply(NoOpRecord(), 9, epoch=3)
    assert (advanced.offset, advanced.epoch) == (9, 3)
    assert advanced.topics == image.topics


def test_remove_topic_drops_partitions_and_configs_and_frees_the_name() -> None:
    image = _image_with_topic().apply(
        ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "5"), 3
    )
    assert image.topic_configs("t") == {"retention.ms": "5"}
    image = image.apply_batch([RemoveTopicRecord(T1), TopicRecord("t", T2)], 4)
    topic = image.topic("t")
    assert topic is not None and topic.topic_id == T2 and not topic.partitions
    assert T1 not in image.topics
    assert image.topic_configs("t") == {}


def test_config_set_and_delete() -> None:
    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    image = MetadataImage.empty().apply(
        ConfigRecord(ConfigResourceType.BROKER, "1", "log.retention.ms", "10"), 1
    )
    assert image.configs[broker] == {"log.retention.ms": "10"}
    image = image.apply(ConfigRecord(ConfigResourceType.BROKER, "1", "log.retention.ms", None), 2)
    assert broker not in image.configs


def test_images_are_immutable_and_share_untouched_parts() -> None:
    before = _image_with_topic()
    after = before.apply(PartitionChangeRecord(T1, 0, isr=(0, 1)), 3)
    # The old image is unchanged: replay never mutates.
    assert before.partition(T1, 0).isr == (0, 1, 2)  # type: ignore[union-attr]
    assert after.brokers is before.brokers
    with pytest.raises(TypeError):
        after.topics[T1].partitions[0] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        after.brokers[0] = None  # type: ignore[index]


def test_delta_is_single_use() -> None:
    delta = MetadataDelta(MetadataImage.empty())
    delta.replay(NoOpRecord(), 1)
    delta.apply()
    with pytest.raises(MetadataInvariantError):
        delta.replay(NoOpRecord(), 2)
    with pytest.raises(MetadataInvariantError):
        delta.apply()


def test_queries() -> None:
    image = _image_with_topic()
    image = image.apply_batch([FenceBrokerRecord(2, 3), PartitionChangeRecord(T1, 1, leader=2)], 3)
    assert [b.broker_id for b in image.active_brokers()] == [0, 1]
    assert [b.broker_id for b in image.fenced_brokers()] == [2]
    assert image.partitions_led_by(0) == [TopicPartition("t", 0)]
    assert image.partitions_led_by(2) == [TopicPartition("t", 1)]
    assert image.partitions_with_replica(1) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert image.leaderless_partitions() == []
    assert image.partition_count() == 2


def test_replaying_10000_partitions_in_one_delta() -> None:
    image = MetadataImage.empty().apply_batch([_broker(b, b + 1) for b in range(3)], 1)
    records = [TopicRecord("big", T1)] + [
        PartitionRecord(T1, p, (p % 3, (p + 1) % 3), (p % 3, (p + 1) % 3), p % 3)
        for p in range(10_000)
    ]
    image = image.apply_batch(records, 2)
    assert image.partition_count() == 10_000
    assert len(image.partitions_led_by(0)) == 3334
