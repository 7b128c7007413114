"""The node's listener: framed calls served here, every other connection relayed to gRPC.

A connection's first five bytes decide what it is. :data:`~lograft.protocol.framed.protocol.MAGIC`
makes it a framed connection: each request frame is decoded, handed to the Broker service's
own handler (the same coroutine gRPC calls) as a task, and answered when that task ends, so a
Fetch held by the broker does not stall the calls behind it. Anything else (gRPC's HTTP/2
preface) is relayed byte for byte to the node's gRPC server on loopback, with back-pressure
both ways, so every gRPC client and tool works unchanged on the same port.

A frame longer than ``max_request_bytes`` is answered ``RECORD_LIST_TOO_LARGE`` and its
connection closed without reading the body; an undecodable request is answered
``INVALID_REQUEST``. A handler's broken invariant is not answered: it propagates out of the
task, and the node's task factory halts the process (:mod:`cluster.halt`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf.message import DecodeError

from lograft.protocol.errors import (
    InvalidRequestError,
    InvariantError,
    LograftError,
    UnknownServerError,
)
from lograft.protocol.framed.protocol import (
    HEADER,
    MAGIC,
    METHODS,
    STATUS_ERROR,
    STATUS_OK,
    FrameTooLargeError,
    OversizedFrame,
    error_text,
    take_frame,
)
from lograft.protocol.kafka.session import KafkaSession

__all__ = ["FramedListener", "Handler", "call_handler"]

log = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Awaitable[Any]]
"""A Broker service method: ``(request, context)`` to response; the context is ``None``."""

MAX_IN_FLIGHT = 256
GRPC_PREFACE = b"PRI *"
"""How an HTTP/2 (gRPC) connection starts; neither it nor the framed magic: Kafka's protocol."""


async def call_handler(handler: Handler, request: Any, method: str) -> Any:
    """Run a service handler as a framed call runs it (the context is ``None``).

    Its ``LograftError`` passes through, to be answered; so does a broken invariant, which
    halts the node (:mod:`cluster.halt`) and is never answered. Any other failure is logged
    and becomes ``UNKNOWN_SERVER_ERROR``.
    """
    try:
        return await handler(request, None)
    except (InvariantError, LograftError):
        raise
    except Exception as exc:
        log.exception("call crashed method=%s", method)
        raise UnknownServerError(f"{method}: {exc!r}") from exc


"""Requests of one connection being served at once; past it the connection is not read."""

_CONCAT_BELOW = 64 * 1024
"""Answers smaller than this go out in one write with their header; larger ones in two,
which saves copying a large fetch answer."""


