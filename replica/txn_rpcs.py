"""The transaction side of the broker's client API (Kafka's KIP-98, KIP-890, KIP-939).

Requests naming a ``transactional_id`` go to the
:class:`~replica.txn_service.TransactionService`, which runs the coordinator of the id's
``__transaction_state`` partition when this broker leads it; ``WriteTxnMarkers`` comes from
a coordinator to this broker as the leader of the partitions a transaction wrote.
Transactions need a controller quorum: a standalone node refuses them at once.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import grpc

from lograft.protocol.control_records import EndTxnMarker
from lograft.protocol.errors import (
    CoordinatorNotAvailableError,
    InvalidRequestError,
    InvalidTxnStateError,
    InvariantError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TransactionalIdNotFoundError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_rpcs import BrokerRpcs, error_fields, partitions_of, topic_partitions
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from replica.txn import InitResult, Outcome, TransactionCoordinator, TxnMetadata, TxnState
from replica.txn_service import TransactionService

__all__ = ["TxnRpcs"]

log = logging.getLogger(__name__)

MARKER_ACK_TIMEOUT_S = 30.0
"""How long a marker waits to reach every in-sync replica before the coordinator is told to
retry it."""
STATE_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
}
"""Kafka's names of the transaction states, as ``kafka-transactions.sh`` prints them."""


