"""``TopicPartition`` and the rules for topic names, shared by broker, controller and clients.

Pure: no I/O, so the controller's decision functions can use it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from lograft.protocol.errors import InvalidRequestError, InvalidTopicError

__all__ = ["MAX_PARTITIONS", "TopicPartition", "partition_for_name", "validate_topic_name"]

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
"""Upper bound on partitions per topic: a request cannot make the node open unbounded files."""


def validate_topic_name(name: str) -> None:
    """Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )


class TopicPartition(NamedTuple):
    """A topic name and a partition number.

    A named tuple, not a dataclass: it keys the hottest dicts of the broker and the
    producer, and a tuple hashes and compares in C where a frozen dataclass runs a Python
    ``__hash__`` (a dict lookup cost five times as much). As a tuple it also equals the
    plain tuple ``(topic, partition)``, as kafka-python's ``TopicPartition`` does.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def partition_for_name(name: str, partition_count: int) -> int:
    """The partition of an internal topic that owns ``name`` (a group id in
    ``__consumer_offsets``, a transactional id in ``__transaction_state``): Kafka's
    ``Utils.abs(name.hashCode()) % partition_count``, bit for bit."""
    if partition_count <= 0:
        raise InvalidRequestError(f"partition_count must be positive, not {partition_count}")
    h = 0
    raw = name.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):  # Java's String.hashCode over UTF-16 code units
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    signed = h - 2**32 if h >= 2**31 else h
    return (0 if signed == -(2**31) else abs(signed)) % partition_count