class FramedListener:
    """Listens on one address for framed calls and relays everything else to gRPC."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        grpc_port: int,
        handlers: dict[str, Handler],
        max_request_bytes: int,
    ) -> None:
        """``grpc_port``: the node's gRPC server on 127.0.0.1. ``handlers``: method name →
        the Broker service coroutine that serves it (empty on a node without the broker role,
        whose framed calls are then answered ``UNKNOWN_SERVER_ERROR``)."""
        self._host = host
        self._port = port
        self._grpc_port = grpc_port
        self._handlers = handlers  # filled in by the node once its services exist
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port bound (the configured one, or the one the kernel chose for port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def bind(self) -> None:
        """Bind the address without accepting yet; raises ``OSError`` when it cannot."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self._host or None,
            self._port,
            reuse_address=True,
            start_serving=False,
        )

    async def serve(self) -> None:
        """Start accepting connections (after :meth:`bind`)."""
        assert self._server is not None
        await self._server.start_serving()

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, give framed calls being served up to ``grace_s`` to answer, then
        close the framed connections. Relayed ones end with the gRPC server's own stop, or
        with :meth:`close_relays`."""
        if self._server is not None:
            self._server.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
        for connection in list(self._connections):
            if not connection.relayed:
                connection.close()
        if self._server is not None:
            await self._server.wait_closed()

    def close_relays(self) -> None:
        """Close every connection still open (after the gRPC server stopped)."""
        for connection in list(self._connections):
            connection.close()

    # -- what connections ask of their listener

    async def call_broker(self, method: str, request: Any) -> Any:
        """The Broker service's answer to ``request`` (the Kafka protocol's calls)."""
        handler = self._handlers.get(method)
        if handler is None:
            raise UnknownServerError(f"{method} is not served by this node (no broker role)")
        return await call_handler(handler, request, method)

    def handler(self, method: int) -> Handler | None:
        known = METHODS.get(method)
        return self._handlers.get(known.name) if known is not None else None

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def open_upstream(self, downstream: _Connection) -> asyncio.Transport:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(
            lambda: _Upstream(downstream), "127.0.0.1", self._grpc_port
        )
        return transport


class _Connection(asyncio.Protocol):
    """One accepted connection: undecided until its first bytes, then framed or relayed."""

    def __init__(self, listener: FramedListener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._framed = False
        self.relayed = False
        self._upstream: asyncio.Transport | None = None
        self._kafka: KafkaSession | None = None
        self._in_flight = 0
        self._reading_paused = False
        self._writing_paused = False
        self._upstream_full = False
        self._closed = False

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._listener._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._kafka is not None:
            self._kafka.closed()
        self._listener._connections.discard(self)
        if self._upstream is not None:
            self._upstream.close()

    def data_received(self, data: bytes) -> None:
        if self._kafka is not None:
            self._kafka.feed(data)
        elif self._framed:
            self._buffer += data
            self._read_frames()
        elif self.relayed:
            if self._upstream is not None:
                self._upstream.write(data)
            else:
                self._buffer += data
        else:
            self._buffer += data
            if len(self._buffer) >= len(MAGIC):
                self._decide()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost closes the upstream

    def pause_writing(self) -> None:
        # Our client reads slower than we answer: stop reading its requests (framed) or the
        # gRPC server's answers (relayed) until it catches up.
        self._writing_paused = True
        if self._kafka is not None:
            self._kafka.writing_paused(True)
        if self._upstream is not None:
            self._upstream.pause_reading()
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._kafka is not None:
            self._kafka.writing_paused(False)
        if self._upstream is not None:
            self._upstream.resume_reading()
        self._update_reading()

    # -- framed or relayed

    def _decide(self) -> None:
        if self._buffer.startswith(MAGIC):
            self._framed = True
            del self._buffer[: len(MAGIC)]
            if self._transport is not None:
                self._transport.write(MAGIC)
            self._read_frames()
            return
        if not self._buffer.startswith(GRPC_PREFACE):
            self._start_kafka()
            return
        self.relayed = True
        self._update_reading()  # off until the upstream is connected
        self._listener.track(asyncio.get_running_loop().create_task(self._connect_upstream()))

    def _start_kafka(self) -> None:
        """Serve the connection as Kafka's protocol (its first bytes are a frame's size)."""
        session = KafkaSession(
            self._listener.call_broker,
            self._listener.max_request_bytes,
            self._write_chunks,
            self.close,
            self._set_reading,
        )
        self._kafka = session
        self._listener.track(asyncio.get_running_loop().create_task(session.run()))
        pending = bytes(self._buffer)
        self._buffer.clear()
        session.feed(pending)

    def _write_chunks(self, chunks: list[bytes | memoryview]) -> None:
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            return
        transport.writelines(chunks)

    async def _connect_upstream(self) -> None:
        try:
            upstream = await self._listener.open_upstream(self)
        except OSError as exc:
            log.warning("relay to grpc failed error=%s", exc)
            self.close()
            return
        if self._closed:
            upstream.close()
            return
        self._upstream = upstream
        upstream.write(bytes(self._buffer))
        self._buffer.clear()
        self._update_reading()

    def upstream_lost(self) -> None:
        self.close()

    def upstream_data(self, data: bytes) -> None:
        if self._transport is not None and not self._closed:
            self._transport.write(data)

    def upstream_paused(self, paused: bool) -> None:
        self._upstream_full = paused
        self._update_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- frames

    def _read_frames(self) -> None:
        limit = self._listener.max_request_bytes
        while True:
            try:
                frame = take_frame(self._buffer, limit)
            except OversizedFrame as oversized:
                error = FrameTooLargeError(
                    f"request of {oversized.length} bytes is larger than "
                    f"socket.request.max.bytes ({limit})"
                )
                log.warning("framed request refused error=%s", error.message)
                self._answer(oversized.correlation_id, STATUS_ERROR, error_text(error))
                self._buffer.clear()
                self.close()
                return
            if frame is None:
                return
            correlation_id, method, body = frame
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._serve(correlation_id, method, body))
            self._listener.track(task)
            self._update_reading()

    async def _serve(self, correlation_id: int, number: int, body: bytes) -> None:
        try:
            status, payload = await self._call(number, body)
            self._answer(correlation_id, status, payload)
        finally:
            self._in_flight -= 1
            self._update_reading()

    async def _call(self, number: int, body: bytes) -> tuple[int, bytes]:
        method = METHODS.get(number)
        handler = self._listener.handler(number)
        if method is None or handler is None:
            error: LograftError = UnknownServerError(f"no framed method {number} here")
            return STATUS_ERROR, error_text(error)
        try:
            request = method.request_type.FromString(body)
        except DecodeError as exc:
            return STATUS_ERROR, error_text(InvalidRequestError(f"{method.name}: {exc}"))
        try:
            response = await call_handler(handler, request, method.name)
        except LograftError as exc:
            return STATUS_ERROR, error_text(exc)
        return STATUS_OK, response.SerializeToString()

    def _answer(self, correlation_id: int, status: int, payload: bytes) -> None:
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            return
        header = HEADER.pack(len(payload), correlation_id, status)
        if len(payload) < _CONCAT_BELOW:
            transport.write(header + payload)
        else:
            transport.write(header)
            transport.write(payload)

    # -- reading on and off

    def _update_reading(self) -> None:
        if self._framed:
            self._set_reading(self._in_flight < MAX_IN_FLIGHT and not self._writing_paused)
        elif self.relayed:
            self._set_reading(self._upstream is not None and not self._upstream_full)

    def _set_reading(self, reading: bool) -> None:
        transport = self._transport
        if transport is None or self._closed or transport.is_closing():
            return
        if reading and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
        elif not reading and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()


class _Upstream(asyncio.Protocol):
    """The relay's connection to the node's gRPC server, on behalf of one client."""

    def __init__(self, downstream: _Connection) -> None:
        self._downstream = downstream

    def data_received(self, data: bytes) -> None:
        self._downstream.upstream_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._downstream.upstream_lost()

    def pause_writing(self) -> None:
        self._downstream.upstream_paused(True)

    def resume_writing(self) -> None:
        self._downstream.upstream_paused(False)
