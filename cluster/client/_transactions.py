"""The transactional producer's state (Kafka's client ``TransactionManager``).

A producer with ``transactional.id`` writes in transactions: ``init_transactions`` gets the
id's producer id and epoch from its transaction coordinator (fencing older producers of the
id), ``begin_transaction`` opens one, every partition written in it is added to the
transaction (``AddPartitionsToTxn``, sent by the sender thread before the partition's first
batch goes out), ``send_offsets_to_transaction`` adds a group's offsets, and
``commit_transaction`` / ``abort_transaction`` end it with ``EndTxn``, whose answer carries
the epoch of the next transaction (transactions version 2). ``prepare_transaction`` and
``complete_transaction`` are KIP-939's two-phase commit.

Errors follow Kafka's classes. *Fatal* (the producer can only be closed): another producer
of the id took over (``PRODUCER_FENCED``, or ``INVALID_PRODUCER_EPOCH`` on a write), the id
maps to another producer, an invalid state, a request the broker does not support, the
client not authorized for the id or the cluster. From then on ``begin_transaction``,
``send``, ``send_offsets_to_transaction``, ``commit_transaction``, ``abort_transaction``,
``prepare_transaction``, ``complete_transaction`` and ``init_transactions`` raise that
error, whichever call or record met it first. *Abortable* (abort, then go on): any other
failure of a write or of a call in the transaction. A method called in the wrong state
raises ``IllegalStateError``.

Thread-safety: the caller's thread runs the public calls, the sender thread
:meth:`TransactionManager.may_send_locked` (under the accumulator's lock) and
:meth:`TransactionManager.add_pending_partitions`; shared state is under that lock.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lograft.protocol.errors import (
    ClusterAuthorizationFailedError,
    IllegalStateError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    LograftError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    TransactionCoordinatorFencedError,
    UnsupportedVersionError,
    error_for_code,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb

from ._connection import BrokerInfo
from ._coordinator import CoordinatorCalls
from ._sequencing import Sequencer

__all__ = ["PreparedTxnState", "TransactionManager", "TxnClientState"]

log = logging.getLogger(__name__)

_FATAL = (
    ProducerFencedError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    TransactionalIdNotFoundError,
    UnsupportedVersionError,
    ClusterAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
"""Errors after which the producer can only be closed: every later transactional call
raises the error (Kafka's fatal errors: fenced, unsupported, not authorized)."""


class TxnClientState(enum.Enum):
    """Where the producer is in its transactions."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in-transaction"
    PREPARED = "prepared"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable-error"
    FATAL_ERROR = "fatal-error"


@dataclass(frozen=True, slots=True)
class PreparedTxnState:
    """KIP-939: what identifies a prepared transaction (its producer id and epoch).

    An external coordinator stores it (``str(state)``; :meth:`parse` reads it back) and
    hands it to ``complete_transaction`` of a later producer with the same transactional
    id, which commits if it names the open transaction, else aborts.
    """

    producer_id: int
    producer_epoch: int

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.producer_epoch}"

    @classmethod
    def parse(cls, text: str) -> PreparedTxnState:
        """The state ``str(state)`` gave; ``ValueError`` for anything else."""
        producer_id, sep, epoch = text.partition(":")
        if not sep:
            raise ValueError(f"not a prepared transaction state: {text!r}")
        return cls(int(producer_id), int(epoch))


class TransactionManager:
    """One transactional producer's state; see the module docstring."""

    def __init__(
        self,
        transactional_id: str,
        *,
        timeout_ms: int,
        two_phase: bool,
        calls: CoordinatorCalls,
        sequencer: Sequencer,
        lock: threading.Lock,
        wake: threading.Condition,
        backoff_s: float,
        request_timeout_ms: int,
        max_block_ms: int,
    ) -> None:
        self.transactional_id = transactional_id
        self._timeout_ms = timeout_ms
        self._two_phase = two_phase
        self._calls = calls
        self._sequencer = sequencer
        self._lock = lock
        self._wake = wake
        self._backoff_s = backoff_s
        self._request_timeout_ms = request_timeout_ms
        self._max_block_ms = max_block_ms
        self.state = TxnClientState.UNINITIALIZED
        self.error: LograftError | None = None
        self._added: set[TopicPartition] = set()
        self._pending: set[TopicPartition] = set()
        self._add_retry_at = 0.0
        self._offsets_added = False
        self._ongoing: PreparedTxnState | None = None

    # ---- the caller's calls --------------------------------------------------------------

    def init_transactions(self, keep_prepared: bool = False) -> None:
        """InitProducerId for the transactional id, retried within ``max.block.ms``."""
        with self._lock:
            self._raise_if_fatal_locked()
            if self.state not in (TxnClientState.UNINITIALIZED, TxnClientState.READY):
                raise IllegalStateError(f"init_transactions in state {self.state.value}")
        request = pb.InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self._timeout_ms,
            enable_2pc=self._two_phase,
            keep_prepared_txn=keep_prepared,
        )
        with self._recording(fatal_only=True):
            response = self._call("InitProducerId", request, self._max_block_ms)
        with self._lock:
            self._sequencer.set_producer_id(response.producer_id, response.producer_epoch)
            self._added.clear()
            self._pending.clear()
            self._offsets_added = False
            self.error = None
            if response.ongoing_txn_producer_id >= 0:
                # KIP-939: the prepared transaction stays open for complete_transaction.
                self._ongoing = PreparedTxnState(
                    response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch
                )
                self.state = TxnClientState.PREPARED
            else:
                self._ongoing = None
                self.state = TxnClientState.READY
        log.info(
            "transactions initialised transactional_id=%s producer_id=%d epoch=%d prepared_open=%s",
            self.transactional_id,
            response.producer_id,
            response.producer_epoch,
            self._ongoing is not None,
        )

    def begin_transaction(self) -> None:
        """Open a transaction (locally: the coordinator learns of it with its first
        partition)."""
        with self._lock:
            self._raise_if_failed_locked()
            if self.state is not TxnClientState.READY:
                raise IllegalStateError(f"begin_transaction in state {self.state.value}")
            self.state = TxnClientState.IN_TRANSACTION

    def check_send_locked(self) -> None:
        """Raise unless a record may be queued now (inside a transaction)."""
        if self.state is TxnClientState.IN_TRANSACTION:
            return
        self._raise_if_failed_locked()
        raise IllegalStateError(
            f"cannot send outside a transaction (state {self.state.value}): "
            "call begin_transaction first"
        )

    def add_offsets(self, group_id: str) -> None:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction."""
        with self._lock:
            self._raise_if_failed_locked()
            if self.state is not TxnClientState.IN_TRANSACTION:
                raise IllegalStateError(f"send_offsets_to_transaction in state {self.state.value}")
            producer_id, epoch = self._sequencer.producer_id, self._sequencer.producer_epoch
        request = pb.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            group_id=group_id,
        )
        self._in_transaction_call("AddOffsetsToTxn", request)
        with self._lock:
            self._offsets_added = True  # the coordinator has the transaction open now

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int],
        group_id: str,
        member_id: str,
        member_epoch: int,
        group_calls: CoordinatorCalls,
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator: the offsets
        count only if the transaction commits."""
        self.add_offsets(group_id)
        producer_id, epoch = self.identity()
        by_topic: dict[str, list[pb.OffsetCommitPartition]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                pb.OffsetCommitPartition(
                    partition=tp.partition, committed_offset=offset, committed_leader_epoch=-1
                )
            )
        request = pb.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            member_id=member_id,
            member_epoch=member_epoch,
            topics=[pb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        with self._recording(fatal_only=False):
            response = group_calls.call(
                group_id, "TxnOffsetCommit", request, _raise_error, timeout_ms=self._max_block_ms
            )
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code:
                        raise error_for_code(
                            p.error_code, p.error_message or f"{topic.name}-{p.partition}"
                        )

    def identity(self) -> tuple[int, int]:
        """The producer id and epoch the open transaction writes with."""
        with self._lock:
            return self._sequencer.producer_id, self._sequencer.producer_epoch

    def prepare(self) -> PreparedTxnState:
        """KIP-939: the open transaction is flushed; keep it open, return its identity."""
        with self._lock:
            self._raise_if_failed_locked()
            if self.state is not TxnClientState.IN_TRANSACTION:
                raise IllegalStateError(f"prepare_transaction in state {self.state.value}")
            if not self._two_phase:
                raise IllegalStateError(
                    "prepare_transaction needs transaction.two.phase.commit.enable=true"
                )
            self.state = TxnClientState.PREPARED
            prepared = PreparedTxnState(self._sequencer.producer_id, self._sequencer.producer_epoch)
            self._ongoing = prepared
            return prepared

    def prepared_matches(self, prepared: PreparedTxnState) -> bool:
        """Whether ``prepared`` names the transaction kept open (KIP-939)."""
        with self._lock:
            self._raise_if_fatal_locked()
            if self.state is not TxnClientState.PREPARED:
                raise IllegalStateError(f"complete_transaction in state {self.state.value}")
            return self._ongoing == prepared

    def begin_end(self, commit: bool) -> None:
        """Check that the transaction may end this way now; mark it ending."""
        with self._lock:
            self._raise_if_fatal_locked()
            allowed = {
                TxnClientState.IN_TRANSACTION,
                TxnClientState.PREPARED,
                TxnClientState.COMMITTING if commit else TxnClientState.ABORTING,
            }
            if not commit:
                allowed |= {TxnClientState.ABORTABLE_ERROR, TxnClientState.COMMITTING}
            if self.state is TxnClientState.ABORTABLE_ERROR and commit:
                assert self.error is not None
                raise self.error
            if self.state not in allowed:
                raise IllegalStateError(
                    f"{'commit' if commit else 'abort'}_transaction in state {self.state.value}"
                )
            self.state = TxnClientState.COMMITTING if commit else TxnClientState.ABORTING
            self._wake.notify()

    def end(self, commit: bool) -> None:
        """EndTxn: commit or abort (the batches are all complete); take the next epoch.

        Raises the error a record or a call of the transaction met while it was flushed:
        a fatal one whether committing or aborting, an abortable one when committing."""
        with self._lock:
            # The flush may have failed the transaction after begin_end checked it (a record
            # fenced while its partition was added): such a transaction never ends normally.
            self._raise_if_fatal_locked()
            if commit and self.state is TxnClientState.ABORTABLE_ERROR:
                assert self.error is not None
                raise self.error
            producer_id, epoch = self._sequencer.producer_id, self._sequencer.producer_epoch
            had_partitions = bool(self._added) or self._offsets_added or self._ongoing is not None
        if had_partitions or not commit:
            request = pb.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=commit,
            )
            # Only a fatal error changes the state: after any other, the same end may be
            # called again.
            with self._recording(fatal_only=True):
                response = self._call("EndTxn", request, self._max_block_ms)
            producer_id, epoch = response.producer_id, response.producer_epoch
        with self._lock:
            self._sequencer.set_producer_id(producer_id, epoch)
            self._added.clear()
            self._pending.clear()
            self._offsets_added = False
            self._ongoing = None
            self.error = None
            self.state = TxnClientState.READY
        log.info(
            "transaction ended transactional_id=%s committed=%s next_epoch=%d",
            self.transactional_id,
            commit,
            epoch,
        )

    # ---- the sender thread ---------------------------------------------------------------

    def may_send_locked(self, tp: TopicPartition) -> bool:
        """Whether a batch of ``tp`` may go now: its partition is in the transaction.
        Otherwise the partition waits to be added."""
        if tp in self._added:
            return True
        if self.state in (TxnClientState.IN_TRANSACTION, TxnClientState.COMMITTING):
            self._pending.add(tp)
        return False

    def add_due_locked(self, now: float) -> bool:
        """Whether partitions wait to be added and may be asked for now."""
        return bool(self._pending) and now >= self._add_retry_at

    def queued_error_locked(self) -> LograftError | None:
        """The error to fail queued batches with, once the transaction cannot take them."""
        if self.state is TxnClientState.ABORTING:
            return TransactionAbortedError(f"transaction of {self.transactional_id!r} aborted")
        if self.state in (TxnClientState.ABORTABLE_ERROR, TxnClientState.FATAL_ERROR):
            return self.error
        return None

    def add_pending_partitions(self, now: float) -> float | None:
        """AddPartitionsToTxn for partitions waiting to join (blocking; sender thread).
        Returns when to try again after a retriable failure, else None."""
        with self._lock:
            if not self._pending or now < self._add_retry_at:
                return self._add_retry_at if self._pending else None
            if self.state not in (TxnClientState.IN_TRANSACTION, TxnClientState.COMMITTING):
                self._pending.clear()
                return None
            wanted = sorted(self._pending)
            producer_id, epoch = self._sequencer.producer_id, self._sequencer.producer_epoch
        by_topic: dict[str, list[int]] = {}
        for tp in wanted:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = pb.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            topics=[pb.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        try:
            self._call("AddPartitionsToTxn", request, self._request_timeout_ms)
        except LograftError as exc:
            with self._lock:
                if exc.retriable:
                    self._add_retry_at = now + self._backoff_s
                    return self._add_retry_at
                self._set_error_locked(exc)
                self._wake.notify()
            return None
        with self._lock:
            self._added.update(wanted)
            self._pending.difference_update(wanted)
            self._wake.notify()
        return None

    def on_batch_failed_locked(self, error: BaseException) -> None:
        """A batch of the transaction failed for good: the transaction cannot commit."""
        if isinstance(error, TransactionAbortedError) or self.state is TxnClientState.ABORTING:
            return
        if isinstance(error, InvalidTxnStateError) or not isinstance(error, LograftError):
            # A partition that would not take the write (not in the transaction, KIP-890)
            # fails this transaction only.
            self._set_error_locked(TransactionAbortableError(str(error)))
        else:
            self._set_error_locked(error)

    # ---- helpers -------------------------------------------------------------------------

    def _set_error_locked(self, error: LograftError) -> None:
        if self.state is TxnClientState.FATAL_ERROR:
            return
        if isinstance(error, _FATAL):
            # A write refused for its epoch means a newer producer of the id took over.
            fatal = (
                ProducerFencedError(str(error))
                if isinstance(error, InvalidProducerEpochError)
                else error
            )
            self.state = TxnClientState.FATAL_ERROR
            self.error = fatal
            log.error(
                "transactional producer fenced or broken transactional_id=%s error=%s",
                self.transactional_id,
                fatal,
            )
            return
        if self.state in (TxnClientState.IN_TRANSACTION, TxnClientState.COMMITTING):
            self.state = TxnClientState.ABORTABLE_ERROR
            self.error = (
                error
                if isinstance(error, TransactionAbortableError)
                else TransactionAbortableError(f"the transaction must be aborted: {error}")
            )

    def _raise_if_fatal_locked(self) -> None:
        if self.state is TxnClientState.FATAL_ERROR:
            assert self.error is not None
            raise self.error

    def _raise_if_failed_locked(self) -> None:
        if self.state in (TxnClientState.ABORTABLE_ERROR, TxnClientState.FATAL_ERROR):
            assert self.error is not None
            raise self.error
        if self.state is TxnClientState.UNINITIALIZED:
            raise IllegalStateError("call init_transactions first")

    def _in_transaction_call(self, method: str, request: Any) -> Any:
        with self._recording(fatal_only=False):
            return self._call(method, request, self._max_block_ms)

    @contextmanager
    def _recording(self, *, fatal_only: bool) -> Iterator[None]:
        """Record the error the block raises (only a fatal one with ``fatal_only``), and
        raise the producer's fatal error instead once it has one: a write refused for its
        epoch raises ``ProducerFencedError``, as every later call does."""
        try:
            yield
        except LograftError as exc:
            with self._lock:
                if not fatal_only or isinstance(exc, _FATAL):
                    self._set_error_locked(exc)
                fatal = self.error if self.state is TxnClientState.FATAL_ERROR else None
            if fatal is None or fatal is exc:
                raise
            raise fatal from exc

    def _call(self, method: str, request: Any, timeout_ms: int) -> Any:
        return self._calls.call(
            self.transactional_id, method, request, _raise_error, timeout_ms=timeout_ms
        )


def _raise_error(response: Any, coordinator: BrokerInfo) -> Any:
    if response.error_code:
        raise error_for_code(response.error_code, response.error_message)
    return response
