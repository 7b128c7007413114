"""The Kafka message codec against an independent one: kafka-python 3.0.12's.

For every message definition lograft ships and every version of it, seeded random values
(null strings and arrays, empty and non-ASCII strings, extreme integers, tagged fields set
and unset) are encoded by both codecs from the same values and must give the same bytes, and
each decodes the other's bytes back to the values. Then the reader's own promises: an unknown
tagged field is skipped; a truncated frame, a length past the end, a null where none is
allowed and a six-byte varint are refused as ``KafkaDecodeError``, never an IndexError or a
huge allocation.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest

from lograft.protocol.kafka.codec import KafkaDecodeError, decode, encode
from lograft.protocol.kafka.schema import MessageSchema, Struct, message

MESSAGES = sorted(
    path.stem
    for path in (Path(__file__).parents[3] / "proto/lograft/protocol/kafka/messages").glob("*.json")
    if not path.stem.endswith("Header")
)
VALUES_PER_VERSION = 8


def _kafka_python_classes() -> dict[str, type]:
    with warnings.catch_warnings():
        # kafka-python reads its JSON with importlib.resources.read_text, deprecated in 3.11.
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.protocol

        return _classes_in(kafka.protocol)


def _classes_in(package: Any) -> dict[str, type]:
    classes: dict[str, type] = {}
    for module in pkgutil.walk_packages(package.__path__, "kafka.protocol."):
        if any(part in module.name for part in (".old", ".schemas", "generate")):
            continue
        loaded = importlib.import_module(module.name)
        for value in vars(loaded).values():
            spec = getattr(value, "_json", None)
            if isinstance(value, type) and isinstance(spec, dict) and "name" in spec:
                classes[spec["name"]] = value
    return classes


ORACLE = _kafka_python_classes()


def _random_value(struct: Struct, version: int, rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for field in struct.fields:
        if version not in field.versions:
            continue
        if version in field.nullable and rng.random() < 0.2:
            value[field.name] = None
        elif field.is_array:
            value[field.name] = [
                _random_scalar(field.type, field.struct, version, rng)
                for _ in range(rng.randint(0, 3))
            ]
        else:
            value[field.name] = _random_scalar(field.type, field.struct, version, rng)
    return value


def _random_scalar(kind: str, struct: Struct | None, version: int, rng: random.Random) -> Any:
    if struct is not None:
        return _random_value(struct, version, rng)
    bounds = {
        "int8": 7,
        "int16": 15,
        "int32": 31,
        "int64": 63,
    }
    if kind in bounds:
        bits = bounds[kind]
        return rng.choice([0, -1, -(2**bits), 2**bits - 1, rng.randint(-(2**bits), 2**bits - 1)])
    if kind == "uint16":
        return rng.randint(0, 2**16 - 1)
    if kind == "uint32":
        return rng.randint(0, 2**32 - 1)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float64":
        return rng.uniform(-1e9, 1e9)
    if kind == "uuid":
        return rng.randbytes(16)
    if kind == "string":
        return "".join(rng.choice("ab-é☃") for _ in range(rng.randint(0, 6)))
    return rng.randbytes(rng.randint(0, 40))


_ORACLE_NAMES = {
    "topic_authorized_operations": "authorized_operations",
    "cluster_authorized_operations": "authorized_operations",
}
"""Fields kafka-python names otherwise than Kafka's definitions do."""


def _operations(bitfield: int) -> set[int] | None:
    """kafka-python's form of an authorized-operations bitfield: the set bits (or None)."""
    if bitfield == -(2**31):
        return None
    return {bit for bit in range(32) if (bitfield & 0xFFFFFFFF) >> bit & 1}


def _as_oracle(cls: type, struct: Struct, version: int, value: dict[str, Any]) -> Any:
    """``value`` built as kafka-python objects of ``cls`` (its nested classes for structs)."""
    fields: dict[str, Any] = {}
    for field in struct.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.struct is not None and item is not None:
            nested = getattr(cls, field.struct.name)
            convert = lambda v, n=nested, s=field.struct: _as_oracle(n, s, version, v)  # noqa: E731
            item = [convert(v) for v in item] if field.is_array else convert(item)
        elif field.type == "uuid" and item is not None:
            item = [uuid.UUID(bytes=v) for v in item] if field.is_array else uuid.UUID(bytes=item)
        elif field.name.endswith("authorized_operations"):
            item = _operations(item)
        fields[_ORACLE_NAMES.get(field.name, field.name)] = item
    return cls(**fields)


@pytest.mark.parametrize("name", MESSAGES)
def test_every_version_encodes_as_kafka_python_does_and_reads_its_bytes(name: str) -> None:
    schema = message(name)
    oracle = ORACLE[name]
    rng = random.Random(name)
    assert schema.valid.high is not None
    for version in range(schema.valid.low, schema.valid.high + 1):
        for _ in range(VALUES_PER_VERSION):
            value = _random_value(schema.body, version, rng)
            ours = encode(schema, version, value)
            theirs = _as_oracle(oracle, schema.body, version, value).encode(version=version)
            assert ours == theirs, (name, version, value)
            decoded, end = decode(schema, version, theirs)
            assert end == len(theirs)
            assert encode(schema, version, decoded) == ours, (name, version)


def _schema(name: str) -> MessageSchema:
    return message(name)


def test_an_unknown_tagged_field_is_skipped() -> None:
    schema = _schema("ApiVersionsRequest")
    known = encode(schema, 3, {"client_software_name": "kcat", "client_software_version": "1"})
    assert known.endswith(b"\x00")  # no tagged fields
    with_unknown = known[:-1] + b"\x01" + b"\x63\x03abc"  # one field: tag 99, three bytes
    decoded, end = decode(schema, 3, with_unknown)
    assert end == len(with_unknown)
    assert decoded == {"client_software_name": "kcat", "client_software_version": "1"}


@pytest.mark.parametrize(
    ("name", "version", "frame"),
    [
        ("MetadataRequest", 4, b"\x00\x00\x00\x02\x00\x01a"),  # a name shorter than its length
        ("MetadataRequest", 4, b"\x7f\xff\xff\xff"),  # 2**31 - 1 topics in four bytes
        ("MetadataRequest", 9, b"\x80\x80\x80\x80\x80\x01"),  # a six-byte varint
        ("ProduceRequest", 7, b"\xff\xff\x00\x01"),  # cut after its acks
        ("ApiVersionsRequest", 3, b"\x00\x00"),  # a null name where none may be
        ("FindCoordinatorRequest", 2, b"\x00\x02\xff\xfe"),  # a UTF-8 string that is not
    ],
)
def test_malformed_frames_are_refused_as_decode_errors(
    name: str, version: int, frame: bytes
) -> None:
    with pytest.raises(KafkaDecodeError):
        decode(_schema(name), version, frame)
