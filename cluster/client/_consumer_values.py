"""The consumer's values: what ``poll`` and ``poll_batches`` return, the group metadata a
transactional producer needs, and the rebalance listener.

A leaf of the client: the helpers that build or pass these values import them from here,
not from the ``Consumer`` facade (``cluster.client.consumer`` re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from lograft.protocol.batch_header import parse_header
from lograft.protocol.record_codec import decode_rows

from ._connection import TopicPartition

__all__ = [
    "ConsumerBatch",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's group membership as ``Producer.send_offsets_to_transaction`` needs it
    (KIP-447): the group, and the member id and epoch the coordinator checks, so a member
    that lost its partitions cannot commit offsets for them through a transaction."""

    group_id: str
    member_id: str = ""
    member_epoch: int = -1


class ConsumerRebalanceListener:
    """Rebalance callbacks as methods (kafka-python's and Kafka's listener); override some.

    Each method gets the sorted partitions concerned. ``on_partitions_lost`` calls
    ``on_partitions_revoked`` unless overridden, as in Kafka.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Before these partitions go to another member: commit or flush work for them."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """After these partitions were added; ``seek`` here to start elsewhere."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        """These partitions may already belong to another member: do not commit them."""
        self.on_partitions_revoked(lost)


class ConsumerRecord(NamedTuple):
    """A record read from ``topic``/``partition`` at ``offset``.

    Fields: ``topic`` (str), ``partition`` (int), ``offset`` (int), ``timestamp`` (int,
    milliseconds), ``key`` and ``value`` (bytes or ``None``), ``headers`` (a tuple of
    ``(str, bytes | None)`` pairs, ``()`` by default).

    An immutable named tuple, as kafka-python's ``ConsumerRecord``: ``poll`` builds a
    whole batch of them in C, which a class with an ``__init__`` would not allow. It equals
    only another ``ConsumerRecord`` with the same fields (not a plain tuple), and hashes
    as the tuple of its fields.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    # Not equal to a plain tuple, as the dataclass this used to be: a tuple's own __eq__
    # would answer for it (tuples compare item by item) if these returned NotImplemented.
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return False if isinstance(other, tuple) else NotImplemented
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return True if isinstance(other, tuple) else NotImplemented
        return tuple.__ne__(self, other)


class ConsumerBatch(NamedTuple):
    """One fetched record batch, as bytes: what ``Consumer.poll_batches`` returns.

    ``data`` is one whole RecordBatch v2 exactly as it is stored (Kafka's format: the
    61-byte header, then the records, compressed as the producer sent them), its CRC
    checked; ``lograft.protocol.records.iter_records(data, start_offset)`` decodes it. Its offsets
    run from ``base_offset`` to ``next_offset - 1`` (a compacted batch may lack some);
    records before ``start_offset`` are not the consumer's to return (the batch straddles
    a seek, or ``poll`` returned them): skip them, or call ``records()``.
    """

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    start_offset: int
    data: bytes

    def records(self) -> list[ConsumerRecord]:
        """The batch's records from ``start_offset`` on, as ``poll`` would return them."""
        header = parse_header(self.data)
        if header.is_control:
            return []
        return decode_rows(
            ConsumerRecord, self.topic, self.partition, self.data, header, self.start_offset
        )
