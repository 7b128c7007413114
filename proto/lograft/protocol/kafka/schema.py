"""Kafka's message definitions, read from Kafka's own JSON files.

``messages/*.json`` are Apache Kafka's request, response and header definitions
(``clients/src/main/resources/common/message``), Apache-2.0, taken as they ship in the
kafka-python 3.0.12 wheel (``messages/NOTICE``): the one place PyPI carries them. Each file
describes every version of one message: a field exists in ``versions``, may be null in
``nullableVersions``, is a tagged field in ``taggedVersions``; the message is *flexible*
(compact lengths, tagged-field sections) in ``flexibleVersions``. :func:`message` reads one
into a :class:`MessageSchema` the codec (:mod:`lograft.protocol.kafka.codec`) walks.

Field names become snake_case (``ClientSoftwareName`` is ``client_software_name``), the
form the codec's dictionaries use.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

__all__ = [
    "PRIMITIVE_TYPES",
    "Field",
    "MessageSchema",
    "SchemaError",
    "Struct",
    "Versions",
    "message",
    "snake_case",
]

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)
"""The scalar types of Kafka's message definitions."""

_COMMENT = re.compile(r"^\s*//.*$", re.MULTILINE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class SchemaError(Exception):
    """A message definition this module cannot read (a packaging mistake, not bad input)."""


def snake_case(name: str) -> str:
    """``ClientSoftwareName`` → ``client_software_name``; ``TopicId`` → ``topic_id``."""
    return _CAMEL.sub("_", name).lower()


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive range of versions: ``3+`` is ``Versions(3, None)``, ``none`` is empty."""

    low: int
    high: int | None

    @classmethod
    def parse(cls, text: str) -> Versions:
        """Read ``"3+"``, ``"0-4"``, ``"7"`` or ``"none"``."""
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.low <= version and (self.high is None or version <= self.high)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct, in all the versions it exists in."""

    name: str
    """snake_case: the key of the codec's dictionaries."""
    type: str
    """A primitive (:data:`PRIMITIVE_TYPES`) or a struct's name; the element type if an array."""
    is_array: bool
    struct: Struct | None
    """The element struct, for a struct or an array of structs."""
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    """The value a missing field takes, already of the field's Python type."""
    flexible: Versions | None
    """A field-level override of the message's flexible versions (the header's client id:
    ``none``, always the old encoding)."""


@dataclass(frozen=True, slots=True)
class Struct:
    """A list of fields: a message body, or the element of an array field."""

    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """One JSON definition: every version of a request, response or header."""

    name: str
    api_key: int | None
    kind: str
    """``request``, ``response`` or ``header``."""
    valid: Versions
    flexible: Versions
    body: Struct


def _default(spec: dict[str, Any], base: str, is_array: bool, nullable: Versions) -> Any:
    raw = spec.get("default")
    if raw == "null":
        return None
    if is_array:
        return []
    if base == "bool":
        return raw == "true" if isinstance(raw, str) else bool(raw)
    if base in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        if raw is None or raw == "":
            return 0
        return int(raw, 16) if isinstance(raw, str) and raw.startswith("0x") else int(raw)
    if base == "float64":
        return float(raw or 0)
    if base == "string":
        return raw if isinstance(raw, str) else ""
    if base == "uuid":
        return bytes(16)
    if base in ("bytes", "records"):
        return b""
    return None


def _field(spec: dict[str, Any], common: dict[str, list[dict[str, Any]]]) -> Field:
    type_text: str = spec["type"]
    is_array = type_text.startswith("[]")
    base = type_text[2:] if is_array else type_text
    struct: Struct | None = None
    if base not in PRIMITIVE_TYPES:
        nested = spec.get("fields", common.get(base))
        if nested is None:
            raise SchemaError(f"field {spec['name']}: no definition of struct {base}")
        struct = Struct(base, tuple(_field(f, common) for f in nested))
    nullable = Versions.parse(spec.get("nullableVersions", "none"))
    flexible = spec.get("flexibleVersions")
    return Field(
        name=snake_case(spec["name"]),
        type=base,
        is_array=is_array,
        struct=struct,
        versions=Versions.parse(spec.get("versions", "0+")),
        nullable=nullable,
        tagged=Versions.parse(spec.get("taggedVersions", "none")),
        tag=spec.get("tag"),
        default=_default(spec, base, is_array, nullable),
        flexible=Versions.parse(flexible) if flexible is not None else None,
    )


@functools.cache
def message(name: str) -> MessageSchema:
    """The definition ``messages/{name}.json`` (``ProduceRequest``, ``RequestHeader``, ...)."""
    text = (resources.files(__package__) / "messages" / f"{name}.json").read_text()
    spec = json.loads(_COMMENT.sub("", text))
    common = {struct["name"]: struct["fields"] for struct in spec.get("commonStructs", [])}
    return MessageSchema(
        name=spec["name"],
        api_key=spec.get("apiKey"),
        kind=spec["type"],
        valid=Versions.parse(spec["validVersions"]),
        flexible=Versions.parse(spec.get("flexibleVersions", "none")),
        body=Struct(spec["name"], tuple(_field(f, common) for f in spec["fields"])),
    )
