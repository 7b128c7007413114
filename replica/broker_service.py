"""The client API of a broker (``lograft.v1.Broker``): produce, fetch, offsets, metadata, topics.

Runs on the node's event loop. :class:`BrokerService` is the gRPC servicer, composed of one
part per concern: the data plane (:mod:`replica.data_plane_rpcs`: Produce, Fetch,
ListOffsets; :mod:`replica.record_rpcs`: ProduceRecords and FetchRecords, records as
messages), administration (:mod:`replica.admin_rpcs`: metadata, topics, producer ids,
configs, the cluster), consumer groups (:mod:`replica.group_rpcs`) and transactions
(:mod:`replica.txn_rpcs`); what they share is in
:mod:`replica.broker_rpcs`. Per-partition failures are answered with Kafka's error codes; a
request that is malformed as a whole is refused with ``INVALID_ARGUMENT``.
"""

from __future__ import annotations

import logging

import grpc

from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.admin_rpcs import AdminRpcs
from replica.broker_rpcs import BrokerEndpoint, ClusterFrontend
from replica.group_rpcs import GroupRpcs
from replica.record_rpcs import RecordRpcs
from replica.txn_rpcs import TxnRpcs

__all__ = ["BrokerEndpoint", "BrokerService", "ClusterFrontend"]

log = logging.getLogger(__name__)


class BrokerService(RecordRpcs, AdminRpcs, GroupRpcs, TxnRpcs, pb_grpc.BrokerServicer):  # type: ignore[misc]
    """gRPC servicer; one instance per listener of a node (constructed as :class:`BrokerRpcs`)."""

    async def InitProducerId(
        self, request: pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> pb.InitProducerIdResponse:
        """A producer id and epoch: a new id for an idempotent producer (any broker), or the
        transactional id's producer from its transaction coordinator."""
        if request.transactional_id:
            return await self._init_transactional_producer(request)
        return await self._init_idempotent_producer()
