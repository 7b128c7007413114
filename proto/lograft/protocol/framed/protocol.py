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

from lograft.protocol import errors
from lograft.protocol.errors import LograftError, UnknownServerError
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import raft_pb2 as rpb

__all__ = [
    "HEADER",
    "MAGIC",
    "METHODS",
    "METHOD_IDS",
    "STATUS_ERROR",
    "STATUS_OK",
    "FrameReceiver",
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
"""An answer's ``status``: the body is the method's protobuf response."""
STATUS_ERROR = 1
"""An answer's ``status``: the body is the UTF-8 text ``"KAFKA_ERROR_NAME: message"``."""


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
"""The methods a frame can carry, by number: Produce and Fetch, which every record makes, and
the calls an idle cluster keeps making; the rest stay on gRPC (docs/decisions/0008)."""
METHOD_IDS: dict[str, int] = {method.name: number for number, method in METHODS.items()}
"""The number of each method of :data:`METHODS`, by name: what a client puts in a frame."""


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
    with memoryview(buffer) as view:
        body = bytes(view[HEADER.size : end])  # one copy (a bytearray slice is another)
    del buffer[:end]
    return correlation_id, kind, body


class FrameReceiver:
    """Frames from a stream read through :class:`asyncio.BufferedProtocol`, with as few
    copies as the sizes allow.

    The transport reads into the memory :meth:`buffer` returns and reports how much it
    read to :meth:`received`; :meth:`frames` then splits off what is whole. Small frames
    arrive together in one receive buffer and are copied out of it. A large body (a Fetch
    answer of a megabyte, a bulk Produce) is read by the kernel straight into a buffer of
    its own, which becomes the frame's body: with ``asyncio.Protocol`` the same megabyte
    was copied three times, and a consumer's I/O thread spent 3 ms of GIL time on each
    fetch.
    """

    LARGE_BODY = 64 * 1024
    """Bodies at least this long are received in place."""

    def __init__(self, limit: int, receive_size: int = 256 * 1024) -> None:
        if receive_size < HEADER.size + 2 * self.LARGE_BODY:
            raise ValueError(f"receive buffer of {receive_size} bytes is too small")
        self._limit = limit
        self._receive = bytearray(receive_size)
        self._view = memoryview(self._receive)
        self._start = 0  # the first byte not taken yet
        self._end = 0  # the end of what has been read
        self._body: bytearray | None = None  # a large body being read in place
        self._body_view = memoryview(b"")
        self._body_read = 0
        self._body_frame = (0, 0)  # its correlation id and method or status

    def buffer(self) -> memoryview:
        """Where the next read goes (never empty)."""
        if self._body is not None:
            return self._body_view[self._body_read :]
        if len(self._receive) - self._end < self.LARGE_BODY and self._start:
            # Move the partial frame at the end to the front; it is smaller than
            # LARGE_BODY (a larger one is read in place), so room is left after it.
            pending = self._end - self._start
            self._receive[:pending] = bytes(self._view[self._start : self._end])
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def take_preamble(self, size: int) -> bytes | None:
        """The first ``size`` bytes read, before any frame (a handshake); ``None`` until
        they have all arrived."""
        if self._end - self._start < size:
            return None
        preamble = bytes(self._view[self._start : self._start + size])
        self._start += size
        return preamble

    def discard(self) -> None:
        """Drop everything read and not taken."""
        self._start = self._end = 0
        self._body, self._body_view = None, memoryview(b"")

    def received(self, size: int) -> None:
        """Note ``size`` bytes read into :meth:`buffer`'s memory."""
        if self._body is not None:
            self._body_read += size
        else:
            self._end += size

    def frames(self) -> list[tuple[int, int, bytes | bytearray]]:
        """The frames now whole, in order, as ``(correlation_id, method or status, body)``.
        Raises :class:`OversizedFrame` as soon as a header announces a body longer than the
        limit."""
        if self._body is not None:
            if self._body_read < len(self._body):
                return []
            body, self._body, self._body_view = self._body, None, memoryview(b"")
            return [(*self._body_frame, body)]
        return self._frames()

    def _frames(self) -> list[tuple[int, int, bytes | bytearray]]:
        frames: list[tuple[int, int, bytes | bytearray]] = []
        view = self._view
        while self._end - self._start >= HEADER.size:
            length, correlation_id, kind = HEADER.unpack_from(self._receive, self._start)
            if length > self._limit:
                raise OversizedFrame(length, correlation_id)
            body_start = self._start + HEADER.size
            available = self._end - body_start
            if available >= length:
                frames.append((correlation_id, kind, bytes(view[body_start : body_start + length])))
                self._start = body_start + length
                continue
            if length >= self.LARGE_BODY:
                body = bytearray(length)
                body[:available] = view[body_start : self._end]
                self._body, self._body_view = body, memoryview(body)
                self._body_read = available
                self._body_frame = (correlation_id, kind)
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames


def error_text(error: LograftError) -> bytes:
    """The body of an error answer for ``error``."""
    return f"{error.error_name}: {error.message}".encode()


def error_from_text(body: bytes | bytearray) -> LograftError:
    """The typed error an error answer names (``UnknownServerError`` for a name not known)."""
    text = bytes(body).decode("utf-8", "replace")
    name, sep, message = text.partition(": ")
    cls = errors.error_type_named(name) if sep else None
    if cls is None:
        return UnknownServerError(text)
    return cls(message)
