"""The broker connections every client shares: gRPC channels, calls and the metadata cache.

:class:`Connections` keeps one gRPC channel per broker address, bootstraps from
``bootstrap.servers``, caches the cluster metadata (topics → partitions → leader, brokers →
address; :mod:`cluster.client._metadata`) and refreshes it on demand. Failed calls become
typed errors (:func:`map_rpc_error`): ``UNAVAILABLE`` → ``NetworkError`` (retriable),
``RESOURCE_EXHAUSTED`` → ``RecordListTooLargeError``, ``DEADLINE_EXCEEDED`` →
``RequestTimedOutError``, ``INVALID_ARGUMENT`` → ``InvalidRequestError``.

Reaching a broker. A call for any broker (metadata, ``FindCoordinator``, ...) asks every
broker it knows from metadata and every bootstrap server to connect, all at once, then
tries them: connected ones first, then those that failed to connect (their call fails at
once, saying why); while every one is still connecting it waits for the first to settle.
Connecting takes at most ``socket.connection.setup.timeout.ms`` (gRPC's connect timeout), so
refused, unresolvable and silent addresses are passed over within a few seconds instead of
the whole request timeout. When none answers, the call raises
:class:`NoBrokersAvailableError` at once (not retriable), naming every address and why:
``NETWORK_EXCEPTION: no broker answered: 127.0.0.1:9092 (connection refused), ...``. A broker
that answers with a retriable error (no leader yet, not the controller) is not a dead
address: that error is raised as before and callers retry it until their timeout. A call to
one broker (``node_id``, :meth:`Connections.call_address`) that cannot reach it raises a
retriable ``NetworkError`` naming the broker, its address and why. gRPC reconnects to a
failed address after 0.1 s, backing off to 1 s (Kafka's ``reconnect.backoff.max.ms``; gRPC's
own default is 120 s), so a restarted broker is found again within a second.

:class:`Connections` is thread-safe. The configuration the clients share lives in
:mod:`cluster.client._client_config`; the metadata types and :func:`map_rpc_error` are
re-exported here, for the modules that import them from here.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import grpc

from lograft.protocol import errors
from lograft.protocol.errors import (
    LeaderNotAvailableError,
    LograftError,
    NetworkError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.framed.client import ClientLoop, FramedChannel
from lograft.protocol.framed.protocol import NotFramedError
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

from ._client_config import (
    DEFAULT_BOOTSTRAP_SERVERS,
    DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
    ClientConfig,
    parse_bootstrap_servers,
)
from ._metadata import BrokerInfo, ClusterMetadata, PartitionInfo, TopicInfo, topic_info
from ._rpc_errors import NoBrokersAvailableError, map_rpc_error, unreachable_reason

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVERS",
    "BrokerInfo",
    "ClusterMetadata",
    "Connections",
    "NoBrokersAvailableError",
    "PartitionInfo",
    "TopicInfo",
    "TopicPartition",
    "map_rpc_error",
]

logger = logging.getLogger(__name__)

_GRPC_MAX_MESSAGE = 2**31 - 1
_RECONNECT_BACKOFF_MS = 100
_RECONNECT_BACKOFF_MAX_MS = 1000

_SETTLED = frozenset(
    {
        grpc.ChannelConnectivity.READY,
        grpc.ChannelConnectivity.TRANSIENT_FAILURE,
        grpc.ChannelConnectivity.SHUTDOWN,
    }
)
_BY_RAW_STATE = {state.value[0]: state for state in grpc.ChannelConnectivity}
_POLL_S = (0.001, 0.002, 0.005, 0.01, 0.02)


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _connectivity(channel: Any, try_to_connect: bool) -> grpc.ChannelConnectivity | None:
    """The channel's connectivity state, asking an idle channel to connect when
    ``try_to_connect``; ``None`` if this gRPC does not tell.

    Read through gRPC's internal channel object: the public ``subscribe`` reports states
    from a polling thread per channel, and a channel being polled takes up to 0.2 s to
    close (a CLI command would pay it per broker on every exit).
    """
    try:
        raw = channel._channel.check_connectivity_state(try_to_connect)
    except (AttributeError, TypeError, ValueError):  # another gRPC, or a closed channel
        return None
    return _BY_RAW_STATE.get(raw)


class _Unreachable(Exception):
    """A broker address could not be reached: ``address`` and the ``reason`` in a few words.

    Internal to this module: a call for any broker collects them into
    ``NoBrokersAvailableError``, a call to one broker turns it into ``NetworkError``.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address} ({reason})")
        self.address = address
        self.reason = reason


