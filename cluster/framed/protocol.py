"""The frame format and the methods it carries.

A client opens a TCP connection and sends :data:`MAGIC` once, and the broker answers with
it before anything else. Then each request is a frame
``length:u32 correlation_id:u32 method:u8`` followed by ``length`` bytes of the method's
protobuf request; each answer is ``length:u32 correlation_id:u32 status:u8`` followed by
``length`` bytes: the protobuf response when ``status`` is :data:`STATUS_OK`, else the UTF-8
text ``"KAFKA_ERROR_NAME: message"``. Answers may come in any order (a Fetch waits on the
broker while later requests are answered); the correlation id pairs them. Every length is
checked against the receiver's limit before anything is read into memory.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from cluster import errors
from cluster.errors import LograftError, UnknownServerError
from cluster.wire import broker_pb2 as pb
from cluster.wire import controller_pb2 as cpb
from cluster.wire import raft_pb2 as rpb

__all__ = [
    "HEADER",
    "MAGIC",
    "METHODS",
    "METHOD_IDS",
    "STATUS_ERROR",
    "STATUS_OK",
    "FrameTooLargeError",
    "Method",
    "NotFramedError",
    "OversizedFrame",
    "error_from_text",
    "error_text",
    "take_frame",
]

MAGIC = b"LGRF\x01"
"""What a framed client sends first, and the broker answers with: ``LGRF`` and the format's
version. gRPC's first bytes (``PRI * HTTP/2.0``) differ from its first four, which is how the
listener tells them apart; a server that speaks only gRPC answers with an HTTP/2 SETTINGS
frame instead, which is how a client tells it is talking to one."""

HEADER = struct.Struct(">IIB")
"""``length``, ``correlation_id`` and ``method`` (a request) or ``status`` (an answer)."""

STATUS_OK = 0
STATUS_ERROR = 1


@dataclass(frozen=True, slots=True)
class Method:
    """One method a frame can carry: its name on the Broker service and its message types."""

    name: str
    request_type: Any
    response_type: Any


METHODS: dict[int, Method] = {
    1: Method("Produce", pb.ProduceRequest, pb.ProduceResponse),
    2: Method("Fetch", pb.FetchRequest, pb.FetchResponse),
    # Between nodes: the metadata quorum's messages and the brokers' session heartbeats,
    # the calls an idle cluster keeps making.
    3: Method("Step", rpb.RaftEnvelope, rpb.RaftReply),
    4: Method("BrokerHeartbeat", cpb.BrokerHeartbeatRequest, cpb.BrokerHeartbeatResponse),
}
METHOD_IDS: dict[str, int] = {method.name: number for number, method in METHODS.items()}


class NotFramedError(errors.NetworkError):
    """The server answered the handshake with something else (a broker that speaks only
    gRPC, as an older lograft does): the caller makes the call over gRPC instead."""

    retriable = False


class FrameTooLargeError(errors.RecordListTooLargeError):
    """A frame announced more bytes than its receiver accepts; the connection is closed."""


class OversizedFrame(Exception):
    """A frame header announced more bytes than the receiver's limit."""

    def __init__(self, length: int, correlation_id: int) -> None:
        super().__init__(length, correlation_id)
        self.length = length
        self.correlation_id = correlation_id


def take_frame(buffer: bytearray, limit: int) -> tuple[int, int, bytes] | None:
    """The next whole frame in ``buffer`` as ``(correlation_id, method or status, body)``,
    removed from it; ``None`` until one is whole. Raises :class:`OversizedFrame` as soon as
    a header announces a body longer than ``limit``, before any of it is kept."""
    if len(buffer) < HEADER.size:
        return None
    length, correlation_id, kind = HEADER.unpack_from(buffer)
    if length > limit:
        raise OversizedFrame(length, correlation_id)
    end = HEADER.size + length
    if len(buffer) < end:
        return None
    body = bytes(buffer[HEADER.size : end])
    del buffer[:end]
    return correlation_id, kind, body


def error_text(error: LograftError) -> bytes:
    """The body of an error answer for ``error``."""
    return f"{error.error_name}: {error.message}".encode()


def error_from_text(body: bytes) -> LograftError:
    """The typed error an error answer names (``UnknownServerError`` for a name not known)."""
    text = bytes(body).decode("utf-8", "replace")
    name, sep, message = text.partition(": ")
    cls = errors.error_type_named(name) if sep else None
    if cls is None:
        return UnknownServerError(text)
    return cls(message)
