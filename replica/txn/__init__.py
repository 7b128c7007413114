"""Transactions (issue 13): the transaction coordinator as a pure, deterministic core.

Import from here. :mod:`replica.txn.coordinator` holds the protocol (Kafka's transaction
coordinator, transactions version 2, and KIP-939's prepared transactions);
:mod:`replica.txn.metadata` a transactional id's state and its ``__transaction_state``
record bytes; :mod:`replica.txn.errors` the invariant error that halts the node.
``docs/decisions/0006-transactions.md`` says how the pieces fit.
"""

from replica.txn.coordinator import (
    DEFAULT_MAX_TIMEOUT_MS,
    EndResult,
    InitResult,
    MarkerJob,
    Outcome,
    TransactionCoordinator,
    partition_for_transactional_id,
)
from replica.txn.errors import TxnInvariantError
from replica.txn.metadata import (
    MAX_PRODUCER_EPOCH,
    TxnMetadata,
    TxnRecord,
    TxnState,
    decode_record,
    encode_record,
)

__all__ = [
    "DEFAULT_MAX_TIMEOUT_MS",
    "MAX_PRODUCER_EPOCH",
    "EndResult",
    "InitResult",
    "MarkerJob",
    "Outcome",
    "TransactionCoordinator",
    "TxnInvariantError",
    "TxnMetadata",
    "TxnRecord",
    "TxnState",
    "decode_record",
    "encode_record",
    "partition_for_transactional_id",
]
