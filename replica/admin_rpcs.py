"""The admin side of the broker's client API: metadata, topics, producer ids, configs.

In a quorum every call goes to the :class:`~replica.broker_rpcs.ClusterFrontend` (the
metadata image answers, the active controller decides); a standalone node answers Metadata,
CreateTopics, DeleteTopics, InitProducerId and DescribeCluster itself and refuses the rest.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from lograft.protocol.error_responses import (
    alter_configs_failed,
    create_partitions_failed,
    describe_configs_failed,
)
from lograft.protocol.errors import (
    InvalidRequestError,
    KafkaStorageError,
    LograftError,
    UnknownTopicOrPartitionError,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from replica.broker_rpcs import BrokerRpcs, error_fields
from replica.log_manager import remove_directories

__all__ = ["AdminRpcs"]

log = logging.getLogger(__name__)


class AdminRpcs(BrokerRpcs):
    """Metadata, topics, producer ids, configs and the cluster, in a quorum or standalone."""

    # ---- Metadata and topics ------------------------------------------------------------

    async def Metadata(
        self, request: pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.MetadataResponse:
        """Brokers and the topics asked for (all when none named).

        Standalone, this node is the only broker; in a quorum, the metadata image answers.
        """
        if self._frontend is not None:
            return await self._frontend.metadata(request, self._endpoint.listener)
        node = self._endpoint
        response = pb.MetadataResponse(
            cluster_id=self._cluster_id,
            controller_id=node.node_id,
            brokers=[
                pb.BrokerMetadata(
                    node_id=node.node_id, host=node.host, port=node.port, rack=node.rack
                )
            ],
        )
        names = list(request.topics) or sorted(self._logs.topics)
        for name in names:
            topic = self._logs.topics.get(name)
            if topic is None:
                error = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                response.topics.add(name=name, **error_fields(error))
                continue
            topic_metadata = response.topics.add(name=name)
            topic_metadata.configs.update(
                self._logs.log_config_for(topic.configs).to_topic_configs()
            )
            for index in range(topic.num_partitions):
                partition = self._logs.partitions.get(TopicPartition(name, index))
                topic_metadata.partitions.add(
                    partition=index,
                    leader_id=node.node_id,
                    leader_epoch=partition.leader_epoch if partition else 0,
                    replica_nodes=[node.node_id],
                    isr_nodes=[node.node_id],
                )
        return response

    async def CreateTopics(
        self, request: pb.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTopicsResponse:
        """Create topics: through the active controller, or local to a standalone node."""
        if self._frontend is not None:
            return await self._frontend.create_topics(request)
        response = pb.CreateTopicsResponse()
        for topic in request.topics:
            result = response.topics.add(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
            )
            # -1 means "the broker default", as in Kafka's CreateTopics v4+.
            num_partitions = topic.num_partitions if topic.num_partitions != -1 else 1
            replication_factor = topic.replication_factor if topic.replication_factor != -1 else 1
            result.num_partitions = num_partitions
            result.replication_factor = replication_factor
            try:
                if request.validate_only:
                    self._logs.validate_new_topic(
                        topic.name, num_partitions, replication_factor, dict(topic.configs)
                    )
                else:
                    # Opening many logs is disk work: off the loop; publishing is on it.
                    prepared = await asyncio.get_running_loop().run_in_executor(
                        None,
                        self._logs.prepare_topic,
                        topic.name,
                        num_partitions,
                        replication_factor,
                        dict(topic.configs),
                    )
                    self._logs.commit_topic(*prepared)
            except LograftError as exc:
                result.error_code = exc.code
                result.error_message = exc.message
        return response

    async def DeleteTopics(
        self, request: pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicsResponse:
        """Delete topics; standalone, their files are removed off the event loop."""
        if self._frontend is not None:
            return await self._frontend.delete_topics(request)
        response = pb.DeleteTopicsResponse()
        doomed = []
        for name in request.topic_names:
            result = response.topics.add(name=name)
            try:
                doomed.extend(self._logs.delete_topic(name))
            except LograftError as exc:
                result.error_code = exc.code
                result.error_message = exc.message
        if doomed:
            await asyncio.get_running_loop().run_in_executor(None, remove_directories, doomed)
        return response

    # ---- InitProducerId -----------------------------------------------------------------

    async def _init_idempotent_producer(self) -> pb.InitProducerIdResponse:
        """A new producer id at epoch 0 for an idempotent producer."""
        try:
            if self._frontend is not None:
                producer_id = await self._frontend.next_producer_id()
            else:
                producer_id = await self._local_producer_ids.next_producer_id()
        except LograftError as exc:
            return pb.InitProducerIdResponse(
                error_code=exc.code, error_message=exc.message, producer_id=-1, producer_epoch=-1
            )
        except OSError as exc:
            error = KafkaStorageError(f"cannot reserve producer ids: {exc}")
            return pb.InitProducerIdResponse(
                error_code=error.code,
                error_message=error.message,
                producer_id=-1,
                producer_epoch=-1,
            )
        log.info("producer id assigned producer_id=%d", producer_id)
        return pb.InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    # ---- Cluster and config administration ------------------------------------------------

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreatePartitionsResponse:
        """Add partitions to topics, through the active controller."""
        if self._frontend is not None:
            return await self._frontend.create_partitions(request)
        return create_partitions_failed(request, _admin_needs_quorum("CreatePartitions"))

    async def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.IncrementalAlterConfigsResponse:
        """Alter topic configs, through the active controller."""
        if self._frontend is not None:
            return await self._frontend.incremental_alter_configs(request)
        return alter_configs_failed(request, _admin_needs_quorum("IncrementalAlterConfigs"))

    async def DescribeConfigs(
        self, request: pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeConfigsResponse:
        """Every config of topics and of this broker, with value, source and flags."""
        if self._frontend is not None:
            return self._frontend.describe_configs(request)
        return describe_configs_failed(request, _admin_needs_quorum("DescribeConfigs"))

    async def DescribeCluster(
        self, request: pb.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeClusterResponse:
        """Cluster id, controller and brokers; standalone, this node is all three."""
        if self._frontend is not None:
            return await self._frontend.describe_cluster(request, self._endpoint.listener)
        node = self._endpoint
        return pb.DescribeClusterResponse(
            cluster_id=self._cluster_id,
            controller_id=node.node_id,
            brokers=[
                pb.DescribeClusterBroker(
                    broker_id=node.node_id, host=node.host, port=node.port, rack=node.rack
                )
            ],
        )


def _admin_needs_quorum(api: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{api} needs a controller quorum: start nodes with --controller-quorum-voters "
        "(lograft cluster up does); a standalone node keeps its topics in topics.json"
    )
