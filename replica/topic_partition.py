"""``TopicPartition`` and the rules for topic names, shared by broker, controller and clients.

Pure: no I/O, so the controller's decision functions can use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import InvalidTopicError

__all__ = ["MAX_PARTITIONS", "TopicPartition", "validate_topic_name"]

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
"""Upper bound on partitions per topic: a request cannot make the node open unbounded files."""


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """A topic name and a partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