def _chain(source: concurrent.futures.Future[Any], target: concurrent.futures.Future[Any]) -> None:
    """Settle ``target`` as ``source`` settles."""

    def copy(done: concurrent.futures.Future[Any]) -> None:
        error = done.exception()
        if error is not None:
            target.set_exception(error)
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class _Link:
    """One broker address: its channel and stub."""

    __slots__ = ("channel", "stub", "target")

    def __init__(self, target: str, channel: Any) -> None:
        self.target = target
        self.channel = channel
        self.stub = pb_grpc.BrokerStub(channel)


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
        connection_setup_timeout_ms: int = DEFAULT_CONNECTION_SETUP_TIMEOUT_MS,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.connection_setup_timeout_ms = connection_setup_timeout_ms
        self._options = [
            ("grpc.max_send_message_length", min(max_send_bytes, _GRPC_MAX_MESSAGE)),
            ("grpc.max_receive_message_length", min(max_receive_bytes, _GRPC_MAX_MESSAGE)),
            ("grpc.primary_user_agent", f"lograft-python/{client_id}"),
            # gRPC's connect timeout is the larger of this and the current backoff.
            ("grpc.min_reconnect_backoff_ms", connection_setup_timeout_ms),
            ("grpc.initial_reconnect_backoff_ms", _RECONNECT_BACKOFF_MS),
            ("grpc.max_reconnect_backoff_ms", _RECONNECT_BACKOFF_MAX_MS),
        ]
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._links: dict[str, _Link] = {}
        self._max_send_bytes = min(max_send_bytes, _GRPC_MAX_MESSAGE)
        self._max_receive_bytes = min(max_receive_bytes, _GRPC_MAX_MESSAGE)
        self._framed: dict[str, FramedChannel] = {}
        self._io_loop: ClientLoop | None = None
        self._metadata = ClusterMetadata()
        self._metadata_at = 0.0
        self._closed = False

    @classmethod
    def from_config(
        cls, config: ClientConfig, *, max_send_bytes: int = _GRPC_MAX_MESSAGE
    ) -> Connections:
        """Connections for a client's resolved configuration."""
        return cls(
            config.bootstrap_servers,
            client_id=config.client_id,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            metadata_max_age_ms=config.metadata_max_age_ms,
            max_send_bytes=max_send_bytes,
            connection_setup_timeout_ms=config.socket_connection_setup_timeout_ms,
        )

    # -- channels

    def _link(self, host: str, port: int) -> _Link:
        target = _target(host, port)
        with self._lock:
            if self._closed:
                raise errors.IllegalStateError("client is closed")
            link = self._links.get(target)
            if link is None:
                link = _Link(target, grpc.insecure_channel(target, options=self._options))
                self._links[target] = link
                logger.debug("channel opened target=%s client_id=%s", target, self.client_id)
            return link

    def stub(self, host: str, port: int) -> Any:
        """The ``BrokerStub`` for an address, opening its channel the first time."""
        return self._link(host, port).stub

    def submit(
        self, node_id: int, method: str, request: Any, timeout_s: float
    ) -> concurrent.futures.Future[Any]:
        """Start ``method`` (Produce or Fetch) on broker ``node_id`` as a framed call; the
        future ends with the response or raises a ``LograftError``. Callbacks run on this
        client's I/O thread. A broker that speaks only gRPC (an older lograft) is called
        over gRPC instead, from then on. Raises ``LeaderNotAvailableError`` at once if the
        broker is unknown."""
        broker = self._broker(node_id)
        channel = self._framed_channel(broker)
        if channel.speaks_frames:
            return channel.submit(method, request, timeout_s)
        if channel.speaks_frames is False:
            return self._grpc_call(broker, method, request, timeout_s)
        outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def settle(framed: concurrent.futures.Future[Any]) -> None:
            error = framed.exception()
            if isinstance(error, NotFramedError):
                _chain(self._grpc_call(broker, method, request, timeout_s), outcome)
            else:
                _chain(framed, outcome)

        channel.submit(method, request, timeout_s).add_done_callback(settle)
        return outcome

    def _framed_channel(self, broker: BrokerInfo) -> FramedChannel:
        target = _target(broker.host, broker.port)
        with self._lock:
            if self._closed:
                raise errors.IllegalStateError("client is closed")
            channel = self._framed.get(target)
            if channel is None:
                if self._io_loop is None:
                    self._io_loop = ClientLoop(f"lograft-io-{self.client_id}")
                channel = FramedChannel(
                    broker.host,
                    broker.port,
                    self._io_loop.loop,
                    max_request_bytes=self._max_send_bytes,
                    max_response_bytes=self._max_receive_bytes,
                    connect_timeout_s=self.connection_setup_timeout_ms / 1000.0,
                )
                self._framed[target] = channel
            return channel

    def _grpc_call(
        self, broker: BrokerInfo, method: str, request: Any, timeout_s: float
    ) -> concurrent.futures.Future[Any]:
        outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()
        call = getattr(self.stub(broker.host, broker.port), method).future(
            request, timeout=timeout_s
        )

        def settle(done: Any) -> None:
            try:
                outcome.set_result(done.result())
            except grpc.RpcError as exc:
                outcome.set_exception(map_rpc_error(exc))
            except Exception as exc:
                outcome.set_exception(NetworkError(f"{broker.host}:{broker.port}: {exc}"))

        call.add_done_callback(settle)
        return outcome

    def _broker(self, node_id: int) -> BrokerInfo:
        broker = self._metadata.brokers.get(node_id)
        if broker is None:
            raise LeaderNotAvailableError(f"broker {node_id} not in metadata")
        return broker

    def close(self) -> None:
        """Close every channel. Later calls raise ``IllegalStateError``."""
        with self._lock:
            self._closed = True
            links = list(self._links.values())
            self._links.clear()
            framed = list(self._framed.values())
            self._framed.clear()
            io_loop, self._io_loop = self._io_loop, None
        for link in links:
            link.channel.close()
        if io_loop is not None:
            io_loop.close(framed)

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
        """Call ``method`` on broker ``node_id`` (or any broker); failures become typed.

        For any broker: the first address that answers (see the module docstring); raises
        ``NoBrokersAvailableError`` when none can be reached, or the last retriable error
        a broker answered with. For ``node_id``: an unreachable broker is a retriable
        ``NetworkError`` naming it.
        """
        if node_id is None:
            return self._call_any(method, request, timeout_ms)
        broker = self._broker(node_id)
        return self.call_address(
            broker.host,
            broker.port,
            method,
            request,
            timeout_ms=timeout_ms,
            what=f"broker {node_id}",
        )

    def call_address(
        self,
        host: str,
        port: int,
        method: str,
        request: Any,
        *,
        timeout_ms: int | None = None,
        what: str = "broker",
    ) -> Any:
        """Call ``method`` at one address. Connecting takes ``socket.connection.setup.timeout.ms``
        at most; an unreachable address is a retriable ``NetworkError`` saying ``what``,
        where and why (``broker 1 at 127.0.0.1:9092: connection refused``)."""
        link = self._link(host, port)
        try:
            return self._invoke(link, method, request, timeout_ms)
        except _Unreachable as exc:
            raise NetworkError(f"{what} at {exc.address}: {exc.reason}") from None

    def _call_any(self, method: str, request: Any, timeout_ms: int | None) -> Any:
        links = [self._link(host, port) for host, port in self._candidate_addresses()]
        for link in links:  # every idle channel starts connecting now, all at once
            _connectivity(link.channel, try_to_connect=True)
        deadline = time.monotonic() + self.connection_setup_timeout_ms / 1000.0
        failures: dict[str, str] = {}
        last: LograftError | None = None
        untried = list(links)
        while untried:
            link = self._next_link(untried, deadline)
            untried.remove(link)
            try:
                return self._invoke(link, method, request, timeout_ms)
            except _Unreachable as exc:
                failures[exc.address] = exc.reason
                logger.debug(
                    "broker unreachable method=%s target=%s reason=%s",
                    method,
                    exc.address,
                    exc.reason,
                )
            except LograftError as exc:
                if not exc.retriable:
                    raise
                last = exc
                logger.debug("call failed method=%s target=%s error=%s", method, link.target, exc)
        if last is not None:
            raise last
        error = NoBrokersAvailableError(
            [(link.target, failures[link.target]) for link in links if link.target in failures]
        )
        logger.info("no broker answered method=%s %s", method, error.message)
        raise error

    @staticmethod
    def _next_link(untried: Sequence[_Link], deadline: float) -> _Link:
        """Which address to try next: a connected one, else one that failed to connect (its
        call fails at once, saying why); while all are still connecting, wait for one to
        settle until ``deadline``, then take the first (gRPC gives up connecting after
        ``socket.connection.setup.timeout.ms``)."""
        polls = 0
        while True:
            states = [_connectivity(link.channel, try_to_connect=False) for link in untried]
            if None in states:  # gRPC does not tell: try in order
                return untried[0]
            for wanted in (grpc.ChannelConnectivity.READY, None):
                for link, state in zip(untried, states, strict=True):
                    if state in _SETTLED and (wanted is None or state is wanted):
                        return link
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return untried[0]
            time.sleep(min(remaining, _POLL_S[min(polls, len(_POLL_S) - 1)]))
            polls += 1

    def _invoke(self, link: _Link, method: str, request: Any, timeout_ms: int | None) -> Any:
        """One call over ``link``; ``_Unreachable`` when its broker was not reached."""
        try:
            return getattr(link.stub, method)(request, timeout=self.timeout_s(timeout_ms))
        except grpc.RpcError as exc:
            reason = unreachable_reason(exc)
            if reason == "timed out":
                reason = f"timed out after {self.connection_setup_timeout_ms} ms"
            if reason is not None:
                raise _Unreachable(link.target, reason) from None
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
        Raises ``NoBrokersAvailableError`` (a ``NetworkError``) when no broker answers.
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
        ``retry.backoff.ms`` pauses until ``timeout_ms`` passes; others, and
        ``NoBrokersAvailableError`` when no broker answers, are raised at once.
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
