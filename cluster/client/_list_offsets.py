"""ListOffsets: the offset of each partition at a timestamp, asked of its leader.

What ``Connections.list_offsets`` runs for the consumer's offset lookups (earliest, latest,
by time) and ``AdminClient.list_offsets``: the partitions are grouped by leader, one request
per leader; retriable errors (no leader, not the leader, network) are retried after a
metadata refresh until the timeout passes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cluster import errors
from cluster.errors import LograftError, UnknownTopicOrPartitionError
from cluster.wire import broker_pb2 as pb
from replica.topic_partition import TopicPartition

from ._rpc_errors import NoBrokersAvailableError

if TYPE_CHECKING:
    from ._connection import Connections

__all__ = ["list_offsets"]

log = logging.getLogger(__name__)


def list_offsets(
    conn: Connections, timestamps: Mapping[TopicPartition, int], timeout_ms: int
) -> dict[TopicPartition, tuple[int, int, int]]:
    """ListOffsets on each partition's leader: ``{tp: (offset, timestamp, leader_epoch)}``.

    ``timestamps`` holds -1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms.
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
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in pending:
            try:
                by_leader.setdefault(conn.metadata.leader_for(tp), []).append(tp)
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
                response = conn.call("ListOffsets", request, node_id=leader)
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
        log.debug("list_offsets retry pending=%d error=%s", len(pending), retry_error)
        time.sleep(backoff_s)
        _refresh_quietly(conn, {tp.topic for tp in pending})
    return results


def _refresh_quietly(conn: Connections, topics: Iterable[str] | None = None) -> None:
    try:
        conn.refresh_metadata(topics)
    except NoBrokersAvailableError:
        raise
    except LograftError as exc:
        log.debug("metadata refresh failed error=%s", exc)
