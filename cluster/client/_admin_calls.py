"""How ``AdminClient``'s calls reach the cluster, and the futures they answer with.

:class:`AdminCalls` retries retriable errors (no leader, not the leader, network) with
``retry.backoff.ms`` pauses until ``default.api.timeout.ms`` passes (but gives up at once
when no broker can be reached at all: ``NoBrokersAvailableError``), and sends the calls that
change the cluster to the active controller's node when the metadata names one. Calls that
may fail per topic, group or partition return futures that are already done (:func:`done`,
:func:`topic_futures`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from lograft.protocol.errors import InvalidRequestError, LograftError, error_for_code

from ._connection import Connections, NoBrokersAvailableError

__all__ = ["AdminCalls", "done", "topic_futures"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class AdminCalls:
    """Retried calls over ``conn``, each within ``api_timeout_ms``."""

    def __init__(self, conn: Connections, *, api_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.conn = conn
        self.api_timeout_ms = api_timeout_ms
        self.backoff_s = retry_backoff_ms / 1000.0

    def controller_call(self, method: str, request: Any) -> Any:
        """Send to the controller when the metadata names one, else to any broker; retry."""
        deadline = time.monotonic() + self.api_timeout_ms / 1000.0
        while True:
            try:
                controller = self.conn.metadata.controller_id
                if controller in self.conn.metadata.brokers:
                    return self.conn.call(method, request, node_id=controller)
                return self.conn.call(method, request)
            except LograftError as exc:
                if not exc.retriable or time.monotonic() + self.backoff_s >= deadline:
                    raise
                log.debug("admin call retry method=%s error=%s", method, exc)
            time.sleep(self.backoff_s)
            self._refresh_quietly()

    def with_retry(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, again after ``retry.backoff.ms`` while it raises a retriable error,
        until ``default.api.timeout.ms`` passes."""
        deadline = time.monotonic() + self.api_timeout_ms / 1000.0
        while True:
            try:
                return fn()
            except LograftError as exc:
                if not exc.retriable or time.monotonic() + self.backoff_s >= deadline:
                    raise
            time.sleep(self.backoff_s)

    def each_broker(self, method: str, request: Any) -> list[Any]:
        """Send ``request`` to every broker the metadata names (as Kafka's admin does for
        listings each broker answers for its own share); each answer's own error is raised,
        retriable ones retried, all within one ``default.api.timeout.ms``."""
        deadline = time.monotonic() + self.api_timeout_ms / 1000.0
        metadata = self.with_retry(lambda: self.conn.refresh_metadata())
        answers = []
        for node_id in sorted(metadata.brokers):
            while True:
                try:
                    response = self.conn.call(method, request, node_id=node_id)
                    if response.error_code:
                        raise error_for_code(response.error_code, response.error_message)
                    break
                except LograftError as exc:
                    if not exc.retriable or time.monotonic() + self.backoff_s >= deadline:
                        raise
                    log.debug("admin call retry method=%s node=%d error=%s", method, node_id, exc)
                time.sleep(self.backoff_s)
            answers.append(response)
        return answers

    def _refresh_quietly(self, topics: Iterable[str] | None = None) -> None:
        """Refresh metadata, ignoring failures but one: no broker answered at all."""
        try:
            self.conn.refresh_metadata(topics)
        except NoBrokersAvailableError:
            raise
        except LograftError as exc:
            log.debug("metadata refresh failed error=%s", exc)


def topic_futures(answers: Iterable[Any], names: Iterable[str]) -> dict[str, Future[None]]:
    """``{topic: done Future}`` from per-topic answers (``name``, ``error_code``,
    ``error_message``); a topic asked for but not answered fails with INVALID_REQUEST."""
    results = {
        r.name: done(
            error_for_code(r.error_code, r.error_message or r.name) if r.error_code else None
        )
        for r in answers
    }
    for name in names:
        results.setdefault(name, done(InvalidRequestError(f"no result for topic {name!r}")))
    return results


def done(error: LograftError | None) -> Future[None]:
    """A future already done: ``None`` on success, else failing with ``error``."""
    future: Future[None] = Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future
