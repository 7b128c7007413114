"""The transaction coordinator of one ``__transaction_state`` partition, as a pure core.

One :class:`TransactionCoordinator` serves every transactional id that hashes to its
partition (:func:`partition_for_transactional_id`); the broker leading that partition runs
it. Pure: requests, ``now_ms`` and a source of new producer ids come in; answers, the
:class:`~replica.txn.metadata.TxnRecord` s to persist and the :class:`MarkerJob` s to start
go out. No clock, socket, thread or disk.

**Ordering rule for the shell** (as the group coordinator's): append a call's records to
``__transaction_state`` (``acks=all``) before answering it and before starting its marker
jobs. If the append fails this object is ahead of the log: drop it, load a new one.

**The protocol** (Kafka's transaction coordinator with transactions version 2, KIP-890):

* ``init_producer_id`` gives a transactional id its producer id and a new epoch, fencing
  every older producer of the id. An open transaction of the old producer is aborted first
  (the epoch is bumped twice: once to fence, once for the abort, whose markers carry it) and
  the caller is told ``CONCURRENT_TRANSACTIONS``: it retries once the abort is complete.
  With ``keep_prepared`` (KIP-939) an open transaction is left open instead: the epoch is
  bumped so the old producer can end nothing, and the answer names the open transaction's
  producer id and epoch, so the new producer can commit it (if it matches the state
  prepared) or abort it.
* ``add_partitions`` adds partitions (a group's ``__consumer_offsets`` partition for
  ``AddOffsetsToTxn``) to the open transaction, opening one if none is.
* ``end_transaction`` decides commit or abort: the epoch is bumped (transactions version 2:
  the markers carry the new epoch, so a late write of this transaction is refused by the
  partition as ``INVALID_PRODUCER_EPOCH``), the state becomes ``PREPARE_COMMIT`` or
  ``PREPARE_ABORT`` and a :class:`MarkerJob` is returned; the answer holds the producer id
  and epoch to use next. :meth:`markers_written` completes it (``COMPLETE_*``). A retried
  end of the same transaction is answered (``CONCURRENT_TRANSACTIONS`` while its markers
  are out, success after); the opposite decision is ``INVALID_TXN_STATE``.
* ``tick`` aborts transactions open longer than their timeout (not two-phase ones), the
  same way as a fencing ``init_producer_id``; ``expire_ids`` forgets ids idle for
  ``transactional.id.expiration.ms`` with no transaction open.
* A request naming another producer id gets ``INVALID_PRODUCER_ID_MAPPING``; one from an
  older or newer epoch ``PRODUCER_FENCED``.

Loading replays the records (the latest per id wins) and :meth:`complete_load` restarts the
marker jobs of transactions left deciding.

**Leadership.** The coordinator serves only the leadership of its partition it was loaded
for (its ``coordinator_epoch``): before every request the shell passes the epoch at which
its broker leads the partition now to :meth:`TransactionCoordinator.check_leadership` and
answers in the same step (the rule: :mod:`replica.coordinator_leadership`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from lograft.protocol.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    LograftError,
    ProducerFencedError,
)
from lograft.protocol.topic_partition import TopicPartition, partition_for_name
from replica.coordinator_leadership import check_leadership
from replica.txn._invariants import check_invariants
from replica.txn.metadata import MAX_PRODUCER_EPOCH, TxnMetadata, TxnRecord, TxnState

__all__ = [
    "DEFAULT_ID_EXPIRATION_MS",
    "DEFAULT_MAX_TIMEOUT_MS",
    "EndResult",
    "InitResult",
    "MarkerJob",
    "Outcome",
    "TransactionCoordinator",
    "partition_for_transactional_id",
]

R = TypeVar("R")

DEFAULT_MAX_TIMEOUT_MS = 900_000
"""Kafka's ``transaction.max.timeout.ms``: the longest ``transaction.timeout.ms`` allowed."""
DEFAULT_ID_EXPIRATION_MS = 604_800_000
"""Kafka's ``transactional.id.expiration.ms`` (7 days): an id with no transaction open and
no request for this long is forgotten (a tombstone), as is its producer id."""
MAX_TRANSACTIONAL_ID_LENGTH = 32_767


def partition_for_transactional_id(transactional_id: str, partition_count: int) -> int:
    """The ``__transaction_state`` partition of an id (Kafka's ``abs(hashCode) % count``)."""
    return partition_for_name(transactional_id, partition_count)


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a commit or abort marker for the producer on every partition; then report
    :meth:`TransactionCoordinator.markers_written` with the same id, producer and epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[TopicPartition]
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """A call's answer, what to append first, and the marker jobs to start after.

    ``error``, when set, is the answer instead of ``result``; the records and markers
    still go (a fencing InitProducerId aborts the open transaction and answers
    ``CONCURRENT_TRANSACTIONS``).
    """

    result: R
    records: tuple[TxnRecord, ...] = ()
    markers: tuple[MarkerJob, ...] = ()
    error: LograftError | None = None


