"""The consumer-group side of the broker's client API (KIP-848 groups and their offsets).

A group's requests go to the :class:`~replica.group_service.GroupService`, which runs the
coordinator of the group's ``__consumer_offsets`` partition when this broker leads it.
Consumer groups need a controller quorum: a standalone node refuses them at once.
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any

import grpc

from lograft.protocol.errors import (
    InvalidGroupIdError,
    InvalidRequestError,
    LograftError,
    UnstableOffsetCommitError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_rpcs import BrokerRpcs, error_fields, partitions_of, topic_partitions
from replica.group import GroupCoordinator, GroupDescription, GroupRecord, OffsetAndMetadata
from replica.group_service import GroupService

__all__ = ["GroupRpcs"]

log = logging.getLogger(__name__)


class GroupRpcs(BrokerRpcs):
    """FindCoordinator, the group heartbeat, offsets, and group listing and deletion."""

    async def FindCoordinator(
        self, request: pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> pb.FindCoordinatorResponse:
        """The broker that coordinates a group (the leader of its offsets partition) or, with
        ``key_type`` 1, a transactional id (that of its transaction-state partition)."""
        error: LograftError
        if not request.group_id:
            error = InvalidGroupIdError("group_id must not be empty")
        elif self._frontend is None:
            error = _no_quorum()
        else:
            return await self._frontend.find_coordinator(
                request.group_id, self._endpoint.listener, request.key_type
            )
        return pb.FindCoordinatorResponse(
            error_code=error.code, error_message=error.message, node_id=-1
        )

    def _group_service(self) -> GroupService:
        if self._groups is None:
            raise _no_quorum()
        return self._groups

    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumerGroupHeartbeatResponse:
        """Join, heartbeat or leave (KIP-848); the answer carries the member's assignment."""
        subscribed = (
            list(request.subscribed_topic_names.names)
            if request.HasField("subscribed_topic_names")
            else None
        )
        owned = (
            partitions_of(request.owned_partitions.topics)
            if request.HasField("owned_partitions")
            else None
        )
        now_ms = self._interval_clock_ms()  # session and rebalance deadlines

        def heartbeat(coordinator: GroupCoordinator) -> Any:
            return coordinator.heartbeat(
                request.group_id,
                request.member_id,
                request.member_epoch,
                now_ms=now_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                subscribed_topics=subscribed,
                assignor=request.server_assignor or None,
                owned_partitions=owned,
                session_timeout_ms=request.session_timeout_ms or None,
                client_id=request.client_id or None,
                client_host=_client_host(context),
            )

        try:
            result = await self._group_service().call(
                request.group_id, heartbeat, lambda r: r.records
            )
        except LograftError as exc:
            return pb.ConsumerGroupHeartbeatResponse(
                member_id=request.member_id, member_epoch=-1, **error_fields(exc)
            )
        response = pb.ConsumerGroupHeartbeatResponse(
            member_id=result.member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval_ms=result.heartbeat_interval_ms,
        )
        if result.assignment is not None:
            response.assignment.SetInParent()
            response.assignment.topics.extend(topic_partitions(result.assignment))
        return response

    async def OffsetCommit(
        self, request: pb.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetCommitResponse:
        """Commit offsets for a member (at its current epoch) or for an empty group."""
        offsets = {
            TopicPartition(topic.name, p.partition): OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch, p.metadata
            )
            for topic in request.topics
            for p in topic.partitions
        }
        now_ms = self._now_ms()  # the commit's timestamp
        try:
            result = await self._group_service().call(
                request.group_id,
                lambda c: c.commit_offsets(
                    request.group_id, request.member_id, request.member_epoch, offsets, now_ms
                ),
                lambda r: r.records,
            )
        except LograftError as exc:
            return pb.OffsetCommitResponse(**error_fields(exc))
        response = pb.OffsetCommitResponse()
        _add_partition_errors(response.topics, result.errors)
        return response

    async def OffsetFetch(
        self, request: pb.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetFetchResponse:
        """Committed offsets of a group (-1: nothing committed)."""
        wanted = partitions_of(request.topics) if request.topics else None
        try:
            found = self._group_service().read(
                request.group_id, lambda c: c.fetch_offsets(request.group_id, wanted)
            )
            unstable = (
                self._group_service().read(
                    request.group_id, lambda c: c.unstable_partitions(request.group_id)
                )
                if request.require_stable
                else frozenset()
            )
        except LograftError as exc:
            return pb.OffsetFetchResponse(**error_fields(exc))
        response = pb.OffsetFetchResponse()
        by_topic: dict[str, pb.OffsetFetchTopic] = {}
        for tp, value in sorted(found.items()):
            topic_response = by_topic.get(tp.topic)
            if topic_response is None:
                topic_response = by_topic[tp.topic] = response.topics.add(name=tp.topic)
            if tp in unstable:
                topic_response.partitions.add(
                    partition=tp.partition,
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    error_code=UnstableOffsetCommitError.code,
                )
            elif value is None:
                topic_response.partitions.add(
                    partition=tp.partition, committed_offset=-1, committed_leader_epoch=-1
                )
            else:
                topic_response.partitions.add(
                    partition=tp.partition,
                    committed_offset=value.offset,
                    committed_leader_epoch=value.leader_epoch,
                    metadata=value.metadata,
                )
        return response

    async def TxnOffsetCommit(
        self, request: pb.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> pb.TxnOffsetCommitResponse:
        """Commit offsets inside the producer's transaction (KIP-98, KIP-447): written now,
        committed when its commit marker reaches the group's partition."""
        offsets = {
            TopicPartition(topic.name, p.partition): OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch, p.metadata
            )
            for topic in request.topics
            for p in topic.partitions
        }
        now_ms = self._now_ms()
        try:
            service = self._group_service()
            tp = service.offsets_partition(request.group_id)
            partition = self._logs.partitions.get(tp)
            if partition is None or not partition.producer_state.in_transaction(
                request.producer_id
            ):
                # The first write of the transaction here: the transaction coordinator
                # must confirm the group's partition was added (KIP-890).
                if self._transactions is None:
                    raise InvalidRequestError("transactions need a controller quorum")
                await self._transactions.verify_remote(
                    request.transactional_id, request.producer_id, request.producer_epoch, tp
                )
            result = await service.call(
                request.group_id,
                lambda c: c.txn_commit_offsets(
                    request.group_id,
                    request.member_id,
                    request.member_epoch,
                    request.producer_id,
                    offsets,
                    now_ms,
                ),
                lambda r: r.records,
                producer=(request.producer_id, request.producer_epoch),
            )
        except LograftError as exc:
            return pb.TxnOffsetCommitResponse(**error_fields(exc))
        response = pb.TxnOffsetCommitResponse()
        _add_partition_errors(response.topics, result.errors)
        return response

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        """The groups this broker coordinates (ask every broker for all of them)."""
        try:
            coordinators = self._group_service().all_coordinators()
        except LograftError as exc:
            return pb.ListGroupsResponse(**error_fields(exc))
        response = pb.ListGroupsResponse()
        for coordinator in coordinators:
            for listing in coordinator.list_groups():
                response.groups.add(group_id=listing.group_id, state=listing.state.value)
        return response

    async def DescribeGroups(
        self, request: pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeGroupsResponse:
        """Members, epochs and assignments of the groups asked for."""
        response = pb.DescribeGroupsResponse()
        for group_id in request.group_ids:
            try:
                described = self._group_service().read(
                    group_id, functools.partial(_describe, group_id)
                )
            except LograftError as exc:
                response.groups.add(group_id=group_id, **error_fields(exc))
                continue
            group = response.groups.add(
                group_id=group_id,
                state=described.state.value,
                group_epoch=described.group_epoch,
                assignment_epoch=described.assignment_epoch,
                assignor=described.assignor,
                coordinator_id=self._endpoint.node_id,
            )
            for member in described.members:
                group.members.add(
                    member_id=member.member_id,
                    client_id=member.client_id,
                    member_epoch=member.member_epoch,
                    subscribed_topic_names=list(member.subscribed_topics),
                    assignment=topic_partitions(member.assignment),
                    target_assignment=topic_partitions(member.target_assignment),
                    client_host=member.client_host,
                )
        return response

    async def DeleteGroups(
        self, request: pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupsResponse:
        """Delete groups without members, with their committed offsets."""
        response = pb.DeleteGroupsResponse()
        for group_id in request.group_ids:
            try:
                await self._group_service().call(
                    group_id, functools.partial(_delete_group, group_id), _records
                )
            except LograftError as exc:
                response.groups.add(group_id=group_id, **error_fields(exc))
                continue
            response.groups.add(group_id=group_id)
        return response

    async def OffsetDelete(
        self, request: pb.OffsetDeleteRequest, context: grpc.aio.ServicerContext
    ) -> pb.OffsetDeleteResponse:
        """Delete committed offsets of topics the group's members do not subscribe to."""
        wanted = partitions_of(request.topics)
        try:
            result = await self._group_service().call(
                request.group_id,
                lambda c: c.delete_offsets(request.group_id, wanted),
                lambda r: r.records,
            )
        except LograftError as exc:
            return pb.OffsetDeleteResponse(**error_fields(exc))
        response = pb.OffsetDeleteResponse()
        _add_partition_errors(response.topics, result.errors)
        return response


def _no_quorum() -> InvalidRequestError:
    # Not retriable: a standalone node never gets a coordinator, so a consumer or an admin
    # call should fail at once with this message instead of retrying until it times out.
    return InvalidRequestError(
        "consumer groups need a controller quorum: start nodes with "
        "--controller-quorum-voters (lograft cluster up does)"
    )


def _client_host(context: grpc.aio.ServicerContext | None) -> str | None:
    """The caller's address as Kafka shows a member's host (``/127.0.0.1``); None if unknown.

    gRPC names peers ``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000`` or ``unix:path``.
    """
    peer = context.peer() if context is not None else None
    if not isinstance(peer, str):
        return None
    kind, _, address = peer.partition(":")
    address = urllib.parse.unquote(address)  # newer gRPC writes ipv6:%5B::1%5D:5000
    if kind == "ipv4":
        return "/" + address.rsplit(":", 1)[0]
    if kind == "ipv6":
        return "/" + address.rsplit(":", 1)[0].strip("[]")
    return None


def _add_partition_errors(
    topics: Any, errors: Mapping[TopicPartition, LograftError | None]
) -> None:
    """Fill ``repeated OffsetCommitTopicResponse``: per partition 0 or its error."""
    by_topic: dict[str, pb.OffsetCommitTopicResponse] = {}
    for tp, error in sorted(errors.items()):
        topic_response = by_topic.get(tp.topic)
        if topic_response is None:
            topic_response = by_topic[tp.topic] = topics.add(name=tp.topic)
        topic_response.partitions.add(
            partition=tp.partition,
            error_code=0 if error is None else error.code,
            error_message="" if error is None else error.message,
        )


def _describe(group_id: str, coordinator: GroupCoordinator) -> GroupDescription:
    return coordinator.describe(group_id)


def _delete_group(group_id: str, coordinator: GroupCoordinator) -> tuple[GroupRecord, ...]:
    return coordinator.delete_group(group_id)


def _records(records: tuple[GroupRecord, ...]) -> tuple[GroupRecord, ...]:
    return records
