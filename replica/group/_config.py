"""The group coordinator's settings, and the fixed limits every request is checked against.

Shared by membership (:mod:`replica.group._membership`) and offsets
(:mod:`replica.group._offsets`): both refuse a malformed group id or partition the same way,
before anything changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidRequestError,
    UnsupportedAssignorError,
)
from lograft.protocol.topic_partition import MAX_PARTITIONS, TopicPartition, validate_topic_name
from replica.group.assignors import ASSIGNOR_NAMES, canonical_assignor

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_CLIENT_ID_LENGTH",
    "MAX_GROUP_ID_LENGTH",
    "MAX_MEMBER_ID_LENGTH",
    "GroupCoordinatorConfig",
    "validate_group_id",
    "validate_topic_partition",
]

MAX_GROUP_ID_LENGTH = 255
"""Longest group id, in characters."""
MAX_MEMBER_ID_LENGTH = 255
"""Longest member id a client may choose, in characters."""
MAX_CLIENT_ID_LENGTH = 255
"""Longest client id kept, in characters."""
INT32_MAX = 2**31 - 1
"""Largest value of an int32 request field (timeouts, leader epochs)."""
INT64_MAX = 2**63 - 1
"""Largest value of an int64 request field (offsets)."""


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """The coordinator's settings (Kafka's ``group.consumer.*`` broker configs).

    ``session_timeout_ms`` is used for members that ask for none; a member may ask for any
    value in ``[min_session_timeout_ms, max_session_timeout_ms]``. The heartbeat interval
    told to a member is ``min(heartbeat_interval_ms, its session timeout / 3)``.
    ``assignors`` lists the accepted server-side assignors; the first is the default.
    """

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    heartbeat_interval_ms: int = 5_000
    max_group_size: int = 1_000
    assignors: tuple[str, ...] = ASSIGNOR_NAMES
    offset_metadata_max_bytes: int = 4_096
    max_subscribed_topics: int = 1_000

    def __post_init__(self) -> None:
        def bad(message: str) -> InvalidConfigError:
            return InvalidConfigError(f"group coordinator: {message}")

        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms <= INT32_MAX:
            raise bad("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if (
            not self.min_session_timeout_ms
            <= self.session_timeout_ms
            <= self.max_session_timeout_ms
        ):
            raise bad("session_timeout_ms must be within [min, max]_session_timeout_ms")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise bad("need 0 < heartbeat_interval_ms < session_timeout_ms")
        if self.max_group_size < 1 or self.max_subscribed_topics < 1:
            raise bad("max_group_size and max_subscribed_topics must be positive")
        if self.offset_metadata_max_bytes < 0:
            raise bad("offset_metadata_max_bytes must not be negative")
        if not self.assignors:
            raise bad("at least one assignor is needed")
        try:
            canonical = [canonical_assignor(a) for a in self.assignors]
        except UnsupportedAssignorError as e:
            raise bad(e.message) from None
        if canonical != list(self.assignors) or len(set(canonical)) != len(canonical):
            raise bad(f"assignors must be distinct canonical names from {ASSIGNOR_NAMES}")


def validate_group_id(group_id: str) -> None:
    """Raises ``INVALID_GROUP_ID`` for an empty, too long or unprintable group id."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupIdError("the group id must not be empty")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidGroupIdError(f"the group id is longer than {MAX_GROUP_ID_LENGTH} characters")
    if not group_id.isprintable():
        raise InvalidGroupIdError(f"the group id {group_id!r} has unprintable characters")


def validate_topic_partition(tp: TopicPartition) -> None:
    """Raises ``INVALID_TOPIC_EXCEPTION`` or ``INVALID_REQUEST`` for a malformed partition."""
    if not isinstance(tp, TopicPartition):
        raise InvalidRequestError(f"{tp!r} is not a TopicPartition")
    validate_topic_name(tp.topic)
    if not isinstance(tp.partition, int) or not 0 <= tp.partition < MAX_PARTITIONS:
        raise InvalidRequestError(f"partition {tp.partition!r} of {tp.topic} is out of range")
