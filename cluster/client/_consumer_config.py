"""The configuration of ``Consumer`` (Kafka's ``ConsumerConfig``): names, defaults, validation.

``ConsumerConfig`` and ``CONSUMER_CONFIGS`` (its table) are re-exported by
:mod:`cluster.client.consumer`, their public home.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ._client_config import ClientConfig, ConfigDef, boolean, int_at_least, one_of, setting

__all__ = ["CONSUMER_CONFIGS", "ConsumerConfig"]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


def _int32_at_least(low: int) -> Callable[[object], int]:
    """An integer ``>= low`` that fits the int32 fields of the group protocol."""
    parse_low = int_at_least(low)

    def parse(value: object) -> int:
        number = parse_low(value)
        if number > _INT32_MAX:
            raise ValueError(f"must be at most {_INT32_MAX}")
        return number

    return parse


def _group_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string, or None for no group")
    return value


@dataclass(frozen=True, slots=True)
class ConsumerConfig(ClientConfig):
    """Every config ``Consumer`` accepts, parsed, with its default."""

    KIND: ClassVar[str] = "consumer"

    fetch_min_bytes: int = setting("fetch.min.bytes", 1, int_at_least(0), "bytes a fetch waits for")
    fetch_max_wait_ms: int = setting(
        "fetch.max.wait.ms",
        500,
        int_at_least(0),
        "longest a fetch waits",
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes",
        52428800,
        int_at_least(0),
        "bytes per fetch response",
    )
    max_partition_fetch_bytes: int = setting(
        "max.partition.fetch.bytes",
        1048576,
        int_at_least(0),
        "bytes per partition per fetch",
    )
    max_poll_records: int = setting(
        "max.poll.records",
        500,
        int_at_least(1),
        "records one poll returns at most",
    )
    auto_offset_reset: str = setting(
        "auto.offset.reset",
        "latest",
        one_of("earliest", "latest", "none"),
        "where to start without a valid position: earliest, latest or none",
    )
    group_id: str | None = setting(
        "group.id",
        None,
        _group_id,
        "the consumer group: needed by subscribe() and to commit offsets; None: no group",
    )
    enable_auto_commit: bool = setting(
        "enable.auto.commit",
        True,
        boolean,
        "with group.id: commit the positions of what poll() returned periodically, "
        "before partitions are revoked and on close()",
    )
    auto_commit_interval_ms: int = setting(
        "auto.commit.interval.ms",
        5000,
        int_at_least(0),
        "how often poll() auto-commits (enable.auto.commit)",
    )
    session_timeout_ms: int = setting(
        "session.timeout.ms",
        45000,
        _int32_at_least(1),
        "sent to the group coordinator: it removes a member it does not hear from this long",
    )
    max_poll_interval_ms: int = setting(
        "max.poll.interval.ms",
        300000,
        _int32_at_least(1),
        "longest time between poll() calls before the member leaves its group (and rejoins "
        "at the next poll); also how long it may take to release revoked partitions",
    )
    isolation_level: str = setting(
        "isolation.level",
        "read_uncommitted",
        one_of("read_uncommitted", "read_committed"),
        "read_committed: only records of committed transactions (and none of an open one: "
        "reads stop at the last stable offset); read_uncommitted: everything",
    )
    group_remote_assignor: str = setting(
        "group.remote.assignor",
        "range",
        one_of("range", "roundrobin"),
        "how the coordinator spreads partitions among the members: range or roundrobin",
    )


CONSUMER_CONFIGS: tuple[ConfigDef[Any], ...] = ConsumerConfig.definitions()
"""Every config ``Consumer`` accepts, with its default."""
