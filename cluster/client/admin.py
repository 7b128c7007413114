"""``AdminClient``: create, delete, list and describe topics; look up offsets.

Results, as in Kafka's Python clients:

* ``create_topics`` and ``delete_topics`` change several topics in one request, and each topic
  may fail on its own; they return ``{topic name: Future}``. The futures are already done when
  the call returns (the client is synchronous): ``future.result()`` is ``None`` on success and
  raises the topic's typed error (``TopicAlreadyExistsError``, ``InvalidPartitionsError``,
  ``UnknownTopicOrPartitionError``, ...) otherwise. A failure of the whole request (no broker
  reachable, timeout) is raised by the call itself.
* ``list_topics``, ``describe_topics`` and ``list_offsets`` are queries: they return plain
  values and raise the first typed error they meet.

Retriable errors (no leader, not the leader, network) are retried with ``retry.backoff.ms``
pauses and a metadata refresh until ``default.api.timeout.ms`` passes. Not thread-safe for
concurrent ``close``; otherwise the calls may be used from several threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar

from cluster.errors import (
    InvalidRequestError,
    LograftError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from cluster.wire import broker_pb2 as pb

from ._connection import (
    COMMON_CONFIGS,
    ConfigDef,
    Connections,
    PartitionInfo,
    TopicPartition,
    int_at_least,
    resolve_config,
)

__all__ = [
    "ADMIN_CONFIGS",
    "AdminClient",
    "ListOffsetsResult",
    "NewTopic",
    "OffsetSpec",
    "TopicDescription",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ADMIN_CONFIGS: tuple[ConfigDef, ...] = (
    *COMMON_CONFIGS,
    ConfigDef(
        "default.api.timeout.ms",
        60000,
        int_at_least(1),
        "how long one admin call may take, retries included",
    ),
)
"""Every config ``AdminClient`` accepts, with its default."""

OffsetSpec = Literal["earliest", "latest", "max_timestamp"] | int
"""What ``list_offsets`` looks up: the first offset, the end offset, the offset of the record
with the largest timestamp, or (an int) the first offset whose timestamp is at or after that
many milliseconds since the epoch."""

_SPEC_TIMESTAMPS = {"latest": -1, "earliest": -2, "max_timestamp": -3}


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: its name, partition count, replication factor and topic configs."""

    name: str
    num_partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's partitions (leader, replicas, ISR) and its configs."""

    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    """An offset found by ``list_offsets``; ``offset`` is -1 when no record matched."""

    offset: int
    timestamp: int
    leader_epoch: int


def _spec_timestamp(spec: OffsetSpec) -> int:
    if isinstance(spec, bool):
        raise InvalidRequestError(f"bad offset spec {spec!r}")
    if isinstance(spec, int):
        if spec < 0:
            raise InvalidRequestError(f"timestamp {spec} is negative")
        return spec
    try:
        return _SPEC_TIMESTAMPS[spec]
    except KeyError:
        raise InvalidRequestError(
            f"bad offset spec {spec!r}: expected earliest, latest, max_timestamp or a timestamp"
        ) from None


def _done(error: LograftError | None) -> Future[None]:
    future: Future[None] = Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future


