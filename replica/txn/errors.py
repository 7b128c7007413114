"""Errors of the pure transaction coordinator core.

Request-level failures use the shared :mod:`lograft.protocol.errors` classes directly
(``PRODUCER_FENCED``, ``INVALID_PRODUCER_ID_MAPPING``, ``CONCURRENT_TRANSACTIONS``,
``INVALID_TXN_STATE``, ...); a ``__transaction_state`` record that does not decode is
``CORRUPT_MESSAGE``. One kind is defined here:

* :class:`TxnInvariantError` -- the coordinator's state broke a rule of its state table (a
  deciding transaction without partitions, an epoch going back, two ids sharing a producer
  id). It halts the node on purpose and is never caught and logged away.
"""

from __future__ import annotations

from lograft.protocol.errors import InvariantError

__all__ = ["TxnInvariantError"]


class TxnInvariantError(InvariantError):
    """A transaction coordinator invariant is broken; the node halts (never answered)."""
