"""Framed calls to one broker: an asyncio connection, usable from its loop or any thread.

:class:`FramedChannel` holds one connection to a listener and pipelines calls on it,
pairing answers by correlation id. It connects on the first call, and again on the first
call after the connection broke; every call waiting on a broken connection fails with a
retriable ``NetworkError``, and a call not answered in its timeout with
``RequestTimedOutError``. A broker's error answer becomes the typed error it names.

In the node (the follower fetcher) calls are awaited with :meth:`FramedChannel.call`. The
synchronous clients run their channels on a :class:`ClientLoop` thread and call
:meth:`FramedChannel.submit` from theirs, which returns a ``concurrent.futures.Future``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from lograft.protocol.errors import (
    LograftError,
    NetworkError,
    RequestTimedOutError,
    UnknownServerError,
)
from lograft.protocol.framed.protocol import (
    HEADER,
    MAGIC,
    METHOD_IDS,
    METHODS,
    STATUS_OK,
    FrameReceiver,
    FrameTooLargeError,
    NotFramedError,
    OversizedFrame,
    error_from_text,
)

__all__ = ["ClientLoop", "FramedChannel"]

log = logging.getLogger(__name__)

_Done = Callable[[Any], None]
"""Called once with the response or the ``LograftError`` a call ended with."""


class FramedChannel:
    """Pipelined framed calls over one connection to ``host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        *,
        max_request_bytes: int,
        max_response_bytes: int,
        connect_timeout_s: float,
    ) -> None:
        """``loop`` runs the connection; :meth:`call` must run on it, :meth:`submit` may be
        called from any thread."""
        self.host = host
        self.port = port
        self.target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._loop = loop
        self._max_request_bytes = max_request_bytes
        self.max_response_bytes = max_response_bytes
        self._connect_timeout_s = connect_timeout_s
        self._ids = itertools.count(1)
        self._connection: _ClientConnection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._waiting: list[tuple[bytes, int]] = []
        self._pending: dict[int, tuple[int, _Done, asyncio.TimerHandle]] = {}
        self._closed = False
        self.speaks_frames: bool | None = None
        """Whether the broker answered the handshake (``None`` until it has been asked);
        ``False`` makes every call fail with ``NotFramedError`` at once."""

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        """Call ``method`` and return its response; raises the call's ``LograftError``."""
        future: asyncio.Future[Any] = self._loop.create_future()

        def done(outcome: Any) -> None:
            if not future.done():
                future.set_result(outcome)

        self._start(METHOD_IDS[method], request.SerializeToString(), timeout_s, done)
        outcome = await future
        if isinstance(outcome, LograftError):
            raise outcome
        return outcome

    def submit(self, method: str, request: Any, timeout_s: float) -> concurrent.futures.Future[Any]:
        """Start a call from any thread; the future ends with the response or raises its
        ``LograftError``. Callbacks run on the channel's loop thread."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def done(outcome: Any) -> None:
            if isinstance(outcome, LograftError):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        payload = request.SerializeToString()
        try:
            self._loop.call_soon_threadsafe(
                self._start, METHOD_IDS[method], payload, timeout_s, done
            )
        except RuntimeError:  # the loop is closed: the client is closing
            future.set_exception(NetworkError(f"{self.target}: client closed"))
        return future

    def close(self) -> None:
        """Close the connection (on the loop); calls still waiting fail with ``NetworkError``."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._connection is not None:
            self._connection.close()
        self._fail_all(NetworkError(f"{self.target}: channel closed"))

    # -- on the loop

    def _start(self, method: int, payload: bytes, timeout_s: float, done: _Done) -> None:
        if self._closed:
            done(NetworkError(f"{self.target}: channel closed"))
            return
        if self.speaks_frames is False:
            done(NotFramedError(f"{self.target} speaks only gRPC"))
            return
        if len(payload) > self._max_request_bytes:
            done(
                FrameTooLargeError(
                    f"request of {len(payload)} bytes is larger than the client's limit "
                    f"({self._max_request_bytes})"
                )
            )
            return
        correlation_id = next(self._ids) & 0xFFFFFFFF
        timer = self._loop.call_later(timeout_s, self._expire, correlation_id, timeout_s)
        self._pending[correlation_id] = (method, done, timer)
        frame = HEADER.pack(len(payload), correlation_id, method) + payload
        connection = self._connection
        if connection is not None and connection.open:
            connection.write(frame)
            return
        self._waiting.append((frame, correlation_id))
        if self._connecting is None:
            self._connecting = self._loop.create_task(self._connect())

    async def _connect(self) -> None:
        connection: _ClientConnection | None = None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await self._loop.create_connection(
                    lambda: _ClientConnection(self), self.host, self.port
                )
                connection.write(MAGIC)
                # Shielded: closing the channel (or the timeout) cancels this wait, not the
                # connection's own record of the handshake, which bytes read later may end.
                framed = await asyncio.shield(connection.handshake)
                if framed is None:
                    raise connection.error or NetworkError(
                        f"{self.target}: connection closed during the handshake"
                    )
        except BaseException as exc:
            if connection is not None:
                connection.close()
            if not isinstance(exc, OSError | TimeoutError | LograftError):
                raise  # cancelled: the channel is closing
            error = (
                exc
                if isinstance(exc, LograftError)
                else NetworkError(f"{self.target}: {_reason(exc)}")
            )
            log.debug("framed connect failed target=%s error=%s", self.target, error.message)
            self._connecting = None
            self._fail_waiting(error)
            return
        self._connecting = None
        if self._closed or not framed:
            connection.close()
            if not framed:
                self.speaks_frames = False
                log.info("broker speaks only grpc target=%s", self.target)
                self._fail_waiting(NotFramedError(f"{self.target} speaks only gRPC"))
            return
        self.speaks_frames = True
        self._connection = connection
        waiting, self._waiting = self._waiting, []
        for frame, correlation_id in waiting:
            if correlation_id in self._pending:  # not expired meanwhile
                connection.write(frame)

    def _expire(self, correlation_id: int, timeout_s: float) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is not None:
            entry[1](RequestTimedOutError(f"{self.target}: no answer in {timeout_s:.3f} s"))

    def answered(self, correlation_id: int, status: int, body: bytes | bytearray) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return  # timed out before it came
        method, done, timer = entry
        timer.cancel()
        if status != STATUS_OK:
            done(error_from_text(body))
            return
        try:
            response = METHODS[method].response_type.FromString(body)
        except DecodeError as exc:
            done(UnknownServerError(f"{self.target}: undecodable answer: {exc}"))
            return
        done(response)

    def lost(self, connection: _ClientConnection, error: LograftError) -> None:
        if self._connection is connection:
            self._connection = None
        self._fail_all(error)

    def _fail_waiting(self, error: LograftError) -> None:
        waiting, self._waiting = self._waiting, []
        for _, correlation_id in waiting:
            entry = self._pending.pop(correlation_id, None)
            if entry is not None:
                entry[2].cancel()
                entry[1](error)

    def _fail_all(self, error: LograftError) -> None:
        self._waiting.clear()
        pending, self._pending = self._pending, {}
        for _, done, timer in pending.values():
            timer.cancel()
            done(error)