class AdminClient:
    """Administers topics of a lograft cluster.

    ``AdminClient({"bootstrap.servers": "127.0.0.1:9092"})`` or
    ``AdminClient(bootstrap_servers="127.0.0.1:9092")``; see ``ADMIN_CONFIGS``.
    Unknown config names and bad values raise ``InvalidConfigError``.
    """

    def __init__(self, config: Mapping[str, object] | None = None, **overrides: object) -> None:
        self.config = resolve_config("admin", ADMIN_CONFIGS, config, overrides)
        self._api_timeout_ms = int(self._int("default.api.timeout.ms"))
        self._backoff_s = self._int("retry.backoff.ms") / 1000.0
        self._conn = Connections(
            str(self.config["bootstrap.servers"]),
            client_id=str(self.config["client.id"]),
            request_timeout_ms=self._int("request.timeout.ms"),
            retry_backoff_ms=self._int("retry.backoff.ms"),
            metadata_max_age_ms=self._int("metadata.max.age.ms"),
        )

    def _int(self, name: str) -> int:
        value = self.config[name]
        assert isinstance(value, int)
        return value

    # -- lifecycle

    def close(self) -> None:
        """Close the connections."""
        self._conn.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- topics

    def _controller_call(self, method: str, request: Any) -> Any:
        """Send to the controller when the metadata names one, else to any broker; retry."""
        deadline = time.monotonic() + self._api_timeout_ms / 1000.0
        while True:
            try:
                controller = self._conn.metadata.controller_id
                if controller in self._conn.metadata.brokers:
                    return self._conn.call(method, request, node_id=controller)
                return self._conn.call(method, request)
            except LograftError as exc:
                if not exc.retriable or time.monotonic() + self._backoff_s >= deadline:
                    raise
                logger.debug("admin call retry method=%s error=%s", method, exc)
            time.sleep(self._backoff_s)
            self._refresh_quietly()

    def _refresh_quietly(self, topics: Iterable[str] | None = None) -> None:
        try:
            self._conn.refresh_metadata(topics)
        except LograftError as exc:
            logger.debug("metadata refresh failed error=%s", exc)

    def create_topics(
        self,
        new_topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, Future[None]]:
        """Create topics; returns ``{name: done Future}`` (see the module docstring)."""
        request = pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs={str(k): str(v) for k, v in t.configs.items()},
                )
                for t in new_topics
            ],
            timeout_ms=timeout_ms if timeout_ms is not None else self._conn.request_timeout_ms,
            validate_only=validate_only,
        )
        response = self._controller_call("CreateTopics", request)
        results = {
            r.name: _done(
                error_for_code(r.error_code, r.error_message or r.name) if r.error_code else None
            )
            for r in response.topics
        }
        for t in new_topics:
            results.setdefault(
                t.name, _done(InvalidRequestError(f"no result for topic {t.name!r}"))
            )
        logger.info(
            "create_topics topics=%s failed=%s",
            ",".join(t.name for t in new_topics),
            ",".join(n for n, f in results.items() if f.exception() is not None) or "-",
        )
        return results

    def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> dict[str, Future[None]]:
        """Delete topics; returns ``{name: done Future}`` (see the module docstring)."""
        request = pb.DeleteTopicsRequest(
            topic_names=list(names),
            timeout_ms=timeout_ms if timeout_ms is not None else self._conn.request_timeout_ms,
        )
        response = self._controller_call("DeleteTopics", request)
        results = {
            r.name: _done(
                error_for_code(r.error_code, r.error_message or r.name) if r.error_code else None
            )
            for r in response.topics
        }
        for name in names:
            results.setdefault(name, _done(InvalidRequestError(f"no result for topic {name!r}")))
        logger.info("delete_topics topics=%s", ",".join(names))
        return results

    def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        metadata = self._with_retry(lambda: self._conn.refresh_metadata())
        return sorted(name for name, info in metadata.topics.items() if info.error_code == 0)

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Partitions (leader, replicas, ISR) and configs of ``names`` (``None``: every topic).

        Raises the typed error of the first topic that cannot be described (for example
        ``UnknownTopicOrPartitionError``).
        """
        wanted = list(names) if names is not None else None
        metadata = self._with_retry(lambda: self._conn.refresh_metadata(wanted))
        order = wanted if wanted is not None else sorted(metadata.topics)
        descriptions: list[TopicDescription] = []
        for name in order:
            info = metadata.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if info.error_code != 0:
                raise error_for_code(info.error_code, info.error_message or name)
            descriptions.append(TopicDescription(name, info.partitions, dict(info.configs)))
        return descriptions

    def list_offsets(
        self, specs: Mapping[TopicPartition, OffsetSpec]
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Offsets of partitions by spec: ``"earliest"``, ``"latest"``, ``"max_timestamp"``,
        or a timestamp in ms. Asks each partition's leader; raises the first typed error."""
        timestamps = {tp: _spec_timestamp(spec) for tp, spec in specs.items()}
        found = self._conn.list_offsets(timestamps, self._api_timeout_ms)
        return {tp: ListOffsetsResult(*found[tp]) for tp in timestamps}

    def _with_retry(self, fn: Callable[[], _T]) -> _T:
        deadline = time.monotonic() + self._api_timeout_ms / 1000.0
        while True:
            try:
                return fn()
            except LograftError as exc:
                if not exc.retriable or time.monotonic() + self._backoff_s >= deadline:
                    raise
            time.sleep(self._backoff_s)
