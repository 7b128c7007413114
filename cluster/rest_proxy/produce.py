"""Producing through the proxy: v3 ``POST /v3/clusters/{id}/topics/{topic}/records`` and v2
``POST /topics/{topic}``.

v3 takes one record object, or several concatenated in one body (Confluent's streaming
form, read here as a whole body up to the size limit); each gets a delivery report in the
same order, ``{"error_code": 200, "cluster_id", "topic_name", "partition_id", "offset",
"timestamp", "key": {"type", "size"}, "value": {...}}``, or its own ``{"error_code",
"message"}``. A single record that cannot be produced is answered with that error's HTTP
status instead. Records are sent with ``acks=all`` by the proxy's one ``AsyncProducer``;
which partition a keyed record goes to is the client's partitioner, as for any producer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re

from aiohttp import web

from cluster.client import RecordMetadata
from lograft.protocol.errors import LograftError

from .bodies import (
    json_documents,
    optional_int,
    parse_json,
    read_body,
    require_dict,
    require_list,
)
from .context import CONTEXT, ProxyContext
from .errors import BAD_REQUEST, INVALID_RECORD, KAFKA_RETRIABLE_ERROR, RestError, from_lograft
from .records import (
    ProduceRecord,
    TypedData,
    iso_timestamp,
    parse_headers,
    parse_timestamp,
    typed_data,
    unembed,
)

__all__ = ["produce_v2", "produce_v3", "v3_record"]

logger = logging.getLogger(__name__)

_MAX_PARTITION = 2**31 - 1
MAX_STREAMED_RECORDS = 10_000
"""Records one v3 produce body may hold (v2's limit on ``records`` too)."""
_V2_FORMAT = re.compile(r"^application/vnd\.kafka\.(json|binary)\.v2\+json$")


def v3_record(document: object) -> ProduceRecord:
    """One v3 produce request object, validated (400/422 naming what is wrong)."""
    entry = require_dict(document, "record")
    return ProduceRecord(
        partition=optional_int(entry.get("partition_id"), "partition_id", 0, _MAX_PARTITION),
        key=typed_data(entry.get("key"), "key"),
        value=typed_data(entry.get("value"), "value"),
        headers=parse_headers(entry.get("headers")),
        timestamp_ms=parse_timestamp(entry.get("timestamp")),
    )


async def _send(
    context: ProxyContext, topic: str, record: ProduceRecord
) -> asyncio.Future[RecordMetadata] | RestError:
    """Queue ``record``; the future of its metadata, or the error that stopped it."""
    try:
        await context.check_partition(topic, record.partition)
        return await context.producer.send(
            topic,
            None if record.value is None else record.value.data,
            None if record.key is None else record.key.data,
            record.partition,
            record.timestamp_ms,
            record.headers,
        )
    except RestError as exc:
        return exc
    except LograftError as exc:
        return from_lograft(exc)
    except ValueError as exc:  # a record the client refuses to build (a field out of range)
        return RestError(422, INVALID_RECORD, str(exc))


async def _outcome(sent: asyncio.Future[RecordMetadata] | RestError) -> RecordMetadata | RestError:
    """The record's metadata once acknowledged, or the error that failed it."""
    if isinstance(sent, RestError):
        return sent
    try:
        return await sent
    except LograftError as exc:
        return from_lograft(exc)


def _v3_report(
    cluster_id: str, record: ProduceRecord, outcome: RecordMetadata | RestError
) -> tuple[int, dict[str, object]]:
    """``(HTTP status, delivery report)`` of one record."""
    if isinstance(outcome, RestError):
        return outcome.status, outcome.body(v3=True)
    return 200, {
        "error_code": 200,
        "cluster_id": cluster_id,
        "topic_name": outcome.topic,
        "partition_id": outcome.partition,
        "offset": outcome.offset,
        "timestamp": iso_timestamp(outcome.timestamp),
        "key": None if record.key is None else record.key.report(),
        "value": None if record.value is None else record.value.report(),
    }


async def produce_v3(request: web.Request) -> web.Response:
    """``POST /v3/clusters/{cluster_id}/topics/{topic_name}/records``."""
    context = request.app[CONTEXT]
    cluster_id = await context.check_cluster(request.match_info["cluster_id"])
    topic = request.match_info["topic_name"]
    body = await read_body(request, context.settings.max_body_bytes)
    parsed: list[ProduceRecord | RestError] = []
    for document in json_documents(body):
        if len(parsed) == MAX_STREAMED_RECORDS:
            # Refused before anything is queued: nothing of the body is written.
            raise RestError(
                400, BAD_REQUEST, f"A body holds at most {MAX_STREAMED_RECORDS} records"
            )
        try:
            parsed.append(v3_record(document))
        except RestError as exc:
            parsed.append(exc)
    if not parsed:
        raise RestError(400, BAD_REQUEST, "Request body is empty: expected a record object")
    await context.check_partition(topic, None)
    # Every record is queued before any acknowledgement is awaited: they share batches.
    sent = [r if isinstance(r, RestError) else await _send(context, topic, r) for r in parsed]
    reports = [
        r.status_and_body()
        if isinstance(r, RestError)
        else _v3_report(cluster_id, r, await _outcome(f))
        for r, f in zip(parsed, sent, strict=True)
    ]
    logger.debug("produced topic=%s records=%d", topic, len(reports))
    if len(reports) == 1:
        status, report = reports[0]
        return web.json_response(report, status=status)
    text = "\n".join(json.dumps(report) for _, report in reports) + "\n"
    return web.Response(text=text, content_type="application/json")


def _v2_records(body: bytes, fmt: str) -> list[ProduceRecord]:
    document = require_dict(parse_json(body), "request body")
    records = []
    for index, item in enumerate(require_list(document.get("records"), "records")):
        entry = require_dict(item, f"records[{index}]")
        key = unembed(entry.get("key"), fmt, f"records[{index}].key")
        value = unembed(entry.get("value"), fmt, f"records[{index}].value")
        records.append(
            ProduceRecord(
                partition=optional_int(
                    entry.get("partition"), f"records[{index}].partition", 0, _MAX_PARTITION
                ),
                key=None if key is None else _typed(fmt, key),
                value=None if value is None else _typed(fmt, value),
                headers=(),
                timestamp_ms=None,
            )
        )
    if not records:
        raise RestError(400, BAD_REQUEST, "records must not be empty")
    return records


def _typed(fmt: str, data: bytes) -> TypedData:
    return TypedData(fmt.upper(), data)


async def produce_v2(request: web.Request) -> web.Response:
    """``POST /topics/{topic}`` with ``{"records": [{"key", "value", "partition"}]}``; the
    embedded format (``json`` or ``binary``) comes from the Content-Type, ``binary`` for a
    plain ``application/vnd.kafka.v2+json`` or ``application/json``."""
    context = request.app[CONTEXT]
    topic = request.match_info["topic"]
    body = await read_body(request, context.settings.max_body_bytes)
    matched = _V2_FORMAT.match(request.content_type)
    records = _v2_records(body, matched.group(1) if matched else "binary")
    await context.check_partition(topic, None)
    sent = [await _send(context, topic, record) for record in records]
    offsets: list[dict[str, object]] = []
    for record, future in zip(records, sent, strict=True):
        outcome = await _outcome(future)
        if isinstance(outcome, RestError):
            # Confluent's v2 report: 1 for an error not worth retrying, 2 for one that is.
            retriable = outcome.code in (KAFKA_RETRIABLE_ERROR,)
            offsets.append(
                {"partition": record.partition, "offset": None}
                | {"error_code": 2 if retriable else 1, "error": outcome.message}
            )
        else:
            offsets.append(
                {"partition": outcome.partition, "offset": outcome.offset}
                | {"error_code": None, "error": None}
            )
    return web.json_response(
        {"key_schema_id": None, "value_schema_id": None, "offsets": offsets},
        content_type="application/vnd.kafka.v2+json",
    )
