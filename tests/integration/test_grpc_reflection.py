"""A gRPC tool that has none of lograft's protos finds and calls its services (issue 42).

It learns the services and their message types from server reflection only, as grpcurl or
Postman would, and asks the standard health service whether the node serves, once or as a stream of
changes.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from tests.integration.nodes import NodeProcess
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster


def test_reflection_lists_the_services_and_a_metadata_call_built_from_it_answers(
    node: NodeProcess,
) -> None:
    with grpc.insecure_channel(node.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {"lograft.v1.Broker", "lograft.node.v1.Node", "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        method = pool.FindServiceByName("lograft.v1.Broker").methods_by_name["Metadata"]
        request_type = message_factory.GetMessageClass(method.input_type)
        response_type = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary(
            "/lograft.v1.Broker/Metadata",
            request_serializer=request_type.SerializeToString,
            response_deserializer=response_type.FromString,
        )
        response = call(request_type(), timeout=10)
        assert [broker.node_id for broker in response.brokers] == [1]
        assert response.cluster_id


def test_the_standard_health_check_answers_serving_and_refuses_an_unknown_service(
    node: NodeProcess,
) -> None:
    with grpc.insecure_channel(node.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "lograft.v1.Broker"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as refused:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_watch_streams_serving_then_not_serving_when_the_quorum_is_lost(
    cluster: QuorumCluster,
) -> None:
    leader = cluster.active_controller()
    watched = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
    with grpc.insecure_channel(watched.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        unknown = health.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        unknown.cancel()
        statuses = health.Watch(health_pb2.HealthCheckRequest(), timeout=CLUSTER_TIMEOUT_S)
        assert next(statuses).status == health_pb2.HealthCheckResponse.SERVING
        for node in cluster.nodes.values():
            if node is not watched:
                node.kill()
        # A follower alone cannot elect a leader: the node stops serving, and says so.
        assert next(statuses).status == health_pb2.HealthCheckResponse.NOT_SERVING
        statuses.cancel()
