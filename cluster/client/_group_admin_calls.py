"""``AdminClient``'s consumer-group calls: one request each to the group's coordinator.

Each call finds the group's coordinator and retries what is retriable through
:class:`~cluster.client._coordinator.CoordinatorCalls`, within
``default.api.timeout.ms``; ``list_consumer_groups`` asks every broker. What the calls mean,
and what they raise, is documented on ``AdminClient`` (:mod:`cluster.client.admin`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from lograft.protocol.errors import InvalidRequestError, LograftError, error_for_code
from lograft.protocol.wire import broker_pb2 as pb

from ._admin_calls import AdminCalls, done
from ._connection import TopicPartition
from ._coordinator import CoordinatorCalls
from ._group_admin import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    OffsetAndMetadata,
    description_from_pb,
    partition_errors,
)

__all__ = ["GroupAdminCalls"]

log = logging.getLogger(__name__)


class GroupAdminCalls:
    """The consumer-group calls of one ``AdminClient``, over its connections."""

    def __init__(self, calls: AdminCalls, *, retry_backoff_ms: int) -> None:
        self._calls = calls
        self._conn = calls.conn
        self._coordinators = CoordinatorCalls(calls.conn, retry_backoff_ms=retry_backoff_ms)

    def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """``AdminClient.list_consumer_groups``."""
        found: dict[str, ConsumerGroupListing] = {}
        for response in self._calls.each_broker("ListGroups", pb.ListGroupsRequest()):
            for g in response.groups:
                found[g.group_id] = ConsumerGroupListing(g.group_id, g.state)
        return [found[group_id] for group_id in sorted(found)]

    def describe_consumer_groups(
        self, group_ids: Sequence[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """``AdminClient.describe_consumer_groups``."""
        described: dict[str, ConsumerGroupDescription] = {}
        for group_id in group_ids:

            def answer(response: Any, coordinator: Any, group_id: str = group_id) -> Any:
                group = _group_result(response, group_id, "description of")
                return description_from_pb(group, coordinator)

            described[group_id] = self._coordinators.call(
                group_id,
                "DescribeGroups",
                pb.DescribeGroupsRequest(group_ids=[group_id]),
                answer,
                timeout_ms=self._calls.api_timeout_ms,
            )
        return described

    def delete_consumer_groups(self, group_ids: Sequence[str]) -> dict[str, Future[None]]:
        """``AdminClient.delete_consumer_groups``."""
        results: dict[str, Future[None]] = {}
        for group_id in group_ids:

            def answer(response: Any, _coordinator: Any, group_id: str = group_id) -> None:
                _group_result(response, group_id, "result for")

            try:
                self._coordinators.call(
                    group_id,
                    "DeleteGroups",
                    pb.DeleteGroupsRequest(group_ids=[group_id]),
                    answer,
                    timeout_ms=self._calls.api_timeout_ms,
                )
                results[group_id] = done(None)
            except LograftError as exc:
                if exc.retriable:
                    raise
                results[group_id] = done(exc)
        log.info(
            "delete_consumer_groups groups=%s failed=%s",
            ",".join(group_ids),
            ",".join(g for g, f in results.items() if f.exception() is not None) or "-",
        )
        return results

    def list_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """``AdminClient.list_consumer_group_offsets``."""
        wanted = sorted(set(partitions)) if partitions is not None else None
        by_topic: dict[str, list[int]] = {}
        for tp in wanted or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = pb.OffsetFetchRequest(
            group_id=group_id,
            topics=[pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )

        def answer(response: Any, _coordinator: Any) -> dict[TopicPartition, Any]:
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message or group_id)
            found: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted or ())
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition)
                    if p.error_code:
                        raise error_for_code(p.error_code, str(tp))
                    if p.committed_offset >= 0:
                        epoch = p.committed_leader_epoch
                        found[tp] = OffsetAndMetadata(
                            p.committed_offset, epoch if epoch >= 0 else None, p.metadata
                        )
            return found

        if wanted == []:
            return {}
        result: dict[TopicPartition, OffsetAndMetadata | None] = self._coordinators.call(
            group_id, "OffsetFetch", request, answer, timeout_ms=self._calls.api_timeout_ms
        )
        return result

    def alter_consumer_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]
    ) -> dict[TopicPartition, Future[None]]:
        """``AdminClient.alter_consumer_group_offsets``."""
        by_topic: dict[str, list[Any]] = {}
        for tp, value in sorted(offsets.items()):
            oam = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            by_topic.setdefault(tp.topic, []).append(
                pb.OffsetCommitPartition(
                    partition=tp.partition,
                    committed_offset=oam.offset,
                    committed_leader_epoch=-1 if oam.leader_epoch is None else oam.leader_epoch,
                    metadata=oam.metadata,
                )
            )
        request = pb.OffsetCommitRequest(
            group_id=group_id,
            member_id="",
            member_epoch=-1,
            topics=[pb.OffsetCommitTopic(name=n, partitions=ps) for n, ps in by_topic.items()],
        )

        return self._partition_futures(
            "alter_consumer_group_offsets", group_id, "OffsetCommit", request, offsets
        )

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, Future[None]]:
        """``AdminClient.delete_consumer_group_offsets``."""
        wanted = sorted(set(partitions))
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = pb.OffsetDeleteRequest(
            group_id=group_id,
            topics=[pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        return self._partition_futures(
            "delete_consumer_group_offsets", group_id, "OffsetDelete", request, wanted
        )

    def _partition_futures(
        self,
        what: str,
        group_id: str,
        method: str,
        request: Any,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, Future[None]]:
        """One call answered per partition; a group-level error fails every future."""

        def answer(response: Any, _coordinator: Any) -> dict[TopicPartition, Future[None]]:
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message or group_id)
            return {tp: done(e) for tp, e in partition_errors(response.topics).items()}

        try:
            results: dict[TopicPartition, Future[None]] = self._coordinators.call(
                group_id, method, request, answer, timeout_ms=self._calls.api_timeout_ms
            )
        except LograftError as exc:
            if exc.retriable:
                raise
            results = {tp: done(exc) for tp in partitions}
        for tp in partitions:
            results.setdefault(tp, done(InvalidRequestError(f"no result for {tp}")))
        log.info(
            "%s group=%s partitions=%d failed=%d",
            what,
            group_id,
            len(results),
            sum(1 for f in results.values() if f.exception() is not None),
        )
        return results


def _group_result(response: Any, group_id: str, what: str) -> Any:
    """The entry of ``group_id`` in a response answering per group; its typed error if it
    failed (``what`` names the entry in the error of a response without one)."""
    group = next((g for g in response.groups if g.group_id == group_id), None)
    if group is None:
        raise InvalidRequestError(f"no {what} group {group_id!r}")
    if group.error_code:
        raise error_for_code(group.error_code, group.error_message or group_id)
    return group
