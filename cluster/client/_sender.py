"""The producer's sender thread (Kafka's ``Sender``): drains ready batches and delivers them.

Each turn of its loop it refreshes metadata if a leader was unknown or moved, fetches a
producer id if it is idempotent and has none, fails batches past ``delivery.timeout.ms``,
then drains the ready batches into Produce requests, one per leader, up to
``max.request.size`` bytes and ``max.in.flight.requests.per.connection`` unanswered
requests per broker, and sends them without waiting. With nothing to send it waits on the
accumulator's ``wake`` condition, at most until the next linger or retry deadline. While
it waits, a caller whose ``send`` made a batch ready drains and sends in its own thread
instead of waking it (``drain_here``), one drain at a time in either thread.

An answer is handled where it arrives, on the client's I/O thread (``on_response``): it
completes each batch's futures (through the producer's ``Delivery``, which runs their
callbacks there, as Kafka's producer runs them on its I/O thread) or, for a retriable error
with ``retries`` and ``delivery.timeout.ms`` left, puts the batch back in its queue to go
again after ``retry.backoff.ms`` (asking for fresh metadata after leadership errors), and
wakes the sender if it waits for an in-flight slot. Handing answers to the sender thread
instead cost every acknowledged send a thread wake-up more (the I/O thread woke the sender,
which woke the caller).

Idempotence decisions (which batch may go, its sequence, what an error means for the
partition's sequence, when a broken partition restarts under a new epoch) come from the
pure ``Sequencer``; the sender stamps the sequence into a batch's header when it is sent
under a sequence for the first time.

Thread-safety: everything here runs in the sender thread, except ``drain_here`` (a
caller's thread), ``on_response`` and what it calls (the I/O thread, one answer at a time,
in the order they arrive; gRPC's callback threads for a broker that speaks only gRPC) and
``fail_all`` (also called by ``close`` once the thread has stopped). Shared state is touched
under the accumulator's lock.
"""

# Over 600 lines: one class, Kafka's Sender, whose steps share its lock and in-flight state.
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from lograft.protocol.batch_header import with_producer_fields
from lograft.protocol.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    LograftError,
    NetworkError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb

from ._accumulator import REQUEST_OVERHEAD, ProducerBatch, RecordAccumulator
from ._clock import Clock
from ._connection import Connections
from ._producer_metadata import ProducerMetadata
from ._rpc_errors import retried_in_background
from ._sequencing import PartitionSequences, Sequencer
from ._transactions import TransactionManager

__all__ = ["Delivery", "ProduceRequest", "Sender"]

log = logging.getLogger(__name__)

_METADATA_ERRORS = (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    LeaderNotAvailableError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    NetworkError,
    RequestTimedOutError,
)


class Delivery(Protocol):
    """Completes a batch's futures; the producer implements it (it owns the result types)."""

    def succeeded(
        self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int, latency_ms: float
    ) -> None:
        """The batch was written at ``base_offset`` (-1 with ``acks=0``)."""
        ...

    def failed(self, batch: ProducerBatch, error: BaseException) -> None:
        """The batch failed for good with ``error``."""
        ...


@dataclass(slots=True)
class ProduceRequest:
    """The batches of one Produce request to ``node``, by partition, and its size."""

    node: int
    batches: dict[TopicPartition, list[ProducerBatch]]
    size: int


