"""Node configuration: identity, listener, data directory and broker-wide defaults.

Broker-level names are Kafka's (``log.segment.bytes``, ``message.max.bytes``, ...). Those that
have a topic-level counterpart become the defaults of every topic's ``LogConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cluster.errors import InvalidConfigError
from replica.topic_config import LogConfig

if TYPE_CHECKING:
    # Only the type of ``data_dir``: parsing a config touches no disk (tests/unit/test_layers.py).
    from pathlib import Path

__all__ = ["BROKER_TO_TOPIC_CONFIG", "NODE_CONFIGS", "NodeConfig"]

BROKER_TO_TOPIC_CONFIG: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.flush.policy": "flush.policy",
    "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
}
"""Broker default → the topic config it sets the default of."""

NODE_CONFIGS: dict[str, tuple[int, int, str]] = {
    "log.retention.check.interval.ms": (
        30_000,
        1,
        "How often retention and segment.ms rolling are checked.",
    ),
    "socket.request.max.bytes": (
        100 * 1024 * 1024,
        1024,
        "Largest request the node accepts; larger ones are refused before they are read.",
    ),
    "controller.quorum.election.timeout.ms": (
        500,
        100,
        "A follower that hears nothing from the leader for this long (randomised up to "
        "twice as long) starts an election.",
    ),
    "metadata.log.max.record.bytes.between.snapshots": (
        20 * 1024 * 1024,
        1,
        "Take a metadata snapshot once this many bytes of records were applied since the "
        "last one (or 1000 entries).",
    ),
    "broker.session.timeout.ms": (
        2000,
        500,
        "A broker the active controller has not heard from for this long is fenced and "
        "loses the leadership of its partitions (Kafka: 9000; lograft heartbeats every "
        "400 ms and fails over faster).",
    ),
    "default.replication.factor": (
        1,
        1,
        "Replicas of a topic created without a replication factor (CreateTopics with -1).",
    ),
    "num.partitions": (
        1,
        1,
        "Partitions of a topic created without a partition count (CreateTopics with -1).",
    ),
    "offsets.topic.num.partitions": (
        50,
        1,
        "Partitions of __consumer_offsets, created when a group first looks for its "
        "coordinator; each group lives in one of them.",
    ),
    "offsets.topic.replication.factor": (
        3,
        1,
        "Replicas of each __consumer_offsets partition; its creation waits (the group's "
        "coordinator is not available) until that many brokers are up.",
    ),
    "replica.lag.time.max.ms": (
        10_000,
        100,
        "A follower that has not caught up with the leader's log end for this long is "
        "removed from the ISR (Kafka: 30000; lograft fences dead brokers within "
        "broker.session.timeout.ms, so this only catches slow or cut-off followers).",
    ),
    "replica.high.watermark.checkpoint.interval.ms": (
        5_000,
        10,
        "How often each broker writes every partition's high watermark to "
        "replication-offset-checkpoint (also at shutdown). A restarted replica reopens at its "
        "checkpoint, never above it, so it cannot publish records its followers lack.",
    ),
    "log.cleaner.enable": (
        True,
        0,
        "Run the log cleaner, which compacts topics with cleanup.policy=compact (true or "
        "false). Off, compacted topics (__consumer_offsets among them) grow forever.",
    ),
    "log.cleaner.backoff.ms": (
        15_000,
        1,
        "How long the log cleaner sleeps when no log needs cleaning.",
    ),
    "offsets.topic.segment.bytes": (
        100 * 1024 * 1024,
        14,
        "segment.bytes of __consumer_offsets (set when it is created): the cleaner compacts "
        "closed segments only, so smaller ones are compacted sooner.",
    ),
}
"""Node-only settings: name → (default, minimum, description); a ``bool`` default means the
setting takes true or false."""


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything a node process needs to start."""

    node_id: int
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str = ""
    rack: str = ""
    log_defaults: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 30_000
    socket_request_max_bytes: int = 100 * 1024 * 1024
    process_roles: frozenset[str] = frozenset({"broker"})
    quorum_voters: Mapping[int, str] | None = None
    """Kafka's ``controller.quorum.voters``; ``None``: a standalone broker (no quorum)."""
    cluster_id: str = ""
    election_timeout_ms: int = 500
    broker_session_timeout_ms: int = 2000
    metadata_snapshot_bytes: int = 20 * 1024 * 1024
    replica_lag_time_max_ms: int = 10_000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    default_replication_factor: int = 1
    num_partitions: int = 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024

    @property
    def in_quorum(self) -> bool:
        """Whether the node takes part in a controller quorum (KRaft mode)."""
        return self.quorum_voters is not None

    @classmethod
    def build(
        cls,
        node_id: int,
        data_dir: Path,
        listen: str,
        advertised_host: str = "",
        overrides: Mapping[str, str] | None = None,
        process_roles: str = "",
        quorum_voters: str = "",
        cluster_id: str = "",
        rack: str = "",
    ) -> NodeConfig:
        """Validate and assemble a node config; raises ``InvalidConfigError``."""
        if node_id < 0:
            raise InvalidConfigError(f"node.id must be >= 0, got {node_id}")
        host, _, port_text = listen.rpartition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise InvalidConfigError(f"listener {listen!r} is not host:port") from None
        if not host or not 0 <= port <= 65535:
            raise InvalidConfigError(f"listener {listen!r} is not host:port")
        topic_overrides: dict[str, str] = {}
        node_configs = NODE_CONFIGS
        node_values = {name: default for name, (default, _, _) in node_configs.items()}
        for name, value in (overrides or {}).items():
            if name in BROKER_TO_TOPIC_CONFIG:
                topic_overrides[BROKER_TO_TOPIC_CONFIG[name]] = value
            elif isinstance(node_configs.get(name, (0,))[0], bool):
                flag = value.strip().lower()
                if flag not in ("true", "false"):
                    raise InvalidConfigError(f"{name}={value!r} is not true or false")
                node_values[name] = flag == "true"
            elif name in node_configs:
                minimum = node_configs[name][1]
                try:
                    parsed = int(value)
                except ValueError:
                    raise InvalidConfigError(f"{name}={value!r} is not an integer") from None
                if parsed < minimum:
                    raise InvalidConfigError(f"{name}={value!r} must be >= {minimum}")
                node_values[name] = parsed
            else:
                raise InvalidConfigError(f"unknown node config {name!r}")
        voters = _parse_voters(quorum_voters) if quorum_voters else None
        roles = frozenset(
            r.strip()
            for r in (process_roles or ("broker,controller" if voters else "broker")).split(",")
            if r.strip()
        )
        if not roles or not roles <= {"broker", "controller"}:
            raise InvalidConfigError(
                f"process.roles must be broker, controller or both: {process_roles!r}"
            )
        if voters is None and roles != {"broker"}:
            raise InvalidConfigError("the controller role needs controller.quorum.voters")
        if voters is not None and "controller" in roles and node_id not in voters:
            raise InvalidConfigError(f"node {node_id} has the controller role but is not a voter")
        return cls(
            process_roles=roles,
            quorum_voters=voters,
            cluster_id=cluster_id,
            election_timeout_ms=node_values["controller.quorum.election.timeout.ms"],
            broker_session_timeout_ms=node_values["broker.session.timeout.ms"],
            metadata_snapshot_bytes=node_values["metadata.log.max.record.bytes.between.snapshots"],
            replica_lag_time_max_ms=node_values["replica.lag.time.max.ms"],
            replica_high_watermark_checkpoint_interval_ms=node_values[
                "replica.high.watermark.checkpoint.interval.ms"
            ],
            default_replication_factor=node_values["default.replication.factor"],
            num_partitions=node_values["num.partitions"],
            offsets_topic_num_partitions=node_values["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=node_values["offsets.topic.replication.factor"],
            log_cleaner_enable=bool(node_values["log.cleaner.enable"]),
            log_cleaner_backoff_ms=node_values["log.cleaner.backoff.ms"],
            offsets_topic_segment_bytes=node_values["offsets.topic.segment.bytes"],
            node_id=node_id,
            data_dir=data_dir,
            host=host,
            port=port,
            advertised_host=advertised_host or host,
            rack=rack,
            log_defaults=LogConfig().with_overrides(topic_overrides),
            retention_check_interval_ms=node_values["log.retention.check.interval.ms"],
            socket_request_max_bytes=node_values["socket.request.max.bytes"],
        )


def _parse_voters(text: str) -> dict[int, str]:
    """Kafka's ``controller.quorum.voters``: ``1@host:port,2@host:port``."""
    voters: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node_text, sep, address = item.partition("@")
        if not sep or not node_text.isdigit() or ":" not in address:
            raise InvalidConfigError(f"controller.quorum.voters entry {item!r} is not id@host:port")
        voters[int(node_text)] = address
    return voters
