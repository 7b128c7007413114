"""``AdminClient``'s transaction calls (Kafka's ``listTransactions``,
``describeTransactions`` and KIP-939's ``forceTerminateTransaction``).

``list_transactions`` asks every broker for the transactional ids it coordinates; the
others go to the id's transaction coordinator through
:class:`~cluster.client._coordinator.CoordinatorCalls` (``key_type`` 1), retrying what is
retriable within ``default.api.timeout.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from lograft.protocol.errors import error_for_code
from lograft.protocol.wire import broker_pb2 as pb

from ._admin_calls import AdminCalls
from ._connection import TopicPartition
from ._coordinator import TRANSACTION_KEY, CoordinatorCalls

__all__ = ["TransactionAdminCalls", "TransactionDescription", "TransactionListing"]

log = logging.getLogger(__name__)

FORCE_TERMINATE_TIMEOUT_MS = 60_000
"""The ``transaction.timeout.ms`` a force-terminated id is left with (Kafka's default)."""


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """A transactional id, its producer id and its state (Kafka's names: ``Ongoing``...)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as its coordinator sees it."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    """When the open transaction began (ms since the epoch); -1 if none is open."""
    partitions: frozenset[TopicPartition]
    two_phase: bool


class TransactionAdminCalls:
    """The transaction calls of one ``AdminClient``, over its connections."""

    def __init__(self, calls: AdminCalls, *, retry_backoff_ms: int) -> None:
        self._calls = calls
        self._conn = calls.conn
        self._coordinators = CoordinatorCalls(
            calls.conn, retry_backoff_ms=retry_backoff_ms, key_type=TRANSACTION_KEY
        )

    def list_transactions(self, states: Collection[str] = ()) -> list[TransactionListing]:
        """``AdminClient.list_transactions``."""
        found: dict[str, TransactionListing] = {}
        request = pb.ListTransactionsRequest(state_filters=list(states))
        for response in self._calls.each_broker("ListTransactions", request):
            for t in response.transactions:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.state
                )
        return [found[t] for t in sorted(found)]

    def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> dict[str, TransactionDescription]:
        """``AdminClient.describe_transactions``."""
        described: dict[str, TransactionDescription] = {}
        for transactional_id in transactional_ids:
            request = pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
            described[transactional_id] = self._coordinators.call(
                transactional_id,
                "DescribeTransactions",
                request,
                _description,
                timeout_ms=self._calls.api_timeout_ms,
            )
        return described

    def force_terminate_transaction(self, transactional_id: str) -> None:
        """``AdminClient.force_terminate_transaction``."""
        request = pb.InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=FORCE_TERMINATE_TIMEOUT_MS,
        )
        self._coordinators.call(
            transactional_id,
            "InitProducerId",
            request,
            _raise_error,
            timeout_ms=self._calls.api_timeout_ms,
        )


def _raise_error(response: Any, coordinator: Any) -> None:
    if response.error_code:
        raise error_for_code(response.error_code, response.error_message)


def _description(response: Any, coordinator: Any) -> TransactionDescription:
    if len(response.transactions) != 1:
        raise error_for_code(-1, f"{len(response.transactions)} descriptions for one id")
    t = response.transactions[0]
    if t.error_code:
        raise error_for_code(t.error_code, t.error_message or t.transactional_id)
    return TransactionDescription(
        transactional_id=t.transactional_id,
        coordinator_id=t.coordinator_id,
        state=t.state,
        producer_id=t.producer_id,
        producer_epoch=t.producer_epoch,
        transaction_timeout_ms=t.transaction_timeout_ms,
        transaction_start_time_ms=t.transaction_start_time_ms,
        partitions=frozenset(TopicPartition(tp.topic, p) for tp in t.topics for p in tp.partitions),
        two_phase=t.two_phase,
    )
