"""How ``lograft consume`` prints records and ``lograft produce`` reads them.

Three formats, the same on both sides:

* ``raw``: one value per line (a null value prints as ``null``).
* ``kv``: ``KEY<SEP>VALUE`` per line (Kafka's ``print.key`` / ``parse.key``); a null key or
  value prints as ``null``; ``produce`` reads a key or value equal to ``--null-marker`` as
  null.
* ``json``: one JSON object per line (JSON_SCHEMA below).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cluster.client import ConsumerRecord
from lograft.protocol.errors import InvalidRequestError

__all__ = [
    "FORMATS",
    "JSON_SCHEMA",
    "NULL_TEXT",
    "InputRecord",
    "RecordFormat",
    "decode_bytes",
    "encode_bytes",
    "format_record",
    "parse_line",
    "record_to_json",
]

RecordFormat = Literal["raw", "kv", "json"]
"""The record formats of ``consume`` and ``produce``."""

FORMATS: tuple[RecordFormat, ...] = ("raw", "kv", "json")
"""The choices of ``--format`` of ``consume`` and ``produce``."""

NULL_TEXT = b"null"
"""What ``raw`` and ``kv`` print for a null key or value (Kafka's console consumer)."""

JSON_SCHEMA = """\
JSON lines (--format json), one object per record:
  {"topic": "orders", "partition": 0, "offset": 42, "timestamp": 1700000000000,
   "key": "user-1", "value": "hello",
   "headers": [{"key": "trace", "value": "abc"}]}
  key, value and each header value are the bytes as a UTF-8 string when they are valid
  UTF-8, null when null, else base64 with an encoding field beside them:
  "value": "AAEC", "value_encoding": "base64" (likewise key_encoding, and value_encoding
  inside a header). Encoding fields appear only for base64. timestamp: ms since the epoch.
produce --format json reads the same objects: "value" is required (null: a tombstone);
"key", "headers", "partition" and "timestamp" are optional; "topic" and "offset" are
ignored, so consume's output can be produced again. "headers" may also be a plain object
{"trace": "abc"}. "partition" is used only with produce --keep-partition (then it wins over
--partition); without it records are partitioned by key, as any other input."""
"""The ``json`` format, as the help of ``consume`` and ``produce`` shows it."""

_ENCODINGS = ("utf-8", "utf8", "base64")
_JSON_INPUT_FIELDS = frozenset(
    {
        "topic",
        "partition",
        "offset",
        "timestamp",
        "key",
        "key_encoding",
        "value",
        "value_encoding",
        "headers",
    }
)


@dataclass(frozen=True, slots=True)
class InputRecord:
    """A record read from one input line of ``produce``."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None
    timestamp_ms: int | None = None


# ---- bytes in JSON ---------------------------------------------------------------------------


def encode_bytes(data: bytes | None) -> tuple[str | None, str | None]:
    """``(text, encoding)``: UTF-8 text and ``None`` when ``data`` is valid UTF-8, else
    base64 and ``"base64"``; ``(None, None)`` for null."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def decode_bytes(text: object, encoding: object, what: str) -> bytes | None:
    """The inverse of :func:`encode_bytes`; raises ``ValueError`` naming ``what``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f'"{what}" must be a string or null, got {type(text).__name__}')
    if encoding is None or encoding in ("utf-8", "utf8"):
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f'"{what}" is not valid Unicode (a lone surrogate?)') from None
    if encoding == "base64":
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ValueError(f'"{what}" is not valid base64') from None
    raise ValueError(f'"{what}_encoding" must be one of {", ".join(_ENCODINGS)}, got {encoding!r}')


# ---- output ----------------------------------------------------------------------------------


def record_to_json(record: ConsumerRecord) -> dict[str, Any]:
    """The JSON object of one record (see ``JSON_SCHEMA``)."""
    doc: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
    }
    for name, data in (("key", record.key), ("value", record.value)):
        text, encoding = encode_bytes(data)
        doc[name] = text
        if encoding is not None:
            doc[f"{name}_encoding"] = encoding
    headers = []
    for header_key, header_value in record.headers:
        text, encoding = encode_bytes(header_value)
        header: dict[str, Any] = {"key": header_key, "value": text}
        if encoding is not None:
            header["value_encoding"] = encoding
        headers.append(header)
    doc["headers"] = headers
    return doc


def format_record(record: ConsumerRecord, fmt: RecordFormat, key_separator: bytes) -> bytes:
    """One output line of ``consume``, newline included."""
    if fmt == "json":
        line = json.dumps(record_to_json(record), ensure_ascii=False, separators=(",", ":"))
        return line.encode("utf-8") + b"\n"
    value = record.value if record.value is not None else NULL_TEXT
    if fmt == "kv":
        key = record.key if record.key is not None else NULL_TEXT
        return key + key_separator + value + b"\n"
    return value + b"\n"


# ---- input -----------------------------------------------------------------------------------


def _headers_from_json(raw: object) -> tuple[tuple[str, bytes | None], ...]:
    if raw is None:
        return ()
    if isinstance(raw, Mapping):
        return tuple(
            (str(name), decode_bytes(value, None, f"headers.{name}")) for name, value in raw.items()
        )
    if not isinstance(raw, list):
        raise ValueError('"headers" must be a list of {"key": ..., "value": ...} or an object')
    headers: list[tuple[str, bytes | None]] = []
    for item in raw:
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise ValueError('each header must be an object with a string "key"')
        unknown = set(item) - {"key", "value", "value_encoding"}
        if unknown:
            raise ValueError(f"unknown header fields {sorted(unknown)}")
        name = item["key"]
        headers.append(
            (name, decode_bytes(item.get("value"), item.get("value_encoding"), f"headers.{name}"))
        )
    return tuple(headers)


def _optional_int(doc: Mapping[str, object], name: str, limit: int) -> int | None:
    """``doc[name]``: null, or an integer in ``[0, limit)`` (what the wire field holds)."""
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise ValueError(
            f'"{name}" must be null or an integer from 0 to {limit - 1}, got {value!r}'
        )
    return value


def _json_record(line: bytes) -> InputRecord:
    try:
        doc = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    unknown = set(doc) - _JSON_INPUT_FIELDS
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    if "value" not in doc:
        raise ValueError('no "value" (use "value": null for a null value)')
    return InputRecord(
        value=decode_bytes(doc["value"], doc.get("value_encoding"), "value"),
        key=decode_bytes(doc.get("key"), doc.get("key_encoding"), "key"),
        headers=_headers_from_json(doc.get("headers")),
        partition=_optional_int(doc, "partition", 2**31),
        timestamp_ms=_optional_int(doc, "timestamp", 2**63),
    )


def parse_line(
    line: bytes,
    fmt: RecordFormat,
    number: int,
    key_separator: bytes = b"\t",
    null_marker: bytes | None = None,
) -> InputRecord:
    """The record of one input line (without its newline) of ``produce``.

    Raises ``InvalidRequestError`` naming line ``number``.
    """
    if fmt == "json":
        try:
            return _json_record(line)
        except ValueError as exc:
            raise InvalidRequestError(f"line {number}: {exc}") from None

    def nullable(data: bytes) -> bytes | None:
        return None if null_marker is not None and data == null_marker else data

    if fmt == "kv":
        key, found, value = line.partition(key_separator)
        if not found:
            raise InvalidRequestError(
                f"line {number}: no key separator {key_separator.decode(errors='replace')!r}"
            )
        return InputRecord(value=nullable(value), key=nullable(key))
    return InputRecord(value=nullable(line))
