"""Shared by the tests that run a broker's shells in-process against a scripted controller:
the committed metadata as the broker's state machine receives it, the wall clock, and a
bounded wait for what the broker's tasks do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from controller.quorum.metadata_machine import MetadataStateMachine
from controller.raft import Entry
from lograft.metadata import MetadataRecord, encode_batch

WAIT_S = 10.0
"""Real seconds a test waits for something the broker's tasks do at once."""


def now_ms() -> int:
    """The wall clock in milliseconds, as the broker reads it."""
    return int(time.time() * 1000)


class Image:
    """Commits metadata records into the broker's state machine, one entry each call."""

    def __init__(self, machine: MetadataStateMachine) -> None:
        self.machine = machine
        self._offset = 0

    def commit(self, *records: MetadataRecord) -> None:
        """Apply ``records`` as the next committed entry."""
        entry = Entry(self._offset, 1, encode_batch(list(records)))
        self._offset += 1
        self.machine.apply([entry])


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Let the broker's tasks run until ``condition`` holds (at most ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
