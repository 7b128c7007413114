"""Answers to admin requests that failed as a whole.

Kafka answers these APIs per topic or per resource even when the request could not be
handled at all (no quorum, no active controller, a timeout): every topic or resource of the
request then carries the same error. The standalone broker, the broker forwarding to the
active controller and the controller itself all answer that way.
"""

from __future__ import annotations

from lograft.protocol.errors import LograftError
from lograft.protocol.wire import broker_pb2 as pb

__all__ = [
    "alter_configs_failed",
    "create_partitions_failed",
    "create_topics_failed",
    "delete_topics_failed",
    "describe_configs_failed",
]


def create_topics_failed(
    request: pb.CreateTopicsRequest, error: LograftError
) -> pb.CreateTopicsResponse:
    """``error`` for every topic of ``request``."""
    return pb.CreateTopicsResponse(
        topics=[
            pb.CreatableTopicResult(name=t.name, error_code=error.code, error_message=error.message)
            for t in request.topics
        ]
    )


def delete_topics_failed(
    request: pb.DeleteTopicsRequest, error: LograftError
) -> pb.DeleteTopicsResponse:
    """``error`` for every topic of ``request``."""
    return pb.DeleteTopicsResponse(
        topics=[
            pb.DeletableTopicResult(name=n, error_code=error.code, error_message=error.message)
            for n in request.topic_names
        ]
    )


def create_partitions_failed(
    request: pb.CreatePartitionsRequest, error: LograftError
) -> pb.CreatePartitionsResponse:
    """``error`` for every topic of ``request``."""
    return pb.CreatePartitionsResponse(
        results=[
            pb.CreatePartitionsTopicResult(
                name=t.name, error_code=error.code, error_message=error.message
            )
            for t in request.topics
        ]
    )


def alter_configs_failed(
    request: pb.IncrementalAlterConfigsRequest, error: LograftError
) -> pb.IncrementalAlterConfigsResponse:
    """``error`` for every resource of ``request``."""
    return pb.IncrementalAlterConfigsResponse(
        responses=[
            pb.AlterConfigsResourceResponse(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=error.code,
                error_message=error.message,
            )
            for r in request.resources
        ]
    )


def describe_configs_failed(
    request: pb.DescribeConfigsRequest, error: LograftError
) -> pb.DescribeConfigsResponse:
    """``error`` for every resource of ``request``."""
    return pb.DescribeConfigsResponse(
        results=[
            pb.DescribeConfigsResult(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=error.code,
                error_message=error.message,
            )
            for r in request.resources
        ]
    )