class TxnRpcs(BrokerRpcs):
    """The transaction coordinator's RPCs and the partition leader's ``WriteTxnMarkers``."""

    def _txn_service(self) -> TransactionService:
        if self._transactions is None:
            raise InvalidRequestError(
                "transactions need a controller quorum: start nodes with "
                "--controller-quorum-voters (lograft cluster up does)"
            )
        return self._transactions

    async def _init_transactional_producer(
        self, request: pb.InitProducerIdRequest
    ) -> pb.InitProducerIdResponse:
        """InitProducerId for a transactional id: its producer id and a new epoch."""
        transactional_id = request.transactional_id
        try:
            service = self._txn_service()
            new_producer_id = await service.new_producer_id()
            now_ms = self._now_ms()

            def init(coordinator: TransactionCoordinator) -> Outcome[InitResult]:
                return coordinator.init_producer_id(
                    transactional_id,
                    request.transaction_timeout_ms,
                    now_ms,
                    lambda: new_producer_id,
                    two_phase=request.enable_2pc,
                    keep_prepared=request.keep_prepared_txn,
                )

            result = await service.call(transactional_id, init)
        except LograftError as exc:
            return pb.InitProducerIdResponse(
                producer_id=-1,
                producer_epoch=-1,
                ongoing_txn_producer_id=-1,
                ongoing_txn_producer_epoch=-1,
                **error_fields(exc),
            )
        log.info(
            "transactional producer initialised transactional_id=%s producer_id=%d epoch=%d",
            transactional_id,
            result.producer_id,
            result.producer_epoch,
        )
        return pb.InitProducerIdResponse(
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
            ongoing_txn_producer_id=result.ongoing_producer_id,
            ongoing_txn_producer_epoch=result.ongoing_producer_epoch,
        )

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddPartitionsToTxnResponse:
        """Add partitions to the open transaction (opening one), or, with ``verify_only``,
        confirm they are in it (a partition leader asking, KIP-890)."""
        wanted = partitions_of(request.topics)
        transactional_id = request.transactional_id
        try:
            service = self._txn_service()
            if request.verify_only:
                for tp in wanted:
                    verify = functools.partial(
                        _verify_partition,
                        transactional_id,
                        request.producer_id,
                        request.producer_epoch,
                        tp,
                    )
                    if not service.read(transactional_id, verify):
                        raise InvalidTxnStateError(
                            f"{tp} is not in the open transaction of {transactional_id!r}"
                        )
            else:
                now_ms = self._now_ms()
                await service.call(
                    transactional_id,
                    lambda c: c.add_partitions(
                        transactional_id,
                        request.producer_id,
                        request.producer_epoch,
                        wanted,
                        now_ms,
                    ),
                )
        except LograftError as exc:
            return pb.AddPartitionsToTxnResponse(**error_fields(exc))
        return pb.AddPartitionsToTxnResponse()

    async def AddOffsetsToTxn(
        self, request: pb.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddOffsetsToTxnResponse:
        """Add the group's ``__consumer_offsets`` partition to the open transaction: the
        offsets the producer then commits (TxnOffsetCommit) end with the transaction."""
        transactional_id = request.transactional_id
        try:
            service = self._txn_service()
            if not request.group_id:
                raise InvalidRequestError("AddOffsetsToTxn needs a group_id")
            count = await self._offsets_partition_count(request.group_id)
            tp = TopicPartition(OFFSETS_TOPIC, partition_for_group(request.group_id, count))
            now_ms = self._now_ms()
            await service.call(
                transactional_id,
                lambda c: c.add_partitions(
                    transactional_id, request.producer_id, request.producer_epoch, [tp], now_ms
                ),
            )
        except LograftError as exc:
            return pb.AddOffsetsToTxnResponse(**error_fields(exc))
        return pb.AddOffsetsToTxnResponse()

    async def _offsets_partition_count(self, group_id: str) -> int:
        groups = self._groups
        count = groups.offsets_partition_count() if groups is not None else 0
        if count <= 0:
            if self._frontend is not None:
                # Creates the offsets topic on first use, as FindCoordinator does.
                await self._frontend.find_coordinator(group_id, self._endpoint.listener)
            raise CoordinatorNotAvailableError(f"{OFFSETS_TOPIC} is being created")
        return count

    async def EndTxn(
        self, request: pb.EndTxnRequest, context: grpc.aio.ServicerContext
    ) -> pb.EndTxnResponse:
        """Commit or abort the open transaction; answers once the decision is durable (the
        markers follow), with the producer id and epoch of the next transaction."""
        transactional_id = request.transactional_id
        now_ms = self._now_ms()
        try:
            result = await self._txn_service().call(
                transactional_id,
                lambda c: c.end_transaction(
                    transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.committed,
                    now_ms,
                ),
            )
        except LograftError as exc:
            return pb.EndTxnResponse(producer_id=-1, producer_epoch=-1, **error_fields(exc))
        return pb.EndTxnResponse(
            producer_id=result.producer_id, producer_epoch=result.producer_epoch
        )

    async def WriteTxnMarkers(
        self, request: pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> pb.WriteTxnMarkersResponse:
        """Append each marker to the partitions named, as their leader, and answer once
        every in-sync replica holds it (per partition: 0 or the error)."""
        response = pb.WriteTxnMarkersResponse()
        for wanted in request.markers:
            marker = EndTxnMarker(wanted.committed, wanted.coordinator_epoch)
            result = response.markers.add(producer_id=wanted.producer_id)
            targets = partitions_of(wanted.topics)
            outcomes = await asyncio.gather(
                *(
                    self._write_marker(tp, wanted.producer_id, wanted.producer_epoch, marker)
                    for tp in targets
                ),
                return_exceptions=True,
            )
            for tp, outcome in zip(targets, outcomes, strict=True):
                if isinstance(outcome, InvariantError):
                    raise outcome  # the node halts (cluster.halt); it is never answered
                error: LograftError | None = None
                if isinstance(outcome, TimeoutError):
                    error = RequestTimedOutError("the marker was not replicated in time")
                elif isinstance(outcome, LograftError):
                    error = outcome
                elif isinstance(outcome, BaseException):
                    raise outcome
                result.partitions.add(
                    topic=tp.topic,
                    partition=tp.partition,
                    **(error_fields(error) if error is not None else {}),
                )
        return response

    async def _write_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, marker: EndTxnMarker
    ) -> None:
        partition = self._logs.partition(tp.topic, tp.partition)
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{tp} is led by another broker")
        required = partition.append_marker(producer_id, producer_epoch, marker, self._now_ms())
        leader_epoch = partition.leader_epoch  # the append's: nothing ran in between
        async with asyncio.timeout(MARKER_ACK_TIMEOUT_S):
            await partition.wait_acked(required, -1, leader_epoch)
        if tp.topic == OFFSETS_TOPIC and self._groups is not None:
            # The group coordinator commits (or drops) the producer's pending offsets.
            await self._groups.on_transaction_marker(tp.partition, producer_id, marker.committed)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTransactionsResponse:
        """The transactional ids this broker coordinates (ask every broker for all)."""
        wanted = set(request.state_filters)
        try:
            coordinators = self._txn_service().all_coordinators()
        except LograftError as exc:
            return pb.ListTransactionsResponse(**error_fields(exc))
        response = pb.ListTransactionsResponse()
        for coordinator in coordinators:
            for transactional_id in coordinator.transactional_ids():
                meta = coordinator.metadata(transactional_id)
                if meta is None:
                    continue
                state = STATE_NAMES[meta.state]
                if wanted and state not in wanted:
                    continue
                response.transactions.add(
                    transactional_id=transactional_id, producer_id=meta.producer_id, state=state
                )
        return response

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeTransactionsResponse:
        """State, producer, timeout and partitions of each transactional id asked for."""
        response = pb.DescribeTransactionsResponse()
        for transactional_id in request.transactional_ids:
            try:
                meta = self._txn_service().read(
                    transactional_id, functools.partial(_metadata, transactional_id)
                )
                if meta is None:
                    raise TransactionalIdNotFoundError(
                        f"transactional id {transactional_id!r} is unknown"
                    )
            except LograftError as exc:
                response.transactions.add(transactional_id=transactional_id, **error_fields(exc))
                continue
            _describe_into(response.transactions.add(), meta, self._endpoint.node_id)
        return response


def _verify_partition(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    tp: TopicPartition,
    coordinator: TransactionCoordinator,
) -> bool:
    return coordinator.verify_partition(transactional_id, producer_id, producer_epoch, tp)


def _metadata(transactional_id: str, coordinator: TransactionCoordinator) -> TxnMetadata | None:
    return coordinator.metadata(transactional_id)


def _describe_into(out: pb.TransactionDescription, meta: TxnMetadata, node_id: int) -> None:
    out.transactional_id = meta.transactional_id
    out.state = STATE_NAMES[meta.state]
    out.producer_id = meta.producer_id
    out.producer_epoch = meta.producer_epoch
    out.transaction_timeout_ms = meta.timeout_ms
    out.transaction_start_time_ms = meta.started_ms
    out.topics.extend(topic_partitions(meta.partitions))
    out.two_phase = meta.two_phase
    out.coordinator_id = node_id
