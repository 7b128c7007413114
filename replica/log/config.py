"""Per-topic log configuration: Kafka's topic config names, types, defaults and checks.

``TOPIC_CONFIGS`` is the single definition of every topic config lograft accepts; the
CreateTopics handler, the CLI and the generated configuration reference all read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cluster.errors import InvalidConfigError

__all__ = ["TOPIC_CONFIGS", "ConfigDef", "FlushPolicy", "LogConfig"]


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
    )
}
