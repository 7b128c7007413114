"""One Kafka protocol connection: frames in, answers out in the order asked.

The listener (:mod:`lograft.protocol.framed.server`) hands a connection here when its first
bytes are neither the framed protocol's magic nor gRPC's preface. Requests are read as they
arrive and served one after another by one task, since Kafka clients pipeline requests and
read the answers in the order they sent them. At most :data:`MAX_QUEUED` requests wait; past
that the connection is not read until the task catches up, so a client that sends without
reading holds a bounded amount of memory; and while the connection's send buffer is full
(the client reads no answers) no request is served.

What Kafka's broker does with a request it cannot serve, this does too: an ApiVersions of a
version it does not know is answered with version 0 and ``UNSUPPORTED_VERSION`` (so the
client can retry with one it knows); a frame over ``socket.request.max.bytes``, a header or
body that does not decode, an API key not served or a version of it not served closes the
connection, logged with the client's id. Nothing is stored before a request has decoded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lograft.protocol.errors import LograftError
from lograft.protocol.kafka.apis import (
    UNSUPPORTED_VERSION,
    ServedApi,
    api_versions_answer,
    served_api,
)
from lograft.protocol.kafka.codec import KafkaDecodeError, decode
from lograft.protocol.kafka.frames import (
    API_VERSIONS_KEY,
    BrokerCall,
    RequestHeader,
    read_request_header,
    response_frame,
    take_frame,
)
from lograft.protocol.kafka.schema import MessageSchema

__all__ = ["MAX_QUEUED", "KafkaSession"]

log = logging.getLogger(__name__)

MAX_QUEUED = 64
"""Requests of one connection read and not yet answered; past it reading pauses."""

Write = Callable[[list[bytes | memoryview]], None]


class KafkaSession:
    """The Kafka side of one accepted connection (fed by its listener's protocol)."""

    def __init__(
        self,
        broker: BrokerCall,
        max_request_bytes: int,
        write: Write,
        close: Callable[[], None],
        set_reading: Callable[[bool], None],
    ) -> None:
        self._broker = broker
        self._max_request_bytes = max_request_bytes
        self._write = write
        self._close = close
        self._set_reading = set_reading
        self._buffer = bytearray()
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._closed = False
        self._writable = asyncio.Event()
        self._writable.set()

    async def run(self) -> None:
        """Serve the connection's requests in order until it closes."""
        while not self._closed:
            await self._writable.wait()  # a client that reads no answers gets no more
            frame = await self._queue.get()
            if self._queue.qsize() < MAX_QUEUED:
                self._set_reading(True)
            await self._serve(frame)

    def feed(self, data: bytes | bytearray) -> None:
        """Bytes read from the connection."""
        if self._closed:
            return
        self._buffer += data
        while True:
            try:
                frame = take_frame(self._buffer, self._max_request_bytes)
            except KafkaDecodeError as exc:
                self._refuse(None, str(exc))
                return
            if frame is None:
                return
            self._queue.put_nowait(frame)
            if self._queue.qsize() >= MAX_QUEUED:
                self._set_reading(False)

    def writing_paused(self, paused: bool) -> None:
        """The connection's send buffer is full (``True``) or has drained (``False``)."""
        if paused:
            self._writable.clear()
        else:
            self._writable.set()

    def closed(self) -> None:
        """The connection is gone: answer nothing more."""
        self._closed = True
        self._writable.set()
        self._queue.put_nowait(b"")  # wakes run() to end

    async def _serve(self, frame: bytes) -> None:
        if not frame:
            return
        try:
            header, start = read_request_header(frame, _request_schema(frame))
        except (KafkaDecodeError, ValueError) as exc:
            self._refuse(None, f"request header: {exc}")
            return
        api = served_api(header.api_key)
        if api is None:
            self._refuse(header, f"API key {header.api_key} is not served")
            return
        if not api.min_version <= header.api_version <= api.max_version:
            if header.api_key == API_VERSIONS_KEY:
                self._answer(api, header, 0, api_versions_answer(UNSUPPORTED_VERSION))
                return
            self._refuse(header, f"{api.name} v{header.api_version} is not served")
            return
        try:
            request, _ = decode(api.request, header.api_version, frame, start)
        except KafkaDecodeError as exc:
            self._refuse(header, f"{api.name} v{header.api_version}: {exc}")
            return
        try:
            body = await api.serve(header, request, self._broker)
        except LograftError as exc:
            self._refuse(header, f"{api.name} failed: {exc}")
            return
        if body is not None:
            self._answer(api, header, header.api_version, body)

    def _answer(
        self, api: ServedApi, header: RequestHeader, version: int, body: dict[str, object]
    ) -> None:
        if not self._closed:
            self._write(response_frame(header, api.response, version, body))

    def _refuse(self, header: RequestHeader | None, why: str) -> None:
        client = header.client_id if header is not None else None
        log.warning("kafka request refused client_id=%s reason=%r", client, why)
        self._closed = True
        self._close()


def _request_schema(frame: bytes) -> MessageSchema | None:
    """The definition of the request a frame's first two bytes name, if it is served."""
    if len(frame) < 2:
        return None
    api = served_api(int.from_bytes(frame[:2], "big", signed=True))
    return api.request if api is not None else None
