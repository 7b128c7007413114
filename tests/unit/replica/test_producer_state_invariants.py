"""``ProducerStateManager.check_invariants``: quiet on the paths the state takes (produce,
wrap, epoch bump, transactions, truncation, expiry, a replay across a retention gap), and a
state poked to break each rule raises ``ProducerStateInvariantError`` naming the rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lograft.protocol.batch_header import ATTR_CONTROL, ATTR_TRANSACTIONAL
from lograft.protocol.control_records import EndTxnMarker
from lograft.protocol.errors import InvariantError, LograftError
from replica.producer_state import (
    MAX_SEQUENCE,
    NUM_BATCHES_TO_RETAIN,
    AbortedTxn,
    BatchMetadata,
    CompletedTxn,
    ProducerStateInvariantError,
    ProducerStateManager,
)
from tests.unit.producer_state_fixtures import PID, header, produce


def _with_batches(count: int = 3) -> ProducerStateManager:
    """PID's batches of two records each, at sequences 0, 2, 4, ..."""
    manager = ProducerStateManager()
    for n in range(count):
        produce(manager, header(seq=2 * n, count=2))
    manager.check_invariants()
    return manager


def _transactions() -> ProducerStateManager:
    """PID: an aborted transaction at 0..2 (marker at 2), then an open one from 3."""
    manager = ProducerStateManager()
    data = replace(header(seq=0, count=2), attributes=ATTR_TRANSACTIONAL)
    manager.on_appended(data)
    marker = replace(
        header(epoch=1, seq=-1, base_offset=2), attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL
    )
    manager.on_appended(marker, EndTxnMarker(committed=False, coordinator_epoch=1))
    manager.on_appended(
        replace(header(epoch=1, seq=0, base_offset=3), attributes=ATTR_TRANSACTIONAL)
    )
    manager.check_invariants()
    assert manager.open_transactions() == {PID: 3}
    assert manager.kept_aborted_transactions() == (AbortedTxn(PID, 0, 2),)
    return manager


def _broken(manager: ProducerStateManager) -> str:
    with pytest.raises(ProducerStateInvariantError) as raised:
        manager.check_invariants()
    return str(raised.value)


def _poke_batches(manager: ProducerStateManager, *batches: BatchMetadata) -> None:
    entry = manager.entry(PID)
    assert entry is not None
    manager._entries[PID] = replace(entry, batches=batches)


def test_the_error_halts_the_node_and_is_never_a_wire_error() -> None:
    assert issubclass(ProducerStateInvariantError, InvariantError)
    assert not issubclass(ProducerStateInvariantError, LograftError)


def test_the_normal_paths_keep_the_invariants() -> None:
    manager = _with_batches(NUM_BATCHES_TO_RETAIN + 2)  # the cache keeps the last five
    produce(manager, header(epoch=1, seq=0))  # a new epoch clears it
    manager.check_invariants()
    near_wrap = ProducerStateManager()
    produce(near_wrap, header(seq=MAX_SEQUENCE - 1, count=2))
    produce(near_wrap, header(seq=0, count=3))  # 2**31 - 1 wraps to 0
    near_wrap.check_invariants()
    produce(manager, header(producer_id=-1, epoch=-1, seq=-1, count=4))  # not idempotent
    manager.check_invariants()
    assert manager.truncate_to(manager.end_offset - 4) == frozenset()  # the plain batch
    manager.check_invariants()
    cut = _with_batches(NUM_BATCHES_TO_RETAIN)
    assert cut.truncate_to(5) == {PID}  # a full cache lost batches: inexact, but whole
    cut.check_invariants()
    assert manager.expire_producers(10**15) == [PID]
    manager.check_invariants()
    transactions = _transactions()
    transactions.last_stable_offset(high_watermark=3)
    transactions.forget_aborted_below(3)
    transactions.check_invariants()


def test_a_replay_across_a_retention_gap_may_skip_the_deleted_sequences() -> None:
    manager = _with_batches(2)  # sequences 0..3 at offsets 0..3
    # The batches at offsets 4..9 (sequences 4..9) were deleted; the log goes on at 10.
    manager.rebuild_from_batches([header(seq=10, count=2, base_offset=10)])
    manager.check_invariants()


