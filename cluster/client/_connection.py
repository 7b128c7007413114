"""The broker connections every client shares: gRPC channels, calls and the metadata cache.

:class:`Connections` keeps one gRPC channel per broker address, bootstraps from
``bootstrap.servers``, caches the cluster metadata (topics → partitions → leader, brokers →
address; :mod:`cluster.client._metadata`) and refreshes it on demand. Failed calls become
typed errors (:func:`map_rpc_error`): ``UNAVAILABLE`` → ``NetworkError`` (retriable),
``RESOURCE_EXHAUSTED`` → ``RecordListTooLargeError``, ``DEADLINE_EXCEEDED`` →
``RequestTimedOutError``, ``INVALID_ARGUMENT`` → ``InvalidRequestError``.

:class:`Connections` is thread-safe. The configuration checking the clients share
(:func:`resolve_config`, ``COMMON_CONFIGS``, ``DEFAULT_BOOTSTRAP_SERVERS``) lives in
:mod:`cluster.client._client_config` and is re-exported here, as are the metadata types and
:func:`map_rpc_error`, for the modules that import them from here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from cluster import errors
from cluster.errors import LeaderNotAvailableError, LograftError, UnknownTopicOrPartitionError
from cluster.wire import broker_pb2 as pb
from cluster.wire import broker_pb2_grpc as pb_grpc
from replica.topic_partition import TopicPartition

from ._client_config import (
    COMMON_CONFIGS,
    DEFAULT_BOOTSTRAP_SERVERS,
    ConfigDef,
    a_string,
    boolean,
    bootstrap_servers,
    int_at_least,
    one_of,
    optional_string,
    parse_bootstrap_servers,
    resolve_config,
)
from ._list_offsets import list_offsets
from ._metadata import BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo, topic_info
from ._rpc_errors import map_rpc_error

__all__ = [
    "COMMON_CONFIGS",
    "DEFAULT_BOOTSTRAP_SERVERS",
    "BrokerInfo",
    "ClusterMetadata",
    "ConfigDef",
    "Connections",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartition",
    "a_string",
    "boolean",
    "bootstrap_servers",
    "int_at_least",
    "map_rpc_error",
    "one_of",
    "optional_string",
    "parse_bootstrap_servers",
    "resolve_config",
]

logger = logging.getLogger(__name__)

_GRPC_MAX_MESSAGE = 2**31 - 1


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
            fresh = {t.name: topic_info(t) for t in response.topics}
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
        return list_offsets(self, timestamps, timeout_ms)
