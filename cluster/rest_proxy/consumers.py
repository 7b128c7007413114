"""v2 consumer endpoints: create and delete instances, subscribe or assign, read records,
commit and read offsets, seek — Confluent's ``/consumers/{group}/instances/{instance}/...``.

Records are read with the instance's ``AsyncConsumer``; ``GET .../records`` answers
``[{"topic", "key", "value", "partition", "offset"}]`` with keys and values embedded in the
instance's format (``json``: as JSON, ``binary``: base64). Records cut off by ``max_bytes``
are not lost: the instance is sought back to them, so the next read starts there.
An explicit commit names the offset of the last record processed, and commits the one
after it (as Confluent's proxy); an empty body commits everything read so far.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiohttp import web

from cluster.client import ConsumerRecord, TopicPartition
from lograft.protocol.errors import LograftError

from .bodies import (
    optional_str,
    parse_json,
    read_body,
    require_dict,
    require_int,
    require_list,
    require_name,
    topic_partitions,
)
from .context import CONTEXT, ProxyContext
from .errors import (
    BAD_REQUEST,
    CONSUMER_FORMAT_MISMATCH,
    INVALID_CONSUMER_CONFIG,
    RestError,
    from_lograft,
)
from .instances import ConsumerInstance, InstanceOptions
from .records import EMBEDDED_FORMATS, embed

__all__ = [
    "commit_offsets",
    "committed_offsets",
    "create_instance",
    "delete_instance",
    "delete_subscription",
    "get_assignments",
    "get_subscription",
    "read_records",
    "seek",
    "seek_to_beginning",
    "seek_to_end",
    "set_assignments",
    "subscribe",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

V2_JSON = "application/vnd.kafka.v2+json"
_ACCEPT_FORMAT = re.compile(r"application/vnd\.kafka\.(\w+)\.v2\+json")
_MAX_OFFSET = 2**63 - 1

_DIGITS = re.compile(r"[0-9]{1,18}")
"""A query parameter's integer: ASCII digits only, short enough for an int64."""


def _options(document: dict[str, Any]) -> InstanceOptions:
    name = document.get("name")
    fmt = document.get("format", "binary")
    if fmt not in EMBEDDED_FORMATS:
        raise RestError(
            422,
            INVALID_CONSUMER_CONFIG,
            f"Invalid consumer configuration: format must be one of {', '.join(EMBEDDED_FORMATS)}",
        )
    reset = document.get("auto.offset.reset", "latest")
    if reset not in ("earliest", "latest", "none"):
        raise RestError(
            422,
            INVALID_CONSUMER_CONFIG,
            "Invalid consumer configuration: auto.offset.reset must be earliest, latest or none",
        )
    auto_commit = str(document.get("auto.commit.enable", "true")).lower()
    if auto_commit not in ("true", "false"):
        raise RestError(
            422,
            INVALID_CONSUMER_CONFIG,
            "Invalid consumer configuration: auto.commit.enable must be true or false",
        )
    return InstanceOptions(
        name=None if name is None else require_name(name, "name"),
        format=str(fmt),
        auto_offset_reset=str(reset),
        auto_commit=auto_commit == "true",
    )


async def _document(request: web.Request, context: ProxyContext) -> dict[str, Any] | None:
    """The request's JSON object, ``None`` for an empty body."""
    body = await read_body(request, context.settings.max_body_bytes)
    if not body.strip():
        return None
    return require_dict(parse_json(body), "request body")


def _v2(data: object, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, content_type=V2_JSON)


def _names(request: web.Request) -> tuple[str, str]:
    return request.match_info["group"], request.match_info["instance"]


async def create_instance(request: web.Request) -> web.Response:
    """``POST /consumers/{group}``: ``{"name", "format", "auto.offset.reset",
    "auto.commit.enable"}`` → ``{"instance_id", "base_uri"}``."""
    context = request.app[CONTEXT]
    group = require_name(request.match_info["group"], "group")
    options = _options(await _document(request, context) or {})
    instance = context.instances.create(group, options)
    base_uri = (
        f"{request.scheme}://{request.host}/consumers/{group}/instances/{instance.instance_id}"
    )
    return _v2({"instance_id": instance.instance_id, "base_uri": base_uri})


async def delete_instance(request: web.Request) -> web.Response:
    """``DELETE /consumers/{group}/instances/{instance}``: close it (it leaves the group)."""
    await request.app[CONTEXT].instances.delete(*_names(request))
    return web.Response(status=204)