class _ClientConnection(asyncio.BufferedProtocol):
    """The connection of one :class:`FramedChannel`: reads answer frames."""

    def __init__(self, channel: FramedChannel) -> None:
        self._channel = channel
        self._transport: asyncio.Transport | None = None
        self._receiver = FrameReceiver(channel.max_response_bytes)
        self.error: LograftError | None = None
        """Why this side closed the connection, if it did."""
        self.handshake: asyncio.Future[bool | None] = channel._loop.create_future()
        """Whether the broker answered :data:`MAGIC` with it (a gRPC-only server does not);
        ``None`` when the connection ended first."""

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def write(self, frame: bytes) -> None:
        assert self._transport is not None
        self._transport.write(frame)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        receiver = self._receiver
        receiver.received(nbytes)
        handshake = self.handshake
        if not handshake.done():
            preamble = receiver.take_preamble(len(MAGIC))
            if preamble is None:
                return
            handshake.set_result(preamble == MAGIC)
        if not handshake.result():  # a gRPC server's bytes: the connection closes
            receiver.discard()
            return
        channel = self._channel
        try:
            frames = receiver.frames()
        except OversizedFrame as oversized:
            self.error = FrameTooLargeError(
                f"{channel.target}: answer of {oversized.length} bytes is larger than the "
                f"client's limit ({channel.max_response_bytes})"
            )
            receiver.discard()
            self.close()
            return
        for frame in frames:
            channel.answered(*frame)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = _reason(exc) if exc is not None else "connection closed"
        error = self.error or NetworkError(f"{self._channel.target}: {reason}")
        if not self.handshake.done():
            self.handshake.set_result(None)
        self._channel.lost(self, error)


def _reason(exc: BaseException) -> str:
    """The few words a person needs for a connection failure."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, BrokenPipeError):
        return "connection closed"
    text = str(exc).lower()
    if "name or service not known" in text or "nodename nor servname" in text:
        return "name not resolved"
    if "unreachable" in text:
        return "network unreachable"
    return str(exc) or type(exc).__name__


class ClientLoop:
    """An asyncio loop on a daemon thread, for the framed channels of a synchronous client."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # As asyncio.run ends: let closed transports and cancelled connects finish.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(
                asyncio.gather(*tasks, asyncio.sleep(0), return_exceptions=True)
            )
            loop.run_until_complete(asyncio.sleep(0))
        finally:
            loop.close()

    def close(self, channels: list[FramedChannel]) -> None:
        """Close ``channels`` on the loop, then stop the loop and wait for its thread."""

        def shut() -> None:
            for channel in channels:
                channel.close()
            self.loop.call_soon(self.loop.stop)  # after the transports' own close callbacks

        try:
            self.loop.call_soon_threadsafe(shut)
        except RuntimeError:
            return  # already closed
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
