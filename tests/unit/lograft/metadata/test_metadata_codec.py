"""Metadata records and snapshots as bytes: exact round trips; bad input is a typed error."""

from __future__ import annotations

import contextlib
import struct
import uuid
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.metadata import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    CorruptMetadataError,
    FenceBrokerRecord,
    Listener,
    MetadataImage,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    decode_batch,
    decode_record,
    decode_snapshot,
    encode_batch,
    encode_record,
    encode_snapshot,
)
from lograft.metadata.codec import MAX_BATCH_BYTES
from lograft.protocol.wire import metadata_pb2 as pb
from tests.unit.controller_fixtures import Cluster

T1 = uuid.UUID(int=0x1234_5678_9ABC)
INC = uuid.UUID(int=0xFEED)

EVERY_RECORD: list[MetadataRecord] = [
    RegisterBrokerRecord(
        3,
        INC,
        7,
        (Listener("PLAINTEXT", "10.0.0.3", 9092), Listener("INTERNAL", "b3", 9093)),
        "rack-a",
        True,
        False,
    ),
    RegisterBrokerRecord(0, INC, 1, (Listener("PLAINTEXT", "h", 1),), None, False, True),
    UnregisterBrokerRecord(3, 7),
    FenceBrokerRecord(3, 7),
    UnfenceBrokerRecord(0, 0),
    BrokerRegistrationChangeRecord(3, 7),
    BrokerRegistrationChangeRecord(3, 7, fenced=False, in_controlled_shutdown=True),
    BrokerRegistrationChangeRecord(0, 7, fenced=True, in_controlled_shutdown=False),
    TopicRecord("orders", T1),
    PartitionRecord(T1, 4, (0, 1, 2), (0, 2), 0, 3, 9),
    PartitionRecord(T1, 0, (5,), (5,), -1),
    PartitionChangeRecord(T1, 4),
    PartitionChangeRecord(T1, 4, leader=0),
    PartitionChangeRecord(T1, 4, leader=-1),
    PartitionChangeRecord(T1, 4, isr=(0, 1)),
    PartitionChangeRecord(T1, 4, leader=2, isr=(2,)),
    RemoveTopicRecord(T1),
    ConfigRecord(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
    ConfigRecord(ConfigResourceType.BROKER, "", "x", ""),
    ConfigRecord(ConfigResourceType.BROKER, "1", "x", None),
    ProducerIdsRecord(1, 2, 3000),
    NoOpRecord(),
]


@pytest.mark.parametrize("record", EVERY_RECORD)
def test_every_record_round_trips(record: MetadataRecord) -> None:
    assert decode_record(encode_record(record)) == record


def test_leader_zero_and_empty_values_are_not_mistaken_for_unchanged() -> None:
    # proto3 defaults (0, false, "") must survive: presence is explicit.
    change = decode_record(encode_record(PartitionChangeRecord(T1, 0, leader=0)))
    assert isinstance(change, PartitionChangeRecord) and change.leader == 0 and change.isr is None
    config = decode_record(encode_record(ConfigRecord(ConfigResourceType.BROKER, "", "k", "")))
    assert isinstance(config, ConfigRecord) and config.value == ""


def test_batch_round_trips_in_order() -> None:
    assert decode_batch(encode_batch(EVERY_RECORD)) == EVERY_RECORD
    assert decode_batch(encode_batch([])) == []


def _envelope(**fields: Any) -> bytes:
    data: bytes = pb.MetadataRecord(**fields).SerializeToString()
    return data


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xff\xff",  # not protobuf
        b"\x0a\x05\x08",  # truncated submessage
        _envelope(),  # no record in the oneof
        _envelope(topic=pb.TopicRecord(name="t", topic_id=b"short")),
        _envelope(register_broker=pb.RegisterBrokerRecord(broker_id=-1, incarnation_id=INC.bytes)),
        _envelope(
            register_broker=pb.RegisterBrokerRecord(
                broker_id=1, incarnation_id=INC.bytes, listeners=[pb.Listener(port=70000)]
            )
        ),
        _envelope(partition=pb.PartitionRecord(topic_id=T1.bytes, replicas=[-3])),
        _envelope(partition=pb.PartitionRecord(topic_id=T1.bytes, leader=-2)),
        _envelope(partition=pb.PartitionRecord(topic_id=T1.bytes, leader_epoch=-1)),
        _envelope(config=pb.ConfigRecord(resource_type=3, name="x")),  # type: ignore[arg-type]
        _envelope(topic=pb.TopicRecord(name="x" * 5000, topic_id=T1.bytes)),
    ],
)
def test_malformed_records_raise_corrupt_metadata(data: bytes) -> None:
    with pytest.raises(CorruptMetadataError) as info:
        decode_record(data)
    assert info.value.error_name == "CORRUPT_MESSAGE" and not info.value.retriable


