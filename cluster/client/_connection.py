"""What every client shares: configuration checking, gRPC channels and the metadata cache.

* :func:`resolve_config` checks a client's configuration (Kafka names such as
  ``bootstrap.servers``) against a table of :class:`ConfigDef` and raises
  ``InvalidConfigError`` for an unknown name or a bad value. Keyword overrides may spell the
  names with underscores (``linger_ms=10``).
* :class:`Connections` keeps one gRPC channel per broker address, bootstraps from
  ``bootstrap.servers``, caches the cluster metadata (topics → partitions → leader, brokers →
  address) and refreshes it on demand. Failed calls become typed errors
  (:func:`map_rpc_error`): ``UNAVAILABLE`` → ``NetworkError`` (retriable),
  ``RESOURCE_EXHAUSTED`` → ``RecordListTooLargeError``, ``DEADLINE_EXCEEDED`` →
  ``RequestTimedOutError``, ``INVALID_ARGUMENT`` → ``InvalidRequestError``.

:class:`Connections` is thread-safe. This module reads no environment variable: the default
bootstrap address is ``127.0.0.1:9092``; ``LOGRAFT_BOOTSTRAP`` is read by the CLI only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from cluster import errors
from cluster.errors import (
    InvalidConfigError,
    InvalidRequestError,
    LeaderNotAvailableError,
    LograftError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from replica.topic_partition import TopicPartition

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVERS",
    "BrokerInfo",
    "ClusterMetadata",
    "ConfigDef",
    "Connections",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartition",
    "boolean",
    "map_rpc_error",
    "parse_bootstrap_servers",
    "resolve_config",
]

logger = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:9092"
"""Where clients look for a cluster when ``bootstrap.servers`` is not given."""

_GRPC_MAX_MESSAGE = 2**31 - 1


# ---- configuration ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One client config: its Kafka name, default and parser (which raises ``ValueError``)."""

    name: str
    default: object
    parse: Callable[[object], object]
    doc: str


def int_at_least(low: int) -> Callable[[object], object]:
    """A parser for integers ``>= low``; accepts ints and decimal strings, not bools."""

    def parse(value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("expected an integer, got a bool")
        if isinstance(value, int):
            number = value
        elif isinstance(value, str):
            number = int(value.strip())
        else:
            raise ValueError(f"expected an integer, got {type(value).__name__}")
        if number < low:
            raise ValueError(f"must be at least {low}")
        return number

    return parse


def boolean(value: object) -> object:
    """A config parser: ``True``/``False`` or the strings ``true``/``false``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


def one_of(*choices: str) -> Callable[[object], object]:
    """A parser for one of ``choices`` (case-insensitive)."""

    def parse(value: object) -> object:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value.strip().lower()

    return parse


def a_string(value: object) -> object:
    """A parser for a string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def optional_string(value: object) -> object:
    """A parser for a string or ``None``."""
    return None if value is None else a_string(value)


def bootstrap_servers(value: object) -> object:
    """A parser for ``bootstrap.servers``: ``host:port,host:port`` (or a list of those)."""
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError(f"expected 'host:port,...', got {type(value).__name__}")
    parse_bootstrap_servers(value)
    return value


COMMON_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "bootstrap.servers",
        DEFAULT_BOOTSTRAP_SERVERS,
        bootstrap_servers,
        "host:port pairs of brokers to ask for cluster metadata, comma separated",
    ),
    ConfigDef("client.id", "lograft-python", a_string, "a name for this client in server logs"),
    ConfigDef("request.timeout.ms", 30000, int_at_least(1), "how long to wait for one response"),
    ConfigDef("retry.backoff.ms", 100, int_at_least(0), "pause before retrying a failed request"),
    ConfigDef(
        "metadata.max.age.ms",
        300000,
        int_at_least(0),
        "refresh cached metadata at least this often",
    ),
)


