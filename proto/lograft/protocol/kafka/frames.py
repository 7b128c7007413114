"""Kafka protocol frames: the size prefix, the request header, the response header.

A frame is a 4-byte big-endian size and that many bytes. A request starts with its header
(``RequestHeader`` v1, or v2 when the request's version is flexible: then the header ends
with a tagged-field section); a response with the correlation id, followed by a tagged-field
section when the response's version is flexible, except for ApiVersions, whose response
header is always v0 so that a client can read it whatever version it asked for.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lograft.protocol.kafka.codec import KafkaDecodeError, decode, encode_chunks
from lograft.protocol.kafka.schema import MessageSchema, message

__all__ = [
    "API_VERSIONS_KEY",
    "BrokerCall",
    "RequestHeader",
    "read_request_header",
    "response_frame",
    "take_frame",
]

BrokerCall = Callable[[str, Any], Awaitable[Any]]
"""Calls the Broker service's handler of a method by name with a ``lograft.v1`` request."""

API_VERSIONS_KEY = 18
"""ApiVersions' API key: its answer's header is v0 at every version."""
_SIZE = struct.Struct(">i")
_KEY_AND_VERSION = struct.Struct(">hh")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Who asks for what: the API, its version, the answer's correlation id, the client."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def take_frame(buffer: bytearray, max_bytes: int) -> bytes | None:
    """Remove and return the first whole frame's body from ``buffer``; ``None`` until one
    has arrived. Raises ``KafkaDecodeError`` for a size below a header's or above
    ``max_bytes``, before the body is read."""
    if len(buffer) < _SIZE.size:
        return None
    (size,) = _SIZE.unpack_from(buffer, 0)
    if size < _KEY_AND_VERSION.size + 4 or size > max_bytes:
        raise KafkaDecodeError(f"a request frame of {size} bytes (the limit is {max_bytes})")
    end = _SIZE.size + size
    if len(buffer) < end:
        return None
    body = bytes(buffer[_SIZE.size : end])
    del buffer[:end]
    return body


def read_request_header(
    frame: bytes, request_schema: MessageSchema | None
) -> tuple[RequestHeader, int]:
    """The header of ``frame`` and where the request body starts. ``request_schema``: the
    definition of the request the header names (``None`` for an API not served here, whose
    header is read as v1: its body is never read)."""
    api_key, api_version = _KEY_AND_VERSION.unpack_from(frame, 0)
    flexible = request_schema is not None and api_version in request_schema.flexible
    fields, end = decode(message("RequestHeader"), 2 if flexible else 1, frame)
    header = RequestHeader(api_key, api_version, fields["correlation_id"], fields["client_id"])
    return header, end


def response_frame(
    header: RequestHeader, schema: MessageSchema, version: int, body: Mapping[str, Any]
) -> list[bytes | memoryview]:
    """A whole response frame (size, header, body) as chunks to write in order."""
    flexible_header = version in schema.flexible and header.api_key != API_VERSIONS_KEY
    chunks = encode_chunks(
        message("ResponseHeader"),
        1 if flexible_header else 0,
        {"correlation_id": header.correlation_id},
    )
    chunks += encode_chunks(schema, version, body)
    size = sum(len(chunk) for chunk in chunks)
    return [_SIZE.pack(size), *chunks]
