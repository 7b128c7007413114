"""Calls from one node to another, from the node's own loop: framed, else gRPC.

A :class:`PeerChannel` makes a call as a frame when the method has one
(:data:`~lograft.protocol.framed.protocol.METHODS`) and the peer answered the framed handshake;
otherwise, and for a peer that speaks only gRPC (an older lograft during a rolling upgrade,
or a bare gRPC server in a test), over a ``grpc.aio`` channel it opens on first need. Either
way a failure is a ``LograftError``: no answer in time is ``RequestTimedOutError``, and any
other failed call a retriable ``NetworkError`` (or the Kafka error the peer named).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from lograft.protocol.errors import NetworkError, RequestTimedOutError
from lograft.protocol.framed.client import FramedChannel
from lograft.protocol.framed.protocol import METHOD_IDS, NotFramedError

__all__ = ["PeerChannel"]

log = logging.getLogger(__name__)


class PeerChannel:
    """One peer node's address: framed calls, with gRPC behind them."""

    def __init__(
        self,
        address: str,
        stub_type: Callable[[grpc.aio.Channel], Any],
        *,
        max_message_bytes: int,
        connect_timeout_s: float,
        grpc_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        """``address`` is ``host:port``; ``stub_type`` the generated stub of the gRPC
        service that has the methods called (``RaftStub``, ``ControllerStub``, ...)."""
        host, _, port = address.rpartition(":")
        self.address = address
        self._framed = FramedChannel(
            host.strip("[]"),
            int(port),
            asyncio.get_running_loop(),
            max_request_bytes=max_message_bytes,
            max_response_bytes=max_message_bytes,
            connect_timeout_s=connect_timeout_s,
        )
        self._stub_type = stub_type
        self._grpc_options = list(grpc_options)
        self._grpc: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def call(self, method: str, request: Any, timeout_s: float) -> Any:
        """Call ``method``; returns its response or raises a ``LograftError``."""
        if method in METHOD_IDS and self._framed.speaks_frames is not False:
            try:
                return await self._framed.call(method, request, timeout_s)
            except NotFramedError:
                log.info("peer speaks only grpc address=%s method=%s", self.address, method)
        if self._stub is None:
            self._grpc = grpc.aio.insecure_channel(self.address, options=self._grpc_options)
            self._stub = self._stub_type(self._grpc)
        try:
            return await getattr(self._stub, method)(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
                raise RequestTimedOutError(f"{self.address}: no answer in time") from None
            raise NetworkError(f"{self.address}: {exc.code().name}") from None

    async def close(self) -> None:
        """Close the framed connection and the gRPC channel, if one was opened."""
        self._framed.close()
        if self._grpc is not None:
            await self._grpc.close()
