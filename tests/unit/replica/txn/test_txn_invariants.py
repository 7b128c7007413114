"""``TransactionCoordinator.check_invariants``: quiet on every path the protocol takes, and
a state poked to break each rule raises ``TxnInvariantError`` naming the rule."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import replace

import pytest

from lograft.protocol.errors import InvariantError, LograftError
from lograft.protocol.topic_partition import TopicPartition
from replica.txn import (
    MAX_PRODUCER_EPOCH,
    TransactionCoordinator,
    TxnInvariantError,
    TxnMetadata,
    TxnState,
)

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)

TID = "orders-writer"
A, B = TopicPartition("a", 0), TopicPartition("b", 1)
NOW = 1_000_000
TIMEOUT = 60_000


def _ids(start: int = 4000) -> Callable[[], int]:
    counter = itertools.count(start)
    return lambda: next(counter)


def _coordinator() -> TransactionCoordinator:
    coordinator = TransactionCoordinator(partition=3, coordinator_epoch=5, logger=CORE_LOG)
    coordinator.complete_load()
    return coordinator


def _open(coordinator: TransactionCoordinator, tid: str = TID) -> TxnMetadata:
    """``tid`` with a transaction open on A and B; its state."""
    init = coordinator.init_producer_id(tid, TIMEOUT, NOW, _ids(4000 + 100 * len(tid))).result
    coordinator.add_partitions(tid, init.producer_id, init.producer_epoch, [A, B], NOW)
    meta = coordinator.metadata(tid)
    assert meta is not None
    return meta


def _poke(coordinator: TransactionCoordinator, meta: TxnMetadata) -> None:
    coordinator._ids[meta.transactional_id] = meta


def test_the_error_halts_the_node_and_is_never_a_wire_error() -> None:
    assert issubclass(TxnInvariantError, InvariantError)
    assert not issubclass(TxnInvariantError, LograftError)


def test_every_step_of_the_protocol_keeps_the_invariants() -> None:
    c = _coordinator()
    c.check_invariants()
    meta = _open(c)
    c.check_invariants()
    pid, epoch = meta.producer_id, meta.producer_epoch
    ended = c.end_transaction(TID, pid, epoch, True, NOW + 1)
    c.check_invariants()  # PREPARE_COMMIT
    c.markers_written(TID, pid, ended.result.producer_epoch, NOW + 2)
    c.check_invariants()  # COMPLETE_COMMIT
    next_epoch = ended.result.producer_epoch
    c.end_transaction(TID, pid, next_epoch, False, NOW + 3)
    c.check_invariants()  # an abort with nothing open: COMPLETE_ABORT, bumped
    _open(c, "other")
    c.tick(NOW + 10 * TIMEOUT)
    c.check_invariants()  # timed out: PREPARE_ABORT, bumped twice
    again = c.init_producer_id(TID, TIMEOUT, NOW + 4, _ids(9000))
    assert again.error is None
    c.check_invariants()
    c.expire_ids(NOW + 10**12)
    c.check_invariants()


def test_a_coordinator_loaded_from_records_keeps_the_invariants() -> None:
    live = _coordinator()
    meta = _open(live)
    outcome = live.end_transaction(TID, meta.producer_id, meta.producer_epoch, False, NOW)
    loaded = TransactionCoordinator(partition=3, coordinator_epoch=6, logger=CORE_LOG)
    for record in outcome.records:
        loaded.replay(record)
    loaded.check_invariants()
    assert len(loaded.complete_load()) == 1
    loaded.check_invariants()


def test_an_exhausted_epoch_moves_to_a_new_producer_id_without_breaking_a_rule() -> None:
    c = _coordinator()
    meta = _open(c)
    _poke(
        c,
        replace(
            meta,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            started_ms=-1,
            producer_epoch=MAX_PRODUCER_EPOCH - 1,
            last_producer_epoch=MAX_PRODUCER_EPOCH - 2,
        ),
    )
    c.check_invariants()
    c.init_producer_id(TID, TIMEOUT, NOW, _ids(7000))
    fresh = c.metadata(TID)
    assert fresh is not None and (fresh.producer_id, fresh.producer_epoch) == (7000, 0)
    c.check_invariants()


def _broken(c: TransactionCoordinator, meta: TxnMetadata, **changes: object) -> str:
    _poke(c, replace(meta, **changes))
    with pytest.raises(TxnInvariantError) as raised:
        c.check_invariants()
    return str(raised.value)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"state": TxnState.DEAD}, "held in state"),
        ({"state": 9}, "held in state"),
        ({"producer_id": -1}, "producer id -1 < 0"),
        ({"producer_epoch": MAX_PRODUCER_EPOCH + 1}, "producer epoch 32768 outside"),
        ({"last_producer_epoch": 5}, "last producer epoch 5 is neither -1 nor the one before"),
        ({"timeout_ms": 0}, "transaction timeout 0 ms is not positive"),
        ({"partitions": frozenset()}, "ONGOING with no partition"),
        ({"started_ms": -1}, "ONGOING with no start time"),
        ({"state": TxnState.EMPTY}, "EMPTY with partitions"),
        ({"state": TxnState.COMPLETE_COMMIT, "partitions": frozenset()}, "with a transaction"),
        ({"state": TxnState.PREPARE_COMMIT}, "PREPARE_COMMIT at epoch 0: not bumped"),
    ],
)
def test_a_broken_state_is_named(changes: dict[str, object], named: str) -> None:
    c = _coordinator()
    meta = _open(c)
    c.check_invariants()
    message = _broken(c, meta, **changes)
    assert named in message
    assert f"__transaction_state-3 {TID!r}" in message


def test_an_id_held_under_another_name_is_named() -> None:
    c = _coordinator()
    meta = _open(c)
    c._ids["someone-else"] = meta
    with pytest.raises(TxnInvariantError, match="'someone-else': holds the state of"):
        c.check_invariants()


def test_two_ids_sharing_a_producer_id_are_named() -> None:
    c = _coordinator()
    first = _open(c)
    second = _open(c, "other")
    _poke(c, replace(second, producer_id=first.producer_id))
    with pytest.raises(TxnInvariantError, match=f"shares producer id {first.producer_id}"):
        c.check_invariants()


def test_an_epoch_going_back_under_one_producer_id_is_named() -> None:
    c = _coordinator()
    meta = _open(c)
    c.end_transaction(TID, meta.producer_id, meta.producer_epoch, False, NOW)
    c.check_invariants()  # remembers epoch 1
    _poke(c, meta)  # back to epoch 0
    with pytest.raises(TxnInvariantError, match="went back from 1 to 0"):
        c.check_invariants()


def test_a_new_producer_id_or_a_forgotten_id_starts_over() -> None:
    c = _coordinator()
    meta = _open(c)
    c.end_transaction(TID, meta.producer_id, meta.producer_epoch, False, NOW)
    c.check_invariants()
    _poke(c, replace(meta, producer_id=meta.producer_id + 1))  # another producer, epoch 0
    c.check_invariants()
    del c._ids[TID]
    c.check_invariants()
    _poke(c, meta)
    c.check_invariants()
