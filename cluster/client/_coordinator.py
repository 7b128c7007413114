"""Calls to a coordinator (a group's, or a transactional id's): find it, call it, retry
what is retriable.

:class:`CoordinatorCalls` finds the coordinator of a key with ``FindCoordinator`` (to any
broker), caches it per key, and sends one request to it.
``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``, ``COORDINATOR_LOAD_IN_PROGRESS`` and
network failures are retried after ``retry.backoff.ms`` (forgetting the cached
coordinator, so the next attempt looks it up again) until the call's deadline, as Kafka's
admin client does. A non-retriable error is raised at once; so is "no broker answered"
(``NoBrokersAvailableError``), except for the transactional producer, whose calls wait
for the cluster within ``max.block.ms`` as Kafka's do. Thread-safe.

The consumer's own coordinator handling lives in ``_group_client``; this module serves the
``AdminClient``, whose calls are one-shot and name many groups, and the transactional
producer (``key_type`` 1).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lograft.protocol.errors import ConcurrentTransactionsError, LograftError, error_for_code
from lograft.protocol.wire import broker_pb2 as pb

from ._connection import BrokerInfo, Connections
from ._rpc_errors import NoBrokersAvailableError

__all__ = ["GROUP_KEY", "TRANSACTION_KEY", "CoordinatorCalls"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.02
GROUP_KEY = 0
"""FindCoordinator's key type of a group id (Kafka's ``CoordinatorType.GROUP``)."""
TRANSACTION_KEY = 1
"""FindCoordinator's key type of a transactional id (Kafka's ``CoordinatorType.TRANSACTION``)."""


class CoordinatorCalls:
    """Requests to the coordinators of groups (or, with ``key_type`` 1, of transactional
    ids), over ``conn``; see the module docstring."""

    def __init__(
        self,
        conn: Connections,
        *,
        retry_backoff_ms: int,
        key_type: int = GROUP_KEY,
        wait_for_brokers: bool = False,
    ) -> None:
        self._conn = conn
        self._key_type = key_type
        # The transactional producer's calls wait within their deadline for a cluster no
        # broker of which answers (a whole-cluster restart), as Kafka's block for
        # max.block.ms; the admin client's give up at once (a wrong address list).
        self._wait_for_brokers = wait_for_brokers
        self._backoff_s = retry_backoff_ms / 1000.0
        self._lock = threading.Lock()
        self._known: dict[str, BrokerInfo] = {}

    def forget(self, key: str) -> None:
        """Look ``key``'s coordinator up again before the next call to it."""
        with self._lock:
            self._known.pop(key, None)

    def coordinator(self, key: str, timeout_ms: int) -> BrokerInfo:
        """The broker coordinating ``key`` (cached); one ``FindCoordinator``, no retry."""
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            return known
        response = self._conn.call(
            "FindCoordinator",
            pb.FindCoordinatorRequest(group_id=key, key_type=self._key_type),
            timeout_ms=timeout_ms,
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message or key)
        found = BrokerInfo(response.node_id, response.host, response.port)
        with self._lock:
            self._known[key] = found
        logger.debug(
            "coordinator found key=%s node=%d address=%s:%d",
            key,
            found.node_id,
            found.host,
            found.port,
        )
        return found

    def call(
        self,
        key: str,
        method: str,
        request: Any,
        answer: Callable[[Any, BrokerInfo], _T],
        *,
        timeout_ms: int,
    ) -> _T:
        """Send ``request`` to the key's coordinator; return ``answer(response, coordinator)``.

        ``answer`` raises the typed error the response carries, if any; retriable ones (and
        failures to reach the coordinator) are retried until ``timeout_ms`` has passed, then
        the last one is raised.
        """
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            remaining_ms = max(int((deadline - time.monotonic()) * 1000), 1)
            try:
                coordinator = self.coordinator(key, remaining_ms)
                response = self._conn.call_address(
                    coordinator.host,
                    coordinator.port,
                    method,
                    request,
                    timeout_ms=min(remaining_ms, self._conn.request_timeout_ms),
                    what=f"coordinator {coordinator.node_id} of {key!r}",
                )
                return answer(response, coordinator)
            except LograftError as exc:
                unreachable = self._wait_for_brokers and isinstance(exc, NoBrokersAvailableError)
                if not exc.retriable and not unreachable:
                    raise
                backoff_s = self._backoff_s
                if isinstance(exc, ConcurrentTransactionsError):
                    # The right coordinator, finishing the previous transaction's markers:
                    # ask again soon (Kafka's client waits 20 ms here, not retry.backoff.ms).
                    backoff_s = min(backoff_s, CONCURRENT_TRANSACTIONS_BACKOFF_S)
                else:
                    self.forget(key)
                if time.monotonic() + backoff_s >= deadline:
                    raise
                logger.debug("coordinator call retry key=%s method=%s error=%s", key, method, exc)
            time.sleep(backoff_s)