async def _call(awaitable: Awaitable[_T]) -> _T:
    """``await awaitable``; a typed error of the client becomes a :class:`RestError`."""
    try:
        return await awaitable
    except LograftError as exc:
        raise from_lograft(exc) from None


async def subscribe(request: web.Request) -> web.Response:
    """``POST .../subscription`` ``{"topics": [...]}`` (``topic_pattern`` is not served)."""
    context = request.app[CONTEXT]
    document = await _document(request, context) or {}
    if "topic_pattern" in document:
        raise RestError(400, BAD_REQUEST, "topic_pattern is not supported: list the topics")
    topics = [
        require_name(t, f"topics[{i}]")
        for i, t in enumerate(require_list(document.get("topics"), "topics", 1000))
    ]
    async with context.instances.using(*_names(request)) as instance:
        await _call(instance.consumer.subscribe(topics))
    return web.Response(status=204)


async def get_subscription(request: web.Request) -> web.Response:
    """``GET .../subscription`` → ``{"topics": [...]}``."""
    async with request.app[CONTEXT].instances.using(*_names(request)) as instance:
        return _v2({"topics": sorted(instance.consumer.subscription())})


async def delete_subscription(request: web.Request) -> web.Response:
    """``DELETE .../subscription``: unsubscribe (leave the group)."""
    async with request.app[CONTEXT].instances.using(*_names(request)) as instance:
        await _call(instance.consumer.unsubscribe())
    return web.Response(status=204)


async def set_assignments(request: web.Request) -> web.Response:
    """``POST .../assignments`` ``{"partitions": [{"topic", "partition"}]}``."""
    context = request.app[CONTEXT]
    document = await _document(request, context) or {}
    pairs = topic_partitions(document.get("partitions"), "partitions")
    async with context.instances.using(*_names(request)) as instance:
        await _call(instance.consumer.assign([TopicPartition(t, p) for t, p in pairs]))
    return web.Response(status=204)


def _tp_list(partitions: set[TopicPartition]) -> list[dict[str, object]]:
    ordered = sorted(partitions, key=lambda tp: (tp.topic, tp.partition))
    return [{"topic": tp.topic, "partition": tp.partition} for tp in ordered]


async def get_assignments(request: web.Request) -> web.Response:
    """``GET .../assignments`` → ``{"partitions": [{"topic", "partition"}]}``."""
    async with request.app[CONTEXT].instances.using(*_names(request)) as instance:
        return _v2({"partitions": _tp_list(instance.consumer.assignment())})


def _wanted_format(request: web.Request, instance: ConsumerInstance) -> None:
    """406 (40601) when Accept names another embedded format than the instance's."""
    match = _ACCEPT_FORMAT.search(request.headers.get("Accept", ""))
    if match is not None and match.group(1) != instance.format:
        raise RestError(
            406,
            CONSUMER_FORMAT_MISMATCH,
            "The requested embedded data format does not match the deserializer for this "
            "consumer instance",
        )


