"""What must hold of a transaction coordinator between any two calls; a broken rule halts it.

:meth:`TransactionCoordinator.check_invariants
<replica.txn.coordinator.TransactionCoordinator.check_invariants>` runs these. They read the
state only (and remember each id's producer id and epoch, to see the epoch move), so calling
them after every step changes nothing about the run. The rules, from the state table
(:class:`~replica.txn.metadata.TxnState`) and what :mod:`replica.txn.metadata` and
:mod:`replica.txn.coordinator` say of the fields:

* each id is held under its own name, in a state a held id can be in (``DEAD`` is a
  tombstone: replaying it forgets the id);
* its producer id is ``>= 0``, its epoch in ``0..MAX_PRODUCER_EPOCH``, and its last epoch
  the one before the last bump (``epoch - 1``) or ``-1`` (no bump since a new producer id);
* its timeout is positive (the record decoder refuses anything else: a state that broke it
  would not load back);
* with no transaction open (``EMPTY``, ``COMPLETE_*``) it holds no partitions and no start
  time; with one open or deciding (``ONGOING``, ``PREPARE_*``) it holds partitions and a
  start time;
* a deciding transaction (``PREPARE_*``, whose marker jobs are out) was bumped when it was
  decided (transactions version 2: its markers carry an epoch above every one its data
  has), so its epoch is ``>= 1`` and its last epoch ``epoch - 1``;
* no two ids share a producer id;
* under one producer id, an id's epoch never goes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from replica.txn.errors import TxnInvariantError
from replica.txn.metadata import MAX_PRODUCER_EPOCH, TxnMetadata, TxnState

__all__ = ["check_invariants"]


def check_invariants(
    partition: int, ids: Mapping[str, TxnMetadata], seen: dict[str, tuple[int, int]]
) -> None:
    """Raise :class:`TxnInvariantError` if a rule is broken; then remember each id's
    producer id and epoch in ``seen`` (forgetting ids no longer held)."""
    owners: dict[int, str] = {}
    for transactional_id, meta in ids.items():
        where = f"__transaction_state-{partition} {transactional_id!r}"
        if meta.transactional_id != transactional_id:
            _fail(where, f"holds the state of {meta.transactional_id!r}")
        _check_identity(where, meta)
        _check_state(where, meta)
        other = owners.setdefault(meta.producer_id, transactional_id)
        if other != transactional_id:
            _fail(where, f"shares producer id {meta.producer_id} with {other!r}")
        before = seen.get(transactional_id)
        if before is not None and before[0] == meta.producer_id and meta.producer_epoch < before[1]:
            _fail(
                where,
                f"epoch of producer {meta.producer_id} went back from {before[1]} to "
                f"{meta.producer_epoch}",
            )
    seen.clear()
    seen.update((t, (m.producer_id, m.producer_epoch)) for t, m in ids.items())


def _fail(where: str, what: str) -> NoReturn:
    raise TxnInvariantError(f"{where}: {what}")


def _check_identity(where: str, meta: TxnMetadata) -> None:
    if meta.producer_id < 0:
        _fail(where, f"producer id {meta.producer_id} < 0")
    if not 0 <= meta.producer_epoch <= MAX_PRODUCER_EPOCH:
        _fail(where, f"producer epoch {meta.producer_epoch} outside 0..{MAX_PRODUCER_EPOCH}")
    if meta.last_producer_epoch not in (-1, meta.producer_epoch - 1):
        _fail(
            where,
            f"last producer epoch {meta.last_producer_epoch} is neither -1 nor the one before "
            f"epoch {meta.producer_epoch}",
        )
    if meta.timeout_ms <= 0:
        _fail(where, f"transaction timeout {meta.timeout_ms} ms is not positive")


def _check_state(where: str, meta: TxnMetadata) -> None:
    state = meta.state
    if state is TxnState.DEAD or not isinstance(state, TxnState):
        _fail(where, f"held in state {state!r}")
    if state.is_complete:
        if meta.partitions:
            _fail(where, f"{state.name} with partitions {sorted(meta.partitions)}")
        if meta.started_ms != -1:
            _fail(where, f"{state.name} with a transaction started at {meta.started_ms} ms")
        return
    if not meta.partitions:
        _fail(where, f"{state.name} with no partition")
    if meta.started_ms < 0:
        _fail(where, f"{state.name} with no start time ({meta.started_ms} ms)")
    if state.is_preparing and meta.last_producer_epoch < 0:
        # With the identity rules above: last epoch = epoch - 1, so the epoch is >= 1.
        _fail(where, f"{state.name} at epoch {meta.producer_epoch}: not bumped when decided")
