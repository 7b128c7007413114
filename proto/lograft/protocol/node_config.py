"""Node configuration: identity, listeners, data directory and broker-wide defaults.

Every name is Kafka's (``node.id``, ``listeners``, ``log.segment.bytes``, ...);
:func:`node_setting_names` lists each name ``lograft node --config NAME=VALUE`` accepts and
:meth:`NodeConfig.from_settings` turns such settings into a config. Broker settings that have
a topic-level counterpart become the defaults of every topic's ``LogConfig``.

**Listeners**, as Kafka's: ``listeners`` names where the node binds
(``INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092``), ``advertised.listeners`` what it
tells clients and other brokers for each (``INTERNAL://lograft-1:19092,EXTERNAL://127.0.0.1:9092``;
a listener not named there advertises its bind address), and ``inter.broker.listener.name``
the one brokers use to reach each other (default: the first listener). The node serves every
service on every listener; a Metadata answer gives each broker's address on the listener the
request arrived on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from lograft.protocol.errors import InvalidConfigError
from lograft.protocol.topic_config import TOPIC_CONFIGS, LogConfig

if TYPE_CHECKING:
    # Only the type of ``data_dir``: parsing a config touches no disk (tests/unit/test_layers.py).
    from pathlib import Path

__all__ = [
    "BROKER_TO_TOPIC_CONFIG",
    "DEFAULT_LISTENER",
    "IDENTITY_SETTINGS",
    "NODE_CONFIGS",
    "UNROUTABLE_HOSTS",
    "NodeConfig",
    "NodeListener",
    "node_setting_names",
    "parse_listener_list",
    "parse_listeners",
]

DEFAULT_LISTENER = "PLAINTEXT://127.0.0.1:9092"
"""``listeners`` of a node given neither ``--listen`` nor ``listeners``."""

IDENTITY_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        "node.id": "This node's id, a number >= 0 (required; the --node-id flag wins).",
        "log.dir": "The node's data directory (required; the --data-dir flag wins).",
        "log.dirs": "Kafka's list of data directories; lograft takes exactly one (as log.dir).",
        "listeners": "Where the node listens, NAME://HOST:PORT,... e.g. "
        "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092 (default "
        f"{DEFAULT_LISTENER}; the --listen flag wins). Every listener serves every service.",
        "advertised.listeners": "The address clients and other brokers are given for each "
        "listener, NAME://HOST:PORT,... e.g. INTERNAL://lograft-1:19092,EXTERNAL://127.0.0.1:9092; "
        "a listener not named here advertises its bind address (which must then not be "
        "0.0.0.0).",
        "inter.broker.listener.name": "The listener brokers use to reach each other "
        "(replication, the metadata of other brokers); default: the first of listeners.",
        "process.roles": "broker, controller or broker,controller (default: both with "
        "controller.quorum.voters, else broker; the --process-roles flag wins).",
        "controller.quorum.voters": "The controller quorum, ID@HOST:PORT,... e.g. "
        "1@lograft-1:19092,2@lograft-2:19092 (dialled as given); without it the node is a "
        "standalone broker (the --controller-quorum-voters flag wins).",
        "cluster.id": "The cluster id (default: derived from controller.quorum.voters; the "
        "--cluster-id flag wins).",
        "broker.rack": "The rack of the broker: replicas of a partition go to distinct racks "
        "(the --rack flag wins).",
    }
)
"""The node's identity settings by Kafka name → description: who it is, where its data is,
where it listens and which quorum it belongs to."""

_LISTENER_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
UNROUTABLE_HOSTS = frozenset({"", "0.0.0.0", "::"})
"""Bind hosts that mean "every interface": no client can dial them."""

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
        1000,
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
        3000,
        500,
        "A broker the active controller has not heard from for this long is fenced and "
        "loses the leadership of its partitions (Kafka: 9000; lograft heartbeats every "
        "broker.heartbeat.interval.ms and fails over faster).",
    ),
    "broker.heartbeat.interval.ms": (
        1000,
        10,
        "How often a broker heartbeats to the active controller; less than "
        "broker.session.timeout.ms, which it renews (Kafka: 2000 against a 9000 session).",
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
    "replica.fetch.wait.max.ms": (
        2000,
        0,
        "How long a follower's fetch may wait at the leader for new data. Idle, each "
        "follower asks each leader once per wait; a fetcher given a new partition or leader "
        "epoch asks again at once. Capped at half of replica.lag.time.max.ms, so that idle "
        "followers stay in the ISR (Kafka: 500).",
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
    "transaction.max.timeout.ms": (
        900_000,
        1,
        "The longest transaction.timeout.ms a transactional producer may ask for.",
    ),
    "transaction.two.phase.commit.enable": (
        True,
        0,
        "Whether producers may take part in two-phase commit (KIP-939): their transactions "
        "are never timed out and a new producer can keep them open (keep_prepared_txn).",
    ),
    "transactional.id.expiration.ms": (
        604_800_000,
        1,
        "How long a transactional id with no transaction open may go unused before its "
        "coordinator forgets it.",
    ),
}
"""Node-only settings: name → (default, minimum, description); a ``bool`` default means the
setting takes true or false."""


def node_setting_names() -> Mapping[str, str]:
    """Every name ``lograft node --config NAME=VALUE`` accepts → a one-line description.

    The identity settings (:data:`IDENTITY_SETTINGS`), the broker defaults of topic configs
    (:data:`BROKER_TO_TOPIC_CONFIG`) and the node-wide settings (:data:`NODE_CONFIGS`): the
    one list a container entrypoint maps its environment variables from.
    """
    names: dict[str, str] = dict(IDENTITY_SETTINGS)
    for broker_name, topic_name in BROKER_TO_TOPIC_CONFIG.items():
        names[broker_name] = f"Default of the topic config {topic_name}: " + (
            TOPIC_CONFIGS[topic_name].doc
        )
    for name, (_, _, doc) in NODE_CONFIGS.items():
        names[name] = doc
    return MappingProxyType(names)


@dataclass(frozen=True, slots=True)
class NodeListener:
    """One named listener: the address the node binds and the one it advertises for it.

    ``advertised_port`` 0 (only when ``port`` is 0) means "the port the listener was given
    when it bound".
    """

    name: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def bind_address(self) -> str:
        """``host:port`` to bind (IPv6 hosts in brackets)."""
        return _join_host_port(self.host or "0.0.0.0", self.port)

    @property
    def advertised_address(self) -> str:
        """``host:port`` clients on this listener dial."""
        return _join_host_port(self.advertised_host, self.advertised_port)


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_DEFAULT_LISTENERS = (NodeListener("PLAINTEXT", "127.0.0.1", 9092, "127.0.0.1", 9092),)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything a node process needs to start."""

    node_id: int
    data_dir: Path
    listeners: tuple[NodeListener, ...] = _DEFAULT_LISTENERS
    """Every listener, in the order of the ``listeners`` setting."""
    inter_broker_listener_name: str = "PLAINTEXT"
    rack: str = ""
    log_defaults: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 30_000
    socket_request_max_bytes: int = 100 * 1024 * 1024
    process_roles: frozenset[str] = frozenset({"broker"})
    quorum_voters: Mapping[int, str] | None = None
    """Kafka's ``controller.quorum.voters``; ``None``: a standalone broker (no quorum)."""
    cluster_id: str = ""
    election_timeout_ms: int = 1000
    broker_session_timeout_ms: int = 3000
    broker_heartbeat_interval_ms: int = 1000
    metadata_snapshot_bytes: int = 20 * 1024 * 1024
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_wait_max_ms: int = 2000
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    default_replication_factor: int = 1
    num_partitions: int = 1
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000
    transaction_two_phase_commit_enable: bool = True
    transactional_id_expiration_ms: int = 604_800_000

    @property
    def in_quorum(self) -> bool:
        """Whether the node takes part in a controller quorum (KRaft mode)."""
        return self.quorum_voters is not None

    @property
    def inter_broker_listener(self) -> NodeListener:
        """The listener other brokers reach this one on (``inter.broker.listener.name``)."""
        return next(x for x in self.listeners if x.name == self.inter_broker_listener_name)

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, str], make_path: Callable[[str], Path]
    ) -> NodeConfig:
        """Validate settings named as :func:`node_setting_names` lists them; raises
        ``InvalidConfigError`` naming the first bad or unknown setting.

        ``node.id`` and ``log.dir`` (or ``log.dirs`` with one entry) are required;
        ``make_path`` turns the data directory's text into a path (parsing touches no disk).
        """
        known = node_setting_names()
        for name in settings:
            if name not in known:
                raise InvalidConfigError(f"unknown node config {name!r}")
        values = {name: value.strip() for name, value in settings.items()}
        node_text = values.get("node.id", "")
        if not node_text:
            raise InvalidConfigError("node.id is required (--node-id or --config node.id=N)")
        try:
            node_id = int(node_text)
        except ValueError:
            raise InvalidConfigError(f"node.id={node_text!r} is not an integer") from None
        data_dir = make_path(_log_dir(values))
        listeners, inter_broker = parse_listeners(
            values.get("listeners", "") or DEFAULT_LISTENER,
            values.get("advertised.listeners", ""),
            values.get("inter.broker.listener.name", ""),
        )
        return cls._assemble(
            node_id,
            data_dir,
            listeners,
            inter_broker,
            {n: v for n, v in settings.items() if n not in IDENTITY_SETTINGS},
            values.get("process.roles", ""),
            values.get("controller.quorum.voters", ""),
            values.get("cluster.id", ""),
            values.get("broker.rack", ""),
        )

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
        """Validate and assemble a node config with one listener, ``PLAINTEXT`` on ``listen``
        (``host:port``), advertised as ``advertised_host`` (default: its host) — the
        ``--listen``/``--advertised-host`` flags; raises ``InvalidConfigError``.

        ``overrides`` are broker and node-wide settings (not the identity ones).
        """
        host, _, port_text = listen.rpartition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise InvalidConfigError(f"listener {listen!r} is not host:port") from None
        if not host or not 0 <= port <= 65535:
            raise InvalidConfigError(f"listener {listen!r} is not host:port")
        host = host.removeprefix("[").removesuffix("]")
        listener = NodeListener("PLAINTEXT", host, port, advertised_host or host, port)
        for name in overrides or {}:
            if name in IDENTITY_SETTINGS:
                raise InvalidConfigError(f"{name} is set by an argument of its own here")
        return cls._assemble(
            node_id,
            data_dir,
            (listener,),
            listener.name,
            overrides or {},
            process_roles,
            quorum_voters,
            cluster_id,
            rack,
        )

    # Over 70 lines: the cross-setting checks, then one constructor call naming every field.
    @classmethod
    def _assemble(
        cls,
        node_id: int,
        data_dir: Path,
        listeners: tuple[NodeListener, ...],
        inter_broker_listener_name: str,
        overrides: Mapping[str, str],
        process_roles: str,
        quorum_voters: str,
        cluster_id: str,
        rack: str,
    ) -> NodeConfig:
        if node_id < 0:
            raise InvalidConfigError(f"node.id must be >= 0, got {node_id}")
        topic_overrides: dict[str, str] = {}
        node_configs = NODE_CONFIGS
        node_values = {name: default for name, (default, _, _) in node_configs.items()}
        for name, value in overrides.items():
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
        heartbeat_ms = node_values["broker.heartbeat.interval.ms"]
        if heartbeat_ms >= node_values["broker.session.timeout.ms"]:
            raise InvalidConfigError(
                f"broker.heartbeat.interval.ms={heartbeat_ms} must be less than "
                f"broker.session.timeout.ms={node_values['broker.session.timeout.ms']}"
            )
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
            broker_heartbeat_interval_ms=node_values["broker.heartbeat.interval.ms"],
            metadata_snapshot_bytes=node_values["metadata.log.max.record.bytes.between.snapshots"],
            replica_lag_time_max_ms=node_values["replica.lag.time.max.ms"],
            replica_fetch_wait_max_ms=node_values["replica.fetch.wait.max.ms"],
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
            transaction_max_timeout_ms=node_values["transaction.max.timeout.ms"],
            transaction_two_phase_commit_enable=bool(
                node_values["transaction.two.phase.commit.enable"]
            ),
            transactional_id_expiration_ms=node_values["transactional.id.expiration.ms"],
            node_id=node_id,
            data_dir=data_dir,
            listeners=listeners,
            inter_broker_listener_name=inter_broker_listener_name,
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