def test_oversized_batch_is_refused_before_parsing() -> None:
    with pytest.raises(CorruptMetadataError):
        decode_batch(b"\x00" * (MAX_BATCH_BYTES + 1))


@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_but_corrupt_metadata(data: bytes) -> None:
    for decode in (decode_record, decode_batch, decode_snapshot):
        with contextlib.suppress(CorruptMetadataError):
            decode(data)


def _cluster_image() -> MetadataImage:
    cluster = Cluster(seed=3)
    for broker_id in range(4):
        cluster.register(broker_id, rack=f"r{broker_id % 2}")
    cluster.create("a", 6, 3, {"retention.ms": "100", "unclean.leader.election.enable": "true"})
    cluster.create("b", 2, 1)
    cluster.register(9, unfence=False)  # a fenced broker waiting to catch up
    cluster.heartbeat(1, want_shut_down=True)  # in controlled shutdown
    return cluster.image


def test_snapshot_round_trips_exactly() -> None:
    image = _cluster_image()
    data = encode_snapshot(image)
    back = decode_snapshot(data)
    assert back == image
    assert back.brokers[9].registration_offset == image.brokers[9].registration_offset
    assert encode_snapshot(back) == data  # deterministic
    assert decode_snapshot(encode_snapshot(MetadataImage.empty())) == MetadataImage.empty()


def test_snapshot_of_10000_partitions_round_trips() -> None:
    cluster = Cluster(seed=1)
    for broker_id in range(3):
        cluster.register(broker_id)
    cluster.create("big", 10_000, 3)
    data = encode_snapshot(cluster.image)
    assert decode_snapshot(data) == cluster.image
    # About 16 bytes a partition with 3 replicas; catches an accidental blow-up.
    assert len(data) < 300_000


def _reframe(payload: bytes) -> bytes:
    return struct.pack(">4sHI", b"LRMS", 1, zlib.crc32(payload)) + payload


def test_corrupt_snapshots_raise_corrupt_metadata() -> None:
    data = encode_snapshot(_cluster_image())
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF
    bad_inputs = [
        b"",
        data[:5],
        b"XXXX" + data[4:],  # magic
        data[:4] + b"\x00\x09" + data[6:],  # version
        bytes(flipped),  # checksum
        data[:-3],  # truncated
        _reframe(b"\xff\xff"),  # valid frame, garbage payload
    ]
    for bad in bad_inputs:
        with pytest.raises(CorruptMetadataError):
            decode_snapshot(bad)
    with pytest.raises(CorruptMetadataError):
        decode_snapshot(data, max_bytes=len(data) - 1)


def test_inconsistent_snapshot_content_is_corruption_not_a_crash() -> None:
    snap = pb.MetadataSnapshot(offset=5, epoch=1)
    topic = snap.topics.add()
    topic.topic.name = "t"
    topic.topic.topic_id = T1.bytes
    # Leader 2 is not in the ISR: replay would break an invariant.
    topic.partitions.add(partition_id=0, replicas=[1, 2], isr=[1], leader=2)
    with pytest.raises(CorruptMetadataError, match="inconsistent"):
        decode_snapshot(_reframe(snap.SerializeToString()))
    newer = pb.MetadataSnapshot(offset=1, epoch=1)
    entry = newer.brokers.add(registration_offset=7)
    entry.registration.broker_id = 1
    entry.registration.incarnation_id = INC.bytes
    entry.registration.listeners.add(name="P", host="h", port=1)
    with pytest.raises(CorruptMetadataError):
        decode_snapshot(_reframe(newer.SerializeToString()))
