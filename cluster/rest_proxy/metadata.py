"""v3 metadata: clusters, topics (list, describe, create) and partitions, in Confluent's shapes.

Each resource is ``{"kind": "Kafka...", "metadata": {"self": url, "resource_name": crn},
...}``, lists are ``{"kind": "Kafka...List", "metadata": {"self", "next": null}, "data":
[...]}``, and related resources are ``{"related": url}``. URLs are built from the request's
own scheme and Host, so they point back at this proxy however it is reached.
"""

from __future__ import annotations

import logging

from aiohttp import web

from cluster.client import NewTopic, PartitionInfo, TopicDescription

from .bodies import optional_int, parse_json, read_body, require_dict, require_list, require_name
from .context import CONTEXT
from .errors import BAD_REQUEST, PARTITION_NOT_FOUND, RestError

__all__ = [
    "create_topic",
    "get_cluster",
    "get_partition",
    "get_topic",
    "list_clusters",
    "list_partitions",
    "list_topics",
]

logger = logging.getLogger(__name__)

_MAX_PARTITIONS = 100_000
_MAX_CONFIGS = 1_000


def _base(request: web.Request, cluster_id: str) -> str:
    return f"{request.scheme}://{request.host}/v3/clusters/{cluster_id}"


def _cluster(request: web.Request, cluster_id: str, controller: int | None) -> dict[str, object]:
    base = _base(request, cluster_id)
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": base, "resource_name": f"crn:///kafka={cluster_id}"},
        "cluster_id": cluster_id,
        "controller": None if controller is None else {"related": f"{base}/brokers/{controller}"},
        "acls": {"related": f"{base}/acls"},
        "brokers": {"related": f"{base}/brokers"},
        "broker_configs": {"related": f"{base}/broker-configs"},
        "consumer_groups": {"related": f"{base}/consumer-groups"},
        "topics": {"related": f"{base}/topics"},
        "partition_reassignments": {"related": f"{base}/topics/-/partitions/-/reassignment"},
    }


def _topic(request: web.Request, cluster_id: str, topic: TopicDescription) -> dict[str, object]:
    url = f"{_base(request, cluster_id)}/topics/{topic.name}"
    first = topic.partitions[0] if topic.partitions else None
    return {
        "kind": "KafkaTopic",
        "metadata": {
            "self": url,
            "resource_name": f"crn:///kafka={cluster_id}/topic={topic.name}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic.name,
        "is_internal": topic.name.startswith("__"),
        "replication_factor": 0 if first is None else len(first.replicas),
        "partitions_count": len(topic.partitions),
        "partitions": {"related": f"{url}/partitions"},
        "configs": {"related": f"{url}/configs"},
        "partition_reassignments": {"related": f"{url}/partitions/-/reassignment"},
        "authorized_operations": [],
    }


def _partition(request: web.Request, cluster_id: str, info: PartitionInfo) -> dict[str, object]:
    url = f"{_base(request, cluster_id)}/topics/{info.topic}/partitions/{info.partition}"
    return {
        "kind": "KafkaPartition",
        "metadata": {
            "self": url,
            "resource_name": (
                f"crn:///kafka={cluster_id}/topic={info.topic}/partition={info.partition}"
            ),
        },
        "cluster_id": cluster_id,
        "topic_name": info.topic,
        "partition_id": info.partition,
        "leader": None if info.leader < 0 else {"related": f"{url}/replicas/{info.leader}"},
        "replicas": {"related": f"{url}/replicas"},
        "reassignment": {"related": f"{url}/reassignment"},
    }


def _listing(kind: str, url: str, data: list[dict[str, object]]) -> web.Response:
    return web.json_response({"kind": kind, "metadata": {"self": url, "next": None}, "data": data})


async def list_clusters(request: web.Request) -> web.Response:
    """``GET /v3/clusters``: this proxy fronts one cluster."""
    context = request.app[CONTEXT]
    description = await context.admin_call(context.admin.describe_cluster)
    controller = None if description.controller is None else description.controller.id
    cluster = _cluster(request, description.cluster_id, controller)
    url = f"{request.scheme}://{request.host}/v3/clusters"
    return _listing("KafkaClusterList", url, [cluster])


async def get_cluster(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}``."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    description = await context.admin_call(context.admin.describe_cluster)
    controller = None if description.controller is None else description.controller.id
    return web.json_response(_cluster(request, cluster_id, controller))


async def list_topics(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}/topics``: every topic, by name."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    topics = await context.admin_call(context.admin.describe_topics, None)
    data = [_topic(request, cluster_id, t) for t in sorted(topics, key=lambda t: t.name)]
    return _listing("KafkaTopicList", f"{_base(request, cluster_id)}/topics", data)


async def get_topic(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}/topics/{topic_name}`` (404 if no such topic)."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    topic = await context.describe_topic(request.match_info["topic_name"])
    return web.json_response(_topic(request, cluster_id, topic))


def _new_topic(document: object) -> tuple[NewTopic, bool]:
    entry = require_dict(document, "request body")
    name = require_name(entry.get("topic_name"), "topic_name")
    partitions = optional_int(entry.get("partitions_count"), "partitions_count", 1, _MAX_PARTITIONS)
    replication = optional_int(entry.get("replication_factor"), "replication_factor", 1, 32767)
    configs: dict[str, str] = {}
    for index, item in enumerate(require_list(entry.get("configs", []), "configs", _MAX_CONFIGS)):
        config = require_dict(item, f"configs[{index}]")
        config_name, value = config.get("name"), config.get("value")
        if not isinstance(config_name, str) or not isinstance(value, str | int | float):
            raise RestError(
                400, BAD_REQUEST, f"configs[{index}] must be {{'name': str, 'value': str}}"
            )
        configs[config_name] = str(value)
    validate_only = entry.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise RestError(400, BAD_REQUEST, "validate_only must be true or false")
    # -1: the broker's default (num.partitions, default.replication.factor), as Kafka.
    new = NewTopic(name, partitions or -1, replication or -1, configs)
    return new, validate_only


async def create_topic(request: web.Request) -> web.Response:
    """``POST /v3/clusters/{cluster_id}/topics`` with ``{"topic_name", "partitions_count",
    "replication_factor", "configs": [{"name", "value"}], "validate_only"}``: 201 and the
    topic (400 / 40002 if it exists)."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    new, validate_only = _new_topic(
        parse_json(await read_body(request, context.settings.max_body_bytes))
    )
    results = await context.admin_call(
        lambda: context.admin.create_topics([new], validate_only=validate_only)
    )
    await context.admin_call(results[new.name].result)
    logger.info("topic created topic=%s validate_only=%s", new.name, validate_only)
    if validate_only:
        topic = TopicDescription(new.name, (), dict(new.configs))
    else:
        topic = await context.describe_topic(new.name)
    return web.json_response(_topic(request, cluster_id, topic), status=201)


async def list_partitions(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}/topics/{topic_name}/partitions``."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    topic = await context.describe_topic(request.match_info["topic_name"])
    data = [_partition(request, cluster_id, p) for p in topic.partitions]
    url = f"{_base(request, cluster_id)}/topics/{topic.name}/partitions"
    return _listing("KafkaPartitionList", url, data)


async def get_partition(request: web.Request) -> web.Response:
    """``GET /v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}``."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    topic = await context.describe_topic(request.match_info["topic_name"])
    wanted = request.match_info["partition_id"]
    for info in topic.partitions:
        if str(info.partition) == wanted:
            return web.json_response(_partition(request, cluster_id, info))
    raise RestError(
        404, PARTITION_NOT_FOUND, f"Partition {wanted} of topic {topic.name} not found."
    )