def _log_dir(values: Mapping[str, str]) -> str:
    """The data directory of ``log.dir`` or ``log.dirs`` (one entry); both must agree."""
    single = values.get("log.dir", "")
    many = [d.strip() for d in values.get("log.dirs", "").split(",") if d.strip()]
    if len(many) > 1:
        raise InvalidConfigError(
            f"log.dirs={values['log.dirs']!r}: lograft keeps its data in one directory"
        )
    if single and many and many[0] != single:
        raise InvalidConfigError(f"log.dir={single!r} and log.dirs={many[0]!r} disagree")
    directory = single or (many[0] if many else "")
    if not directory:
        raise InvalidConfigError("log.dir is required (--data-dir or --config log.dir=DIR)")
    return directory


def parse_listener_list(setting: str, text: str) -> list[tuple[str, str, int]]:
    """``NAME://HOST:PORT,...`` → ``(NAME, host, port)``; names upper-cased, as Kafka."""
    parsed: list[tuple[str, str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        name = name.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise InvalidConfigError(f"{setting}: {item!r} is not NAME://HOST:PORT")
        if address.startswith("["):
            host, bracket, rest = address[1:].partition("]")
            if not bracket or not rest.startswith(":"):
                raise InvalidConfigError(f"{setting}: {item!r} is not NAME://HOST:PORT")
            port_text = rest[1:]
        else:
            host, colon, port_text = address.rpartition(":")
            if not colon or ":" in host:
                raise InvalidConfigError(f"{setting}: {item!r} is not NAME://HOST:PORT")
        if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
            raise InvalidConfigError(f"{setting}: {item!r} needs a port 0..65535")
        if any(name == seen for seen, _, _ in parsed):
            raise InvalidConfigError(f"{setting}: listener name {name} is given twice")
        parsed.append((name, host, int(port_text)))
    return parsed


def parse_listeners(
    listeners: str, advertised_listeners: str = "", inter_broker_listener_name: str = ""
) -> tuple[tuple[NodeListener, ...], str]:
    """Kafka's ``listeners``, ``advertised.listeners`` and ``inter.broker.listener.name``.

    Returns every listener with its advertised address, and the inter-broker listener's
    name (default: the first listener). Raises ``InvalidConfigError`` naming the setting:
    a malformed entry, a name given twice, two listeners on one port, an advertised name
    that is not a listener, an advertised port 0, a listener bound to all interfaces (or
    none named) that ``advertised.listeners`` does not name, an unknown inter-broker name.
    """
    bound = parse_listener_list("listeners", listeners)
    if not bound:
        raise InvalidConfigError("listeners: at least one NAME://HOST:PORT is needed")
    ports: dict[int, str] = {}
    for name, _, port in bound:
        if port and port in ports:
            raise InvalidConfigError(
                f"listeners: {ports[port]} and {name} both listen on port {port}"
            )
        ports[port] = name
    names = [name for name, _, _ in bound]
    advertised = {
        name: (host, port)
        for name, host, port in parse_listener_list("advertised.listeners", advertised_listeners)
    }
    for name, (host, port) in advertised.items():
        if name not in names:
            raise InvalidConfigError(
                f"advertised.listeners: {name} is not one of listeners ({', '.join(names)})"
            )
        if host in UNROUTABLE_HOSTS or port == 0:
            raise InvalidConfigError(
                f"advertised.listeners: {name}://{_join_host_port(host, port)} is not an "
                "address clients can dial (name a host and a port 1..65535)"
            )
    result: list[NodeListener] = []
    for name, host, port in bound:
        advertised_host, advertised_port = advertised.get(name, (host, port))
        if advertised_host in UNROUTABLE_HOSTS:
            raise InvalidConfigError(
                f"advertised.listeners: listener {name} binds "
                f"{_join_host_port(host or '0.0.0.0', port)}, which clients cannot dial; "
                f"give its address as {name}://HOST:PORT in advertised.listeners"
            )
        result.append(NodeListener(name, host, port, advertised_host, advertised_port))
    inter_broker = inter_broker_listener_name.strip().upper() or names[0]
    if inter_broker not in names:
        raise InvalidConfigError(
            f"inter.broker.listener.name: {inter_broker} is not one of listeners "
            f"({', '.join(names)})"
        )
    return tuple(result), inter_broker
