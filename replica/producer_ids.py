"""Producer ids for idempotent producers, handed out from blocks (Kafka's ProducerIdManager).

A broker in a quorum takes blocks from the active controller (``AllocateProducerIds``, a
committed metadata record, so no id is ever handed out twice in the cluster); a standalone
node takes them from a file in its data directory, written durably before any id of the
block is given out, so a restart never reuses one. A new id starts at epoch 0.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from lograft.durable import write_file_atomically
from lograft.protocol.errors import KafkaStorageError

__all__ = ["LOCAL_BLOCK_SIZE", "LocalProducerIdBlocks", "ProducerIdAllocator"]

log = logging.getLogger(__name__)

LOCAL_BLOCK_SIZE = 1000
"""Producer ids a standalone node reserves with each write of its ``producer-id-block``;
the controller hands out blocks of as many (Kafka's block size)."""
_LOCAL_FILE = "producer-id-block"

BlockSource = Callable[[], Awaitable[tuple[int, int]]]
"""Returns a fresh block as ``(first producer id, size)``; raises a typed error."""


class ProducerIdAllocator:
    """Hands out producer ids one at a time; fetches a new block when the current one ends."""

    def __init__(self, fetch_block: BlockSource) -> None:
        self._fetch_block = fetch_block
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_producer_id(self) -> int:
        """A producer id never handed out before (by any broker of the cluster)."""
        async with self._lock:
            if self._next >= self._end:
                start, size = await self._fetch_block()
                if start < 0 or size < 1:
                    raise KafkaStorageError(f"invalid producer id block start={start} size={size}")
                self._next, self._end = start, start + size
                log.info("producer id block start=%d size=%d", start, size)
            producer_id = self._next
            self._next += 1
            return producer_id


class LocalProducerIdBlocks:
    """Blocks for a standalone node, recorded in ``producer-id-block`` before use."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / _LOCAL_FILE

    def _take(self) -> tuple[int, int]:
        start = 0
        if self._path.exists():
            text = self._path.read_text().strip()
            if not text.isdigit():
                raise KafkaStorageError(f"{self._path} does not hold a producer id: {text!r}")
            start = int(text)
        write_file_atomically(self._path, f"{start + LOCAL_BLOCK_SIZE}\n".encode())
        return start, LOCAL_BLOCK_SIZE

    async def __call__(self) -> tuple[int, int]:
        """Reserve the next block durably (off the event loop)."""
        return await asyncio.get_running_loop().run_in_executor(None, self._take)
