"""Idempotent-producer state of one partition: Kafka's ``ProducerStateManager``, pure.

The leader keeps, per producer id, the producer epoch, the metadata of the last five
batches the producer wrote (first and last sequence, first and last offset, max timestamp)
and the timestamp of its last batch. Before an append the leader asks
:meth:`ProducerStateManager.check_and_plan` whether a produced batch is new, a retry of a
batch already in the log, or invalid; after the append it reports the batch, with its
offsets, to :meth:`ProducerStateManager.on_appended`. Followers, and recovery, feed every
batch they append to :meth:`~ProducerStateManager.on_appended` (or
:meth:`~ProducerStateManager.rebuild_from_batches`) without checking, as Kafka does for
``AppendOrigin.REPLICATION``, so every replica holds the same state for the same log.

Nothing here reads a clock or touches a file: timestamps come in as arguments, and
:mod:`replica.producer_snapshot_codec` turns the state into snapshot bytes and back.

Rules for a produced batch (``ProducerAppendInfo`` and ``UnifiedLog`` in Kafka 3.x/4.x):

1. ``producerId == -1``: not idempotent; always passes, nothing is recorded.
2. Duplicate: the producer is known, the batch epoch equals its epoch, and one of the five
   cached batches has exactly the batch's (first sequence, last sequence). The broker
   appends nothing and answers with the cached batch's offsets
   (``ProducerStateEntry.findDuplicateBatch``). Modern Kafka answers duplicates with
   success, never ``DUPLICATE_SEQUENCE_NUMBER``. As in Kafka, duplicates are looked up in
   the state of the log (batches already appended), not among earlier batches of the same
   request.
3. Epoch older than the known epoch: ``INVALID_PRODUCER_EPOCH``
   (:class:`~lograft.protocol.errors.InvalidProducerEpochError`). Kafka answered
   ``PRODUCER_FENCED`` for this before 2.7; KIP-588 (2.7) changed the produce path to
   ``INVALID_PRODUCER_EPOCH``, which this module follows.
4. Epoch newer than the known epoch: the batch must start at sequence 0, else
   ``OUT_OF_ORDER_SEQUENCE_NUMBER``. The new epoch replaces the old one and clears the
   cached batches.
5. Same epoch: the first sequence must be the last sequence + 1, where sequence
   2**31 - 1 is followed by 0 (``ProducerAppendInfo.inSequence``), else
   ``OUT_OF_ORDER_SEQUENCE_NUMBER``.
6. Unknown producer id (no state at all, whatever the sequence): accepted, and the batch
   starts the producer's state. This is Kafka since KIP-360 (2.5): the broker no longer
   answers ``UNKNOWN_PRODUCER_ID``, because it cannot tell a producer it never saw from one
   whose state expired (``producer.id.expiration.ms``) or whose batches were all deleted;
   a fresh idempotent producer always starts at sequence 0, so a non-zero first sequence
   means the state is gone, not that data is missing. (Kafka's only exception is a
   transactions-v2 producer in a verified transaction, which does not exist here.)

Several batches of one request are checked in order: pass the plans of the earlier batches
of the request to :meth:`~ProducerStateManager.check_and_plan` (or use
:meth:`~ProducerStateManager.check_batches`), so the second batch of a producer must
follow the first. A batch that fails fails the request; nothing is recorded by checking.

The last sequence of a batch is ``baseSequence + lastOffsetDelta`` wrapped at 2**31, as
Kafka's ``DefaultRecordBatch.incrementSequence``. The producer's "last timestamp", used for
expiry, is the batch's ``maxTimestamp`` (as Kafka's ``ProducerStateEntry.lastTimestamp``):
it is in the log, so replicas and recovery agree on it, which a broker clock would not.

Recovery: the shell loads the newest snapshot (its :attr:`~ProducerStateManager.end_offset`
is the log end offset it covers) and replays the log from there with
:meth:`~ProducerStateManager.rebuild_from_batches`. Producer state is not dropped when
retention deletes segments (KIP-360); producers idle for ``producer.id.expiration.ms``
(default 86400000) are removed by :meth:`~ProducerStateManager.expire_producers`.
"""

# Over 600 lines: one state machine (Kafka's ProducerStateManager) owned by one file.
from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final, NoReturn