def resolve_config(
    kind: str,
    defs: Sequence[ConfigDef],
    config: Mapping[str, object] | None,
    overrides: Mapping[str, object],
) -> dict[str, object]:
    """Check and complete a client configuration.

    ``config`` uses Kafka's names; ``overrides`` (keyword arguments) may use underscores for
    dots and win over ``config``. Returns every name of ``defs`` with its parsed value.
    Raises ``InvalidConfigError`` naming the client ``kind`` for an unknown name or a bad value.
    """
    by_name = {d.name: d for d in defs}
    given: dict[str, object] = {}
    for name, value in (config or {}).items():
        given[str(name)] = value
    for name, value in overrides.items():
        given[name.replace("_", ".")] = value
    resolved: dict[str, object] = {}
    for name, value in given.items():
        definition = by_name.get(name)
        if definition is None:
            raise InvalidConfigError(f"unknown {kind} config {name!r}")
        try:
            resolved[name] = definition.parse(value)
        except (ValueError, LograftError) as exc:
            raise InvalidConfigError(f"{kind} config {name}={value!r}: {exc}") from None
    for definition in defs:
        resolved.setdefault(definition.name, definition.default)
    return resolved


# ---- errors --------------------------------------------------------------------------------

_BY_NAME: dict[str, type[LograftError]] = {
    cls.error_name: cls
    for cls in (getattr(errors, name) for name in errors.__all__)
    if isinstance(cls, type) and issubclass(cls, LograftError) and cls is not LograftError
}

_BY_STATUS: dict[Any, type[LograftError]] = {
    grpc.StatusCode.UNAVAILABLE: NetworkError,
    grpc.StatusCode.CANCELLED: NetworkError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RecordListTooLargeError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimedOutError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
}


def map_rpc_error(error: grpc.RpcError) -> LograftError:
    """Turn a failed gRPC call into the matching typed error.

    A status detail that starts with a Kafka error name (``"NOT_LEADER_OR_FOLLOWER: ..."``)
    selects that error; otherwise the status code decides, and unknown codes become
    ``UnknownServerError``.
    """
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else None) or ""
    name, sep, rest = details.partition(":")
    if sep and name.strip() in _BY_NAME:
        return _BY_NAME[name.strip()](rest.strip())
    cls = _BY_STATUS.get(code, UnknownServerError)
    status = code.name if code is not None and hasattr(code, "name") else str(code)
    return cls(f"gRPC {status}: {details}" if details else f"gRPC {status}")


# ---- metadata -----------------------------------------------------------------------------


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """Parse ``"host:port,host:port"``; IPv6 hosts go in brackets (``[::1]:9092``)."""
    addresses: list[tuple[str, int]] = []
    for raw in servers.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        if not sep or not host:
            raise InvalidConfigError(f"bootstrap server {item!r} is not host:port")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            port = int(port_text)
        except ValueError:
            raise InvalidConfigError(f"bootstrap server {item!r} has a bad port") from None
        if not 0 < port < 65536:
            raise InvalidConfigError(f"bootstrap server {item!r} has a bad port")
        addresses.append((host, port))
    if not addresses:
        raise InvalidConfigError("bootstrap.servers is empty")
    return addresses


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as the metadata lists it."""

    node_id: int
    host: str
    port: int
    rack: str = ""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition as the metadata describes it; ``leader`` is -1 when there is none."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the metadata describes it; ``error_code`` is non-zero for a bad topic."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    error_code: int = 0
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """An immutable snapshot of what the client knows about the cluster."""

    brokers: Mapping[int, BrokerInfo] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str = ""

    def partition_count(self, topic: str) -> int | None:
        """Number of partitions of ``topic``, or ``None`` if unknown or in error."""
        info = self.topics.get(topic)
        if info is None or info.error_code != 0 or not info.partitions:
            return None
        return len(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` whose leader is a known broker."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return [p.partition for p in info.partitions if p.leader in self.brokers]

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        """The metadata of one partition, if known."""
        info = self.topics.get(topic)
        if info is None:
            return None
        for p in info.partitions:
            if p.partition == partition:
                return p
        return None

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader's node id; raises the retriable error that says why there is none."""
        info = self.topics.get(tp.topic)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {tp.topic!r} not in metadata")
        if info.error_code != 0:
            raise errors.error_for_code(info.error_code, info.error_message or tp.topic)
        part = self.partition(tp.topic, tp.partition)
        if part is None:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition}")
        if part.leader < 0 or part.leader not in self.brokers:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition}")
        return part.leader


def _topic_info(t: Any) -> TopicInfo:
    partitions = tuple(
        sorted(
            (
                PartitionInfo(
                    topic=t.name,
                    partition=p.partition,
                    leader=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replica_nodes),
                    isr=tuple(p.isr_nodes),
                    offline_replicas=tuple(p.offline_replicas),
                    error_code=p.error_code,
                )
                for p in t.partitions
            ),
            key=lambda p: p.partition,
        )
    )
    return TopicInfo(
        name=t.name,
        partitions=partitions,
        configs=dict(t.configs),
        error_code=t.error_code,
        error_message=t.error_message,
    )


