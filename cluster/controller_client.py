"""Calls to the active controller's ``Controller`` service, from a broker.

Any voter may be the active controller; a call goes to the one the Raft driver or the last
NOT_CONTROLLER answer names first, then to the others, until one answers as active. On a
node that is a controller too, the calls given as ``local`` handlers (the heartbeat, made
every ``broker.heartbeat.interval.ms``) reach this node's own controller in-process, not
over loopback: the same handler, without two serialisations and two socket writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any

from controller.quorum.driver import CHANNEL_OPTIONS, MAX_MESSAGE_BYTES, RaftDriver
from lograft.protocol.errors import LograftError, NotControllerError, RequestTimedOutError
from lograft.protocol.framed.peer import PeerChannel
from lograft.protocol.framed.server import Handler, call_handler
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc

__all__ = ["CONTROLLER_CALL_TIMEOUT_S", "ControllerClient"]

log = logging.getLogger(__name__)

CONTROLLER_CALL_TIMEOUT_S = 60.0
"""How long (s) a call tries the voters for the active controller (unless the caller gives
its own) before ``NotControllerError``; also each channel's connect timeout."""
RETRY_BACKOFF_S = 0.2
#: How often a call that may move checks whether the node it waits on still leads.
LEADER_CHECK_S = 0.05


class _Deposed(Exception):
    """The node a movable call waits on is no longer the Raft leader."""


class ControllerClient:
    """Calls the ``Controller`` service of the active controller, following NOT_CONTROLLER."""

    def __init__(
        self,
        voters: Mapping[int, str],
        driver: RaftDriver,
        local: Mapping[str, Handler] | None = None,
    ) -> None:
        """``local``: methods of this node's own controller (``driver``'s node), by name,
        called in-process when that node is the one to ask."""
        self._voters = dict(voters)
        self._driver = driver
        self._local = dict(local or {})
        self._channels: dict[int, PeerChannel] = {}
        self._hint: int | None = None

    def _channel(self, node_id: int) -> PeerChannel:
        channel = self._channels.get(node_id)
        if channel is None:
            channel = PeerChannel(
                self._voters[node_id],
                cpb_grpc.ControllerStub,
                max_message_bytes=MAX_MESSAGE_BYTES,
                connect_timeout_s=CONTROLLER_CALL_TIMEOUT_S,
                grpc_options=CHANNEL_OPTIONS,
            )
            self._channels[node_id] = channel
        return channel

    def _candidates(self) -> list[int]:
        leader = self._driver.status().leader_id
        order = [n for n in (leader, self._hint) if n is not None and n in self._voters]
        return order + [n for n in sorted(self._voters) if n not in order]

    async def call(
        self,
        method: str,
        request: Any,
        timeout_s: float = CONTROLLER_CALL_TIMEOUT_S,
        *,
        movable: bool = False,
    ) -> Any:
        """Call ``method`` on the active controller; retry others until ``timeout_s``.

        Returns the first response that is not NOT_CONTROLLER (for responses that carry a
        top-level ``error_code``) or an error-free one; raises ``NotControllerError`` when no
        controller answered as active in time. A ``movable`` call (one that is harmless to
        repeat, such as a heartbeat) is abandoned and sent to the new leader as soon as the
        node it waits on is known to lead no more: a stalled old controller would otherwise
        hold it until the deadline, and the new one fence the broker meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error = "no controller reachable"
        while loop.time() < deadline:
            for node_id in self._candidates():
                try:
                    rpc = self._rpc(node_id, method, request, max(0.1, deadline - loop.time()))
                    response = await (self._unless_deposed(rpc, node_id) if movable else rpc)
                except _Deposed:
                    last_error = f"controller {node_id} lost the leadership"
                    continue
                except RequestTimedOutError:
                    # The controller may have acted on it: retrying could repeat it.
                    raise RequestTimedOutError(
                        f"controller {node_id} did not answer {method} in time"
                    ) from None
                except LograftError as exc:
                    last_error = f"controller {node_id}: {exc.message}"
                    continue
                if _not_controller(response):
                    self._hint = (
                        response.leader_id if getattr(response, "leader_id", -1) >= 0 else None
                    )
                    last_error = f"controller {node_id} is not active"
                    continue
                self._hint = node_id
                return response
            await asyncio.sleep(RETRY_BACKOFF_S)
        raise NotControllerError(last_error)

    def _rpc(self, node_id: int, method: str, request: Any, timeout_s: float) -> Awaitable[Any]:
        handler = self._local.get(method) if node_id == self._driver.config.node_id else None
        if handler is None:
            return self._channel(node_id).call(method, request, timeout_s)
        return _call_local(handler, method, request, timeout_s)

    async def _unless_deposed(self, rpc: Any, node_id: int) -> Any:
        """Await ``rpc``; cancel it and raise ``_Deposed`` once another node leads."""
        task = asyncio.ensure_future(rpc)
        while True:
            done, _ = await asyncio.wait({task}, timeout=LEADER_CHECK_S)
            if done:
                return task.result()
            leader = self._driver.status().leader_id
            if leader is not None and leader != node_id:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise _Deposed(node_id)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


async def _call_local(handler: Handler, method: str, request: Any, timeout_s: float) -> Any:
    """Call this node's controller as a framed call would: in time, errors typed."""
    try:
        async with asyncio.timeout(timeout_s):
            return await call_handler(handler, request, method)
    except TimeoutError:
        raise RequestTimedOutError(
            f"this node's controller did not answer {method} in time"
        ) from None


def _not_controller(response: Any) -> bool:
    code = getattr(response, "error_code", None)
    if code == NotControllerError.code:
        return True
    # Per-item answers: topics (CreateTopics), results (CreatePartitions), responses
    # (IncrementalAlterConfigs); a non-active controller answers every item alike.
    for field in ("topics", "results", "responses"):
        items = list(getattr(response, field, ()))
        if items:
            return all(i.error_code == NotControllerError.code for i in items)
    return False
