"""The proxy's errors, in Confluent REST Proxy's shape: ``{"error_code": int, "message": str}``.

API v2 answers Confluent's five-digit codes (the HTTP status times 100 plus a sub-code:
40401 topic not found, 40403 consumer instance not found, ...); API v3 answers the HTTP
status itself as the ``error_code``. Every failure a handler meets becomes a
:class:`RestError` (typed errors of the client through :func:`from_lograft`), so a client
always gets one of these bodies, never a stack trace or a dropped connection.
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    IllegalStateError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTimestampError,
    InvalidTopicError,
    LograftError,
    MessageTooLargeError,
    NetworkError,
    PolicyViolationError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = [
    "BAD_REQUEST",
    "BODY_TOO_LARGE",
    "CONSUMER_ALREADY_EXISTS",
    "CONSUMER_FORMAT_MISMATCH",
    "CONSUMER_INSTANCE_NOT_FOUND",
    "ILLEGAL_STATE",
    "INVALID_CONSUMER_CONFIG",
    "INVALID_RECORD",
    "KAFKA_ERROR",
    "KAFKA_RETRIABLE_ERROR",
    "NOT_FOUND",
    "PARTITION_NOT_FOUND",
    "TOO_MANY_INSTANCES",
    "TOPIC_ALREADY_EXISTS",
    "TOPIC_NOT_FOUND",
    "UNSUPPORTED_MEDIA_TYPE",
    "RestError",
    "error_response",
    "from_lograft",
]

logger = logging.getLogger(__name__)

BAD_REQUEST = 400  # malformed JSON, a missing or mistyped field
TOPIC_ALREADY_EXISTS = 40002  # Confluent's code for creating a topic that exists
NOT_FOUND = 404  # no such route, cluster or resource
TOPIC_NOT_FOUND = 40401  # no such topic
PARTITION_NOT_FOUND = 40402  # the topic has no such partition
CONSUMER_INSTANCE_NOT_FOUND = 40403  # no such instance in the group (or expired)
CONSUMER_FORMAT_MISMATCH = 40601  # Accept names another embedded format than the instance's
CONSUMER_ALREADY_EXISTS = 40902  # an instance of that name exists in the group
ILLEGAL_STATE = 40903  # e.g. subscribe after assign
BODY_TOO_LARGE = 413  # the request body is over the proxy's limit
UNSUPPORTED_MEDIA_TYPE = 415  # a body whose Content-Type is not JSON
INVALID_RECORD = 42201  # a record the proxy cannot build: bad base64, key type, headers...
INVALID_CONSUMER_CONFIG = 42204  # a bad format, auto.offset.reset, ...
TOO_MANY_INSTANCES = 42901  # the proxy's limit on consumer instances is reached
KAFKA_ERROR = 50002  # the cluster refused or failed the call
KAFKA_RETRIABLE_ERROR = 50003  # the cluster failed the call in a way worth retrying


class RestError(Exception):
    """A failure to answer as ``{"error_code", "message"}`` with HTTP ``status``.

    ``code`` is Confluent's v2 code (``TOPIC_NOT_FOUND`` = 40401, ...); under ``/v3`` the
    body's ``error_code`` is ``status`` instead, as Confluent's v3 API answers.
    """

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self, v3: bool) -> dict[str, object]:
        """The JSON object of the answer (v3: the HTTP status as ``error_code``)."""
        return {"error_code": self.status if v3 else self.code, "message": self.message}

    def status_and_body(self) -> tuple[int, dict[str, object]]:
        """``(HTTP status, v3 body)``: a delivery report for a record that failed."""
        return self.status, self.body(v3=True)

    def response(self, v3: bool) -> web.Response:
        """The whole HTTP answer."""
        return error_response(self.status, self.body(v3))


def error_response(status: int, body: dict[str, object]) -> web.Response:
    """A JSON error answer (``Content-Type: application/json``)."""
    return web.Response(
        status=status, text=json.dumps(body), content_type="application/json", charset="utf-8"
    )


_CLIENT_ERRORS: tuple[tuple[type[LograftError], int, int], ...] = (
    (UnknownTopicOrPartitionError, 404, TOPIC_NOT_FOUND),
    (TopicAlreadyExistsError, 400, TOPIC_ALREADY_EXISTS),
    (InvalidTopicError, 400, BAD_REQUEST),
    (InvalidPartitionsError, 400, BAD_REQUEST),
    (InvalidReplicationFactorError, 400, BAD_REQUEST),
    (InvalidConfigError, 400, BAD_REQUEST),
    (InvalidRequestError, 400, BAD_REQUEST),
    (PolicyViolationError, 400, BAD_REQUEST),
    (InvalidTimestampError, 400, BAD_REQUEST),
    (IllegalStateError, 409, ILLEGAL_STATE),
    (MessageTooLargeError, 422, INVALID_RECORD),
    (RecordListTooLargeError, 422, INVALID_RECORD),
)
_UNAVAILABLE = (
    NetworkError,
    RequestTimedOutError,
    CoordinatorNotAvailableError,
    CoordinatorLoadInProgressError,
)


def from_lograft(exc: LograftError) -> RestError:
    """The answer for a typed error of the client: a 4xx for what the request asked wrong,
    503 (50003) when the cluster cannot be reached in time, 500 (50002/50003) otherwise."""
    for kind, status, code in _CLIENT_ERRORS:
        if isinstance(exc, kind):
            return RestError(status, code, str(exc))
    if isinstance(exc, _UNAVAILABLE):
        return RestError(503, KAFKA_RETRIABLE_ERROR, f"Retriable Kafka error: {exc}")
    code = KAFKA_RETRIABLE_ERROR if exc.retriable else KAFKA_ERROR
    prefix = "Retriable Kafka error" if exc.retriable else "Kafka error"
    logger.warning("cluster call failed error=%s retriable=%s", exc.error_name, exc.retriable)
    return RestError(500, code, f"{prefix}: {exc}")