# ---- connections --------------------------------------------------------------------------


class Connections:
    """gRPC channels to the brokers of one cluster, and its metadata cache. Thread-safe."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "lograft-python",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        max_send_bytes: int = _GRPC_MAX_MESSAGE,
        max_receive_bytes: int = _GRPC_MAX_MESSAGE,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self._options = [
            ("grpc.max_send_message_length", min(max_send_bytes, _GRPC_MAX_MESSAGE)),
            ("grpc.max_receive_message_length", min(max_receive_bytes, _GRPC_MAX_MESSAGE)),
            ("grpc.primary_user_agent", f"lograft-python/{client_id}"),
        ]
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._channels: dict[str, tuple[Any, Any]] = {}
        self._metadata = ClusterMetadata()
        self._metadata_at = 0.0
        self._closed = False

    # -- channels

    def stub(self, host: str, port: int) -> Any:
        """The ``BrokerStub`` for an address, opening its channel the first time."""
        target = _target(host, port)
        with self._lock:
            if self._closed:
                raise errors.IllegalStateError("client is closed")
            entry = self._channels.get(target)
            if entry is None:
                channel = grpc.insecure_channel(target, options=self._options)
                entry = (channel, pb_grpc.BrokerStub(channel))
                self._channels[target] = entry
                logger.debug("channel opened target=%s client_id=%s", target, self.client_id)
            return entry[1]

    def stub_for_node(self, node_id: int) -> Any:
        """The stub of broker ``node_id``; raises ``LeaderNotAvailableError`` if unknown."""
        broker = self._metadata.brokers.get(node_id)
        if broker is None:
            raise LeaderNotAvailableError(f"broker {node_id} not in metadata")
        return self.stub(broker.host, broker.port)

    def close(self) -> None:
        """Close every channel. Later calls raise ``IllegalStateError``."""
        with self._lock:
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
        for channel, _ in channels:
            channel.close()

    # -- calls

    def timeout_s(self, timeout_ms: int | None = None) -> float:
        """A call deadline in seconds (``request.timeout.ms`` unless given)."""
        return (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000.0

    def call(
        self,
        method: str,
        request: Any,
        *,
        node_id: int | None = None,
        timeout_ms: int | None = None,
    ) -> Any:
        """Call ``method`` on broker ``node_id`` (or any broker); gRPC failures become typed."""
        if node_id is not None:
            stub = self.stub_for_node(node_id)
            return self._invoke(stub, method, request, timeout_ms)
        last: LograftError | None = None
        for host, port in self._candidate_addresses():
            try:
                return self._invoke(self.stub(host, port), method, request, timeout_ms)
            except LograftError as exc:
                if not exc.retriable:
                    raise
                last = exc
                logger.debug(
                    "call failed method=%s target=%s error=%s", method, _target(host, port), exc
                )
        assert last is not None
        raise last

    def _invoke(self, stub: Any, method: str, request: Any, timeout_ms: int | None) -> Any:
        try:
            return getattr(stub, method)(request, timeout=self.timeout_s(timeout_ms))
        except grpc.RpcError as exc:
            raise map_rpc_error(exc) from None

    def _candidate_addresses(self) -> list[tuple[str, int]]:
        known = [(b.host, b.port) for b in self._metadata.brokers.values()]
        seen: set[tuple[str, int]] = set()
        ordered: list[tuple[str, int]] = []
        for address in [*known, *self.bootstrap]:
            if address not in seen:
                seen.add(address)
                ordered.append(address)
        return ordered

    # -- metadata

    @property
    def metadata(self) -> ClusterMetadata:
        """The current metadata snapshot (possibly empty before the first refresh)."""
        return self._metadata

    def metadata_is_stale(self) -> bool:
        """True when the cache is older than ``metadata.max.age.ms``."""
        return time.monotonic() - self._metadata_at > self.metadata_max_age_ms / 1000.0

    def refresh_metadata(
        self, topics: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> ClusterMetadata:
        """Ask a broker for metadata (of ``topics``, or of all topics) and merge it in.

        Topics named in the request but absent from the answer are dropped from the cache.
        Raises ``NetworkError`` when no broker answers.
        """
        wanted = sorted(set(topics)) if topics is not None else []
        request = pb.MetadataRequest(topics=wanted)
        with self._refresh_lock:
            response = self.call("Metadata", request, timeout_ms=timeout_ms)
            brokers = {
                b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
            }
            fresh = {t.name: _topic_info(t) for t in response.topics}
            if wanted:
                merged = dict(self._metadata.topics)
                for name in wanted:
                    merged.pop(name, None)
                merged.update(fresh)
            else:
                merged = fresh
            snapshot = ClusterMetadata(
                brokers=brokers,
                topics=merged,
                controller_id=response.controller_id,
                cluster_id=response.cluster_id,
            )
            self._metadata = snapshot
            self._metadata_at = time.monotonic()
        logger.debug(
            "metadata refreshed brokers=%d topics=%d requested=%s",
            len(brokers),
            len(fresh),
            ",".join(wanted) or "*",
        )
        return snapshot

    def wait_for_topic(self, topic: str, timeout_ms: int) -> ClusterMetadata:
        """Refresh metadata until ``topic`` has partitions, or raise its error after timeout.

        Retriable errors (unknown topic, no leader, network) are retried with
        ``retry.backoff.ms`` pauses until ``timeout_ms`` passes; others are raised at once.
        """
        deadline = time.monotonic() + timeout_ms / 1000.0
        snapshot = self._metadata
        if snapshot.partition_count(topic) is not None and not self.metadata_is_stale():
            return snapshot
        while True:
            try:
                snapshot = self.refresh_metadata([topic])
                info = snapshot.topics.get(topic)
                if info is None:
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
                if info.error_code != 0:
                    raise errors.error_for_code(info.error_code, info.error_message or topic)
                if not info.partitions:
                    raise LeaderNotAvailableError(f"topic {topic!r} has no partitions yet")
                return snapshot
            except LograftError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
            time.sleep(min(self.retry_backoff_ms / 1000.0, max(0.0, deadline - time.monotonic())))

    def list_offsets(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, tuple[int, int, int]]:
        """ListOffsets on each partition's leader: ``{tp: (offset, timestamp, leader_epoch)}``.

        ``timestamps`` holds -1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms.
        Retriable errors are retried with a metadata refresh until ``timeout_ms`` passes;
        the first non-retriable error is raised.
        """
        deadline = time.monotonic() + timeout_ms / 1000.0
        backoff_s = self.retry_backoff_ms / 1000.0
        results: dict[TopicPartition, tuple[int, int, int]] = {}
        pending = dict(timestamps)
        if any(self._metadata.partition(tp.topic, tp.partition) is None for tp in pending):
            self._refresh_quietly({tp.topic for tp in pending})
        while pending:
            retry_error: LograftError | None = None
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                try:
                    by_leader.setdefault(self._metadata.leader_for(tp), []).append(tp)
                except LograftError as exc:
                    if not exc.retriable:
                        raise
                    retry_error = exc
            for leader, tps in by_leader.items():
                topics: dict[str, list[Any]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(
                        pb.ListOffsetsPartition(partition=tp.partition, timestamp=pending[tp])
                    )
                request = pb.ListOffsetsRequest(
                    topics=[pb.ListOffsetsTopic(name=n, partitions=ps) for n, ps in topics.items()]
                )
                try:
                    response = self.call("ListOffsets", request, node_id=leader)
                except LograftError as exc:
                    if not exc.retriable:
                        raise
                    retry_error = exc
                    continue
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition)
                        if tp not in pending:
                            continue
                        if p.error_code:
                            error = errors.error_for_code(
                                p.error_code, p.error_message or f"{tp.topic}-{tp.partition}"
                            )
                            if not error.retriable:
                                raise error
                            retry_error = error
                            continue
                        results[tp] = (p.offset, p.timestamp, p.leader_epoch)
                        del pending[tp]
            if not pending:
                break
            if retry_error is None:
                retry_error = UnknownTopicOrPartitionError(
                    "no answer for " + ",".join(f"{tp.topic}-{tp.partition}" for tp in pending)
                )
            if time.monotonic() + backoff_s >= deadline:
                raise retry_error
            logger.debug("list_offsets retry pending=%d error=%s", len(pending), retry_error)
            time.sleep(backoff_s)
            self._refresh_quietly({tp.topic for tp in pending})
        return results

    def _refresh_quietly(self, topics: Iterable[str] | None = None) -> None:
        try:
            self.refresh_metadata(topics)
        except LograftError as exc:
            logger.debug("metadata refresh failed error=%s", exc)
