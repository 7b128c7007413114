"""Failed gRPC calls as the typed errors of :mod:`cluster.errors`.

A broker names the Kafka error in the status detail (``"NOT_LEADER_OR_FOLLOWER: ..."``);
without one the status code decides: ``UNAVAILABLE`` → ``NetworkError`` (retriable),
``RESOURCE_EXHAUSTED`` → ``RecordListTooLargeError``, ``DEADLINE_EXCEEDED`` →
``RequestTimedOutError``, ``INVALID_ARGUMENT`` → ``InvalidRequestError``.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from cluster import errors
from cluster.errors import (
    InvalidRequestError,
    LograftError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    UnknownServerError,
)

__all__ = ["map_rpc_error"]

log = logging.getLogger(__name__)

_BY_NAME: dict[str, type[LograftError]] = {
    cls.error_name: cls
    for cls in (getattr(errors, name) for name in errors.__all__)
    if isinstance(cls, type) and issubclass(cls, LograftError) and cls is not LograftError
}

_BY_STATUS: dict[Any, type[LograftError]] = {
    grpc.StatusCode.UNAVAILABLE: NetworkError,
    grpc.StatusCode.CANCELLED: NetworkError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RecordListTooLargeError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimedOutError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
}


def map_rpc_error(error: grpc.RpcError) -> LograftError:
    """Turn a failed gRPC call into the matching typed error.

    A status detail that starts with a Kafka error name (``"NOT_LEADER_OR_FOLLOWER: ..."``)
    selects that error; otherwise the status code decides, and unknown codes become
    ``UnknownServerError``.
    """
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else None) or ""
    name, sep, rest = details.partition(":")
    if sep and name.strip() in _BY_NAME:
        return _BY_NAME[name.strip()](rest.strip())
    cls = _BY_STATUS.get(code, UnknownServerError)
    status = code.name if code is not None and hasattr(code, "name") else str(code)
    return cls(f"gRPC {status}: {details}" if details else f"gRPC {status}")
