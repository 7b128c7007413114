"""The idempotent producer's sequencing, as a pure core (Kafka's ``TransactionManager``
without transactions).

It holds the producer id and epoch and, per partition, the batch sequences
(``PartitionSequences``, Kafka's ``TxnPartitionEntry``), and answers the sender's questions:

* ``may_send``: may the partition's head batch join a request now? A batch sent before goes
  only as its partition's oldest unresolved batch, alone, with nothing of the partition in
  flight (and, once the sequence is broken, only if it may have been written). A new batch
  waits while the partition has batches to retry, a broken sequence, a full window or
  sequences of an old epoch; and until the broker has acknowledged a batch of this epoch,
  the partition has at most one request in flight.
* ``assign``: a batch leaves for the broker. Its first time it gets the partition's next
  sequence (base sequence, ``+ record count`` per batch, kept without wrapping; the header
  carries it modulo 2**31, see ``header_sequence``) and joins the partition's *window*; a
  retry keeps its sequence, so the leader answers a duplicate with its original offset.
  From then on the batch *may have been written* under that sequence.
* ``resolve``: a sequenced batch has its final outcome. Written: the partition's last
  acknowledged sequence moves on. Failed for good: nobody knows which sequence the broker
  expects next, so the partition ``needs_bump``.
* ``retriable``: ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for a batch sent while its predecessor was
  unresolved means the request overtook it (gRPC may reorder the requests of a channel):
  retry. Sent right after an acknowledged batch, it is a real gap: the leader lost
  sequences it had acknowledged (an unclean election, a power loss under
  ``flush.policy=interval``). Any other error keeps its own flag; a fenced or invalid epoch
  is not retriable and breaks the sequence the same way.
  ``on_error`` answers for a sequenced batch and also records what the error proves: the
  leader looks a batch up among the producer's last five before it checks the sequence, so
  ``OUT_OF_ORDER_SEQUENCE_NUMBER`` means it does not hold the batch. An idempotent producer
  then retries a real gap too (Kafka's KIP-360): the partition's sequence is broken, so the
  batch goes again re-sequenced under a new epoch, instead of failing. A transactional
  producer fails it (its transaction must abort). ``error_giving_up``: a batch that may not
  go again although the error let it (``delivery.timeout.ms`` or ``retries`` ran out) fails
  with that error, except ``OUT_OF_ORDER_SEQUENCE_NUMBER``, which only asked for a resend:
  it fails as timed out.
* ``restart``: bump the epoch locally (KIP-360; a new producer id, from InitProducerId, once
  the epoch is exhausted) and restart a broken partition at sequence 0, re-sequencing the
  batches that wait for a retry, once nothing of it is in flight and none of those batches
  may have been written (below). If every sequence sent was acknowledged after all (the
  batch that failed had been written), the sequence is whole: no bump. A partition whose
  sequences belong to an older epoch restarts too, once it has no unresolved batch.

Resolving before a bump (Kafka's unresolved sequences, KIP-360, and KAFKA-14034): a batch
that may have been written (its response was lost, or it timed out) must not be given a new
epoch and sequence, or the leader would write it a second time. So a broken partition first
retries its oldest unresolved batch under its original producer id, epoch and sequence,
alone, until it is resolved (acknowledged, answered as a duplicate, or failed for good by
``retries`` or ``delivery.timeout.ms``) or the leader answers that it does not hold it;
then the next one. The leader appends a producer's batches only in sequence, so once the
oldest unresolved batch is known not to be written and will not go again under its
sequence, no later batch can be written either: those are the batches a restart
re-sequences. Kafka gets the same from in-order responses (a lost response fails every
later request on the connection); gRPC may answer a later request first.

The window: the leader remembers a producer's last five batches per partition, so a retry is
recognised as a duplicate only if at most four later batches were written after it. Kafka
gets that from in-order responses; here no batch is sent more than four batches after its
partition's oldest unresolved one (answers may come back out of order, so counting
unresolved batches would not do).

No clock, socket, thread or I/O: state in, decisions out. Not thread-safe: the producer
calls it under its lock.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from lograft.protocol.errors import (
    InvariantError,
    LograftError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
)
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_PRODUCER_EPOCH",
    "SEQUENCE_MODULUS",
    "EpochBump",
    "PartitionSequences",
    "SequencedBatch",
    "Sequencer",
    "SequencerInvariantError",
]

MAX_IN_FLIGHT = 5
"""Kafka's limit on ``max.in.flight.requests.per.connection`` for an idempotent producer,
and here also on a partition's sequence window (its oldest unresolved batch and every batch
sequenced after it): the leader remembers the last five batches of a producer, so a retried
batch is recognised as a duplicate only if at most four later batches were written after
it. Kafka gets that from in-order responses; gRPC may answer a later request first."""
SEQUENCE_MODULUS = 2**31
"""Batch sequences are int32 and wrap from 2**31 - 1 to 0."""
MAX_PRODUCER_EPOCH = 2**15 - 1
"""Producer epochs are int16: past this one the producer must get a new producer id."""


class SequencerInvariantError(InvariantError):
    """A sequencing invariant is broken (:meth:`Sequencer.check_invariants`): the producer's
    bookkeeping no longer says which sequences may have been written."""


class SequencedBatch(Protocol):
    """What sequencing reads and writes on a batch (the producer's batch has these fields).

    ``base_sequence`` is -1 until the batch is first sent; then it holds the sequence
    without wrapping and ``producer_id``/``producer_epoch`` the identity it was sequenced
    under. ``stamped`` says whether the batch's bytes carry those values yet.
    ``follows_acked`` is whether the batch before it had been acknowledged when this
    attempt was sent. ``maybe_written`` is whether an attempt under its current sequence may
    have been written: set when an attempt goes, cleared when the leader answers that it
    does not hold the batch, and when the batch is re-sequenced.
    """

    tp: TopicPartition
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    stamped: bool
    in_flight: bool
    resolved: bool
    follows_acked: bool
    maybe_written: bool


class PartitionSequences:
    """The idempotence bookkeeping of one partition (Kafka's ``TxnPartitionEntry``).

    ``window`` holds, in sequence order, the oldest batch that has a sequence and no final
    outcome (in flight or waiting for a retry) and every batch sequenced after it, resolved
    or not; it is empty when every sequenced batch is resolved. Sequences are kept without
    wrapping.
    """

    __slots__ = (
        "last_acked_sequence",
        "needs_bump",
        "next_sequence",
        "producer_epoch",
        "producer_id",
        "window",
    )

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.window: deque[SequencedBatch] = deque()
        self.needs_bump = False
        """A sequenced batch failed for good, so the broker's sequence for this partition
        may have a gap: restart at sequence 0 under a new epoch once nothing of the
        partition is in flight and no batch waiting for a retry may have been written."""

    def in_flight(self) -> int:
        """How many of the partition's batches are in flight."""
        return sum(1 for b in self.window if b.in_flight)

    def waiting_for_retry(self) -> bool:
        """Whether a batch sent before waits in the queue to be sent again."""
        return any(not b.in_flight and not b.resolved for b in self.window)

    def oldest_may_be_written(self) -> bool:
        """Whether the oldest unresolved batch may have been written under its sequence.

        If it cannot have been, no later batch can (the leader appends in sequence), so a
        restart may re-sequence every unresolved batch. Call after ``trim``.
        """
        return bool(self.window) and self.window[0].maybe_written

    def trim(self) -> None:
        """Drop resolved batches from the front of the window."""
        while self.window and self.window[0].resolved:
            self.window.popleft()


@dataclass(frozen=True, slots=True)
class EpochBump:
    """``restart`` bumped the producer epoch because ``tp``'s sequence broke.

    ``producer_id`` is -1 when the epoch was exhausted: a new producer id is needed.
    """

    tp: TopicPartition
    producer_id: int
    producer_epoch: int


class Sequencer:
    """Producer id, epoch and every partition's sequences; see the module docstring.

    ``logger`` is the producer's (a pure core creates none).
    """

    __slots__ = ("_log", "partitions", "producer_epoch", "producer_id", "transactional")

    def __init__(self, transactional: bool = False, *, logger: logging.Logger) -> None:
        self._log = logger
        self.producer_id = -1
        self.producer_epoch = -1
        self.partitions: dict[TopicPartition, PartitionSequences] = {}
        self.transactional = transactional
        """A transactional producer never bumps its epoch itself: only its coordinator
        does (at the end of each transaction), so a broken partition waits for that."""

    @property
    def has_producer_id(self) -> bool:
        """Whether InitProducerId has given (or a bump has kept) a producer id."""
        return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        """The identity InitProducerId gave."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch

    def partition(self, tp: TopicPartition) -> PartitionSequences:
        """``tp``'s sequences, created on first use."""
        sequences = self.partitions.get(tp)
        if sequences is None:
            sequences = self.partitions[tp] = PartitionSequences()
        return sequences

    def restart(self, tp: TopicPartition, sequences: PartitionSequences) -> EpochBump | None:
        """Restart a partition's sequences at 0 under the current producer id and epoch.

        Once nothing of the partition is in flight: when its sequence is broken
        (``needs_bump``) and none of the batches waiting for a retry may have been written
        (those go again under their own sequence first), after bumping the epoch (returned
        as an ``EpochBump``; with the epoch exhausted the producer id is dropped and the
        restart waits for a new one), re-sequencing the batches that wait for a retry; or
        when the producer's epoch moved on (another partition bumped it) and the partition
        has no unresolved batch left. The broker accepts a newer epoch starting at
        sequence 0. A broken partition whose every sequence sent has been acknowledged
        after all (Kafka's ``maybeResolveSequences``) is whole again: no bump.
        """
        if sequences.in_flight():
            return None
        bump: EpochBump | None = None
        current = (self.producer_id, self.producer_epoch)
        if sequences.needs_bump and sequences.oldest_may_be_written():
            return None  # retried under its own sequence first: it may be a duplicate
        if (
            sequences.needs_bump
            and not sequences.window
            and sequences.last_acked_sequence + 1 == sequences.next_sequence
        ):
            # The highest sequence sent was acknowledged, so the leader expects the next one:
            # the batch that failed had been written after all (it appends in sequence).
            self._log.debug(
                "producer sequence whole again topic=%s partition=%d next_sequence=%d",
                tp.topic,
                tp.partition,
                sequences.next_sequence,
            )
            sequences.needs_bump = False
        if sequences.needs_bump:
            if (sequences.producer_id, sequences.producer_epoch) == current and self.transactional:
                return None  # the transaction must abort; its EndTxn gives the next epoch
            if (sequences.producer_id, sequences.producer_epoch) == current and current[0] >= 0:
                if self.producer_epoch >= MAX_PRODUCER_EPOCH:
                    self.producer_id = self.producer_epoch = -1
                else:
                    self.producer_epoch += 1
                bump = EpochBump(tp, self.producer_id, self.producer_epoch)
            if self.producer_id < 0:
                return bump  # InitProducerId first
        elif (
            (sequences.producer_id, sequences.producer_epoch) == current
            or current[0] < 0
            or sequences.window
        ):
            return None
        sequences.producer_id = self.producer_id
        sequences.producer_epoch = self.producer_epoch
        sequences.next_sequence = 0
        sequences.last_acked_sequence = -1
        sequences.needs_bump = False
        sequences.window = deque(b for b in sequences.window if not b.resolved)
        for batch in sequences.window:
            self._sequence(sequences, batch)
        return bump

    def may_send(
        self,
        sequences: PartitionSequences,
        batch: SequencedBatch,
        taken: int,
        in_flight_before: int,
        joins_request: bool,
    ) -> bool:
        """Whether the partition's head ``batch`` may join a request now.

        ``taken``: batches of the partition already taken into requests in this drain;
        ``in_flight_before``: the partition's batches in flight before it;
        ``joins_request``: whether ``batch`` would go in the request that carries the batches
        taken (it is open and has room), rather than start another.

        A batch sent before goes only as the partition's first unresolved batch, alone and
        with nothing else of the partition in flight; once the partition's sequence is
        broken, only if it may have been written (otherwise it waits for the restart to
        give it a new sequence). A new batch waits while the partition has batches to
        retry, a broken sequence, a full window (five batches from the oldest unresolved
        one) or sequences of an old epoch. Until the broker has acknowledged one batch of
        this producer epoch, the partition has at most one request in flight: a broker that
        does not know the producer yet accepts any sequence, so a second request overtaking
        the first could leave a gap.
        """
        if batch.base_sequence >= 0:
            return (
                taken == 0
                and in_flight_before == 0
                and bool(sequences.window)
                and sequences.window[0] is batch
                and (batch.maybe_written or not sequences.needs_bump)
            )
        if (
            self.producer_id < 0
            or sequences.needs_bump
            or (sequences.producer_id, sequences.producer_epoch)
            != (self.producer_id, self.producer_epoch)
            or len(sequences.window) >= MAX_IN_FLIGHT
            or sequences.waiting_for_retry()
        ):
            return False
        if sequences.last_acked_sequence < 0:
            if in_flight_before:
                return False
            if taken and not joins_request:
                return False  # the next request would be the partition's second
        return True

    def assign(self, sequences: PartitionSequences, batch: SequencedBatch) -> None:
        """Mark ``batch`` in flight, giving it the partition's next sequence if it has none."""
        if batch.base_sequence < 0:
            self._sequence(sequences, batch)
            sequences.window.append(batch)
        batch.in_flight = True
        batch.maybe_written = True
        batch.follows_acked = sequences.last_acked_sequence + 1 == batch.base_sequence

    def resolve(self, batch: SequencedBatch, acked: bool) -> None:
        """A sequenced batch has its final outcome: written (``acked``) or failed for good."""
        batch.in_flight = False
        if batch.resolved:
            return
        batch.resolved = True
        sequences = self.partitions.get(batch.tp)
        if sequences is None or batch not in sequences.window:
            return  # sequenced under an identity the partition has left behind
        if acked:
            last = batch.base_sequence + batch.record_count - 1
            sequences.last_acked_sequence = max(sequences.last_acked_sequence, last)
        else:
            # Written or not, nobody knows which sequence the broker expects next.
            sequences.needs_bump = True
        sequences.trim()

    def on_error(self, batch: SequencedBatch, error: LograftError) -> bool:
        """An attempt of a sequenced ``batch`` failed with ``error``: may the batch go again?

        Answers as ``retriable``, and records what the error proves. The leader looks a
        batch up among the producer's last five (the window keeps a written batch among
        them) before checking its sequence, so OUT_OF_ORDER_SEQUENCE_NUMBER means the leader
        does not hold it, and no earlier attempt wrote it: the batch is not written. Any
        other error proves nothing (a lost response or a timeout may follow a write, and an
        earlier attempt may have been written).

        OUT_OF_ORDER_SEQUENCE_NUMBER right after an acknowledged batch (a real gap: the
        leader lost sequences it had acknowledged) breaks the partition's sequence, and an
        idempotent producer retries the batch: ``restart`` bumps the epoch and re-sequences
        it from 0 once nothing of the partition is in flight (Kafka's KIP-360). A
        transactional producer fails it, as ``retriable`` says.
        """
        if isinstance(error, OutOfOrderSequenceNumberError) and batch.base_sequence >= 0:
            batch.maybe_written = False
            sequences = self.partitions.get(batch.tp)
            if (
                batch.follows_acked
                and not self.transactional
                and sequences is not None
                and batch in sequences.window
            ):
                self._log.info(
                    "leader lost acknowledged sequences, restarting under a new epoch "
                    "topic=%s partition=%d producer_id=%d producer_epoch=%d base_sequence=%d "
                    "error=%s",
                    batch.tp.topic,
                    batch.tp.partition,
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    error,
                )
                sequences.needs_bump = True
                return True
        return self.retriable(batch, error)

    @staticmethod
    def retriable(batch: SequencedBatch, error: LograftError) -> bool:
        """Whether ``error`` lets ``batch`` be sent again.

        OUT_OF_ORDER_SEQUENCE_NUMBER for a sequenced batch is retriable when the batch was
        sent before its predecessor was acknowledged: the predecessor was in flight (or
        being retried) and the request overtook it, so the batch goes again once the
        predecessor is resolved. Sent right after an acknowledged batch, it means the broker
        lost sequences: not retriable as it stands (``on_error`` retries it under a new
        epoch for an idempotent producer; a transactional one fails it).
        """
        if isinstance(error, OutOfOrderSequenceNumberError) and batch.base_sequence >= 0:
            return not batch.follows_acked
        return error.retriable

    @staticmethod
    def error_giving_up(batch: SequencedBatch, error: LograftError) -> LograftError:
        """What ``batch`` fails with when ``error`` let it go again but it may not
        (``delivery.timeout.ms`` or ``retries`` ran out, or the producer closed).

        ``error`` itself, as Kafka reports a batch's last retriable error, except
        OUT_OF_ORDER_SEQUENCE_NUMBER: that answer only asked for a resend (after the
        predecessor the request overtook, or re-sequenced under a new epoch), so the
        batch fails as timed out, with the leader's answer in the message. It is what a
        batch right after one that ran out of time gets: it may have been written, so it
        goes once more under its own sequence, and the leader answers that it does not
        hold the predecessor.
        """
        if isinstance(error, OutOfOrderSequenceNumberError) and batch.base_sequence >= 0:
            return RequestTimedOutError(
                f"gave up on {batch.record_count} records for {batch.tp.topic}-"
                f"{batch.tp.partition} (delivery.timeout.ms or retries ran out) before they "
                f"could be sent again after {error}"
            )
        return error

    @staticmethod
    def header_sequence(batch: SequencedBatch) -> int:
        """The ``baseSequence`` the batch's header carries: its sequence modulo 2**31."""
        return batch.base_sequence % SEQUENCE_MODULUS

    def check_invariants(self) -> None:
        """Raise :class:`SequencerInvariantError` if the state breaks a rule of this module.

        Reads the state only; a simulation calls it after every step. The producer id is
        ``-1`` exactly when the epoch is (no identity), else ``>= 0`` with the epoch in
        ``0..MAX_PRODUCER_EPOCH``; each partition is checked by :meth:`_check_partition`.
        """
        identity = (self.producer_id, self.producer_epoch)
        if (self.producer_id < 0 or self.producer_epoch < 0) and identity != (-1, -1):
            raise SequencerInvariantError(f"producer identity {identity} is half set")
        if self.producer_epoch > MAX_PRODUCER_EPOCH:
            raise SequencerInvariantError(f"producer epoch {self.producer_epoch} is past int16")
        for tp, sequences in self.partitions.items():
            self._check_partition(tp, sequences)

    def _check_partition(self, tp: TopicPartition, sequences: PartitionSequences) -> None:
        """The window holds at most ``MAX_IN_FLIGHT`` batches of the partition, starting with
        an unresolved one, all under the partition's identity, their sequences consecutive
        (kept without wrapping; the headers carry them modulo 2**31) and ending at the next
        sequence; the last acknowledged sequence is below the next; resolved batches are not
        in flight; an identity of the producer's own id is not of a newer epoch."""
        where = f"{tp.topic}-{tp.partition}"
        window = sequences.window
        if len(window) > MAX_IN_FLIGHT:
            raise SequencerInvariantError(f"{where}: {len(window)} batches in the window")
        if window and window[0].resolved:
            raise SequencerInvariantError(f"{where}: the window starts with a resolved batch")
        if not -1 <= sequences.last_acked_sequence < sequences.next_sequence:
            raise SequencerInvariantError(
                f"{where}: last acknowledged sequence {sequences.last_acked_sequence}, "
                f"next {sequences.next_sequence}"
            )
        identity = (sequences.producer_id, sequences.producer_epoch)
        if identity[0] == self.producer_id and identity[1] > self.producer_epoch:
            raise SequencerInvariantError(
                f"{where}: epoch {identity[1]} is newer than the producer's {self.producer_epoch}"
            )
        expected = sequences.next_sequence - sum(b.record_count for b in window)
        for batch in window:
            if batch.tp != tp or (batch.producer_id, batch.producer_epoch) != identity:
                raise SequencerInvariantError(
                    f"{where}: batch of {batch.tp.topic}-{batch.tp.partition} under "
                    f"{batch.producer_id}/{batch.producer_epoch} in the window of {identity}"
                )
            if batch.base_sequence != expected or batch.record_count < 1 or expected < 0:
                raise SequencerInvariantError(
                    f"{where}: batch at sequence {batch.base_sequence} of {batch.record_count} "
                    f"records where {expected} follows (next sequence {sequences.next_sequence})"
                )
            if batch.resolved and batch.in_flight:
                raise SequencerInvariantError(f"{where}: resolved batch {expected} in flight")
            expected += batch.record_count

    @staticmethod
    def _sequence(sequences: PartitionSequences, batch: SequencedBatch) -> None:
        batch.producer_id = sequences.producer_id
        batch.producer_epoch = sequences.producer_epoch
        batch.base_sequence = sequences.next_sequence
        batch.stamped = False
        batch.maybe_written = False
        sequences.next_sequence += batch.record_count