def test_too_many_batches_are_named() -> None:
    manager = _with_batches(NUM_BATCHES_TO_RETAIN)
    entry = manager.entry(PID)
    assert entry is not None
    extra = BatchMetadata(10, 11, 10, 11, 1_000)
    manager._end_offset = 12
    _poke_batches(manager, *entry.batches, extra)
    assert f"producer {PID}: 6 batches retained" in _broken(manager)


def test_sequences_that_skip_between_adjacent_batches_are_named() -> None:
    manager = _with_batches(2)
    _poke_batches(manager, BatchMetadata(0, 1, 0, 1, 1_000), BatchMetadata(3, 4, 2, 3, 1_000))
    assert "sequence 3 at offset 2 does not follow sequence 1 at 1" in _broken(manager)


def test_a_sequence_that_goes_back_is_named_even_across_the_wrap() -> None:
    manager = _with_batches(2)
    _poke_batches(manager, BatchMetadata(0, 1, 0, 1, 1_000), BatchMetadata(1, 2, 2, 3, 1_000))
    assert "sequence 1 at offset 2 does not follow sequence 1 at 1" in _broken(manager)


def test_offsets_that_do_not_increase_are_named() -> None:
    manager = _with_batches(2)
    _poke_batches(manager, BatchMetadata(0, 1, 2, 3, 1_000), BatchMetadata(2, 3, 2, 3, 1_000))
    assert "batch at 2 not after 3" in _broken(manager)


@pytest.mark.parametrize(
    ("batch", "named"),
    [
        (BatchMetadata(0, 1, 0, 4, 1_000), "batch 0..4, end offset 4"),
        (BatchMetadata(0, 1, 2, 1, 1_000), "batch 2..1"),
        (BatchMetadata(-1, 0, 0, 1, 1_000), "batch sequences -1..0"),
        (BatchMetadata(0, 2, 0, 1, 1_000), "sequences 0..2 do not match its offsets 0..1"),
    ],
)
def test_a_batch_out_of_its_bounds_is_named(batch: BatchMetadata, named: str) -> None:
    manager = _with_batches(2)
    _poke_batches(manager, batch)
    assert named in _broken(manager)


def test_an_entry_under_another_id_or_a_negative_epoch_is_named() -> None:
    manager = _with_batches(1)
    entry = manager.entry(PID)
    assert entry is not None
    manager._entries[PID + 1] = entry
    assert f"producer {PID + 1}: holds the entry of producer {PID}" in _broken(manager)
    del manager._entries[PID + 1]
    manager._entries[PID] = replace(entry, producer_epoch=-1)
    assert "epoch -1 < 0" in _broken(manager)


def test_an_open_transaction_past_the_end_or_missing_from_the_index_is_named() -> None:
    manager = _transactions()
    entry = manager.entry(PID)
    assert entry is not None
    manager._entries[PID] = replace(entry, current_txn_first_offset=4)
    assert "open transaction at 4, end offset 4" in _broken(manager)
    manager._entries[PID] = entry
    manager._open_txns.clear()
    assert "open transactions index {} is not the entries' {1000: 3}" in _broken(manager)


def test_ended_and_aborted_transactions_out_of_order_or_bounds_are_named() -> None:
    manager = _transactions()
    manager._completed = [CompletedTxn(PID, 0, 2, True), CompletedTxn(PID, 1, 2, False)]
    assert "ended transaction marker 2 not after the previous" in _broken(manager)
    manager._completed = []
    manager._aborted = [AbortedTxn(PID, 3, 2)]
    assert f"aborted transaction of producer {PID}: 3..2" in _broken(manager)
    manager._aborted = [AbortedTxn(PID, 0, 2)]
    manager._aborted_ends = [3]
    assert "aborted marker offsets [3] are not the transactions'" in _broken(manager)


def test_a_negative_end_offset_is_named() -> None:
    manager = ProducerStateManager()
    manager._end_offset = -1
    assert "end offset -1 < 0" in _broken(manager)
