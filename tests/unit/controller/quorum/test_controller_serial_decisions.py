"""The active controller decides on an image holding every earlier decision, even when the
caller of an earlier one gave up.

A broker's request times out on a loaded controller and gRPC cancels its handler while the
decision's records wait to commit. The next decision must still wait for those records:
made on the image without them, a second producer-id block was handed out from the same
start and every node replaying the log halted (``ProducerIds: next producer id 1000 does
not advance past 1000``; the chaos suite's clock-jump run on a loaded machine).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from controller.logic import Decision
from controller.quorum.controller import QuorumController
from controller.raft import Role
from lograft.metadata import NoOpRecord


@dataclass
class _Status:
    role: Role = Role.LEADER
    epoch: int = 1
    leader_id: int | None = 1


@dataclass
class _Config:
    node_id: int = 1


@dataclass
class _Driver:
    """A leader whose proposals commit when the test says so."""

    config: _Config = field(default_factory=_Config)
    proposals: asyncio.Queue[asyncio.Future[int]] = field(default_factory=asyncio.Queue)

    def status(self) -> _Status:
        return _Status()

    async def propose(self, data: bytes) -> int:
        committed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.proposals.put_nowait(committed)
        return await committed


@dataclass
class _Machine:
    """The applied image: here, how many decisions were committed and replayed."""

    applied: int = 0
    leader_change_offsets: list[tuple[int, int]] = field(default_factory=lambda: [(0, 1)])

    @property
    def image(self) -> _Machine:
        return self

    def unfenced_brokers(self) -> list[object]:
        return []

    def add_listener(self, listener: object) -> None:
        """The controller's fencer listens for image changes; this test makes none."""


async def test_a_decision_waits_for_an_earlier_one_whose_caller_gave_up() -> None:
    driver, machine = _Driver(), _Machine()
    controller = QuorumController(driver, machine, random.Random(1))  # type: ignore[arg-type]
    seen: list[int] = []

    def decide() -> Decision[int]:
        seen.append(machine.applied)  # what this decision was made on
        return Decision((NoOpRecord(),), machine.applied)

    first = asyncio.create_task(controller._decide(decide))
    first_commit = await driver.proposals.get()
    first.cancel()  # the broker's deadline passed: gRPC cancels the handler
    second = asyncio.create_task(controller._decide(decide))
    for _ in range(10):
        await asyncio.sleep(0)
    assert seen == [0], "the second decision was made before the first one committed"
    machine.applied += 1  # the first decision's records commit and are replayed
    first_commit.set_result(1)
    second_commit = await driver.proposals.get()
    assert seen == [0, 1]
    second_commit.set_result(2)
    assert await second == 1
    assert first.cancelled()