from lograft.protocol.batch_header import BatchHeader
from lograft.protocol.control_records import EndTxnMarker
from lograft.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    InvariantError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "MAX_SEQUENCE",
    "NO_COORDINATOR_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NUM_BATCHES_TO_RETAIN",
    "AbortedTxn",
    "AppendPlan",
    "BatchMetadata",
    "CompletedTxn",
    "Duplicate",
    "MarkerReader",
    "ProducerEntry",
    "ProducerStateInvariantError",
    "ProducerStateManager",
    "last_sequence",
]

NO_PRODUCER_ID: Final = -1
"""The producer id of a batch without one (not idempotent), as on the wire."""
NO_PRODUCER_EPOCH: Final = -1
"""The producer epoch of a batch without a producer id, as on the wire."""
NUM_BATCHES_TO_RETAIN: Final = 5
"""Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``: at most five requests in flight."""
MAX_SEQUENCE: Final = 2**31 - 1
"""Sequences are int32 and wrap from this one to 0."""
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000
"""Kafka's ``producer.id.expiration.ms`` default (one day)."""
NO_COORDINATOR_EPOCH: Final = -1
"""The coordinator epoch of a producer with no transaction marker written yet (Kafka's -1)."""


class ProducerStateInvariantError(InvariantError):
    """A producer state invariant is broken
    (:meth:`ProducerStateManager.check_invariants`); the node halts (never answered)."""


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: ``base + delta`` wrapped past 2**31 - 1 to 0."""
    return (base_sequence + last_offset_delta) % (MAX_SEQUENCE + 1)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's ``inSequence``: ``next`` directly follows ``last``, 2**31 - 1 wrapping to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer, as cached for duplicate detection."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What the partition knows of one producer.

    ``batches`` holds the producer's last one to five batches of ``producer_epoch``, oldest
    first; it is empty only after a transaction marker moved the producer to a new epoch
    (the next batch of that epoch must then start at sequence 0). ``last_timestamp`` is the
    max timestamp of its last batch or marker. ``current_txn_first_offset`` is the first
    offset of the producer's open transaction on this partition (None: none open);
    ``coordinator_epoch`` that of the transaction coordinator whose marker came last.
    """

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    last_timestamp: int
    current_txn_first_offset: int | None = None
    coordinator_epoch: int = NO_COORDINATOR_EPOCH

    @property
    def last_seq(self) -> int:
        """The last sequence written in this epoch, -1 if none yet."""
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        """The offset of the producer's last cached batch, -1 if none."""
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with this epoch and exact sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def with_batch(self, epoch: int, batch: BatchMetadata) -> ProducerEntry:
        """This entry after ``batch``: a new epoch clears the cache; keeps the last five."""
        kept = self.batches if epoch == self.producer_epoch else ()
        batches = (*kept, batch)[-NUM_BATCHES_TO_RETAIN:]
        return replace(
            self, producer_epoch=epoch, batches=batches, last_timestamp=batch.max_timestamp
        )


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """A batch that may be appended. ``producer_id == -1``: not idempotent, no checks.

    Pass it among ``earlier`` to check the next batch of the same request.
    ``starts_transaction``: the batch is transactional and its producer has no transaction
    open on this partition; the leader must verify with the transaction coordinator that
    the partition was added to the transaction (KIP-890) before appending it.
    """

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    is_transactional: bool = False
    starts_transaction: bool = False

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended on this partition: its data starts at ``first_offset``,
    its marker sits at ``last_offset``. Kept until the high watermark passes the marker:
    until then the transaction still holds back the last stable offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: a ``read_committed`` reader drops the producer's batches
    from ``first_offset`` up to the marker at ``last_offset`` (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int


MarkerReader = Callable[[BatchHeader], EndTxnMarker | None]
"""Reads the marker of a control batch from the log (None: a control record of another
type), for replaying the log into the state."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a batch already in the log: append nothing, answer with ``original``."""

    producer_id: int
    original: BatchMetadata

    @property
    def first_offset(self) -> int:
        return self.original.first_offset

    @property
    def last_offset(self) -> int:
        return self.original.last_offset


def _check_header_fields(header: BatchHeader) -> None:
    if header.producer_id == NO_PRODUCER_ID:
        return
    if header.producer_id < 0:
        raise InvalidRecordError(f"invalid producer id {header.producer_id}")
    if header.producer_epoch < 0:
        raise InvalidRecordError(
            f"producer {header.producer_id} sent invalid epoch {header.producer_epoch}"
        )
    if header.base_sequence < 0:
        raise InvalidRecordError(
            f"producer {header.producer_id} sent invalid sequence {header.base_sequence}"
        )
    if header.last_offset_delta < 0:
        raise InvalidRecordError(f"invalid lastOffsetDelta {header.last_offset_delta}")


class ProducerStateManager:
    """Producer ids, epochs and the last five batch sequences of one partition.

    Mutable, single-threaded (the partition's owner calls it), pure: no I/O, no clock.
    :attr:`end_offset` is the log end offset the state covers: every batch below it has
    been applied.
    """

    __slots__ = (
        "_aborted",
        "_aborted_ends",
        "_completed",
        "_end_offset",
        "_entries",
        "_expiration_ms",
        "_open_txns",
    )

    def __init__(
        self,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        end_offset: int = 0,
    ) -> None:
        """An empty state covering a log that ends (or starts) at ``end_offset``."""
        if producer_id_expiration_ms < 0:
            raise ValueError(f"producer.id.expiration.ms={producer_id_expiration_ms} < 0")
        if end_offset < 0:
            raise ValueError(f"negative end offset {end_offset}")
        self._expiration_ms = producer_id_expiration_ms
        self._end_offset = end_offset
        self._entries: dict[int, ProducerEntry] = {}
        # Each producer's open transaction: producer id -> first offset (an index of the
        # entries' current_txn_first_offset, so the LSO costs nothing without transactions).
        self._open_txns: dict[int, int] = {}
        # Transactions ended by a marker the high watermark has not passed yet.
        self._completed: list[CompletedTxn] = []
        # Aborted transactions, in marker order; ``_aborted_ends`` their marker offsets.
        self._aborted: list[AbortedTxn] = []
        self._aborted_ends: list[int] = []

    # ---- reading ---------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The log end offset covered: the next offset :meth:`on_appended` expects."""
        return self._end_offset

    @property
    def producer_id_expiration_ms(self) -> int:
        return self._expiration_ms

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The state of ``producer_id``, or None if unknown."""
        return self._entries.get(producer_id)

    def entries(self) -> Mapping[int, ProducerEntry]:
        """A read-only view of every producer's state, by producer id."""
        return MappingProxyType(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateManager):
            return NotImplemented
        return (
            self._end_offset == other._end_offset
            and self._entries == other._entries
            and self._completed == other._completed
            and self._aborted == other._aborted
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager(end_offset={self._end_offset}, producers={len(self._entries)})"
        )

    # ---- the produce path ------------------------------------------------------------------

    def check_and_plan(
        self, header: BatchHeader, earlier: Sequence[AppendPlan] = ()
    ) -> AppendPlan | Duplicate:
        """Check a produced batch before it is appended; changes nothing.

        ``earlier`` are the plans of the batches before this one in the same request (in
        order); the batch must follow them. Returns a :class:`Duplicate` (append nothing,
        answer with its offsets) or an :class:`AppendPlan`. Raises
        ``InvalidProducerEpochError``, ``OutOfOrderSequenceNumberError``, or
        ``InvalidRecordError`` for a negative epoch or sequence with a producer id. See the
        module docstring for the rules.
        """
        _check_header_fields(header)
        producer_id = header.producer_id
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        last_seq = last_sequence(first_seq, header.last_offset_delta)
        if producer_id == NO_PRODUCER_ID:
            return AppendPlan(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, -1, -1)
        entry = self._entries.get(producer_id)
        if entry is not None:
            duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
            if duplicate is not None:
                return Duplicate(producer_id, duplicate)
        # The producer's state as the earlier batches of this request leave it.
        current_epoch = NO_PRODUCER_EPOCH if entry is None else entry.producer_epoch
        current_last_seq = -1 if entry is None else entry.last_seq
        in_transaction = entry is not None and entry.current_txn_first_offset is not None
        for previous in earlier:
            if previous.producer_id == producer_id:
                current_epoch = previous.producer_epoch
                current_last_seq = previous.last_seq
                in_transaction = in_transaction or previous.is_transactional
        where = f"producer {producer_id} at offset {self._end_offset}"
        if in_transaction and not header.is_transactional:
            raise InvalidTxnStateError(
                f"{where} has a transaction open here and sent a non-transactional batch"
            )
        plan = AppendPlan(
            producer_id,
            epoch,
            first_seq,
            last_seq,
            is_transactional=header.is_transactional,
            starts_transaction=header.is_transactional and not in_transaction,
        )
        if current_epoch == NO_PRODUCER_EPOCH:
            return plan  # unknown producer: any sequence (KIP-360)
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"epoch of {where} is {epoch}, older than the last seen epoch {current_epoch}"
            )
        if epoch > current_epoch or current_last_seq == -1:
            # A new epoch, or the first batch of the epoch a transaction marker moved to.
            if first_seq != 0:
                raise OutOfOrderSequenceNumberError(
                    f"invalid sequence for new epoch of {where}: {epoch} (request epoch), "
                    f"{first_seq} (sequence), {current_epoch} (current epoch)"
                )
            return plan
        if not _in_sequence(current_last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence for {where}: {first_seq} (incoming sequence), "
                f"{current_last_seq} (current end sequence)"
            )
        return plan

    def check_batches(self, headers: Iterable[BatchHeader]) -> list[AppendPlan | Duplicate]:
        """:meth:`check_and_plan` for each batch of one request, each seeing the ones before."""
        results: list[AppendPlan | Duplicate] = []
        plans: list[AppendPlan] = []
        for header in headers:
            result = self.check_and_plan(header, plans)
            results.append(result)
            if isinstance(result, AppendPlan) and result.is_idempotent:
                plans.append(result)
        return results

    def check_coordinator_write(self, producer_id: int, producer_epoch: int) -> None:
        """Check a batch a coordinator writes for a producer (Kafka's
        ``AppendOrigin.COORDINATOR``: a ``TxnOffsetCommit``): only its epoch, which must not
        be older than the producer's here (a fenced producer's commit is refused with
        ``INVALID_PRODUCER_EPOCH``)."""
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidRecordError(
                f"coordinator batch for producer {producer_id} epoch {producer_epoch}"
            )
        entry = self._entries.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {producer_epoch} of producer {producer_id} is older than its epoch "
                f"{entry.producer_epoch} here"
            )

    def check_marker(self, producer_id: int, producer_epoch: int, marker: EndTxnMarker) -> bool:
        """Whether a leader appends this transaction marker (False: it is stale; skip it).

        A marker carries the epoch the coordinator bumped to when it decided, so it must be
        newer than every epoch the producer wrote here (KIP-1228). A marker at or below the
        producer's epoch here is a late duplicate of one already written: the producer only
        writes with the bumped epoch once every marker of the transaction is in. Appending it
        would end the producer's *next* transaction. Raises
        ``TransactionCoordinatorFencedError`` for a marker from an older coordinator than the
        last one that wrote here, ``InvalidProducerEpochError`` for a negative epoch.
        """
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} with epoch {producer_epoch}"
            )
        entry = self._entries.get(producer_id)
        if entry is None:
            return True
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch "
                f"{marker.coordinator_epoch}, older than {entry.coordinator_epoch}"
            )
        return producer_epoch > entry.producer_epoch

    def on_appended(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> None:
        """Record a batch just written to the log, with its offsets assigned.

        ``marker``: the transaction marker a control batch holds (None for data, or for a
        control record of another type). No checks (the leader checked before appending; a
        follower or recovery trusts the log, as Kafka's ``AppendOrigin.REPLICATION``): a
        different epoch, older or newer, replaces the producer's epoch and clears its cache.
        Every batch moves :attr:`end_offset`; batches without a producer id record nothing
        else. Raises ``ValueError`` if the batch starts below :attr:`end_offset` (already
        applied).
        """
        if header.base_offset < self._end_offset:
            raise ValueError(
                f"batch at offset {header.base_offset} is below the producer state end "
                f"offset {self._end_offset}"
            )
        self._apply(header, marker)

    def _apply(self, header: BatchHeader, marker: EndTxnMarker | None) -> None:
        self._end_offset = header.next_offset
        producer_id = header.producer_id
        if producer_id < 0 or header.producer_epoch < 0:
            return
        if header.is_control:
            if marker is not None:
                self._apply_marker(header, marker)
            return
        if header.base_sequence < 0:
            if header.is_transactional:
                # Written by a coordinator for the producer (TxnOffsetCommit): no sequence.
                known = self._entries.get(producer_id) or ProducerEntry(
                    producer_id, header.producer_epoch, (), header.max_timestamp
                )
                if header.producer_epoch != known.producer_epoch:
                    known = replace(known, producer_epoch=header.producer_epoch, batches=())
                if known.current_txn_first_offset is None:
                    known = replace(known, current_txn_first_offset=header.base_offset)
                    self._open_txns[producer_id] = header.base_offset
                self._entries[producer_id] = replace(known, last_timestamp=header.max_timestamp)
            return
        batch = BatchMetadata(
            first_seq=header.base_sequence,
            last_seq=last_sequence(header.base_sequence, header.last_offset_delta),
            first_offset=header.base_offset,
            last_offset=header.last_offset,
            max_timestamp=header.max_timestamp,
        )
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, header.producer_epoch, (batch,), batch.max_timestamp)
        else:
            entry = entry.with_batch(header.producer_epoch, batch)
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry = replace(entry, current_txn_first_offset=header.base_offset)
            self._open_txns[producer_id] = header.base_offset
        self._entries[producer_id] = entry

    def _apply_marker(self, header: BatchHeader, marker: EndTxnMarker) -> None:
        producer_id = header.producer_id
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, header.producer_epoch, (), header.max_timestamp)
        first_offset = entry.current_txn_first_offset
        self._open_txns.pop(producer_id, None)
        if first_offset is not None:
            aborted = not marker.committed
            self._completed.append(
                CompletedTxn(producer_id, first_offset, header.base_offset, aborted)
            )
            if aborted:
                self._aborted.append(AbortedTxn(producer_id, first_offset, header.base_offset))
                self._aborted_ends.append(header.base_offset)
        same_epoch = header.producer_epoch == entry.producer_epoch
        self._entries[producer_id] = replace(
            entry,
            producer_epoch=header.producer_epoch,
            batches=entry.batches if same_epoch else (),
            last_timestamp=header.max_timestamp,
            current_txn_first_offset=None,
            coordinator_epoch=marker.coordinator_epoch,
        )

    # ---- transactions: what readers may see -------------------------------------------------

    def in_transaction(self, producer_id: int) -> bool:
        """Whether ``producer_id`` has a transaction open on this partition."""
        return producer_id in self._open_txns

    def open_transactions(self) -> dict[int, int]:
        """Each producer with a transaction open here: producer id -> its first offset."""
        return dict(self._open_txns)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: ``read_committed`` readers see offsets below it only.

        The first offset of the oldest transaction still open, or ended by a marker the high
        watermark has not passed (a replica that takes over could lack the marker), capped
        by ``high_watermark``. Forgets ended transactions the high watermark passed.
        """
        if self._completed:
            self._completed = [txn for txn in self._completed if txn.last_offset >= high_watermark]
        stable = high_watermark
        for txn in self._completed:
            stable = min(stable, txn.first_offset)
        for first_offset in self._open_txns.values():
            stable = min(stable, first_offset)
        return stable

    def aborted_transactions(self, from_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in ``[from_offset, upper_offset)``, marker order.

        What a fetch from ``from_offset`` answering up to ``upper_offset`` hands a
        ``read_committed`` reader so it can drop the aborted batches.
        """
        start = bisect.bisect_left(self._aborted_ends, from_offset)
        return [txn for txn in self._aborted[start:] if txn.first_offset < upper_offset]

    def forget_aborted_below(self, log_start_offset: int) -> None:
        """Drop aborted transactions whose marker retention deleted (below the log start)."""
        cut = bisect.bisect_left(self._aborted_ends, log_start_offset)
        if cut:
            del self._aborted[:cut]
            del self._aborted_ends[:cut]

    # ---- recovery --------------------------------------------------------------------------

    def rebuild_from_batches(
        self, headers: Iterable[BatchHeader], read_marker: MarkerReader | None = None
    ) -> None:
        """Replay batch headers read from the log (the tail after the loaded snapshot);
        ``read_marker`` reads the marker of each control batch (a log with a control batch
        and no reader raises ``ValueError``).

        Headers wholly below :attr:`end_offset` were covered by the snapshot and are
        skipped; a batch straddling it raises ``ValueError`` (the snapshot does not match
        the log). A gap (the log starts above the snapshot, after retention) is accepted.
        """
        for header in headers:
            if header.last_offset < self._end_offset:
                continue
            if header.base_offset < self._end_offset:
                raise ValueError(
                    f"batch {header.base_offset}..{header.last_offset} straddles the "
                    f"producer state end offset {self._end_offset}"
                )
            marker = None
            if header.is_control:
                if read_marker is None:
                    raise ValueError(f"control batch at {header.base_offset} and no marker reader")
                marker = read_marker(header)
            self._apply(header, marker)

    def truncate_to(self, offset: int) -> frozenset[int]:
        """Forget every batch at or above ``offset`` (replication truncation).

        Cached batches ending at or above ``offset`` are dropped; a producer left with none
        is removed, and a producer's epoch is that of its remaining batches (the cache only
        holds one epoch). Lowers :attr:`end_offset` to ``offset`` if above.

        Returns the producers whose state may now differ from a replay of the log up to
        ``offset``: those that lost every cached batch (their older history is unknown
        here) and those whose full cache lost batches (older batches that would refill it
        are not kept). If the set is not empty, the shell gets the exact state as Kafka's
        ``truncateAndReload`` does: load the newest snapshot at or below ``offset`` and
        :meth:`rebuild_from_batches` the log from it. Producers not in the set are exact.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        inexact: set[int] = set()
        if offset < self._end_offset:
            # A marker leaves no cached batch to tell whether it was cut: a transactional
            # producer's state is replayed after any truncation of the log it covers.
            inexact.update(
                producer_id
                for producer_id, entry in self._entries.items()
                if entry.current_txn_first_offset is not None
                or entry.coordinator_epoch != NO_COORDINATOR_EPOCH
            )
        for producer_id, entry in list(self._entries.items()):
            kept = tuple(batch for batch in entry.batches if batch.last_offset < offset)
            if len(kept) == len(entry.batches):
                continue
            if not kept or len(entry.batches) == NUM_BATCHES_TO_RETAIN:
                inexact.add(producer_id)
            if kept:
                self._entries[producer_id] = replace(
                    entry, batches=kept, last_timestamp=kept[-1].max_timestamp
                )
            else:
                del self._entries[producer_id]
        self._completed = [txn for txn in self._completed if txn.last_offset < offset]
        cut = bisect.bisect_left(self._aborted_ends, offset)
        del self._aborted[cut:]
        del self._aborted_ends[cut:]
        self._end_offset = min(self._end_offset, offset)
        self._index_open_transactions()
        return frozenset(inexact)

    # ---- invariants ------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise :class:`ProducerStateInvariantError` if the state breaks a rule of this
        module. Reads the state only; a simulation calls it after every step.

        Every producer is held under its id (``>= 0``) with an epoch ``>= 0`` and at most
        :data:`NUM_BATCHES_TO_RETAIN` batches (:meth:`_check_batches`); its open
        transaction starts below :attr:`end_offset`, and the index of open transactions
        the last stable offset reads is exactly the entries' first offsets. Ended and
        aborted transactions run from their first offset to a marker below
        :attr:`end_offset`, in marker order, and the aborted ones' marker offsets are the
        index :meth:`aborted_transactions` bisects.
        """
        end = self._end_offset
        if end < 0:
            self._fail(f"end offset {end} < 0")
        for producer_id, entry in self._entries.items():
            where = f"producer {producer_id}"
            if entry.producer_id != producer_id or producer_id < 0:
                self._fail(f"{where}: holds the entry of producer {entry.producer_id}")
            if entry.producer_epoch < 0:
                self._fail(f"{where}: epoch {entry.producer_epoch} < 0")
            self._check_batches(where, entry.batches)
            first = entry.current_txn_first_offset
            if first is not None and not 0 <= first < end:
                self._fail(f"{where}: open transaction at {first}, end offset {end}")
        index = {
            producer_id: entry.current_txn_first_offset
            for producer_id, entry in self._entries.items()
            if entry.current_txn_first_offset is not None
        }
        if self._open_txns != index:
            self._fail(f"open transactions index {self._open_txns} is not the entries' {index}")
        self._check_ended("ended", self._completed)
        self._check_ended("aborted", self._aborted)
        if self._aborted_ends != [txn.last_offset for txn in self._aborted]:
            self._fail(f"aborted marker offsets {self._aborted_ends} are not the transactions'")

    def _check_batches(self, where: str, batches: tuple[BatchMetadata, ...]) -> None:
        """At most five; each within the log, its sequences in 0..2**31 - 1 and as long as
        its offsets; offsets increasing; and no more sequences skipped between two batches
        than offsets lie between them (consecutive modulo 2**31 for batches next to each
        other in the log: only other producers' batches, or batches retention deleted
        before a replay across the gap, can come between)."""
        if len(batches) > NUM_BATCHES_TO_RETAIN:
            self._fail(f"{where}: {len(batches)} batches retained")
        previous: BatchMetadata | None = None
        for batch in batches:
            first, last = batch.first_offset, batch.last_offset
            if not 0 <= first <= last < self._end_offset:
                self._fail(f"{where}: batch {first}..{last}, end offset {self._end_offset}")
            if not (0 <= batch.first_seq <= MAX_SEQUENCE and 0 <= batch.last_seq <= MAX_SEQUENCE):
                self._fail(f"{where}: batch sequences {batch.first_seq}..{batch.last_seq}")
            if last_sequence(batch.first_seq, last - first) != batch.last_seq:
                self._fail(
                    f"{where}: batch sequences {batch.first_seq}..{batch.last_seq} do not match "
                    f"its offsets {first}..{last}"
                )
            if previous is not None:
                if first <= previous.last_offset:
                    self._fail(f"{where}: batch at {first} not after {previous.last_offset}")
                skipped = (batch.first_seq - previous.last_seq - 1) % (MAX_SEQUENCE + 1)
                if skipped > first - previous.last_offset - 1:
                    self._fail(
                        f"{where}: sequence {batch.first_seq} at offset {first} does not "
                        f"follow sequence {previous.last_seq} at {previous.last_offset}"
                    )
            previous = batch

    def _check_ended(self, what: str, txns: Sequence[CompletedTxn | AbortedTxn]) -> None:
        previous_marker = -1
        for txn in txns:
            if not 0 <= txn.first_offset <= txn.last_offset < self._end_offset:
                self._fail(
                    f"{what} transaction of producer {txn.producer_id}: "
                    f"{txn.first_offset}..{txn.last_offset}, end offset {self._end_offset}"
                )
            if txn.last_offset <= previous_marker:
                self._fail(f"{what} transaction marker {txn.last_offset} not after the previous")
            previous_marker = txn.last_offset

    def _fail(self, what: str) -> NoReturn:
        raise ProducerStateInvariantError(
            f"producer state at end offset {self._end_offset}: {what}"
        )

    def _index_open_transactions(self) -> None:
        self._open_txns = {
            producer_id: entry.current_txn_first_offset
            for producer_id, entry in self._entries.items()
            if entry.current_txn_first_offset is not None
        }

    def expire_producers(self, now_ms: int) -> list[int]:
        """Remove producers whose last timestamp is ``producer.id.expiration.ms`` old or more.

        Kafka's ``removeExpiredProducers``: expired when ``now_ms - last_timestamp >=
        producer.id.expiration.ms`` and no transaction of it is open here. Returns the
        removed producer ids, ascending.
        """
        expired = sorted(
            producer_id
            for producer_id, entry in self._entries.items()
            if now_ms - entry.last_timestamp >= self._expiration_ms
            and entry.current_txn_first_offset is None  # an open transaction keeps it
        )
        for producer_id in expired:
            del self._entries[producer_id]
        return expired

    # ---- snapshots: what replica.producer_snapshot_codec writes and reads ---------------

    def ended_transactions(self) -> tuple[CompletedTxn, ...]:
        """Transactions ended by a marker the high watermark may not have passed yet (the
        last :meth:`last_stable_offset` had not seen it pass), in marker order."""
        return tuple(self._completed)

    def kept_aborted_transactions(self) -> tuple[AbortedTxn, ...]:
        """Every aborted transaction kept (not yet forgotten below the log start), in marker
        order."""
        return tuple(self._aborted)

    def restore(
        self,
        entries: Iterable[ProducerEntry],
        ended: Iterable[CompletedTxn],
        aborted: Iterable[AbortedTxn],
    ) -> None:
        """Take the producers and transactions of a decoded snapshot into this new state:
        ``entries`` by ascending producer id, ``aborted`` in marker order. The codec
        (:func:`replica.producer_snapshot_codec.decode_snapshot`) checked them."""
        self._entries = {entry.producer_id: entry for entry in entries}
        self._index_open_transactions()
        self._completed = list(ended)
        self._aborted = list(aborted)
        self._aborted_ends = [txn.last_offset for txn in self._aborted]
