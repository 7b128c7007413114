"""``TopicPartition``: the name of one partition, shared by the broker and the clients."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicPartition"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
