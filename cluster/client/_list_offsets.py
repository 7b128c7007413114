"""ListOffsets: the offset of each partition at a timestamp, asked of its leader.

What ``Connections.list_offsets`` runs for the consumer's blocking offset lookups
(``position``, ``beginning_offsets``, ``end_offsets``) and ``AdminClient.list_offsets``: the
partitions are grouped by leader, one request per leader; retriable errors (no leader, not
the leader, network) are retried after a metadata refresh until the timeout passes.
``list_offsets_at`` is one such request to one leader, without retries, reporting each
partition's outcome on its own: what the consumer's background position lookups send, one
per leader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from lograft.protocol import errors
from lograft.protocol.errors import LograftError, UnknownTopicOrPartitionError
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb

from ._rpc_errors import NoBrokersAvailableError

if TYPE_CHECKING:
    from ._connection import Connections

__all__ = ["list_offsets", "list_offsets_at"]

log = logging.getLogger(__name__)


def list_offsets(
    conn: Connections,
    timestamps: Mapping[TopicPartition, int],
    timeout_ms: int,
    isolation_level: int = 0,
) -> dict[TopicPartition, tuple[int, int, int]]:
    """ListOffsets on each partition's leader: ``{tp: (offset, timestamp, leader_epoch)}``.

    ``timestamps`` holds -1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms;
    with ``isolation_level`` 1 (read_committed) "latest" is the last stable offset.
    Retriable errors are retried with a metadata refresh until ``timeout_ms`` passes;
    the first non-retriable error is raised.
    """
    deadline = time.monotonic() + timeout_ms / 1000.0
    backoff_s = conn.retry_backoff_ms / 1000.0
    results: dict[TopicPartition, tuple[int, int, int]] = {}
    pending = dict(timestamps)
    if any(conn.metadata.partition(tp.topic, tp.partition) is None for tp in pending):
        _refresh_quietly(conn, {tp.topic for tp in pending})
    while pending:
        retry_error: LograftError | None = None
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, timestamp in pending.items():
            try:
                by_leader.setdefault(conn.metadata.leader_for(tp), {})[tp] = timestamp
            except LograftError as exc:
                if not exc.retriable:
                    raise
                retry_error = exc
        for leader, asked in by_leader.items():
            found, failed = list_offsets_at(conn, leader, asked, isolation_level=isolation_level)
            results.update(found)
            for tp in found:
                del pending[tp]
            for error in failed.values():
                retry_error = error
        if not pending:
            break
        if retry_error is None:
            retry_error = UnknownTopicOrPartitionError(
                "no answer for " + ",".join(f"{tp.topic}-{tp.partition}" for tp in pending)
            )
        if time.monotonic() + backoff_s >= deadline:
            raise retry_error
        log.debug("list_offsets retry pending=%d error=%s", len(pending), retry_error)
        time.sleep(backoff_s)
        _refresh_quietly(conn, {tp.topic for tp in pending})
    return results


def list_offsets_at(
    conn: Connections,
    leader: int,
    timestamps: Mapping[TopicPartition, int],
    timeout_ms: int | None = None,
    isolation_level: int = 0,
) -> tuple[dict[TopicPartition, tuple[int, int, int]], dict[TopicPartition, LograftError]]:
    """One ``ListOffsets`` to broker ``leader`` for ``timestamps``, without retrying; the
    call's deadline is ``timeout_ms`` (default ``request.timeout.ms``).

    Returns what it found (``{tp: (offset, timestamp, leader_epoch)}``) and the retriable
    error of each partition it did not (the call's own error for all of them when the
    broker could not be asked); a partition the answer leaves out fails as unknown. The
    first non-retriable error is raised. The consumer's position lookups ask each leader
    on its own this way, so that a partition without a reachable leader holds up no other.
    """
    topics: dict[str, list[Any]] = {}
    for tp, timestamp in timestamps.items():
        topics.setdefault(tp.topic, []).append(
            pb.ListOffsetsPartition(partition=tp.partition, timestamp=timestamp)
        )
    request = pb.ListOffsetsRequest(
        topics=[pb.ListOffsetsTopic(name=n, partitions=ps) for n, ps in topics.items()],
        isolation_level=isolation_level,
    )
    found: dict[TopicPartition, tuple[int, int, int]] = {}
    failed: dict[TopicPartition, LograftError] = {}
    try:
        response = conn.call("ListOffsets", request, node_id=leader, timeout_ms=timeout_ms)
    except LograftError as exc:
        if not exc.retriable:
            raise
        return found, dict.fromkeys(timestamps, exc)
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            if tp not in timestamps or tp in found:
                continue
            if p.error_code:
                error = errors.error_for_code(
                    p.error_code, p.error_message or f"{tp.topic}-{tp.partition}"
                )
                if not error.retriable:
                    raise error
                failed[tp] = error
                continue
            found[tp] = (p.offset, p.timestamp, p.leader_epoch)
    for tp in timestamps:
        if tp not in found and tp not in failed:
            failed[tp] = UnknownTopicOrPartitionError(
                f"broker {leader} did not answer for {tp.topic}-{tp.partition}"
            )
    return found, failed


def _refresh_quietly(conn: Connections, topics: Iterable[str] | None = None) -> None:
    try:
        conn.refresh_metadata(topics)
    except NoBrokersAvailableError:
        raise
    except LograftError as exc:
        log.debug("metadata refresh failed error=%s", exc)
