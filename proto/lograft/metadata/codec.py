"""Bytes of metadata: log entries (record batches) and snapshots, to and from protobuf.

A metadata log entry is one serialized ``MetadataRecordBatch``; a snapshot is a small
header followed by one serialized ``MetadataSnapshot`` (``proto/metadata.proto``)::

    magic "LRMS" | version u16 | crc32 u32 of the payload | payload

Everything decoded here may come from a peer or a damaged disk, so decoding checks sizes
before parsing, checks every field it converts, and raises
:class:`~lograft.metadata.errors.CorruptMetadataError` (never anything else) on bad input.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from google.protobuf.message import DecodeError

from lograft.metadata.errors import CorruptMetadataError, MetadataInvariantError
from lograft.metadata.image import MetadataDelta, MetadataImage
from lograft.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    Listener,
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
)
from lograft.protocol.wire import metadata_pb2 as pb

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "decode_batch",
    "decode_record",
    "decode_snapshot",
    "encode_batch",
    "encode_record",
    "encode_snapshot",
    "record_from_proto",
    "record_to_proto",
]

MAX_BATCH_BYTES = 16 * 1024 * 1024
"""Largest log entry accepted; a 10 000-partition topic with 5 replicas is well under 1 MiB."""
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024
"""Largest snapshot accepted, checked before parsing so a bogus length cannot exhaust memory."""
MAX_REPLICAS = 1024
"""Most replicas (or ISR members) a partition may list."""
MAX_LISTENERS = 64
"""Most listeners a broker may register."""
MAX_STRING_CHARS = 1024
"""Longest name, host, rack or config name; config values get ``MAX_CONFIG_VALUE_CHARS``."""
MAX_CONFIG_VALUE_CHARS = 64 * 1024

_SNAPSHOT_MAGIC = b"LRMS"
_SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">4sHI")
_INT32_MIN = -(2**31)


# ---- field checks ----------------------------------------------------------------------------


def _uuid(raw: bytes, what: str) -> uuid.UUID:
    if len(raw) != 16:
        raise CorruptMetadataError(f"{what} must be 16 bytes, got {len(raw)}")
    return uuid.UUID(bytes=bytes(raw))


def _text(value: str, what: str, limit: int = MAX_STRING_CHARS) -> str:
    if len(value) > limit:
        raise CorruptMetadataError(f"{what} is longer than {limit} characters")
    return str(value)


def _broker_id(value: int, what: str) -> int:
    if value < 0:
        raise CorruptMetadataError(f"{what} {value} must be >= 0")
    return int(value)


def _broker_ids(values: Iterable[int], what: str) -> tuple[int, ...]:
    ids = tuple(int(v) for v in values)
    if len(ids) > MAX_REPLICAS:
        raise CorruptMetadataError(f"{what} lists more than {MAX_REPLICAS} brokers")
    for broker_id in ids:
        _broker_id(broker_id, what)
    return ids


def _leader(value: int, what: str) -> int:
    if value < -1:
        raise CorruptMetadataError(f"{what} leader {value} must be a broker id or -1")
    return int(value)


def _epoch(value: int, what: str) -> int:
    if value < 0:
        raise CorruptMetadataError(f"{what} {value} must be >= 0")
    return int(value)


# ---- records ---------------------------------------------------------------------------------


def record_to_proto(record: MetadataRecord) -> Any:
    """The ``MetadataRecord`` protobuf envelope of a record."""
    env = pb.MetadataRecord()
    match record:
        case RegisterBrokerRecord():
            msg = env.register_broker
            msg.broker_id = record.broker_id
            msg.incarnation_id = record.incarnation_id.bytes
            msg.broker_epoch = record.broker_epoch
            for listener in record.listeners:
                msg.listeners.add(name=listener.name, host=listener.host, port=listener.port)
            if record.rack is not None:
                msg.rack = record.rack
            msg.fenced = record.fenced
            msg.in_controlled_shutdown = record.in_controlled_shutdown
        case UnregisterBrokerRecord():
            env.unregister_broker.SetInParent()
            env.unregister_broker.broker_id = record.broker_id
            env.unregister_broker.broker_epoch = record.broker_epoch
        case FenceBrokerRecord():
            env.fence_broker.SetInParent()
            env.fence_broker.broker_id = record.broker_id
            env.fence_broker.broker_epoch = record.broker_epoch
        case UnfenceBrokerRecord():
            env.unfence_broker.SetInParent()
            env.unfence_broker.broker_id = record.broker_id
            env.unfence_broker.broker_epoch = record.broker_epoch
        case BrokerRegistrationChangeRecord():
            change = env.broker_registration_change
            change.SetInParent()
            change.broker_id = record.broker_id
            change.broker_epoch = record.broker_epoch
            if record.fenced is not None:
                change.fenced = record.fenced
            if record.in_controlled_shutdown is not None:
                change.in_controlled_shutdown = record.in_controlled_shutdown
        case TopicRecord():
            env.topic.name = record.name
            env.topic.topic_id = record.topic_id.bytes
        case PartitionRecord():
            _partition_to_proto(record, env.partition, with_topic_id=True)
        case PartitionChangeRecord():
            pc = env.partition_change
            pc.topic_id = record.topic_id.bytes
            pc.partition_id = record.partition_id
            if record.leader is not None:
                pc.leader = record.leader
            if record.isr is not None:
                pc.isr.SetInParent()
                pc.isr.broker_ids.extend(record.isr)
        case RemoveTopicRecord():
            env.remove_topic.topic_id = record.topic_id.bytes
        case ConfigRecord():
            _config_to_proto(record, env.config)
        case ProducerIdsRecord():
            env.producer_ids.SetInParent()
            env.producer_ids.broker_id = record.broker_id
            env.producer_ids.broker_epoch = record.broker_epoch
            env.producer_ids.next_producer_id = record.next_producer_id
        case NoOpRecord():
            env.no_op.SetInParent()
        case _:  # pragma: no cover - the union is exhaustive
            raise TypeError(f"not a metadata record: {record!r}")
    return env


def _partition_to_proto(record: PartitionRecord, msg: Any, *, with_topic_id: bool) -> None:
    if with_topic_id:
        msg.topic_id = record.topic_id.bytes
    msg.partition_id = record.partition_id
    msg.replicas.extend(record.replicas)
    msg.isr.extend(record.isr)
    msg.leader = record.leader
    msg.leader_epoch = record.leader_epoch
    msg.partition_epoch = record.partition_epoch


def _config_to_proto(record: ConfigRecord, msg: Any) -> None:
    msg.resource_type = int(record.resource_type)
    msg.resource_name = record.resource_name
    msg.name = record.name
    if record.value is not None:
        msg.value = record.value


def record_from_proto(env: Any) -> MetadataRecord:
    """The record in a ``MetadataRecord`` protobuf envelope; raises ``CorruptMetadataError``."""
    kind = env.WhichOneof("record")
    if kind is None:
        raise CorruptMetadataError("metadata record envelope carries no record")
    msg = getattr(env, kind)
    if kind == "register_broker":
        if len(msg.listeners) > MAX_LISTENERS:
            raise CorruptMetadataError(f"more than {MAX_LISTENERS} listeners")
        return RegisterBrokerRecord(
            broker_id=_broker_id(msg.broker_id, "broker id"),
            incarnation_id=_uuid(msg.incarnation_id, "incarnation id"),
            broker_epoch=_epoch(msg.broker_epoch, "broker epoch"),
            listeners=tuple(
                Listener(
                    name=_text(lst.name, "listener name"),
                    host=_text(lst.host, "listener host"),
                    port=_port(lst.port),
                )
                for lst in msg.listeners
            ),
            rack=_text(msg.rack, "rack") if msg.HasField("rack") else None,
            fenced=bool(msg.fenced),
            in_controlled_shutdown=bool(msg.in_controlled_shutdown),
        )
    if kind == "unregister_broker":
        return UnregisterBrokerRecord(*_broker_and_epoch(msg))
    if kind == "fence_broker":
        return FenceBrokerRecord(*_broker_and_epoch(msg))
    if kind == "unfence_broker":
        return UnfenceBrokerRecord(*_broker_and_epoch(msg))
    if kind == "broker_registration_change":
        return BrokerRegistrationChangeRecord(
            broker_id=_broker_id(msg.broker_id, "broker id"),
            broker_epoch=_epoch(msg.broker_epoch, "broker epoch"),
            fenced=bool(msg.fenced) if msg.HasField("fenced") else None,
            in_controlled_shutdown=(
                bool(msg.in_controlled_shutdown) if msg.HasField("in_controlled_shutdown") else None
            ),
        )
    if kind == "topic":
        return TopicRecord(
            name=_text(msg.name, "topic name"), topic_id=_uuid(msg.topic_id, "topic id")
        )
    if kind == "partition":
        return _partition_from_proto(msg, _uuid(msg.topic_id, "topic id"))
    if kind == "partition_change":
        return PartitionChangeRecord(
            topic_id=_uuid(msg.topic_id, "topic id"),
            partition_id=_epoch(msg.partition_id, "partition id"),
            leader=_leader(msg.leader, "partition change") if msg.HasField("leader") else None,
            isr=_broker_ids(msg.isr.broker_ids, "ISR") if msg.HasField("isr") else None,
        )
    if kind == "remove_topic":
        return RemoveTopicRecord(topic_id=_uuid(msg.topic_id, "topic id"))
    if kind == "config":
        return _config_from_proto(msg)
    if kind == "producer_ids":
        return ProducerIdsRecord(
            broker_id=_broker_id(msg.broker_id, "broker id"),
            broker_epoch=_epoch(msg.broker_epoch, "broker epoch"),
            next_producer_id=_epoch(msg.next_producer_id, "next producer id"),
        )
    if kind == "no_op":
        return NoOpRecord()
    raise CorruptMetadataError(f"unknown metadata record kind {kind!r}")  # pragma: no cover


def _broker_and_epoch(msg: Any) -> tuple[int, int]:
    return _broker_id(msg.broker_id, "broker id"), _epoch(msg.broker_epoch, "broker epoch")


def _port(value: int) -> int:
    if not 0 < value < 65536:
        raise CorruptMetadataError(f"listener port {value} is not in 1..65535")
    return int(value)


def _partition_from_proto(msg: Any, topic_id: uuid.UUID) -> PartitionRecord:
    return PartitionRecord(
        topic_id=topic_id,
        partition_id=_epoch(msg.partition_id, "partition id"),
        replicas=_broker_ids(msg.replicas, "replicas"),
        isr=_broker_ids(msg.isr, "ISR"),
        leader=_leader(msg.leader, "partition"),
        leader_epoch=_epoch(msg.leader_epoch, "leader epoch"),
        partition_epoch=_epoch(msg.partition_epoch, "partition epoch"),
    )


def _config_from_proto(msg: Any) -> ConfigRecord:
    try:
        resource_type = ConfigResourceType(msg.resource_type)
    except ValueError:
        raise CorruptMetadataError(f"unknown config resource type {msg.resource_type}") from None
    return ConfigRecord(
        resource_type=resource_type,
        resource_name=_text(msg.resource_name, "config resource name"),
        name=_text(msg.name, "config name"),
        value=(
            _text(msg.value, "config value", MAX_CONFIG_VALUE_CHARS)
            if msg.HasField("value")
            else None
        ),
    )


def _parse(message: Any, data: bytes, what: str) -> None:
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        # protobuf raises DecodeError on malformed input, and RuntimeWarning-like errors
        # (e.g. recursion limits) as RuntimeError; both mean "bad bytes" here.
        raise CorruptMetadataError(f"malformed {what}: {exc}") from None


def encode_record(record: MetadataRecord) -> bytes:
    """One record as a serialized ``MetadataRecord`` envelope."""
    data: bytes = record_to_proto(record).SerializeToString(deterministic=True)
    return data


def decode_record(data: bytes) -> MetadataRecord:
    """The record in a serialized envelope; raises ``CorruptMetadataError``."""
    if len(data) > MAX_BATCH_BYTES:
        raise CorruptMetadataError(f"record of {len(data)} bytes exceeds {MAX_BATCH_BYTES}")
    env = pb.MetadataRecord()
    _parse(env, data, "metadata record")
    return record_from_proto(env)


def encode_batch(records: Sequence[MetadataRecord]) -> bytes:
    """The payload of one metadata log entry: the records, committed and replayed together."""
    batch = pb.MetadataRecordBatch()
    batch.records.extend(record_to_proto(r) for r in records)
    data: bytes = batch.SerializeToString(deterministic=True)
    if len(data) > MAX_BATCH_BYTES:
        # The decoder would refuse it on every node: fail at the writer instead.
        raise ValueError(f"metadata batch of {len(data)} bytes exceeds {MAX_BATCH_BYTES}")
    return data


def decode_batch(data: bytes) -> list[MetadataRecord]:
    """The records of one metadata log entry; raises ``CorruptMetadataError``."""
    if len(data) > MAX_BATCH_BYTES:
        raise CorruptMetadataError(f"batch of {len(data)} bytes exceeds {MAX_BATCH_BYTES}")
    batch = pb.MetadataRecordBatch()
    _parse(batch, data, "metadata record batch")
    return [record_from_proto(env) for env in batch.records]


# ---- snapshots -------------------------------------------------------------------------------


def encode_snapshot(image: MetadataImage) -> bytes:
    """The image as snapshot bytes; :func:`decode_snapshot` gives an equal image back."""
    snap = pb.MetadataSnapshot()
    snap.offset = image.offset
    snap.epoch = image.epoch
    snap.next_producer_id = image.next_producer_id
    snap.last_broker_epoch = image.last_broker_epoch
    for _, broker in sorted(image.brokers.items()):
        entry = snap.brokers.add()
        entry.registration_offset = broker.registration_offset
        reg = record_to_proto(
            RegisterBrokerRecord(
                broker_id=broker.broker_id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.broker_epoch,
                listeners=broker.listeners,
                rack=broker.rack,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
        ).register_broker
        entry.registration.CopyFrom(reg)
    for topic in image.topics.values():
        topic_entry = snap.topics.add()
        topic_entry.topic.name = topic.name
        topic_entry.topic.topic_id = topic.topic_id.bytes
        add = topic_entry.partitions.add
        for partition_id, state in topic.partitions.items():
            # Field by field rather than via PartitionRecord: this loop is the hot path of
            # a 10 000-partition snapshot.
            msg = add()
            msg.partition_id = partition_id
            msg.replicas.extend(state.replicas)
            msg.isr.extend(state.isr)
            msg.leader = state.leader
            msg.leader_epoch = state.leader_epoch
            msg.partition_epoch = state.partition_epoch
    # Sorted, so every replica encodes the same image to the same bytes.
    for resource, table in sorted(
        image.configs.items(), key=lambda item: (item[0].resource_type, item[0].name)
    ):
        for name, value in sorted(table.items()):
            _config_to_proto(
                ConfigRecord(resource.resource_type, resource.name, name, value), snap.configs.add()
            )
    payload: bytes = snap.SerializeToString(deterministic=True)
    header = _HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, zlib.crc32(payload))
    return header + payload


def decode_snapshot(data: bytes, *, max_bytes: int = MAX_SNAPSHOT_BYTES) -> MetadataImage:
    """The image in snapshot bytes; raises ``CorruptMetadataError`` on any bad input."""
    if len(data) > max_bytes:
        raise CorruptMetadataError(f"snapshot of {len(data)} bytes exceeds {max_bytes}")
    if len(data) < _HEADER.size:
        raise CorruptMetadataError("snapshot is shorter than its header")
    magic, version, crc = _HEADER.unpack_from(data)
    if magic != _SNAPSHOT_MAGIC:
        raise CorruptMetadataError("not a metadata snapshot (bad magic)")
    if version != _SNAPSHOT_VERSION:
        raise CorruptMetadataError(f"unsupported snapshot version {version}")
    payload = memoryview(data)[_HEADER.size :]
    if zlib.crc32(payload) != crc:
        raise CorruptMetadataError("snapshot checksum mismatch")
    snap = pb.MetadataSnapshot()
    _parse(snap, bytes(payload), "metadata snapshot")
    if snap.offset < -1 or snap.epoch < -1:
        raise CorruptMetadataError("snapshot offset and epoch must be >= -1")
    try:
        return _image_from_snapshot(snap)
    except MetadataInvariantError as exc:
        # A snapshot is input, not a committed record of ours: inconsistent content is
        # corruption to report, not a reason to crash.
        raise CorruptMetadataError(f"inconsistent snapshot: {exc}") from None


def _image_from_snapshot(snap: Any) -> MetadataImage:
    # Rebuilt by replaying the snapshot's content as records through a delta, so a snapshot
    # passes exactly the invariant checks a log does.
    delta = MetadataDelta(MetadataImage.empty())
    registrations: list[tuple[RegisterBrokerRecord, int]] = []
    for entry in snap.brokers:
        env = pb.MetadataRecord()
        env.register_broker.CopyFrom(entry.registration)
        record = record_from_proto(env)
        assert isinstance(record, RegisterBrokerRecord)
        registrations.append((record, _epoch(entry.registration_offset, "registration offset")))
    for record, registration_offset in sorted(registrations, key=lambda r: r[1]):
        # Each broker replayed at its own registration offset keeps that offset exact.
        delta.advance(registration_offset)
        delta.replay(record, registration_offset)
    for entry in snap.topics:
        topic = TopicRecord(
            name=_text(entry.topic.name, "topic name"),
            topic_id=_uuid(entry.topic.topic_id, "topic id"),
        )
        offset = delta.offset
        delta.replay(topic, offset)
        for msg in entry.partitions:
            delta.replay(_partition_from_proto(msg, topic.topic_id), offset)
    offset = delta.offset
    for msg in snap.configs:
        delta.replay(_config_from_proto(msg), offset)
    if snap.next_producer_id < 0 or snap.last_broker_epoch < 0:
        raise CorruptMetadataError("snapshot producer id and broker epoch must be >= 0")
    if snap.next_producer_id > 0:
        delta.replay(ProducerIdsRecord(-1, -1, int(snap.next_producer_id)), offset)
    if snap.offset < delta.offset:
        raise CorruptMetadataError("a broker registration is newer than the snapshot offset")
    delta.advance(int(snap.offset), int(snap.epoch))
    image = delta.apply()
    if snap.last_broker_epoch < image.last_broker_epoch:
        raise CorruptMetadataError("last broker epoch is below a registered broker's epoch")
    return replace(image, last_broker_epoch=int(snap.last_broker_epoch))