def _query_int(request: web.Request, name: str, default: int, maximum: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not _DIGITS.fullmatch(text):
        raise RestError(400, BAD_REQUEST, f"{name} must be a non-negative integer")
    return min(int(text), maximum)


def _cut(records: list[ConsumerRecord], max_bytes: int) -> int:
    """How many records fit in ``max_bytes`` of keys and values (always at least one)."""
    total = 0
    for index, record in enumerate(records):
        total += len(record.key or b"") + len(record.value or b"")
        if total > max_bytes and index > 0:
            return index
    return len(records)


async def _give_back(instance: ConsumerInstance, records: list[ConsumerRecord]) -> None:
    """Seek each partition back to its first record of ``records``: they are read again."""
    first: dict[TopicPartition, int] = {}
    for record in records:
        first.setdefault(TopicPartition(record.topic, record.partition), record.offset)
    for tp, offset in first.items():
        await _call(instance.consumer.seek(tp, offset))


def _embedded(record: ConsumerRecord, fmt: str) -> dict[str, object]:
    where = f"{record.topic}/{record.partition}@{record.offset}"
    return {
        "topic": record.topic,
        "key": embed(record.key, fmt, where),
        "value": embed(record.value, fmt, where),
        "partition": record.partition,
        "offset": record.offset,
    }


async def read_records(request: web.Request) -> web.Response:
    """``GET .../records?timeout=MS&max_bytes=N``: the records the instance reads next."""
    context = request.app[CONTEXT]
    settings = context.settings
    timeout_ms = _query_int(
        request, "timeout", settings.consumer_request_timeout_ms, settings.max_poll_timeout_ms
    )
    max_bytes = _query_int(
        request,
        "max_bytes",
        settings.consumer_request_max_bytes,
        settings.consumer_request_max_bytes,
    )
    async with context.instances.using(*_names(request)) as instance:
        _wanted_format(request, instance)
        records = await _call(instance.consumer.poll(timeout_ms=timeout_ms))
        kept = _cut(records, max_bytes)
        try:
            data = [_embedded(record, instance.format) for record in records[:kept]]
        except RestError:
            await _give_back(instance, records)
            raise
        await _give_back(instance, records[kept:])
    content_type = f"application/vnd.kafka.{instance.format}.v2+json"
    return web.json_response(data, content_type=content_type)


def _offsets(document: dict[str, Any] | None, what: str) -> dict[TopicPartition, int]:
    """``{"offsets": [{"topic", "partition", "offset", "metadata"?}]}`` by partition."""
    entries = require_list((document or {}).get("offsets"), what)
    pairs = topic_partitions(entries, what)  # checks each entry's topic and partition
    offsets: dict[TopicPartition, int] = {}
    for index, (entry, (topic, partition)) in enumerate(zip(entries, pairs, strict=True)):
        offsets[TopicPartition(topic, partition)] = require_int(
            entry.get("offset"), f"{what}[{index}].offset", 0, _MAX_OFFSET - 1
        )
        optional_str(entry.get("metadata"), f"{what}[{index}].metadata")
    return offsets


async def commit_offsets(request: web.Request) -> web.Response:
    """``POST .../offsets``: ``{"offsets": [{"topic", "partition", "offset"}]}`` commits
    offset + 1 of each; an empty body commits every record read so far."""
    context = request.app[CONTEXT]
    document = await _document(request, context)
    given = None if document is None else _offsets(document, "offsets")
    async with context.instances.using(*_names(request)) as instance:
        if given is None:
            committed = await _call(instance.consumer.commit())
        else:
            committed = await _call(
                instance.consumer.commit({tp: offset + 1 for tp, offset in given.items()})
            )
    logger.debug(
        "offsets committed group=%s instance=%s partitions=%d",
        instance.group,
        instance.instance_id,
        len(committed),
    )
    return web.Response(status=204)


async def committed_offsets(request: web.Request) -> web.Response:
    """``GET .../offsets`` (body ``{"partitions": [...]}``, else the instance's assignment)
    → ``{"offsets": [{"topic", "partition", "offset", "metadata"}]}``: the group's committed
    offsets, the next offset each partition is read from."""
    context = request.app[CONTEXT]
    document = await _document(request, context)
    async with context.instances.using(*_names(request)) as instance:
        if document is None:
            partitions = sorted(
                instance.consumer.assignment(), key=lambda tp: (tp.topic, tp.partition)
            )
        else:
            pairs = topic_partitions(document.get("partitions"), "partitions")
            partitions = [TopicPartition(t, p) for t, p in pairs]
        committed = await _call(instance.consumer.committed(partitions))
    offsets = [
        {"topic": tp.topic, "partition": tp.partition, "offset": offset, "metadata": ""}
        for tp, offset in committed.items()
        if offset is not None
    ]
    return _v2({"offsets": offsets})


async def seek(request: web.Request) -> web.Response:
    """``POST .../positions`` ``{"offsets": [{"topic", "partition", "offset"}]}``."""
    context = request.app[CONTEXT]
    offsets = _offsets(await _document(request, context), "offsets")
    async with context.instances.using(*_names(request)) as instance:
        for tp, offset in offsets.items():
            await _call(instance.consumer.seek(tp, offset))
    return web.Response(status=204)


async def _seek_to(request: web.Request, end: bool) -> web.Response:
    context = request.app[CONTEXT]
    document = await _document(request, context) or {}
    pairs = topic_partitions(document.get("partitions"), "partitions")
    tps = [TopicPartition(t, p) for t, p in pairs]
    async with context.instances.using(*_names(request)) as instance:
        if end:
            await _call(instance.consumer.seek_to_end(*tps))
        else:
            await _call(instance.consumer.seek_to_beginning(*tps))
    return web.Response(status=204)


async def seek_to_beginning(request: web.Request) -> web.Response:
    """``POST .../positions/beginning`` ``{"partitions": [{"topic", "partition"}]}``."""
    return await _seek_to(request, end=False)


async def seek_to_end(request: web.Request) -> web.Response:
    """``POST .../positions/end`` ``{"partitions": [{"topic", "partition"}]}``."""
    return await _seek_to(request, end=True)
