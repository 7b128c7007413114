"""``Sequencer.check_invariants``: quiet on the paths the sequencing core takes (send, ack,
retry, failure and epoch bump, exhaustion), and a state poked to break each rule raises
``SequencerInvariantError`` naming the rule."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from cluster.client._sequencing import (
    MAX_IN_FLIGHT,
    MAX_PRODUCER_EPOCH,
    PartitionSequences,
    Sequencer,
    SequencerInvariantError,
)
from lograft.protocol.errors import InvariantError, LograftError, NetworkError
from lograft.protocol.topic_partition import TopicPartition

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)

TP = TopicPartition("t", 0)


@dataclass(eq=False)
class Batch:
    """A batch as the core sees it (identity equality, like the producer's batches)."""

    record_count: int = 1
    tp: TopicPartition = TP
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    stamped: bool = False
    in_flight: bool = False
    resolved: bool = False
    follows_acked: bool = False
    maybe_written: bool = False


def _sequencer(
    batches: int = 3, epoch: int = 0
) -> tuple[Sequencer, PartitionSequences, list[Batch]]:
    """Producer 7 at ``epoch`` with ``batches`` of 1, 2, 3, ... records sent on TP."""
    sequencer = Sequencer(logger=CORE_LOG)
    sequencer.check_invariants()
    sequencer.set_producer_id(7, epoch)
    sequences = sequencer.partition(TP)
    sequencer.restart(TP, sequences)
    sent = [Batch(record_count=n + 1) for n in range(batches)]
    for batch in sent:
        sequencer.assign(sequences, batch)
        sequencer.check_invariants()
    return sequencer, sequences, sent


def _broken(sequencer: Sequencer) -> str:
    with pytest.raises(SequencerInvariantError) as raised:
        sequencer.check_invariants()
    return str(raised.value)


def test_the_error_is_an_invariant_error_never_a_wire_error() -> None:
    assert issubclass(SequencerInvariantError, InvariantError)
    assert not issubclass(SequencerInvariantError, LograftError)


def test_the_normal_paths_keep_the_invariants() -> None:
    sequencer, sequences, sent = _sequencer(MAX_IN_FLIGHT)
    sequencer.resolve(sent[1], acked=True)  # out of order: stays in the window
    sequencer.check_invariants()
    assert sequencer.on_error(sent[0], NetworkError("lost"))
    sent[0].in_flight = False  # waits for its retry
    sequencer.check_invariants()
    sequencer.assign(sequences, sent[0])  # the retry keeps its sequence
    sequencer.resolve(sent[0], acked=True)
    sequencer.check_invariants()
    for batch in sent[2:]:
        sequencer.resolve(batch, acked=False)  # failed for good: the sequence is broken
        sequencer.check_invariants()
    assert not sequences.window and sequences.needs_bump
    bump = sequencer.restart(TP, sequences)
    assert bump is not None and bump.producer_epoch == 1
    sequencer.check_invariants()
    sequencer.assign(sequences, Batch(record_count=2))
    sequencer.check_invariants()


def test_a_restart_re_sequences_the_waiting_batches_consecutively() -> None:
    sequencer, sequences, sent = _sequencer(3)
    for batch in sent:
        batch.in_flight = batch.maybe_written = False  # the leader does not hold them
    sequencer.resolve(sent[0], acked=False)
    sequencer.check_invariants()
    assert sequencer.restart(TP, sequences) is not None
    assert [b.base_sequence for b in sequences.window] == [0, 2]
    sequencer.check_invariants()


def test_an_exhausted_epoch_drops_the_identity_whole() -> None:
    sequencer, sequences, sent = _sequencer(1, epoch=MAX_PRODUCER_EPOCH)
    sequencer.resolve(sent[0], acked=False)
    bump = sequencer.restart(TP, sequences)
    assert bump is not None and bump.producer_id == -1
    sequencer.check_invariants()
    sequencer.set_producer_id(8, 0)
    sequencer.restart(TP, sequences)
    sequencer.check_invariants()


def test_a_half_set_identity_or_an_epoch_past_int16_is_named() -> None:
    sequencer, _, _ = _sequencer(0)
    sequencer.producer_epoch = -1
    assert "producer identity (7, -1) is half set" in _broken(sequencer)
    sequencer.producer_epoch = MAX_PRODUCER_EPOCH + 1
    assert "producer epoch 32768 is past int16" in _broken(sequencer)


def test_a_window_over_the_limit_is_named() -> None:
    sequencer, sequences, _ = _sequencer(MAX_IN_FLIGHT)
    sequencer.assign(sequences, Batch())  # what may_send refuses
    assert f"t-0: {MAX_IN_FLIGHT + 1} batches in the window" in _broken(sequencer)


def test_a_window_starting_with_a_resolved_batch_is_named() -> None:
    sequencer, sequences, _ = _sequencer(2)
    sequences.window[0].resolved = True
    assert "t-0: the window starts with a resolved batch" in _broken(sequencer)


def test_sequences_not_consecutive_or_not_ending_at_the_next_are_named() -> None:
    sequencer, sequences, sent = _sequencer(3)  # sequences 0, 1, 3; next 6
    sent[1].base_sequence = 2
    assert "batch at sequence 2 of 2 records where 1 follows (next sequence 6)" in _broken(
        sequencer
    )
    sent[1].base_sequence = 1
    sequences.next_sequence = 7
    assert "batch at sequence 0 of 1 records where 1 follows" in _broken(sequencer)


def test_an_acknowledged_sequence_at_or_past_the_next_is_named() -> None:
    sequencer, sequences, _ = _sequencer(1)
    sequences.last_acked_sequence = sequences.next_sequence
    assert "last acknowledged sequence 1, next 1" in _broken(sequencer)


def test_a_batch_under_another_identity_or_a_newer_epoch_is_named() -> None:
    sequencer, sequences, sent = _sequencer(2)
    sent[1].producer_epoch = 1
    assert "t-0: batch of t-0 under 7/1 in the window of (7, 0)" in _broken(sequencer)
    sent[1].producer_epoch = 0
    sequences.producer_epoch = 1
    assert "t-0: epoch 1 is newer than the producer's 0" in _broken(sequencer)


def test_a_resolved_batch_in_flight_is_named() -> None:
    sequencer, _, sent = _sequencer(2)
    sent[1].resolved = True
    assert "t-0: resolved batch 1 in flight" in _broken(sequencer)
