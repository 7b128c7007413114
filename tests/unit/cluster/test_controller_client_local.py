"""A broker's calls to the controller on its own node are made in-process, as a framed
call would be answered: same response, errors typed, a deadline kept."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

import pytest

from cluster.controller_client import ControllerClient
from controller.quorum.driver import RaftDriver
from lograft.protocol.errors import NotControllerError, RequestTimedOutError
from lograft.protocol.wire import controller_pb2 as cpb

# A voter whose address accepts nothing: a call that left the process would fail.
VOTERS = {1: "127.0.0.1:9"}
REQUEST = cpb.BrokerHeartbeatRequest(broker_id=1, broker_epoch=7)


@dataclass
class _Config:
    node_id: int


@dataclass
class _Status:
    leader_id: int | None


class _Driver:
    """What the client reads of the Raft driver: this node's id and the leader it knows."""

    def __init__(self, node_id: int, leader_id: int) -> None:
        self.config = _Config(node_id)
        self._leader_id = leader_id

    def status(self) -> _Status:
        return _Status(self._leader_id)


def _client(handler: Any) -> ControllerClient:
    driver = cast(RaftDriver, _Driver(node_id=1, leader_id=1))
    return ControllerClient(VOTERS, driver, local={"BrokerHeartbeat": handler})


async def test_a_heartbeat_to_this_nodes_controller_is_answered_in_process() -> None:
    seen: list[Any] = []

    async def heartbeat(request: Any, context: None) -> Any:
        seen.append(request)
        return cpb.BrokerHeartbeatResponse(is_caught_up=True, leader_id=1)

    response = await _client(heartbeat).call("BrokerHeartbeat", REQUEST, 5.0, movable=True)
    assert seen == [REQUEST]
    assert response.is_caught_up and response.leader_id == 1


async def test_a_local_controller_that_crashes_is_an_error_the_broker_retries() -> None:
    async def crashed(request: Any, context: None) -> Any:
        raise KeyError("a bug")

    # Typed as the framed server would answer it (UNKNOWN_SERVER_ERROR), so the broker's
    # heartbeat loop retries instead of dying on a KeyError; here until the deadline.
    with pytest.raises(NotControllerError, match="KeyError"):
        await _client(crashed).call("BrokerHeartbeat", REQUEST, 0.3)


async def test_a_local_controller_that_does_not_answer_times_the_call_out() -> None:
    async def stalled(request: Any, context: None) -> Any:
        await asyncio.get_running_loop().create_future()  # never answered

    with pytest.raises(RequestTimedOutError, match="did not answer BrokerHeartbeat"):
        await _client(stalled).call("BrokerHeartbeat", REQUEST, 0.1)
