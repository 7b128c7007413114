"""Record keys, values and headers between JSON and bytes, as Confluent's REST Proxy has them.

* v3 produce: ``{"type": "JSON" | "BINARY" | "STRING", "data": ...}``: JSON data is
  serialized compactly, BINARY is base64, STRING is UTF-8; headers are
  ``[{"name": str, "value": base64 | null}]``; ``timestamp`` is ISO 8601 (or epoch ms).
* v2 embedded formats: ``json`` (the bytes are a JSON document, embedded as such) and
  ``binary`` (base64 strings).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .bodies import optional_int, require_dict, require_list
from .errors import BAD_REQUEST, INVALID_RECORD, KAFKA_ERROR, RestError

__all__ = [
    "DATA_TYPES",
    "EMBEDDED_FORMATS",
    "ProduceRecord",
    "TypedData",
    "decode_base64",
    "embed",
    "iso_timestamp",
    "parse_headers",
    "parse_timestamp",
    "typed_data",
    "unembed",
]

DATA_TYPES = ("JSON", "BINARY", "STRING")
"""The v3 key/value types served (no Schema Registry types)."""

EMBEDDED_FORMATS = ("binary", "json")
"""The v2 embedded formats served."""

_MAX_HEADERS = 1000


@dataclass(frozen=True, slots=True)
class TypedData:
    """A v3 key or value: its type and its bytes (``None``: null)."""

    type: str
    data: bytes | None

    def report(self) -> dict[str, object]:
        """``{"type", "size"}`` as the v3 delivery report gives it."""
        return {"type": self.type, "size": 0 if self.data is None else len(self.data)}


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """One record to produce, validated."""

    partition: int | None
    key: TypedData | None
    value: TypedData | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int | None


def decode_base64(text: object, what: str) -> bytes:
    """Standard base64 (422 if it is not)."""
    if not isinstance(text, str):
        raise RestError(422, INVALID_RECORD, f"{what} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RestError(422, INVALID_RECORD, f"{what} is not valid base64") from None


def typed_data(value: object, what: str) -> TypedData | None:
    """A v3 ``{"type", "data"}`` object as bytes; ``None`` when absent. Type defaults to JSON."""
    if value is None:
        return None
    entry = require_dict(value, what)
    kind = entry.get("type", "JSON")
    if kind not in DATA_TYPES:
        raise RestError(422, INVALID_RECORD, f"{what}.type must be one of {', '.join(DATA_TYPES)}")
    data = entry.get("data")
    if data is None:
        return TypedData(str(kind), None)
    if kind == "BINARY":
        return TypedData("BINARY", decode_base64(data, f"{what}.data"))
    if kind == "STRING":
        if not isinstance(data, str):
            raise RestError(422, INVALID_RECORD, f"{what}.data must be a string for STRING")
        return TypedData("STRING", data.encode("utf-8"))
    return TypedData("JSON", json.dumps(data, separators=(",", ":")).encode("utf-8"))


def parse_headers(value: object) -> tuple[tuple[str, bytes | None], ...]:
    """``[{"name": str, "value": base64 | null}, ...]`` as ``(name, bytes)`` pairs."""
    if value is None:
        return ()
    headers = []
    for index, item in enumerate(require_list(value, "headers", _MAX_HEADERS)):
        entry = require_dict(item, f"headers[{index}]")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise RestError(422, INVALID_RECORD, f"headers[{index}].name must be a string")
        raw = entry.get("value")
        headers.append(
            (name, None if raw is None else decode_base64(raw, f"headers[{index}].value"))
        )
    return tuple(headers)


MAX_TIMESTAMP_MS = 253_402_300_799_999
"""The last millisecond of year 9999: a later timestamp has no ISO 8601 form to report."""


def parse_timestamp(value: object) -> int | None:
    """ISO 8601 (``2024-05-01T12:00:00Z``) or epoch milliseconds, as epoch ms."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise RestError(400, BAD_REQUEST, f"timestamp {value!r} is not ISO 8601") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = int(moment.timestamp() * 1000)
    # What a producer may send (Kafka refuses negative timestamps) and a report can show.
    return optional_int(value, "timestamp", 0, MAX_TIMESTAMP_MS)


def iso_timestamp(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (``...T12:00:00.123Z``)."""
    moment = datetime.fromtimestamp(ms / 1000.0, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def embed(data: bytes | None, fmt: str, where: str) -> Any:
    """Record bytes as a v2 response embeds them: ``json`` parsed, ``binary`` base64."""
    if data is None:
        return None
    if fmt == "binary":
        return base64.b64encode(data).decode("ascii")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise RestError(
            500,
            KAFKA_ERROR,
            f"Kafka error: the record at {where} is not JSON: read it with format binary",
        ) from None


def unembed(value: object, fmt: str, what: str) -> bytes | None:
    """A v2 produced key/value as bytes: ``json`` serialized, ``binary`` from base64."""
    if value is None:
        return None
    if fmt == "binary":
        return decode_base64(value, what)
    return json.dumps(value, separators=(",", ":")).encode("utf-8")
