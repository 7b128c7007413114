"""Per-topic log configuration: Kafka's topic config names, types, defaults and checks.

``TOPIC_CONFIGS`` is the single definition of every topic config lograft accepts; the
CreateTopics handler, the CLI and the generated configuration reference all read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lograft.protocol.errors import InvalidConfigError

__all__ = ["MAX_LONG", "TOPIC_CONFIGS", "CleanupPolicy", "ConfigDef", "FlushPolicy", "LogConfig"]

MAX_LONG = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: Kafka's "never" for ``max.compaction.lag.ms``."""


class CleanupPolicy:
    """Values of ``cleanup.policy`` (a list: ``compact,delete`` enables both)."""

    DELETE = "delete"
    """Delete whole old segments per ``retention.ms`` / ``retention.bytes`` (the default)."""
    COMPACT = "compact"
    """Keep at least the latest record of every key (log compaction)."""
    COMPACT_DELETE = "compact,delete"
    """Both: compact, and also delete segments past retention."""


class FlushPolicy:
    """Values of ``flush.policy``."""

    FSYNC = "fsync"
    """Group-commit fdatasync before a produce is acknowledged (the default)."""
    INTERVAL = "interval"
    """fdatasync every ``flush.ms``; acknowledged writes may be lost on power failure."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config: its Kafka name, the LogConfig field it sets, and how to parse it."""

    name: str
    field: str
    parse: Callable[[str], object]
    check: Callable[[object], bool]
    rule: str
    doc: str


def _int(text: str) -> int:
    return int(text.strip())


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _float(text: str) -> float:
    value = float(text.strip())
    if value != value:  # NaN compares unequal to itself and would pass any range check
        raise ValueError(text)
    return value


def _cleanup_policy(text: str) -> str:
    """Kafka's list syntax: comma-separated, any order, duplicates allowed; canonical form."""
    items = {item.strip() for item in text.split(",")}
    if not items or not items <= {CleanupPolicy.DELETE, CleanupPolicy.COMPACT}:
        raise ValueError(text)
    return ",".join(sorted(items))  # "compact", "delete" or "compact,delete"


