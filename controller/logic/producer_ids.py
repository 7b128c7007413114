"""Producer-id blocks for idempotent producers (Kafka's AllocateProducerIds)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.logic.brokers import check_broker_epoch
from controller.logic.decision import DEFAULT_CONFIG, Decision
from lograft.metadata.image import MetadataImage
from lograft.metadata.records import ProducerIdsRecord
from lograft.protocol.errors import UnknownServerError

__all__ = ["MAX_PRODUCER_ID", "ProducerIdBlock", "allocate_producer_ids"]

MAX_PRODUCER_ID = 2**63 - 1
"""Producer ids are int64."""


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``first_producer_id .. first_producer_id + size - 1`` for one broker."""

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        """The last id of the block."""
        return self.first_producer_id + self.size - 1


def allocate_producer_ids(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    block_size: int = DEFAULT_CONFIG.producer_id_block_size,
) -> Decision[ProducerIdBlock]:
    """Hand the next block of producer ids to a broker.

    The next block's start is in the image (replayed from ``ProducerIdsRecord``), so blocks
    increase monotonically and no id is handed out twice, across controller failovers too.
    ``STALE_BROKER_EPOCH`` for an unknown broker or an old epoch.
    """
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    check_broker_epoch(image, broker_id, broker_epoch)
    first = image.next_producer_id
    if first + block_size - 1 > MAX_PRODUCER_ID:
        raise UnknownServerError("producer ids are exhausted")
    record = ProducerIdsRecord(broker_id, broker_epoch, first + block_size)
    return Decision((record,), ProducerIdBlock(broker_id, first, block_size))
