"""How a broker's transaction coordinator and partition leaders reach the other brokers.

:class:`BrokerTxnPeers` is the node's :class:`~replica.txn_service.TxnPeers`: it finds
partition leaders and transaction coordinators in the metadata image and calls them over
gRPC on the inter-broker listener (this broker included, through the same path), keeping
one channel per address.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import grpc

from lograft.metadata import MetadataImage
from lograft.protocol.errors import (
    CoordinatorNotAvailableError,
    LograftError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.broker_rpcs import topic_partitions
from replica.txn import MarkerJob, partition_for_transactional_id
from replica.txn_service import TRANSACTION_STATE_TOPIC

__all__ = ["BrokerTxnPeers"]

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 35.0
"""Longer than a marker's own wait for its replicas (30 s), so the leader's answer wins."""


class BrokerTxnPeers:
    """Marker writes and KIP-890 verifications, sent to the brokers the image names."""

    def __init__(
        self,
        image: Callable[[], MetadataImage],
        listener: str,
        next_producer_id: Callable[[], Awaitable[int]],
    ) -> None:
        """``listener``: the inter-broker listener's name, whose addresses are called."""
        self._image = image
        self._listener = listener
        self._next_producer_id = next_producer_id
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close() for c in channels.values()), return_exceptions=True)

    async def next_producer_id(self) -> int:
        """A producer id from this broker's block."""
        return await self._next_producer_id()

    def _stub(self, broker_id: int) -> pb_grpc.BrokerStub:
        registration = self._image().broker(broker_id)
        address = None if registration is None else registration.listener(self._listener)
        if registration is None or registration.fenced or address is None:
            raise NotLeaderOrFollowerError(f"broker {broker_id} is not available")
        target = f"{address.host}:{address.port}"
        channel = self._channels.get(target)
        if channel is None:
            channel = self._channels[target] = grpc.aio.insecure_channel(target)
        return pb_grpc.BrokerStub(channel)

    def _leader(self, tp: TopicPartition) -> int:
        topic = self._image().topic(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        leader = topic.partitions[tp.partition].leader
        if leader < 0:
            raise NotLeaderOrFollowerError(f"{tp} has no leader")
        return leader

    async def write_markers(
        self, job: MarkerJob, partitions: frozenset[TopicPartition]
    ) -> Mapping[TopicPartition, LograftError | None]:
        """Send the job's marker to each partition's leader, one request per leader."""
        outcomes: dict[TopicPartition, LograftError | None] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            try:
                by_leader.setdefault(self._leader(tp), []).append(tp)
            except LograftError as exc:
                outcomes[tp] = exc
        answers = await asyncio.gather(
            *(self._send_markers(leader, job, tps) for leader, tps in by_leader.items())
        )
        for answer in answers:
            outcomes.update(answer)
        return outcomes

    async def _send_markers(
        self, leader: int, job: MarkerJob, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, LograftError | None]:
        request = pb.WriteTxnMarkersRequest(
            markers=[
                pb.TxnMarker(
                    producer_id=job.producer_id,
                    producer_epoch=job.producer_epoch,
                    committed=job.committed,
                    coordinator_epoch=job.coordinator_epoch,
                    topics=topic_partitions(partitions),
                    transactional_id=job.transactional_id,
                )
            ]
        )
        try:
            response = await self._stub(leader).WriteTxnMarkers(request, timeout=CALL_TIMEOUT_S)
        except LograftError as exc:
            return dict.fromkeys(partitions, exc)
        except grpc.aio.AioRpcError as exc:
            error = RequestTimedOutError(f"WriteTxnMarkers to broker {leader}: {exc.code().name}")
            return dict.fromkeys(partitions, error)
        outcomes: dict[TopicPartition, LograftError | None] = dict.fromkeys(
            partitions, RequestTimedOutError(f"broker {leader} did not answer for the partition")
        )
        for result in response.markers:
            for answered in result.partitions:
                tp = TopicPartition(answered.topic, answered.partition)
                if tp in outcomes:
                    outcomes[tp] = (
                        error_for_code(answered.error_code, answered.error_message)
                        if answered.error_code
                        else None
                    )
        return outcomes

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> None:
        """Ask the id's coordinator whether ``tp`` is in the open transaction (KIP-890)."""
        topic = self._image().topic(TRANSACTION_STATE_TOPIC)
        if topic is None:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} does not exist yet")
        index = partition_for_transactional_id(transactional_id, len(topic.partitions))
        coordinator = topic.partitions[index].leader
        if coordinator < 0:
            raise NotCoordinatorError(f"{TRANSACTION_STATE_TOPIC}-{index} has no leader")
        request = pb.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            topics=topic_partitions([tp]),
            verify_only=True,
        )
        try:
            response = await self._stub(coordinator).AddPartitionsToTxn(
                request, timeout=CALL_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            raise NotCoordinatorError(
                f"transaction coordinator {coordinator} unreachable: {exc.code().name}"
            ) from exc
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
