"""Admin calls to a group's coordinator: find it, call it, retry what is retriable.

:class:`GroupCoordinatorCalls` finds the coordinator of a group with ``FindCoordinator``
(to any broker), caches it per group, and sends one request to it.
``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``, ``COORDINATOR_LOAD_IN_PROGRESS`` and
network failures are retried after ``retry.backoff.ms`` (forgetting the cached
coordinator, so the next attempt looks it up again) until the call's deadline, as Kafka's
admin client does. A non-retriable error is raised at once. Thread-safe.

The consumer's own coordinator handling lives in ``_group_client``; this module serves the
``AdminClient``, whose calls are one-shot and name many groups.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cluster.errors import LograftError, error_for_code
from cluster.wire import broker_pb2 as pb

from ._connection import BrokerInfo, Connections

__all__ = ["GroupCoordinatorCalls"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class GroupCoordinatorCalls:
    """Requests to the coordinators of groups, over ``conn``; see the module docstring."""

    def __init__(self, conn: Connections, *, retry_backoff_ms: int) -> None:
        self._conn = conn
        self._backoff_s = retry_backoff_ms / 1000.0
        self._lock = threading.Lock()
        self._known: dict[str, BrokerInfo] = {}

    def forget(self, group_id: str) -> None:
        """Look ``group_id``'s coordinator up again before the next call to it."""
        with self._lock:
            self._known.pop(group_id, None)

    def coordinator(self, group_id: str, timeout_ms: int) -> BrokerInfo:
        """The broker coordinating ``group_id`` (cached); one ``FindCoordinator``, no retry."""
        with self._lock:
            known = self._known.get(group_id)
        if known is not None:
            return known
        response = self._conn.call(
            "FindCoordinator", pb.FindCoordinatorRequest(group_id=group_id), timeout_ms=timeout_ms
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message or group_id)
        found = BrokerInfo(response.node_id, response.host, response.port)
        with self._lock:
            self._known[group_id] = found
        logger.debug(
            "coordinator found group=%s node=%d address=%s:%d",
            group_id,
            found.node_id,
            found.host,
            found.port,
        )
        return found

    def call(
        self,
        group_id: str,
        method: str,
        request: Any,
        answer: Callable[[Any, BrokerInfo], _T],
        *,
        timeout_ms: int,
    ) -> _T:
        """Send ``request`` to the group's coordinator; return ``answer(response, coordinator)``.

        ``answer`` raises the typed error the response carries, if any; retriable ones (and
        failures to reach the coordinator) are retried until ``timeout_ms`` has passed, then
        the last one is raised.
        """
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            remaining_ms = max(int((deadline - time.monotonic()) * 1000), 1)
            try:
                coordinator = self.coordinator(group_id, remaining_ms)
                response = self._conn.call_address(
                    coordinator.host,
                    coordinator.port,
                    method,
                    request,
                    timeout_ms=min(remaining_ms, self._conn.request_timeout_ms),
                    what=f"coordinator {coordinator.node_id} of group {group_id!r}",
                )
                return answer(response, coordinator)
            except LograftError as exc:
                if not exc.retriable:
                    raise
                self.forget(group_id)
                if time.monotonic() + self._backoff_s >= deadline:
                    raise
                logger.debug("group call retry group=%s method=%s error=%s", group_id, method, exc)
            time.sleep(self._backoff_s)