class Sender:
    """The producer's background thread; see the module docstring."""

    def __init__(
        self,
        *,
        accumulator: RecordAccumulator,
        conn: Connections,
        metadata: ProducerMetadata,
        sequencer: Sequencer | None,
        delivery: Delivery,
        transactions: TransactionManager | None = None,
        clock: Clock,
        acks: int,
        retries: int,
        backoff_s: float,
        max_in_flight: int,
        request_timeout_ms: int,
        client_id: str,
    ) -> None:
        self._acc = accumulator
        self._conn = conn
        self._metadata = metadata
        self.sequencer = sequencer
        """Idempotence state (None without idempotence); under the accumulator's lock."""
        self._transactions = transactions
        self._txn_retry_at: float | None = None
        self._delivery = delivery
        self._clock = clock
        self._acks = acks
        self._retries = retries
        self._backoff_s = backoff_s
        self._max_in_flight = max_in_flight
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._in_flight: dict[int, int] = {}
        """Unanswered requests per broker; under the lock."""
        self._drain_rotation = 0
        self._producer_id_retry_at = 0.0
        self._fatal: LograftError | None = None
        self._idle = False
        """Whether the sender waits (or is about to) on ``wake``; under the lock. An answer
        that frees an in-flight slot wakes it only then; a caller drains only then."""
        self._drain_lock = threading.Lock()
        """Held from a drain until its requests are handed to the connections, by the
        sender thread or a caller draining in its place (``drain_here``): requests leave in
        the order they were drained, which is their sequences' order. Taken before the
        accumulator's lock; a caller only tries it."""
        self.thread = threading.Thread(
            target=self.run, name=f"lograft-producer-{client_id}", daemon=True
        )

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """The thread's body: loop until the accumulator is closed."""
        acc = self._acc
        try:
            while True:
                self._metadata.refresh_if_stale()
                if self._metadata.update_wanted:
                    self._metadata.refresh(acc.queued_topics_locked)
                if self._transactions is not None:
                    self._run_transaction_step()
                elif self.sequencer is not None:
                    self._maybe_init_producer_id()
                    if self._fatal is not None:
                        self._fail(acc.abort_queued(), self._fatal)
                self._drain_lock.acquire()
                draining = True
                try:
                    with acc.lock:
                        if acc.closed:
                            return
                        now = self._clock.monotonic()
                        expired = acc.expire_locked(now)
                        requests, wake_at = self._drain_locked(now) if not expired else ([], now)
                        if not requests and not expired:
                            # Under the lock, as the answers' bookkeeping is: an answer
                            # handled before this point is in what the drain saw, one after
                            # it wakes us. A caller may drain while we wait.
                            self._drain_lock.release()
                            draining = False
                            self._idle = True
                            try:
                                self._wait_for_work_locked(wake_at)
                            finally:
                                self._idle = False
                    if expired:
                        self._expire(expired)
                    for request in requests:
                        self._send(request)
                finally:
                    if draining:
                        self._drain_lock.release()
        except Exception:
            self._crashed("producer sender thread crashed")

    def take_wake_locked(self) -> bool:
        """A caller's ``send`` made a batch ready or moved a linger deadline
        (``sender_wanted``): True if that caller is to drain and send it itself
        (``drain_here``, once it released the lock), else the sender is woken.

        A caller drains only while the sender waits: it then sends at once from its own
        thread, and the request reaches the I/O thread without the sender thread's wake-up
        on the way. A busy sender is left to drain (records gather in batches meanwhile);
        one that waits for an in-flight slot is woken by the answer that frees it, and a
        caller's drain then finds no slot either.
        """
        self._acc.sender_wanted = False
        if (
            self._acks != 0  # acks=0 completes batches as they are sent: not in a caller
            and self._idle
            and self._fatal is None
            and self._drain_lock.acquire(blocking=False)
        ):
            return True
        self._acc.wake.notify()
        return False

    def drain_here(self) -> None:
        """Drain and send in the caller's thread, as the sender's loop would, after
        ``take_wake_locked`` said so; what can wait (a lingering batch, a partition whose
        leader or producer id is missing, a full in-flight window) wakes the sender."""
        acc = self._acc
        try:
            # What the sender's loop asks each turn: a producer whose sends all go this way
            # must still find partitions added to its topics.
            self._metadata.refresh_if_stale()
            try:
                with acc.lock:
                    requests, _ = self._drain_locked(self._clock.monotonic())
                    left = acc.has_queued_locked()
                for request in requests:
                    self._send(request)
            finally:
                self._drain_lock.release()
            if left:
                with acc.lock:
                    acc.wake.notify()
        except Exception:
            self._crashed("producer send crashed")

    def _wait_for_work_locked(self, wake_at: float | None) -> None:
        """Wait on ``wake`` until something may be sent (at most until ``wake_at``, a retry
        or a back-off); return at once if the next turn has work without waiting."""
        acc = self._acc
        if self._fatal is not None and acc.has_queued_locked():
            return  # queued after the abort ran: fail them, do not wait
        if self._transactions is not None and self._transactions.add_due_locked(
            self._clock.monotonic()
        ):
            return  # partitions wait to join the transaction: add them
        timeout = None if wake_at is None else max(0.0, wake_at - self._clock.monotonic())
        if timeout is None and self._metadata.update_wanted:
            timeout = self._backoff_s
        if self._txn_retry_at is not None:
            retry_in = max(0.0, self._txn_retry_at - self._clock.monotonic())
            timeout = retry_in if timeout is None else min(timeout, retry_in)
        if self._awaiting_producer_id_locked():
            retry_in = max(0.0, self._producer_id_retry_at - self._clock.monotonic())
            timeout = retry_in if timeout is None else min(timeout, retry_in)
        self._clock.wait(acc.wake, timeout)

    # Over 70 lines: Kafka's drain: sequencing, linger, size and in-flight limits in one pass.
    def _drain_locked(self, now: float) -> tuple[list[ProduceRequest], float | None]:
        """Take the batches that are ready, grouped into requests per leader."""
        acc = self._acc
        metadata = self._conn.metadata
        wake_at: float | None = None
        requests: list[ProduceRequest] = []
        current: dict[int, ProduceRequest] = {}
        planned: dict[int, int] = {}
        full_nodes: set[int] = set()
        items = [(tp, q) for tp, q in acc.queues.items() if q]
        if not items:
            return requests, None
        self._drain_rotation = (self._drain_rotation + 1) % len(items)
        items = items[self._drain_rotation :] + items[: self._drain_rotation]
        txn = self._transactions
        for tp, q in items:
            if txn is not None and not txn.may_send_locked(tp):
                continue  # the partition joins the transaction first (AddPartitionsToTxn)
            try:
                node = metadata.leader_for(tp)
            except LograftError:
                self._metadata.update_wanted = True
                continue
            if node in full_nodes:
                continue
            sequences: PartitionSequences | None = None
            in_flight_before = 0
            if self.sequencer is not None:
                sequences = self.sequencer.partition(tp)
                bump = self.sequencer.restart(tp, sequences)
                if bump is not None:
                    log.info(
                        "producer epoch bumped topic=%s partition=%d producer_id=%d "
                        "producer_epoch=%d",
                        tp.topic,
                        tp.partition,
                        bump.producer_id,
                        bump.producer_epoch,
                    )
                in_flight_before = sequences.in_flight()
            taken = 0
            while q:
                batch = q[0]
                if batch.retry_at > now:
                    wake_at = batch.retry_at if wake_at is None else min(wake_at, batch.retry_at)
                    break
                due = acc.linger_due_locked(batch, now)
                if due is not None:
                    wake_at = due if wake_at is None else min(wake_at, due)
                    break
                request = current.get(node)
                resend = batch.base_sequence >= 0
                if (
                    self.sequencer is not None
                    and sequences is not None
                    and not self.sequencer.may_send(
                        sequences,
                        batch,
                        taken,
                        in_flight_before,
                        joins_request=request is not None
                        and request.size + batch.size <= acc.max_request_size,
                    )
                ):
                    break
                if request is not None and request.size + batch.size > acc.max_request_size:
                    requests.append(request)
                    del current[node]
                    request = None
                if request is None:
                    if self._in_flight.get(node, 0) + planned.get(node, 0) >= self._max_in_flight:
                        full_nodes.add(node)
                        break
                    request = current[node] = ProduceRequest(node, {}, REQUEST_OVERHEAD)
                    planned[node] = planned.get(node, 0) + 1
                acc.take_locked(q)
                request.batches.setdefault(tp, []).append(batch)
                request.size += batch.size
                taken += 1
                if self.sequencer is not None and sequences is not None:
                    self.sequencer.assign(sequences, batch)
                    if resend:
                        # Kafka's rule: a batch sent before goes alone, so that a duplicate
                        # answer (its original offset) cannot be mixed with other batches.
                        break
        requests.extend(current.values())
        for request in requests:
            self._in_flight[request.node] = self._in_flight.get(request.node, 0) + 1
        return requests, wake_at

    # ---- transactions ---------------------------------------------------------------------

    def _run_transaction_step(self) -> None:
        """Fail what the transaction can no longer take; add waiting partitions to it."""
        txn = self._transactions
        assert txn is not None
        with self._acc.lock:
            doomed = txn.queued_error_locked()
        if doomed is not None:
            self._fail(self._acc.abort_queued(), doomed)
        self._txn_retry_at = txn.add_pending_partitions(self._clock.monotonic())

    # ---- producer id ----------------------------------------------------------------------

    def _awaiting_producer_id_locked(self) -> bool:
        """True when batches wait for a producer id that InitProducerId should fetch."""
        return (
            self.sequencer is not None
            and not self.sequencer.has_producer_id
            and self._fatal is None
            and self._acc.has_queued_locked()
        )

    def _maybe_init_producer_id(self) -> None:
        """Fetch a producer id and epoch from any broker once there is something to send.

        Retriable failures, and no broker answering, are retried after ``retry.backoff.ms``
        (the batches meanwhile wait, bounded by ``delivery.timeout.ms``); any other failure
        is fatal, as in Kafka: every record sent through this producer then fails with it.
        Not under the lock: it blocks for at most ``request.timeout.ms`` per broker.
        """
        if self.sequencer is None or self.sequencer.has_producer_id:
            return  # read without the lock: only this thread gives or takes the id
        with self._acc.lock:
            if not self._awaiting_producer_id_locked():
                return
            if self._clock.monotonic() < self._producer_id_retry_at:
                return
        code = 0
        error: LograftError | None = None
        try:
            response = self._conn.call("InitProducerId", pb.InitProducerIdRequest())
            code = response.error_code
            if code:
                error = error_for_code(code, response.error_message or "InitProducerId")
            elif response.producer_id < 0 or response.producer_epoch < 0:
                error = UnknownServerError(
                    f"InitProducerId gave producer id {response.producer_id} epoch "
                    f"{response.producer_epoch}"
                )
        except LograftError as exc:
            error = exc
        if error is None:
            with self._acc.lock:
                assert self.sequencer is not None
                self.sequencer.set_producer_id(response.producer_id, response.producer_epoch)
                self._acc.wake.notify()
            log.info(
                "producer id assigned producer_id=%d producer_epoch=%d client_id=%s",
                response.producer_id,
                response.producer_epoch,
                self._client_id,
            )
            return
        # The batches waiting for the id are bounded by delivery.timeout.ms.
        if retried_in_background(error):
            self._producer_id_retry_at = self._clock.monotonic() + self._backoff_s
            log.info("InitProducerId failed, will retry error_code=%d error=%s", code, error)
            return
        log.error("InitProducerId failed; producer is unusable error=%s", error)
        with self._acc.lock:
            self._fatal = error

    # ---- requests and answers -------------------------------------------------------------

    def _send(self, request: ProduceRequest) -> None:
        """Encode the request's open batches and send it without waiting for the answer."""
        # Built in place: a message passed to a constructor is copied, and each megabyte
        # of records was copied three times on its way into the request.
        message = pb.ProduceRequest(
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            transactional_id=(
                self._transactions.transactional_id if self._transactions is not None else ""
            ),
        )
        topics: dict[str, Any] = {}
        now = self._clock.monotonic()
        for tp, batches in request.batches.items():
            for batch in batches:
                if batch.data is None:
                    assert batch.pending is not None
                    batch.data = batch.pending.build(self._acc.compression)
                    batch.pending = None
                if not batch.stamped and batch.base_sequence >= 0:
                    batch.data = with_producer_fields(
                        batch.data,
                        batch.producer_id,
                        batch.producer_epoch,
                        Sequencer.header_sequence(batch),
                        transactional=self._transactions is not None,
                    )
                    batch.stamped = True
                batch.sent_at = now
            records = (
                batches[0].data
                if len(batches) == 1
                else b"".join(b.data for b in batches if b.data is not None)
            )
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = message.topics.add(name=tp.topic)
            topic.partitions.add(partition=tp.partition, records=records)
        try:
            call = self._conn.submit(request.node, "Produce", message, self._conn.timeout_s())
        except LograftError as exc:
            self._settle(request, exc, now)
            return
        call.add_done_callback(lambda done: self.on_response(request, done, now))
        if self._acks == 0:
            for batches in request.batches.values():
                for batch in batches:
                    self._complete(batch, -1, -1, now)

    def on_response(self, request: ProduceRequest, call: Any, sent_at: float) -> None:
        """The client's I/O thread: the request's answer (or failure) arrived; handle it."""
        try:
            self._settle(request, call, sent_at)
        except Exception:
            self._crashed("producer answer handling crashed")

    def _crashed(self, what: str) -> None:
        """A bug, not a broker failure: report it (with the exception being handled), stop
        the producer and fail every pending record loudly rather than leave callers
        waiting forever."""
        log.exception(what)
        with self._acc.lock:
            self._acc.closing = True
            self._acc.wake.notify()
        self.fail_all(UnknownServerError(what))

    def _settle(self, request: ProduceRequest, outcome: Any, sent_at: float) -> None:
        """Complete, retry or fail the request's batches and free its in-flight slot."""
        acked = self._handle_answer(request, outcome, sent_at)
        # One turn of the lock per answer: the callers' sends wait for it.
        with self._acc.lock:
            self._in_flight[request.node] -= 1
            if acked:
                self._retire_locked(acked, acked=True)
            # The freed slot matters only to batches that wait: waking an idle sender for
            # nothing costs a synchronous send a thread wake-up just as its caller wakes.
            if self._idle and self._acc.has_queued_locked():
                self._acc.wake.notify()

    def _handle_answer(
        self, request: ProduceRequest, outcome: Any, sent_at: float
    ) -> list[ProducerBatch]:
        """Complete, retry or fail the request's batches; returns the ones written, whose
        futures are complete but which are still to retire."""
        if self._acks == 0:
            if isinstance(outcome, LograftError):
                log.debug("acks=0 request failed error=%s", outcome)
            return []
        error: LograftError | None = None
        response = None
        if isinstance(outcome, LograftError):
            error = outcome
        else:
            try:
                response = outcome.result()
            except LograftError as exc:
                error = exc
            except Exception as exc:
                error = NetworkError(str(exc))
        if error is not None:
            for batches in request.batches.values():
                self._fail_or_retry(batches, error)
            return []
        acked: list[ProducerBatch] = []
        seen: set[TopicPartition] = set()
        assert response is not None
        now = self._clock.monotonic()
        latency_ms = (now - sent_at) * 1000.0
        succeeded = self._delivery.succeeded
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                answered = request.batches.get(tp)
                if answered is None or tp in seen:
                    continue
                seen.add(tp)
                batches = answered
                if p.error_code:
                    self._fail_or_retry(
                        batches, error_for_code(p.error_code, p.error_message or str(tp))
                    )
                    continue
                if len(p.batch_base_offsets) == len(batches):
                    # One offset per batch: a retried duplicate keeps its original offset,
                    # which need not be contiguous with the batches after it.
                    for batch, base in zip(batches, p.batch_base_offsets, strict=True):
                        succeeded(batch, base, p.log_append_time_ms, latency_ms)
                else:
                    base = p.base_offset
                    for batch in batches:
                        succeeded(batch, base, p.log_append_time_ms, latency_ms)
                        base += batch.record_count
                acked.extend(batches)
        for tp, batches in request.batches.items():
            if tp not in seen:
                self._fail_or_retry(
                    batches, UnknownServerError(f"no answer for {tp.topic}-{tp.partition}")
                )
        return acked

    # ---- outcomes -------------------------------------------------------------------------

    def _complete(
        self, batch: ProducerBatch, base_offset: int, append_time: int, sent_at: float
    ) -> None:
        latency_ms = (self._clock.monotonic() - sent_at) * 1000.0
        self._delivery.succeeded(batch, base_offset, append_time, latency_ms)
        with self._acc.lock:
            self._retire_locked([batch], acked=True)

    def _fail(self, batches: list[ProducerBatch], error: BaseException) -> None:
        if not batches:
            return
        # The producer's state learns of the failure before the caller does (Kafka's order):
        # a record sent as soon as this future fails must be sequenced, and checked against
        # the transaction, knowing that this batch failed.
        with self._acc.lock:
            if self._transactions is not None:
                self._transactions.on_batch_failed_locked(error)
            self._resolve_sequences_locked(batches, acked=False)
        for batch in batches:
            self._delivery.failed(batch, error)
            log.warning(
                "batch failed topic=%s partition=%d records=%d producer_id=%d epoch=%d "
                "base_sequence=%d error=%s detail=%r",
                batch.tp.topic,
                batch.tp.partition,
                batch.record_count,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                getattr(error, "error_name", type(error).__name__),
                str(error),
            )
            with self._acc.lock:
                self._acc.retire_locked([batch])  # its sequence was resolved above

    def _retire_locked(self, batches: list[ProducerBatch], acked: bool) -> None:
        self._resolve_sequences_locked(batches, acked)
        self._acc.retire_locked(batches)

    def _resolve_sequences_locked(self, batches: list[ProducerBatch], acked: bool) -> None:
        sequencer = self.sequencer
        if sequencer is None:
            return
        incomplete = self._acc.incomplete
        for batch in batches:
            if batch.seq not in incomplete:
                continue  # retired already: failed by close while its answer was handled
            if batch.base_sequence >= 0:
                sequencer.resolve(batch, acked)

    def _fail_or_retry(self, batches: list[ProducerBatch], error: LograftError) -> None:
        now = self._clock.monotonic()
        retry: list[ProducerBatch] = []
        for batch in batches:
            retriable = self._retriable(batch, error)
            if (
                retriable
                and batch.attempts < self._retries
                and now + self._backoff_s < batch.deadline
                and not self._acc.closed
            ):
                batch.attempts += 1
                batch.retry_at = now + self._backoff_s
                retry.append(batch)
            else:
                self._fail([batch], Sequencer.error_giving_up(batch, error) if retriable else error)
        if not retry:
            return
        log.info(
            "retrying batches topic=%s partition=%d batches=%d error=%s",
            retry[0].tp.topic,
            retry[0].tp.partition,
            len(retry),
            error.error_name,
        )
        with self._acc.lock:
            self._acc.requeue_locked(retry)
            if isinstance(error, _METADATA_ERRORS):
                self._metadata.update_wanted = True
            self._acc.wake.notify()

    def _retriable(self, batch: ProducerBatch, error: LograftError) -> bool:
        """Whether ``error`` lets ``batch`` go again; the sequencer records what it proves."""
        if self.sequencer is None or batch.base_sequence < 0:
            return Sequencer.retriable(batch, error)
        with self._acc.lock:
            return self.sequencer.on_error(batch, error)

    def _expire(self, expired: list[ProducerBatch]) -> None:
        for batch in expired:
            self._fail(
                [batch],
                RequestTimedOutError(
                    f"expiring {batch.record_count} records for {batch.tp.topic}-"
                    f"{batch.tp.partition}: delivery.timeout.ms passed"
                ),
            )

    def fail_all(self, error: LograftError) -> None:
        """Fail every incomplete batch, queued or in flight (close, or a crash)."""
        self._fail(self._acc.abort_incomplete(), error)