@dataclass(frozen=True, slots=True)
class InitResult:
    """The producer id and epoch to use; the open transaction kept for it (KIP-939), if any."""

    producer_id: int
    producer_epoch: int
    ongoing_producer_id: int = -1
    ongoing_producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EndResult:
    """The producer id and epoch the producer uses for its next transaction."""

    producer_id: int
    producer_epoch: int


class TransactionCoordinator:
    """Transactional ids of one ``__transaction_state`` partition; see the module docstring.

    ``coordinator_epoch`` is that partition's leader epoch when this broker took it over:
    markers carry it, and partitions refuse markers from an older coordinator. ``logger``
    is the shell's (a pure core creates none).
    """

    def __init__(
        self,
        partition: int,
        coordinator_epoch: int,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        two_phase_enabled: bool = False,
        id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS,
        *,
        logger: logging.Logger,
    ) -> None:
        self._log = logger
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.two_phase_enabled = two_phase_enabled
        self.loading = True
        self._ids: dict[str, TxnMetadata] = {}
        # Each id's producer id and epoch at the last check_invariants, to see them move.
        self._seen: dict[str, tuple[int, int]] = {}

    # ---- loading ------------------------------------------------------------------------

    def replay(self, record: TxnRecord) -> None:
        """Apply a record read back from the partition (while loading)."""
        if record.metadata is None or record.metadata.state is TxnState.DEAD:
            self._ids.pop(record.transactional_id, None)
        else:
            self._ids[record.transactional_id] = record.metadata

    def complete_load(self) -> tuple[MarkerJob, ...]:
        """Loading is over: serve requests; returns the marker jobs of deciding transactions."""
        self.loading = False
        return tuple(self._job(m) for m in self._ids.values() if m.state.is_preparing)

    def check_leadership(self, leader_epoch: int | None) -> None:
        """Raise unless this coordinator may answer a request now that its broker leads the
        partition at ``leader_epoch`` (``None``: it does not): ``NOT_COORDINATOR`` once the
        leadership it was loaded for is over, ``COORDINATOR_LOAD_IN_PROGRESS`` while it, or
        the coordinator of a newer leadership of this broker, loads."""
        check_leadership(
            f"__transaction_state-{self.partition}",
            self.coordinator_epoch,
            leader_epoch,
            loading=self.loading,
        )

    # ---- reading ------------------------------------------------------------------------

    def metadata(self, transactional_id: str) -> TxnMetadata | None:
        """The id's state, or ``None`` if it has none."""
        return self._ids.get(transactional_id)

    def transactional_ids(self) -> list[str]:
        """Every id this coordinator holds state for, sorted."""
        return sorted(self._ids)

    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> bool:
        """Whether the producer's open transaction added ``tp`` (a partition leader asks
        before it takes the first transactional batch of a producer; KIP-890). Raises as
        ``add_partitions`` for an unknown id, another producer or another epoch."""
        meta = self._check(transactional_id, producer_id, producer_epoch)
        return meta.state is TxnState.ONGOING and tp in meta.partitions

    # ---- requests -----------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        new_producer_id: Callable[[], int],
        *,
        two_phase: bool = False,
        keep_prepared: bool = False,
    ) -> Outcome[InitResult]:
        """InitProducerId for a transactional id (see the module docstring)."""
        self._serving()
        _check_id(transactional_id)
        if two_phase and not self.two_phase_enabled:
            raise InvalidTxnStateError(
                "two-phase commit is not enabled on this cluster "
                "(transaction.two.phase.commit.enable)"
            )
        # A two-phase transaction never times out, so its timeout has no upper bound; it is
        # still written to __transaction_state, whose reader refuses one that is not positive.
        if timeout_ms <= 0 or (timeout_ms > self.max_timeout_ms and not two_phase):
            bound = "positive" if two_phase else f"in 1..{self.max_timeout_ms}"
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} must be {bound}"
            )
        meta = self._ids.get(transactional_id)
        if meta is None:
            fresh = TxnMetadata(
                transactional_id,
                new_producer_id(),
                0,
                -1,
                timeout_ms,
                TxnState.EMPTY,
                frozenset(),
                -1,
                now_ms,
                two_phase,
            )
            return self._write(fresh, InitResult(fresh.producer_id, 0))
        if meta.state.is_preparing:
            raise ConcurrentTransactionsError(
                f"the last transaction of {transactional_id!r} is still being completed"
            )
        if meta.state is TxnState.ONGOING and keep_prepared:
            kept = self._bumped(meta, now_ms, new_producer_id=None)
            kept = replace(kept, timeout_ms=timeout_ms, two_phase=two_phase)
            result = InitResult(
                kept.producer_id, kept.producer_epoch, meta.producer_id, meta.producer_epoch
            )
            return self._write(kept, result)
        if meta.state is TxnState.ONGOING:
            aborting = self._abort_open(meta, now_ms)
            return replace(
                aborting,
                error=ConcurrentTransactionsError(
                    f"aborting the open transaction of {transactional_id!r}: retry"
                ),
            )
        bumped = self._bumped(meta, now_ms, new_producer_id)
        bumped = replace(
            bumped,
            state=TxnState.EMPTY,
            timeout_ms=timeout_ms,
            two_phase=two_phase,
            partitions=frozenset(),
            started_ms=-1,
        )
        return self._write(bumped, InitResult(bumped.producer_id, bumped.producer_epoch))

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Outcome[None]:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
        self._serving()
        meta = self._check(transactional_id, producer_id, producer_epoch)
        if meta.state.is_preparing:
            raise ConcurrentTransactionsError(
                f"the last transaction of {transactional_id!r} is still being completed"
            )
        wanted = frozenset(partitions)
        if not wanted:
            raise InvalidRequestError("AddPartitionsToTxn names no partition")
        if meta.state is TxnState.ONGOING and wanted <= meta.partitions:
            return Outcome(None)
        started = meta.started_ms if meta.state is TxnState.ONGOING else now_ms
        opened = replace(
            meta,
            state=TxnState.ONGOING,
            partitions=meta.partitions | wanted if meta.state is TxnState.ONGOING else wanted,
            started_ms=started,
            updated_ms=now_ms,
        )
        return self._write(opened, None)

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Outcome[EndResult]:
        """EndTxn: commit or abort the open transaction (see the module docstring)."""
        self._serving()
        meta = self._ids.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of {transactional_id!r}"
            )
        decided = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        retried = producer_epoch == meta.last_producer_epoch and producer_epoch >= 0
        if meta.state.is_preparing or meta.state in (
            TxnState.COMPLETE_COMMIT,
            TxnState.COMPLETE_ABORT,
        ):
            if retried and meta.state in (decided, done):
                if meta.state is decided:
                    raise ConcurrentTransactionsError(
                        f"the transaction of {transactional_id!r} is being completed"
                    )
                return Outcome(EndResult(meta.producer_id, meta.producer_epoch))
            if retried:
                raise InvalidTxnStateError(
                    f"the transaction of {transactional_id!r} already ended the other way "
                    f"({meta.state.name})"
                )
        if producer_epoch != meta.producer_epoch:
            raise ProducerFencedError(
                f"epoch {producer_epoch} of producer {producer_id} is not the current "
                f"{meta.producer_epoch} of {transactional_id!r}"
            )
        if meta.state.is_preparing:
            raise ConcurrentTransactionsError(
                f"the last transaction of {transactional_id!r} is still being completed"
            )
        if meta.state is not TxnState.ONGOING:
            if commit:
                raise InvalidTxnStateError(
                    f"{transactional_id!r} has no open transaction to commit ({meta.state.name})"
                )
            # Transactions version 2: an abort when nothing was added (the producer could
            # not tell) ends nothing, but still moves the epoch on.
            ended = replace(
                self._bumped(meta, now_ms, new_producer_id=None), state=TxnState.COMPLETE_ABORT
            )
            return self._write(ended, EndResult(ended.producer_id, ended.producer_epoch))
        bumped = replace(self._bumped(meta, now_ms, new_producer_id=None), state=decided)
        return self._write(
            bumped,
            EndResult(bumped.producer_id, bumped.producer_epoch),
            markers=(self._job(bumped),),
        )

    def markers_written(
        self, transactional_id: str, producer_id: int, producer_epoch: int, now_ms: int
    ) -> Outcome[bool]:
        """Every marker of a job is written: the transaction is complete. ``False`` (nothing
        to write) for a job the state has moved past."""
        meta = self._ids.get(transactional_id)
        if (
            meta is None
            or not meta.state.is_preparing
            or (meta.producer_id, meta.producer_epoch) != (producer_id, producer_epoch)
        ):
            return Outcome(False)
        done = (
            TxnState.COMPLETE_COMMIT
            if meta.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        completed = replace(
            meta, state=done, partitions=frozenset(), started_ms=-1, updated_ms=now_ms
        )
        return self._write(completed, True)

    def tick(self, now_ms: int) -> Outcome[tuple[str, ...]]:
        """Abort every transaction open longer than its timeout (two-phase ones excepted);
        the result names them."""
        if self.loading:
            return Outcome(())
        records: list[TxnRecord] = []
        markers: list[MarkerJob] = []
        expired: list[str] = []
        for meta in list(self._ids.values()):
            if (
                meta.state is not TxnState.ONGOING
                or meta.two_phase
                or now_ms - meta.started_ms <= meta.timeout_ms
            ):
                continue
            self._log.info(
                "transaction timed out transactional_id=%s producer_id=%d epoch=%d",
                meta.transactional_id,
                meta.producer_id,
                meta.producer_epoch,
            )
            aborted = self._abort_open(meta, now_ms)
            records += aborted.records
            markers += aborted.markers
            expired.append(meta.transactional_id)
        return Outcome(tuple(expired), tuple(records), tuple(markers))

    def expire_ids(self, now_ms: int) -> Outcome[tuple[str, ...]]:
        """Forget every id with no transaction open that nothing touched for
        ``id_expiration_ms`` (tombstones); the result names them."""
        if self.loading:
            return Outcome(())
        gone = tuple(
            sorted(
                meta.transactional_id
                for meta in self._ids.values()
                if meta.state.is_complete and now_ms - meta.updated_ms > self.id_expiration_ms
            )
        )
        for transactional_id in gone:
            del self._ids[transactional_id]
        return Outcome(gone, tuple(TxnRecord(t, None) for t in gone))

    # ---- invariants ---------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise :class:`~replica.txn.errors.TxnInvariantError` if the state breaks a rule
        (:mod:`replica.txn._invariants`: legal states, their partitions and start times, the
        epoch bumped when a transaction was decided, producer ids not shared, epochs never
        going back). Reads the state only, and remembers each id's epoch to see it move; a
        simulation calls it after every step."""
        check_invariants(self.partition, self._ids, self._seen)

    # ---- helpers ------------------------------------------------------------------------

    def _serving(self) -> None:
        if self.loading:
            raise CoordinatorLoadInProgressError(
                f"__transaction_state-{self.partition} is still loading"
            )

    def _check(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        meta = self._ids.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of {transactional_id!r}"
            )
        if producer_epoch != meta.producer_epoch:
            raise ProducerFencedError(
                f"epoch {producer_epoch} of producer {producer_id} is not the current "
                f"{meta.producer_epoch} of {transactional_id!r}"
            )
        return meta

    @staticmethod
    def _bumped(
        meta: TxnMetadata, now_ms: int, new_producer_id: Callable[[], int] | None
    ) -> TxnMetadata:
        """The next epoch of the id's producer; a new producer id at epoch 0 once the epoch
        is exhausted (only where a new id may start: not for an open transaction, whose
        markers must carry its producer id)."""
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH - 1 and new_producer_id is not None:
            return replace(
                meta,
                producer_id=new_producer_id(),
                producer_epoch=0,
                last_producer_epoch=-1,
                updated_ms=now_ms,
            )
        if meta.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise InvalidTxnStateError(f"the epoch of {meta.transactional_id!r} is exhausted")
        return replace(
            meta,
            producer_epoch=meta.producer_epoch + 1,
            last_producer_epoch=meta.producer_epoch,
            updated_ms=now_ms,
        )

    def _abort_open(self, meta: TxnMetadata, now_ms: int) -> Outcome[InitResult]:
        """Fence the open transaction's producer and abort the transaction.

        Two bumps, as Kafka's fence followed by its own EndTxn: the first fences the
        producer, the second is the abort's, which the markers carry. The epoch the retry
        rule answers (``last_producer_epoch``) is then the fencing one, which no producer
        holds: the fenced producer's own end is refused, not taken for a retry.
        """
        fenced = self._bumped(meta, now_ms, new_producer_id=None)
        aborting = replace(
            self._bumped(fenced, now_ms, new_producer_id=None), state=TxnState.PREPARE_ABORT
        )
        return self._write(
            aborting,
            InitResult(aborting.producer_id, aborting.producer_epoch),
            (self._job(aborting),),
        )

    def _write(
        self, meta: TxnMetadata, result: R, markers: tuple[MarkerJob, ...] = ()
    ) -> Outcome[R]:
        self._ids[meta.transactional_id] = meta
        return Outcome(result, (TxnRecord(meta.transactional_id, meta),), markers)

    def _job(self, meta: TxnMetadata) -> MarkerJob:
        return MarkerJob(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            meta.state is TxnState.PREPARE_COMMIT,
            meta.partitions,
            self.coordinator_epoch,
        )


def _check_id(transactional_id: str) -> None:
    if not transactional_id:
        raise InvalidRequestError("transactional.id must not be empty")
    if len(transactional_id.encode()) > MAX_TRANSACTIONAL_ID_LENGTH:
        raise InvalidRequestError("transactional.id is longer than 32767 bytes")
