"""Failed gRPC calls as the typed errors of :mod:`lograft.protocol.errors`, and unreachable brokers.

A broker names the Kafka error in the status detail (``"NOT_LEADER_OR_FOLLOWER: ..."``);
without one the status code decides: ``UNAVAILABLE`` → ``NetworkError`` (retriable),
``RESOURCE_EXHAUSTED`` → ``RecordListTooLargeError``, ``DEADLINE_EXCEEDED`` →
``RequestTimedOutError``, ``INVALID_ARGUMENT`` → ``InvalidRequestError``.

An ``UNAVAILABLE`` without a Kafka error name means the broker was not reached (or the
connection broke): :func:`unreachable_reason` turns gRPC's detail (``failed to connect to all
addresses; last error: UNKNOWN: ipv4:127.0.0.1:9092: Failed to connect to remote host:
Connection refused``) into the few words a person needs (``connection refused``). When no
bootstrap server or known broker can be reached, the client raises
:class:`NoBrokersAvailableError`, which names every address tried and why.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import grpc

from lograft.protocol.errors import (
    InvalidRequestError,
    LograftError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    UnknownServerError,
    error_type_named,
)

__all__ = [
    "NoBrokersAvailableError",
    "describe_rpc_failure",
    "describe_unavailable",
    "map_rpc_error",
    "retried_in_background",
    "unreachable_reason",
]

log = logging.getLogger(__name__)

_BY_STATUS: dict[Any, type[LograftError]] = {
    grpc.StatusCode.UNAVAILABLE: NetworkError,
    grpc.StatusCode.CANCELLED: NetworkError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RecordListTooLargeError,
    grpc.StatusCode.DEADLINE_EXCEEDED: RequestTimedOutError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequestError,
}

# Words of gRPC's (and the kernel's) connection failures, most specific first, and how a
# person is told. Matched case-insensitively anywhere in the status detail.
_REASONS: tuple[tuple[str, str], ...] = (
    ("connection refused", "connection refused"),
    ("dns resolution failed", "name not resolved"),
    ("errors resolving", "name not resolved"),
    ("domain name not found", "name not resolved"),
    ("name or service not known", "name not resolved"),
    ("hostname lookup", "name not resolved"),
    ("network is unreachable", "network unreachable"),
    ("no route to host", "no route to host"),
    ("connection reset", "connection reset"),
    ("broken pipe", "connection closed"),
    ("socket closed", "connection closed"),
    ("timed out", "timed out"),
    ("timeout occurred", "timed out"),
    ("handshake", "connection setup failed"),
)

_GRPC_PREFIX = re.compile(
    r"^(failed to connect to all addresses; last error: )?([A-Z_]+: )?(ipv[46]:\S+: )?"
)


class NoBrokersAvailableError(NetworkError):
    """No broker answered: every known broker and bootstrap server was tried and none could
    be reached (kafka-python's ``NoBrokersAvailable``).

    A ``NetworkError`` (``NETWORK_EXCEPTION``) that is *not* retriable: a call gives up at
    once instead of waiting out its timeout, since an unreachable address list is not a
    slow cluster. ``failures`` holds ``(address, reason)`` per address tried, in order; the
    message is one line, ``no broker answered: 127.0.0.1:9092 (connection refused), ...``.
    """

    retriable = False

    def __init__(self, failures: Sequence[tuple[str, str]]) -> None:
        self.failures: tuple[tuple[str, str], ...] = tuple(failures)
        tried = ", ".join(f"{address} ({reason})" for address, reason in self.failures)
        super().__init__(f"no broker answered: {tried or 'no address to try'}")


def retried_in_background(error: LograftError) -> bool:
    """Whether a client's own background work (a group member's heartbeat, a producer's
    InitProducerId) tries again after ``error``: every retriable error, and also no broker
    answering at all. A call the user waits on fails fast on that (an address list nobody
    answers is not a slow cluster), but a running client outlasts an outage of the whole
    cluster, as Kafka's clients do; its own deadlines bound the wait."""
    return error.retriable or isinstance(error, NoBrokersAvailableError)


def unreachable_reason(error: grpc.RpcError) -> str | None:
    """Why the broker was not reached, when ``error`` says it was not; else ``None``.

    ``UNAVAILABLE`` without a Kafka error name in the detail is a connection that could not
    be made or broke (refused, name not resolved, reset, ...); anything else reached a
    broker and is that broker's answer (see :func:`map_rpc_error`).
    """
    code = error.code() if hasattr(error, "code") else None
    if code is not grpc.StatusCode.UNAVAILABLE:
        return None
    details = (error.details() if hasattr(error, "details") else None) or ""
    name, sep, _rest = details.partition(":")
    if sep and error_type_named(name.strip()) is not None:
        return None
    return describe_unavailable(details)


def describe_unavailable(details: str) -> str:
    """gRPC's ``UNAVAILABLE`` detail in a few words: ``connection refused``, ``name not
    resolved``, ``timed out``, ... (else the detail itself, without gRPC's prefixes)."""
    lowered = details.lower()
    for needle, reason in _REASONS:
        if needle in lowered:
            return reason
    first_line = details.strip().splitlines()[0] if details.strip() else ""
    short = _GRPC_PREFIX.sub("", first_line).strip()
    return short[:120] or "unavailable"


def describe_rpc_failure(error: grpc.RpcError) -> str:
    """Why a call failed, in a few words: the reason a broker was not reached
    (:func:`unreachable_reason`), else the typed error's message (``REQUEST_TIMED_OUT: ...``)."""
    reason = unreachable_reason(error)
    if reason is not None:
        return reason
    text = str(map_rpc_error(error))
    return text.splitlines()[0][:160] if text else "failed"


def map_rpc_error(error: grpc.RpcError) -> LograftError:
    """Turn a failed gRPC call into the matching typed error.

    A status detail that starts with a Kafka error name (``"NOT_LEADER_OR_FOLLOWER: ..."``)
    selects that error; ``UNAVAILABLE`` otherwise is a ``NetworkError`` saying why the
    broker was not reached (:func:`describe_unavailable`); other codes decide as the
    module docstring says, and unknown codes become ``UnknownServerError``.
    """
    code = error.code() if hasattr(error, "code") else None
    details = (error.details() if hasattr(error, "details") else None) or ""
    name, sep, rest = details.partition(":")
    named = error_type_named(name.strip()) if sep else None
    if named is not None:
        return named(rest.strip())
    if code is grpc.StatusCode.UNAVAILABLE:
        return NetworkError(describe_unavailable(details))
    cls = _BY_STATUS.get(code, UnknownServerError)
    status = code.name if code is not None and hasattr(code, "name") else str(code)
    return cls(f"gRPC {status}: {details}" if details else f"gRPC {status}")