def _choice(*options: str) -> Callable[[str], object]:
    def parse(text: str) -> str:
        return text.strip()

    parse.options = options  # type: ignore[attr-defined]
    return parse


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log. Field names are Kafka's with dots as underscores."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    max_message_bytes: int = 1024 * 1024 + 12
    flush_policy: str = FlushPolicy.FSYNC
    flush_ms: int = 1000
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    cleanup_policy: str = CleanupPolicy.DELETE
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = MAX_LONG

    @property
    def compact(self) -> bool:
        """Whether ``cleanup.policy`` includes ``compact`` (the log cleaner runs)."""
        return CleanupPolicy.COMPACT in self.cleanup_policy.split(",")

    @property
    def max_segment_ms(self) -> int:
        """When the active segment rolls by age: ``segment.ms``, or for a compacted log
        ``max.compaction.lag.ms`` if smaller (Kafka's ``LogConfig.maxSegmentMs``): the
        cleaner never cleans the active segment, so it must close in time (KIP-354)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def delete(self) -> bool:
        """Whether ``cleanup.policy`` includes ``delete`` (time and size retention apply)."""
        return CleanupPolicy.DELETE in self.cleanup_policy.split(",")

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """Return a copy with Kafka-named overrides applied; raises ``InvalidConfigError``."""
        changes: dict[str, object] = {}
        for name, text in overrides.items():
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise InvalidConfigError(f"unknown topic config {name!r}")
            try:
                value = definition.parse(text)
            except ValueError:
                raise InvalidConfigError(
                    f"{name}={text!r} is not valid: {definition.rule}"
                ) from None
            if not definition.check(value):
                raise InvalidConfigError(f"{name}={text!r} is not valid: {definition.rule}")
            changes[definition.field] = value
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_topic_configs(self) -> dict[str, str]:
        """Every topic config by Kafka name, as strings."""
        return {d.name: _format(getattr(self, d.field)) for d in TOPIC_CONFIGS.values()}


def _format(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _ge(low: int) -> Callable[[object], bool]:
    return lambda v: isinstance(v, int) and v >= low


def _in(*options: str) -> Callable[[object], bool]:
    return lambda v: v in options


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef(
            "segment.bytes",
            "segment_bytes",
            _int,
            _ge(14),
            "integer >= 14",
            "Roll to a new segment file once the active one reaches this size.",
        ),
        ConfigDef(
            "segment.ms",
            "segment_ms",
            _int,
            _ge(1),
            "integer >= 1",
            "Roll to a new segment once the active one is this old, even if not full.",
        ),
        ConfigDef(
            "retention.ms",
            "retention_ms",
            _int,
            _ge(-1),
            "integer >= -1",
            "Delete whole segments whose newest record is older than this; -1 keeps all.",
        ),
        ConfigDef(
            "retention.bytes",
            "retention_bytes",
            _int,
            _ge(-1),
            "integer >= -1",
            "Delete the oldest segments while the log exceeds this size; -1: no limit.",
        ),
        ConfigDef(
            "index.interval.bytes",
            "index_interval_bytes",
            _int,
            _ge(0),
            "integer >= 0",
            "Bytes of log between two entries of the sparse offset and time indexes.",
        ),
        ConfigDef(
            "segment.index.bytes",
            "segment_index_bytes",
            _int,
            _ge(8),
            "integer >= 8",
            "Maximum size of a segment's offset index; a full index rolls the segment.",
        ),
        ConfigDef(
            "max.message.bytes",
            "max_message_bytes",
            _int,
            _ge(61),
            "integer >= 61",
            "Largest record batch the topic accepts, after compression.",
        ),
        ConfigDef(
            "flush.policy",
            "flush_policy",
            _choice("fsync", "interval"),
            _in("fsync", "interval"),
            "one of fsync, interval",
            "fsync: fdatasync (group commit) before acknowledging a produce. "
            "interval: fdatasync every flush.ms; faster, may lose acknowledged writes "
            "if every replica loses power at once.",
        ),
        ConfigDef(
            "flush.ms",
            "flush_ms",
            _int,
            _ge(1),
            "integer >= 1",
            "Interval between fdatasync calls when flush.policy=interval.",
        ),
        ConfigDef(
            "message.timestamp.type",
            "message_timestamp_type",
            _choice("CreateTime", "LogAppendTime"),
            _in("CreateTime", "LogAppendTime"),
            "one of CreateTime, LogAppendTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps each "
            "batch with the broker's clock on append.",
        ),
        ConfigDef(
            "min.insync.replicas",
            "min_insync_replicas",
            _int,
            _ge(1),
            "integer >= 1",
            "In-sync replicas an acks=all produce needs (enforced with replication).",
        ),
        ConfigDef(
            "unclean.leader.election.enable",
            "unclean_leader_election_enable",
            _bool,
            lambda v: isinstance(v, bool),
            "true or false",
            "Let an out-of-sync replica become leader when no in-sync one is live: the "
            "partition comes back, but acknowledged writes may be lost.",
        ),
        ConfigDef(
            "cleanup.policy",
            "cleanup_policy",
            _cleanup_policy,
            _in(CleanupPolicy.DELETE, CleanupPolicy.COMPACT, CleanupPolicy.COMPACT_DELETE),
            "delete, compact, or both (compact,delete)",
            "delete: drop whole old segments per retention.ms and retention.bytes. compact: "
            "the log cleaner keeps at least the latest record of every key (records need "
            "keys; a null value is a tombstone that deletes its key); retention then deletes "
            "nothing. compact,delete: both.",
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            "min_cleanable_dirty_ratio",
            _float,
            lambda v: isinstance(v, float) and 0.0 <= v <= 1.0,
            "number in [0, 1]",
            "Compacted topics: clean a log once the part not yet cleaned is at least this "
            "fraction of the cleanable log (or once max.compaction.lag.ms passed).",
        ),
        ConfigDef(
            "delete.retention.ms",
            "delete_retention_ms",
            _int,
            _ge(0),
            "integer >= 0",
            "Compacted topics: how long a tombstone stays readable after the cleaner first "
            "saw it, so that consumers reading from the start see the delete.",
        ),
        ConfigDef(
            "min.compaction.lag.ms",
            "min_compaction_lag_ms",
            _int,
            _ge(0),
            "integer >= 0",
            "Compacted topics: a segment is cleaned only once its newest record is at "
            "least this old, so recent updates stay readable uncompacted.",
        ),
        ConfigDef(
            "max.compaction.lag.ms",
            "max_compaction_lag_ms",
            _int,
            lambda v: isinstance(v, int) and 1 <= v <= MAX_LONG,
            "integer in [1, 9223372036854775807]",
            "Compacted topics: clean a log whose oldest uncleaned record is this old even "
            "if min.cleanable.dirty.ratio is not reached; the active segment rolls at least "
            "this often (the cleaner cleans closed segments only).",
        ),
    )
}
"""Every topic config lograft accepts, by Kafka's name: its type, check and help text."""
