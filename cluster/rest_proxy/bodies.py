"""Reading untrusted request bodies: size limit, content type, JSON, typed field checks.

Every helper raises :class:`~cluster.rest_proxy.errors.RestError` with Confluent's code
for what is wrong, naming the field, so a handler never sees a malformed value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from .errors import BAD_REQUEST, BODY_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, RestError

__all__ = [
    "JSON_TYPES",
    "json_documents",
    "optional_int",
    "optional_str",
    "parse_json",
    "read_body",
    "require_dict",
    "require_int",
    "require_list",
    "require_name",
    "topic_partitions",
]

JSON_TYPES = re.compile(r"^application/(json|vnd\.kafka(\.(json|binary))?(\.v[23])?\+json)$")
"""Content types a body may have: JSON, and Confluent's ``application/vnd.kafka[.json|
.binary].v2+json`` family."""

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_MAX_INT64 = 2**63 - 1


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes (413 past it), of a JSON content type (415
    otherwise; an empty body may have any)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise RestError(413, BODY_TOO_LARGE, f"Request body of {declared} bytes is over {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise RestError(413, BODY_TOO_LARGE, f"Request body is over {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if body.strip() and not JSON_TYPES.match(request.content_type):
        raise RestError(
            415,
            UNSUPPORTED_MEDIA_TYPE,
            f"HTTP 415 Unsupported Media Type: {request.content_type!r}; send application/json "
            "or application/vnd.kafka.v2+json",
        )
    return body


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RestError(400, BAD_REQUEST, f"Request body is not UTF-8: {exc}") from None


def parse_json(body: bytes) -> Any:
    """One JSON document (400 with the parser's message if it is not one)."""
    try:
        return json.loads(_text(body))
    except json.JSONDecodeError as exc:
        raise RestError(400, BAD_REQUEST, f"Malformed JSON: {exc}") from None
    except RecursionError:
        raise RestError(400, BAD_REQUEST, "Malformed JSON: nested too deeply") from None


def json_documents(body: bytes) -> Iterator[Any]:
    """The JSON documents of a body of concatenated JSON (whitespace between them allowed).

    Yields each as it is parsed; raises 400 at the first malformed one (documents before it
    have been yielded).
    """
    text = _text(body)
    decoder = json.JSONDecoder()
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position == len(text):
            return
        try:
            document, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise RestError(400, BAD_REQUEST, f"Malformed JSON: {exc}") from None
        except RecursionError:
            raise RestError(400, BAD_REQUEST, "Malformed JSON: nested too deeply") from None
        yield document


def require_dict(value: object, what: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else 400 naming ``what``."""
    if not isinstance(value, dict):
        raise RestError(400, BAD_REQUEST, f"{what} must be a JSON object")
    return value


def require_list(value: object, what: str, max_items: int = 10_000) -> list[Any]:
    """``value`` if it is a JSON array of at most ``max_items``, else 400."""
    if not isinstance(value, list):
        raise RestError(400, BAD_REQUEST, f"{what} must be a JSON array")
    if len(value) > max_items:
        raise RestError(400, BAD_REQUEST, f"{what} has more than {max_items} items")
    return value


def require_int(value: object, what: str, minimum: int = 0, maximum: int = _MAX_INT64) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]`` (not a bool), else 400."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise RestError(400, BAD_REQUEST, f"{what} must be an integer")
    if not minimum <= value <= maximum:
        raise RestError(400, BAD_REQUEST, f"{what} must be between {minimum} and {maximum}")
    return value


def optional_int(
    value: object, what: str, minimum: int = 0, maximum: int = _MAX_INT64
) -> int | None:
    """``None`` for a missing/null value, else as :func:`require_int`."""
    return None if value is None else require_int(value, what, minimum, maximum)


def optional_str(value: object, what: str, max_length: int = 1024) -> str | None:
    """``None`` for a missing/null value; a string of at most ``max_length``; else 400."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise RestError(400, BAD_REQUEST, f"{what} must be a string of at most {max_length}")
    return value


def require_name(value: object, what: str) -> str:
    """A topic, group or instance name: 1-249 of ``A-Za-z0-9._-`` (Kafka's topic rule)."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise RestError(400, BAD_REQUEST, f"{what} must be 1-249 characters of A-Za-z0-9._-")
    return value


def topic_partitions(items: object, what: str) -> list[tuple[str, int]]:
    """``[{"topic", "partition"}, ...]`` as ``(topic, partition)`` pairs."""
    pairs = []
    for index, item in enumerate(require_list(items, what)):
        entry = require_dict(item, f"{what}[{index}]")
        topic = require_name(entry.get("topic"), f"{what}[{index}].topic")
        partition = require_int(entry.get("partition"), f"{what}[{index}].partition", 0, 2**31 - 1)
        pairs.append((topic, partition))
    return pairs
