"""The configuration of ``Consumer`` (Kafka's ``ConsumerConfig``): names, defaults, validation.

``CONSUMER_CONFIGS`` is re-exported by :mod:`cluster.client.consumer`, its public home.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ._connection import COMMON_CONFIGS, ConfigDef, boolean, int_at_least, one_of

__all__ = ["CONSUMER_CONFIGS"]

logger = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


def _int32_at_least(low: int) -> Callable[[object], object]:
    """An integer ``>= low`` that fits the int32 fields of the group protocol."""
    parse_low = int_at_least(low)

    def parse(value: object) -> object:
        number = parse_low(value)
        assert isinstance(number, int)
        if number > _INT32_MAX:
            raise ValueError(f"must be at most {_INT32_MAX}")
        return number

    return parse


def _group_id(value: object) -> object:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError("expected a non-empty string, or None for no group")
    return value


CONSUMER_CONFIGS: tuple[ConfigDef, ...] = (
    *COMMON_CONFIGS,
    ConfigDef("fetch.min.bytes", 1, int_at_least(0), "bytes a fetch waits for"),
    ConfigDef("fetch.max.wait.ms", 500, int_at_least(0), "longest a fetch waits"),
    ConfigDef("fetch.max.bytes", 52428800, int_at_least(0), "bytes per fetch response"),
    ConfigDef(
        "max.partition.fetch.bytes", 1048576, int_at_least(0), "bytes per partition per fetch"
    ),
    ConfigDef("max.poll.records", 500, int_at_least(1), "records one poll returns at most"),
    ConfigDef(
        "auto.offset.reset",
        "latest",
        one_of("earliest", "latest", "none"),
        "where to start without a valid position: earliest, latest or none",
    ),
    ConfigDef(
        "group.id",
        None,
        _group_id,
        "the consumer group: needed by subscribe() and to commit offsets; None: no group",
    ),
    ConfigDef(
        "enable.auto.commit",
        True,
        boolean,
        "with group.id: commit the positions of what poll() returned periodically, "
        "before partitions are revoked and on close()",
    ),
    ConfigDef(
        "auto.commit.interval.ms",
        5000,
        int_at_least(0),
        "how often poll() auto-commits (enable.auto.commit)",
    ),
    ConfigDef(
        "session.timeout.ms",
        45000,
        _int32_at_least(1),
        "sent to the group coordinator: it removes a member it does not hear from this long",
    ),
    ConfigDef(
        "max.poll.interval.ms",
        300000,
        _int32_at_least(1),
        "longest time between poll() calls before the member leaves its group (and rejoins "
        "at the next poll); also how long it may take to release revoked partitions",
    ),
    ConfigDef(
        "isolation.level",
        "read_uncommitted",
        one_of("read_uncommitted", "read_committed"),
        "read_committed: only records of committed transactions (and none of an open one: "
        "reads stop at the last stable offset); read_uncommitted: everything",
    ),
    ConfigDef(
        "group.remote.assignor",
        "range",
        one_of("range", "roundrobin"),
        "how the coordinator spreads partitions among the members: range or roundrobin",
    ),
)
"""Every config ``Consumer`` accepts, with its default."""
