"""The load a chaos run puts on the cluster, recorded op by op in the history.

- :class:`ProducerWorker`: one producer (``Producer.send``, one record at a time) writing
  unique values ``p{n}-{seq:06d}`` round-robin over the topic's partitions. Each send is an
  ``invoke`` and, when its future completes, ``ok`` (partition, offset), ``fail`` or
  ``info`` (:func:`send_outcome`).
- :class:`GroupConsumerWorker`: a member of a consumer group (``subscribe``), recording each
  poll, each rebalance (``rebalance`` ops: partitions assigned, revoked or lost) and a
  synchronous ``commit`` of its positions after every poll that returned records. A consumer
  whose poll raises a non-retriable error is closed and replaced by a new member.
- :class:`AssignConsumerWorker`: a consumer by assignment reading every partition from the
  start, recording each poll, and now and then seeking one partition back to its beginning
  (a ``seek`` op) so that records are read more than once.
- :func:`drain`: after healing, every record of every partition from its earliest offset to
  the end offset ListOffsets gave (one ``drain`` op; ``read_committed``, a
  ``drain-committed`` op once every transaction has ended: one still open by its deadline
  ends the op ``info`` with ``open``, the partitions it holds, see
  :class:`OpenTransactionsError`).

The ``txn-pipeline`` workload (:attr:`WorkloadConfig.pipeline`) adds an exactly-once
read-process-write pipeline on top of the producers (which fill its input):

- :class:`PipelineWorker`: a ``read_committed`` member of the pipeline's group and a
  transactional producer of its own ``transactional.id`` (docs/examples/exactly_once.py's
  pattern, KIP-447). Each poll's records become one transaction (a ``txn`` op): one output
  record per input record, ``<input value>|<txn label>``, to the same partition of the output
  topic, and the group's offsets past them (``send_offsets_to_transaction`` with
  ``consumer.group_metadata()``). It aborts about one transaction in ten itself, once its
  records and offsets are sent (``CHOSEN_ABORT``, as an application that cannot process a
  record), so that every run has aborted transactions for ``read_committed`` not to see,
  and about one in fifty it *crashes* there: a new instance (a new member, a new producer of
  the same id) takes over and the abandoned producer, a zombie, tries to commit (see the
  class).
  On an error before the commit it aborts (``fail``: never asked to commit); when the commit
  itself raises it retries a retriable error a few times, aborts after an abortable one
  (``fail`` once the abort returned) and otherwise gives up (``info``: unknown). A producer
  that cannot go on (fenced, or its abort failed) is closed and a new one of the same id
  initialised (a ``txn-init`` op: it fences the old one and ends its transaction). After any
  transaction that did not commit, the consumer seeks the transaction's partitions back to
  the group's committed offsets (a ``seek`` op), as an application must: the positions had
  moved past records whose output was not committed.
- :class:`OffsetObserver`: reads the group's committed offset (``read_committed``: stable
  offsets, KIP-447) of one partition after another every tenth of a second (``offset-fetch``
  ops).
- A :class:`AssignConsumerWorker` with ``isolation_level="read_committed"`` reads the output.
- :func:`wait_consumed`: after the faults, waits (bounded) until the group's committed
  offsets reach the input's end.

**ok, fail or info.** A send is ``fail`` only when it certainly was not written: ``send``
itself raised (nothing was queued), its future had failed before ``send`` returned (a record
too large, a partition the topic does not have), or the error is one the broker gives for the
batch's content whatever the attempt (``MESSAGE_TOO_LARGE``, ``INVALID_RECORD``, ...: every
attempt of the batch was refused alike). Any other error is ``info``: the producer retries
retriable errors (``NOT_ENOUGH_REPLICAS`` among them) until ``delivery.timeout.ms``, and as
its documentation says, a timeout or a lost response may follow a write, and an earlier
attempt may have been written, so even a final ``NOT_ENOUGH_REPLICAS`` (refused before the
append) does not prove that the record is not in the log. Calling those ``fail`` would make
the checker report reads of them as anomalies that are none.

Every loop is bounded: workers stop when asked or at their deadline, whichever is first,
and after ``max_ops`` operations; :func:`drain` and :func:`wait_consumed` by their deadlines;
a pipeline worker's commit retries and its replacements of consumers and producers by
counts.
"""

# Over 600 lines: every worker of a chaos run, recording ops in the one history format they share.
from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from chaos.history import OUTPUT_SEPARATOR, HistoryWriter, Op
from cluster.client import Consumer, Producer
from cluster.client.consumer import ConsumerRecord
from cluster.client.producer import RecordFuture
from lograft.protocol.errors import (
    IllegalStateError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTimestampError,
    InvalidTopicError,
    LograftError,
    MessageTooLargeError,
    RecordListTooLargeError,
    TransactionAbortableError,
    UnsupportedCompressionTypeError,
)
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "WORKLOADS",
    "AssignConsumerWorker",
    "GroupConsumerWorker",
    "OffsetObserver",
    "OpenTransactionsError",
    "PipelineWorker",
    "ProducerWorker",
    "WorkloadConfig",
    "drain",
    "observe_committed",
    "send_outcome",
    "wait_consumed",
    "warm_up_transactions",
]

log = logging.getLogger(__name__)

MAX_OPS = 5_000_000
"""Bound of every worker's loop, beside its deadline."""
MAX_REPLACEMENTS = 1000
"""Bound of the consumers a group worker replaces after fatal errors (and of the producers
a pipeline worker re-creates)."""
COMMIT_ATTEMPTS = 3
"""How many times a pipeline worker calls ``commit_transaction`` when it raises a retriable
error (a timed-out commit may be called again) before it gives the outcome up as unknown."""
TRANSACTION_TIMEOUT_MS = 20000
"""The pipeline producers' ``transaction.timeout.ms``: a transaction its producer left open
(closed without ending it) is aborted by its coordinator within this."""

_REFUSED_FOR_CONTENT = (
    MessageTooLargeError,
    RecordListTooLargeError,
    InvalidRecordError,
    InvalidTopicError,
    InvalidRequiredAcksError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)
"""Errors a broker gives for a batch's content or the producer's settings: every attempt of
the batch gets the same answer, so none was written."""


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """The producer settings and topic configs of a workload."""

    name: str
    acks: str
    idempotent: bool
    topic_configs: tuple[tuple[str, str], ...] = (("min.insync.replicas", "2"),)
    pipeline: bool = False
    """Run the transactional read-process-write pipeline on the producers' topic (its
    workers replace the group consumers; see the module docstring)."""
    send_interval_s: float | None = None
    """Each producer's pause between sends, when the workload sets it (else the run's)."""


WORKLOADS = {
    w.name: w
    for w in (
        WorkloadConfig("acks-all", "all", True),
        WorkloadConfig("acks-1", "1", False),  # idempotence needs acks=all (Kafka)
        WorkloadConfig("no-idempotence", "all", False),
        WorkloadConfig(
            "unclean",
            "all",
            True,
            (("min.insync.replicas", "2"), ("unclean.leader.election.enable", "true")),
        ),
        # Acknowledged before fdatasync (every flush.ms = 1 s): a power loss may take them.
        WorkloadConfig(
            "flush-interval",
            "all",
            True,
            (("min.insync.replicas", "2"), ("flush.policy", "interval")),
        ),
        # acks=all with the ISR allowed down to one replica, which then acknowledges alone
        # (without, then with, unclean election: Kafka's classic case of losing writes).
        WorkloadConfig("min-isr-1", "all", True, (("min.insync.replicas", "1"),)),
        WorkloadConfig(
            "unclean-min-isr-1",
            "all",
            True,
            (("min.insync.replicas", "1"), ("unclean.leader.election.enable", "true")),
        ),
        # acks-all input, read, transformed and written again exactly once in transactions;
        # fewer input records (each transaction costs several replicated coordinator writes).
        WorkloadConfig("txn-pipeline", "all", True, pipeline=True, send_interval_s=0.02),
    )
}
"""The workloads by name: ``acks-all`` is the configuration lograft promises no loss for."""


def send_outcome(error: BaseException, before_send_returned: bool) -> Literal["fail", "info"]:
    """How a failed send goes into the history (see the module docstring)."""
    if before_send_returned or isinstance(error, IllegalStateError):
        return "fail"
    if isinstance(error, _REFUSED_FOR_CONTENT):
        return "fail"
    return "info"


def _error_name(error: BaseException) -> str:
    return error.error_name if isinstance(error, LograftError) else repr(error)


class _Worker(threading.Thread):
    """A thread that loops until :meth:`stop`, its deadline or ``max_ops``."""

    def __init__(self, process: str, history: HistoryWriter, deadline: float) -> None:
        super().__init__(name=process, daemon=True)
        self.process = process
        self._history = history
        self._deadline = deadline
        self._stop_event = threading.Event()
        self.ops = 0

    def stop(self) -> None:
        """Stop after the current operation."""
        self._stop_event.set()

    def _running(self) -> bool:
        self.ops += 1
        return (
            not self._stop_event.is_set()
            and time.monotonic() < self._deadline
            and self.ops <= MAX_OPS
        )


class ProducerWorker(_Worker):
    """Sends unique values until stopped, recording every send."""

    def __init__(
        self,
        index: int,
        history: HistoryWriter,
        bootstrap: str,
        topic: str,
        partitions: int,
        workload: WorkloadConfig,
        interval_s: float,
        deadline: float,
    ) -> None:
        super().__init__(f"producer-{index}", history, deadline)
        self._topic = topic
        self._partitions = partitions
        self._workload = workload
        self._interval_s = interval_s
        self._index = index
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": workload.acks,
                "enable.idempotence": workload.idempotent,
                "linger.ms": 2,
                "delivery.timeout.ms": 20000,
                "request.timeout.ms": 5000,
                "max.block.ms": 5000,
                "client.id": self.process,
            }
        )
        self.sent = 0

    def close(self) -> None:
        """Flush what is in flight (bounded by the delivery timeout) and close."""
        try:
            self._producer.flush(30)
        except LograftError as exc:
            log.info("flush at close failed process=%s error=%s", self.process, exc)
        self._producer.close(30)

    def run(self) -> None:
        while self._running():
            value = f"p{self._index}-{self.sent:06d}"
            partition = self.sent % self._partitions
            self.sent += 1
            invoked = self._history.invoke(
                self.process,
                "send",
                topic=self._topic,
                partition=partition,
                value=value,
                acks=self._workload.acks,
                idempotent=self._workload.idempotent,
                producer=self._workload.name,
            )
            try:
                future = self._producer.send(self._topic, value.encode(), partition=partition)
            except Exception as exc:
                # Raised before anything was queued: it certainly did not happen.
                self._history.complete(invoked, "fail", error=_error_name(exc))
                self._stop_event.wait(self._interval_s)
                continue
            if future.done() and future.exception() is not None:
                error = future.exception()
                assert error is not None
                self._history.complete(
                    invoked,
                    send_outcome(error, before_send_returned=True),
                    error=_error_name(error),
                )
            else:
                future.add_done_callback(functools.partial(self._completed, invoked))
            self._stop_event.wait(self._interval_s)

    def _completed(self, invoked: Op, future: RecordFuture) -> None:
        error = future.exception()
        if error is None:
            metadata = future.result()
            self._history.complete(
                invoked,
                "ok",
                topic=self._topic,
                partition=metadata.partition,
                offset=metadata.offset,
            )
        else:
            outcome = send_outcome(error, before_send_returned=False)
            self._history.complete(invoked, outcome, error=_error_name(error))


def _polled(records: Sequence[ConsumerRecord]) -> list[tuple[str, int, int, str]]:
    return [(r.topic, r.partition, r.offset, (r.value or b"").decode()) for r in records]


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"


def _record_rebalance(
    history: HistoryWriter, process: str, group: str, what: str, partitions: list[TopicPartition]
) -> None:
    names = [_name(tp) for tp in partitions]
    invoked = history.invoke(process, "rebalance", group=group, partitions=names, detail=what)
    history.complete(invoked, "ok", group=group, partitions=names, detail=what)


class GroupConsumerWorker(_Worker):
    """A member of consumer group ``group``: polls, records rebalances, commits what it read."""

    def __init__(
        self,
        group: str,
        index: int,
        history: HistoryWriter,
        bootstrap: str,
        topic: str,
        deadline: float,
    ) -> None:
        super().__init__(f"consumer-{group}-{index}", history, deadline)
        self.group = group
        self._topic = topic
        self._servers = bootstrap
        self._positions: dict[TopicPartition, int] = {}
        self.replaced = 0
        """Consumers closed and replaced after an error that ended their membership."""

    def _new_consumer(self) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self._servers,
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": self.process,
                "request.timeout.ms": 5000,
                "session.timeout.ms": 10000,
            }
        )
        consumer.subscribe(
            [self._topic],
            on_assign=functools.partial(self._rebalanced, "assigned"),
            on_revoke=functools.partial(self._rebalanced, "revoked"),
            on_lost=functools.partial(self._rebalanced, "lost"),
        )
        return consumer

    def _replace_consumer(self, consumer: Consumer, error: LograftError) -> Consumer:
        """A non-retriable error ended the consumer's membership for good (every later poll
        raises it): as Jepsen does with a crashed client, close it and start a new member,
        which reads on from the group's committed offsets (a ``rebalance`` op)."""
        log.warning("replacing consumer process=%s error=%s", self.process, error)
        self.replaced += 1
        self._positions.clear()
        try:
            consumer.close(1000)
        except LograftError as exc:
            log.info("closing a failed consumer failed process=%s error=%s", self.process, exc)
        invoked = self._history.invoke(
            self.process, "rebalance", group=self.group, partitions=[], detail="new consumer"
        )
        replacement = self._new_consumer()
        self._history.complete(
            invoked, "ok", group=self.group, partitions=[], detail="new consumer"
        )
        return replacement

    def _rebalanced(self, what: str, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if what != "assigned":
            for tp in partitions:
                self._positions.pop(tp, None)
        _record_rebalance(self._history, self.process, self.group, what, partitions)

    def run(self) -> None:
        consumer = self._new_consumer()
        try:
            while self._running():
                invoked = self._history.invoke(self.process, "poll", group=self.group)
                try:
                    records = consumer.poll(500)
                except LograftError as exc:
                    self._history.complete(invoked, "fail", error=exc.error_name)
                    if not exc.retriable and self.replaced < MAX_REPLACEMENTS:
                        consumer = self._replace_consumer(consumer, exc)
                    self._stop_event.wait(1.0)
                    continue
                polled = _polled(records)
                self._history.complete(invoked, "ok", group=self.group, records=polled)
                for topic, partition, offset, _value in polled:
                    self._positions[TopicPartition(topic, partition)] = offset + 1
                if polled:
                    self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer) -> None:
        offsets = dict(self._positions)
        invoked = self._history.invoke(
            self.process,
            "commit",
            group=self.group,
            offsets={f"{tp.topic}/{tp.partition}": offset for tp, offset in offsets.items()},
        )
        try:
            consumer.commit(offsets)
        except LograftError as exc:
            # A timeout may follow a commit that was applied; refusals are rare enough that
            # telling them apart buys nothing (the checker reads only acknowledged commits).
            self._history.complete(invoked, "info", error=exc.error_name)
            return
        self._history.complete(invoked, "ok", group=self.group)


class AssignConsumerWorker(_Worker):
    """A consumer by assignment reading every partition from the start until stopped; every
    ``seek_every_s`` (about) it seeks one partition back to its beginning. With
    ``isolation_level="read_committed"`` its polls say so (an extra ``isolation``)."""

    def __init__(
        self,
        index: int,
        history: HistoryWriter,
        bootstrap: str,
        topic: str,
        partitions: int,
        deadline: float,
        seed: int = 0,
        seek_every_s: float = 10.0,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        super().__init__(f"assign-consumer-{index}", history, deadline)
        self._topic = topic
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._rng = random.Random(f"{self.process}/{seed}")
        self._seek_every_s = seek_every_s
        self._isolation: dict[str, str] = (
            {"isolation": isolation_level} if isolation_level != "read_uncommitted" else {}
        )
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": self.process,
                "request.timeout.ms": 5000,
                "isolation.level": isolation_level,
            }
        )

    def _seek_back(self) -> None:
        tp = self._rng.choice(self._partitions)
        name = f"{tp.topic}/{tp.partition}"
        invoked = self._history.invoke(self.process, "seek", partitions=[name], detail="beginning")
        try:
            self._consumer.seek_to_beginning(tp)
        except LograftError as exc:
            self._history.complete(invoked, "fail", error=exc.error_name)
            return
        self._history.complete(invoked, "ok", partitions=[name], detail="beginning")

    def run(self) -> None:
        try:
            self._consumer.assign(self._partitions)
            next_seek = time.monotonic() + self._seek_every_s * self._rng.uniform(0.5, 1.5)
            while self._running():
                if time.monotonic() >= next_seek:
                    self._seek_back()
                    next_seek = time.monotonic() + self._seek_every_s * self._rng.uniform(0.5, 1.5)
                invoked = self._history.invoke(
                    self.process, "poll", group=None, topic=self._topic, **self._isolation
                )
                try:
                    records = self._consumer.poll(500)
                except LograftError as exc:
                    self._history.complete(invoked, "fail", error=exc.error_name)
                    self._stop_event.wait(0.2)
                    continue
                self._history.complete(invoked, "ok", records=_polled(records), **self._isolation)
        finally:
            self._consumer.close()


def drain(
    history: HistoryWriter,
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout_s: float,
    isolation_level: str = "read_uncommitted",
    only: Sequence[int] | None = None,
    **fields: object,
) -> dict[tuple[str, int], list[tuple[int, str | None]]]:
    """Read every partition (``only``: those of them) from its earliest offset to its end;
    records one ``drain`` op (``drain-committed`` with ``read_committed``; ``fields`` go on
    its invocation).

    The end is what ListOffsets answers once, before reading. ``read_committed`` first waits
    until every partition's last stable offset is its high watermark (every transaction
    ended), then reads to it. Raises ``TimeoutError`` (the op then ends ``info``) when the
    end is not reached within ``timeout_s``.
    """
    committed = isolation_level == "read_committed"
    invoked = history.invoke(
        "drain", "drain-committed" if committed else "drain", topic=topic, **fields
    )
    indexes = range(partitions) if only is None else only
    tps = [TopicPartition(topic, p) for p in indexes]
    records: dict[tuple[str, int], list[tuple[int, str | None]]] = {(topic, p): [] for p in indexes}
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "enable.auto.commit": False,
            "client.id": "drain",
            "isolation.level": isolation_level,
        }
    )
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = _stable_ends(bootstrap, consumer, tps, deadline) if committed else None
        if ends is None:
            ends = consumer.end_offsets(tps)
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"drain did not reach the end offsets {ends}")
            for record in consumer.poll(1000):
                if record.offset >= ends[TopicPartition(record.topic, record.partition)]:
                    continue
                value = None if record.value is None else record.value.decode()
                records[(record.topic, record.partition)].append((record.offset, value))
    except BaseException as exc:
        held = {"open": exc.open} if isinstance(exc, OpenTransactionsError) else {}
        history.complete(invoked, "info", error=_error_name(exc), **held)
        raise
    finally:
        consumer.close()
    history.complete(
        invoked,
        "ok",
        records=[(t, p, o, v) for (t, p), rs in sorted(records.items()) for o, v in rs],
    )
    return records


class OpenTransactionsError(TimeoutError):
    """Partitions whose last stable offset stayed below their high watermark: a transaction
    still open there. ``open``: ``{"topic/partition": (last stable offset, high watermark)}``."""

    def __init__(self, open_: dict[str, tuple[int, int]]) -> None:
        super().__init__(f"transactions still open: (last stable, high) {open_}")
        self.open = open_


def _stable_ends(
    bootstrap: str, consumer: Consumer, tps: list[TopicPartition], deadline: float
) -> dict[TopicPartition, int]:
    """The last stable offsets of ``tps`` once they equal the high watermarks (bounded by
    ``deadline``: :class:`OpenTransactionsError` names the partitions a transaction still
    holds open)."""
    with Consumer(
        {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "client.id": "drain-hw"}
    ) as uncommitted:
        while True:
            stable = consumer.end_offsets(tps)
            high = uncommitted.end_offsets(tps)
            if stable == high:
                return stable
            if time.monotonic() > deadline:
                raise OpenTransactionsError(
                    {_name(tp): (stable[tp], high[tp]) for tp in tps if stable[tp] != high[tp]}
                )
            time.sleep(0.5)


def warm_up_transactions(bootstrap: str, transactional_id: str = "chaos-warm-up") -> None:
    """Initialise one transactional producer: the first one creates the internal topic
    ``__transaction_state`` (50 partitions), which under load took a node many seconds."""
    with Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "max.block.ms": 60000,
            "client.id": transactional_id,
        }
    ) as producer:
        producer.init_transactions()


def observe_committed(
    history: HistoryWriter,
    process: str,
    consumer: Consumer,
    group: str,
    partitions: Sequence[TopicPartition],
    timeout_ms: int = 5000,
) -> dict[TopicPartition, int | None] | None:
    """One ``offset-fetch`` op: the group's committed offsets as ``consumer`` (a
    ``read_committed`` consumer of ``group``: stable offsets) reads them; None on an error."""
    invoked = history.invoke(
        process,
        "offset-fetch",
        group=group,
        partitions=[_name(tp) for tp in partitions],
        isolation="read_committed",
    )
    try:
        found = consumer.committed(partitions, timeout_ms=timeout_ms)
    except LograftError as exc:
        history.complete(invoked, "fail", error=exc.error_name)
        return None
    offsets = {_name(tp): offset for tp, offset in sorted(found.items()) if offset is not None}
    history.complete(invoked, "ok", group=group, offsets=offsets)
    return found


def _offsets_reader(bootstrap: str, group: str, process: str) -> Consumer:
    """A consumer that only reads ``group``'s committed offsets (stable ones: KIP-447)."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "client.id": process,
            "request.timeout.ms": 5000,
        }
    )


class OffsetObserver(_Worker):
    """Reads the group's committed offset of one partition of ``topic`` after another,
    round-robin, every ``interval_s`` until stopped (``offset-fetch`` ops). One partition at a
    time: a stable read waits while a transaction in flight holds offsets of the partitions it
    asks for, and one of three partitions is held far less often than any of them."""

    def __init__(
        self,
        index: int,
        history: HistoryWriter,
        bootstrap: str,
        group: str,
        topic: str,
        partitions: int,
        deadline: float,
        interval_s: float = 0.1,
    ) -> None:
        super().__init__(f"offset-fetch-{index}", history, deadline)
        self._group = group
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._interval_s = interval_s
        self._consumer = _offsets_reader(bootstrap, group, self.process)

    def run(self) -> None:
        try:
            while self._running():
                tp = self._tps[self.ops % len(self._tps)]
                observe_committed(self._history, self.process, self._consumer, self._group, [tp])
                self._stop_event.wait(self._interval_s)
        finally:
            self._consumer.close(5000)


def wait_consumed(
    bootstrap: str, group: str, topic: str, partitions: int, timeout_s: float
) -> tuple[dict[str, int], float]:
    """Wait until ``group``'s committed offsets reach the end of every partition of
    ``topic`` (its producers stopped), at most ``timeout_s``; returns, per partition
    (``"topic/partition"``) still short, how many records it lacks, and the seconds waited."""
    start = time.monotonic()
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    short: dict[str, int] = {_name(tp): -1 for tp in tps}
    with _offsets_reader(bootstrap, group, "wait-consumed") as consumer:
        while time.monotonic() - start <= timeout_s:
            try:
                ends = consumer.end_offsets(tps)
                committed = consumer.committed(tps, timeout_ms=5000)
            except LograftError as exc:
                log.info("waiting for the pipeline error=%s", exc)
            else:
                short = {
                    _name(tp): ends[tp] - (committed[tp] or 0)
                    for tp in tps
                    if (committed[tp] or 0) < ends[tp]
                }
                if not short:
                    break
            time.sleep(0.5)
    return short, round(time.monotonic() - start, 2)


class _ChosenAbort(LograftError):
    """A pipeline worker's own decision to abort a transaction (as an application does when
    it cannot process a record): aborted transactions under faults, on purpose."""

    error_name = "CHOSEN_ABORT"


class PipelineWorker(_Worker):
    """One copy of an exactly-once read-process-write application (see the module
    docstring): a ``read_committed`` group member and a transactional producer.

    It aborts about ``abort_p`` of its transactions itself, once their records and offsets
    are sent (their error: ``CHOSEN_ABORT``), so that every run has aborted transactions to
    hide. About ``crash_p`` of them it *crashes* at that point, as an application instance
    killed mid-transaction whose replacement starts at once: a new member and a new producer
    of the same ``transactional.id`` (whose ``init_transactions`` fences the old producer and
    aborts its transaction), after which the abandoned producer, a zombie, tries to commit
    (``ZOMBIE_COMMIT``): it must be refused, and its records stay invisible. Then the
    abandoned clients are closed.
    """

    def __init__(
        self,
        index: int,
        history: HistoryWriter,
        bootstrap: str,
        source: str,
        sink: str,
        group: str,
        deadline: float,
        seed: int = 0,
        abort_p: float = 0.1,
        crash_p: float = 0.02,
        max_poll_records: int = 100,
    ) -> None:
        super().__init__(f"pipeline-{index}", history, deadline)
        self.index = index
        self._rng = random.Random(f"{self.process}/{seed}")
        self._abort_p = abort_p
        self._crash_p = crash_p
        self.group = group
        self.transactional_id = f"chaos-pipeline-{index}"
        self._servers = bootstrap
        self._source = source
        self._sink = sink
        self._max_poll_records = max_poll_records
        self._begun = 0
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._rewind: set[TopicPartition] = set()
        """Partitions to seek back to the committed offsets before the next poll."""
        self.replaced = 0
        """Consumers closed and replaced (a poll's non-retriable error, a failed rewind)."""
        self.recreated = 0
        """Producers closed and created again (fenced, an abort that failed, a commit whose
        outcome was not learnt, a failed ``init_transactions``)."""
        self.crashed = 0
        """Crashes (see the class docstring)."""

    # ---- the clients -----------------------------------------------------------------

    def _new_consumer(self, detail: str | None = None) -> Consumer:
        """A new member of the group; with ``detail``, recorded as a ``rebalance`` op (it
        reads on from the group's committed offsets)."""
        invoked = None
        if detail is not None:
            invoked = self._history.invoke(
                self.process, "rebalance", group=self.group, partitions=[], detail=detail
            )
        consumer = Consumer(
            {
                "bootstrap.servers": self._servers,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,  # offsets commit in the transactions
                "auto.offset.reset": "earliest",
                "client.id": self.process,
                "request.timeout.ms": 5000,
                "session.timeout.ms": 10000,
                "max.poll.records": self._max_poll_records,
            }
        )
        consumer.subscribe(
            [self._source],
            on_assign=functools.partial(self._rebalanced, "assigned"),
            on_revoke=functools.partial(self._rebalanced, "revoked"),
            on_lost=functools.partial(self._rebalanced, "lost"),
        )
        if invoked is not None:
            self._history.complete(invoked, "ok", group=self.group, partitions=[], detail=detail)
        return consumer

    def _rebalanced(self, what: str, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        _record_rebalance(self._history, self.process, self.group, what, partitions)

    def _close_consumer(self, consumer: Consumer, timeout_ms: int = 1000) -> None:
        try:
            consumer.close(timeout_ms)
        except LograftError as exc:
            log.info("closing a consumer failed process=%s error=%s", self.process, exc)

    def _replace_consumer(self, why: str) -> None:
        """Close the consumer and start a new member."""
        log.warning("replacing consumer process=%s why=%s", self.process, why)
        self.replaced += 1
        if self._consumer is not None:
            self._close_consumer(self._consumer)
        self._rewind.clear()  # the new member starts from the committed offsets
        self._consumer = self._new_consumer("new consumer")

    def _new_producer(self) -> Producer | None:
        """A producer of the worker's transactional id, initialised (which fences the one
        before and ends its transaction); None when that failed (a ``txn-init`` op)."""
        invoked = self._history.invoke(
            self.process, "txn-init", transactional_id=self.transactional_id
        )
        producer = Producer(
            {
                "bootstrap.servers": self._servers,
                "transactional.id": self.transactional_id,
                "acks": "all",
                "linger.ms": 2,
                "delivery.timeout.ms": 20000,
                "request.timeout.ms": 5000,
                "max.block.ms": 10000,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "client.id": self.process,
            }
        )
        try:
            producer.init_transactions()
        except LograftError as exc:
            # It may have reached the coordinator (and fenced the producer before).
            self._history.complete(invoked, "info", error=exc.error_name)
            self._close_producer(producer)
            return None
        self._history.complete(invoked, "ok", transactional_id=self.transactional_id)
        return producer

    def _close_producer(self, producer: Producer) -> None:
        try:
            producer.close(5)
        except LograftError as exc:
            log.info("closing a producer failed process=%s error=%s", self.process, exc)

    # ---- the loop --------------------------------------------------------------------

    def run(self) -> None:
        self._consumer = self._new_consumer()
        try:
            while self._running():
                if self._producer is None:
                    if self.recreated > MAX_REPLACEMENTS:
                        break
                    self._producer = self._new_producer()
                    if self._producer is None:
                        self.recreated += 1
                        self._stop_event.wait(1.0)
                        continue
                if self._rewind:
                    self._seek_back(self._consumer, sorted(self._rewind))
                    self._rewind.clear()
                self._poll_and_process(self._consumer, self._producer)
        finally:
            if self._producer is not None:
                self._close_producer(self._producer)
            self._close_consumer(self._consumer, 10000)

    def _poll_and_process(self, consumer: Consumer, producer: Producer) -> None:
        invoked = self._history.invoke(
            self.process, "poll", group=self.group, isolation="read_committed"
        )
        try:
            records = consumer.poll(500)
        except LograftError as exc:
            self._history.complete(invoked, "fail", error=exc.error_name)
            if not exc.retriable and self.replaced < MAX_REPLACEMENTS:
                self._replace_consumer(exc.error_name)
            self._stop_event.wait(1.0)
            return
        polled = _polled(records)
        self._history.complete(
            invoked, "ok", group=self.group, records=polled, isolation="read_committed"
        )
        if polled:
            self._transact(consumer, producer, polled)

    def _seek_back(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        """Seek ``tps`` back to the group's committed offsets (a ``seek`` op); a consumer
        that cannot is replaced, and the new member starts from them."""
        names = [_name(tp) for tp in tps]
        invoked = self._history.invoke(self.process, "seek", partitions=names, detail="committed")
        try:
            committed = consumer.committed(tps, timeout_ms=10000)
            for tp in tps:
                offset = committed[tp]
                if offset is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, offset)
        except LograftError as exc:
            # The positions may have moved for some of them: a new member reads them again.
            self._history.complete(invoked, "info", error=exc.error_name)
            self._replace_consumer(f"rewind failed: {exc.error_name}")
            return
        offsets = {_name(tp): o for tp, o in committed.items() if o is not None}
        self._history.complete(invoked, "ok", partitions=names, detail="committed", offsets=offsets)

    def _transact(
        self, consumer: Consumer, producer: Producer, polled: list[tuple[str, int, int, str]]
    ) -> None:
        """One transaction of ``polled`` (a ``txn`` op), and what its end calls for."""
        self._begun += 1
        label = f"{self.index}.{self._begun}"
        outputs = [f"{value}{OUTPUT_SEPARATOR}{label}" for _, _, _, value in polled]
        offsets: dict[TopicPartition, int] = {}
        for topic, partition, offset, _ in polled:
            tp = TopicPartition(topic, partition)
            offsets[tp] = max(offsets.get(tp, 0), offset + 1)
        invoked = self._history.invoke(
            self.process,
            "txn",
            group=self.group,
            offsets={_name(tp): o for tp, o in sorted(offsets.items())},
            records=polled,
            txn=label,
            transactional_id=self.transactional_id,
            outputs=outputs,
        )
        commit_asked = False
        try:
            producer.begin_transaction()
            for (_, partition, _, _), value in zip(polled, outputs, strict=True):
                producer.send(self._sink, value.encode(), partition=partition)
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            draw = self._rng.random()
            if draw < self._crash_p and self.crashed < MAX_REPLACEMENTS:
                self._crash(invoked, consumer, producer)
                return
            if draw < self._crash_p + self._abort_p:
                raise _ChosenAbort(f"the worker aborts transaction {label}")
            commit_asked = True
            self._commit(producer)
        except LograftError as exc:
            usable = self._failed(invoked, producer, exc, commit_asked)
            self._rewind.update(offsets)
            if not usable:
                self._close_producer(producer)
                self.recreated += 1
                self._producer = None  # a new one first: it ends this one's transaction
            return
        self._history.complete(invoked, "ok", txn=label)

    def _commit(self, producer: Producer) -> None:
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                producer.commit_transaction()
                return
            except LograftError as exc:
                if not exc.retriable or attempt == COMMIT_ATTEMPTS:
                    raise
                log.info("commit again process=%s attempt=%d error=%s", self.process, attempt, exc)

    def _crash(self, invoked: Op, consumer: Consumer, producer: Producer) -> None:
        """The instance dies with the transaction open; its replacement starts; then the
        abandoned producer, a zombie, tries to commit the transaction."""
        self.crashed += 1
        log.info("crash process=%s txn=%s", self.process, invoked.extra.get("txn"))
        self._consumer = self._new_consumer("new consumer (crash)")
        self._rewind.clear()
        self._producer = self._new_producer()  # fences the zombie, aborts its transaction
        if self._producer is None:
            self.recreated += 1
        try:
            producer.commit_transaction()
        except LograftError as exc:
            # Refused after its successor's init returned: the transaction was aborted then
            # (nothing had asked to commit it). Otherwise its outcome is not known.
            fenced = self._producer is not None
            self._history.complete(
                invoked,
                "fail" if fenced else "info",
                error=f"ZOMBIE_COMMIT: {exc}"[:300],
                txn=invoked.extra.get("txn"),
                aborted=fenced,
            )
        else:
            self._history.complete(invoked, "ok", txn=invoked.extra.get("txn"), zombie=True)
        self._close_producer(producer)
        self._close_consumer(consumer)

    def _failed(
        self, invoked: Op, producer: Producer, error: LograftError, commit_asked: bool
    ) -> bool:
        """Record a transaction that did not commit; returns whether the producer can go on.

        Before the commit was asked for, the transaction cannot commit (``fail``): abort it.
        A commit that raised an abortable error is aborted too (``fail`` once the abort
        returned); any other error of the commit leaves its outcome unknown (``info``), and
        the producer is replaced (its successor's ``init_transactions`` ends it).
        """
        aborted = False
        abort_error = None
        if not commit_asked or isinstance(error, TransactionAbortableError):
            try:
                producer.abort_transaction()
                aborted = True
            except LograftError as exc:
                abort_error = exc.error_name
        outcome: Literal["fail", "info"] = "fail" if aborted or not commit_asked else "info"
        log.info(
            "transaction did not commit process=%s txn=%s outcome=%s error=%s abort_error=%s",
            self.process,
            invoked.extra.get("txn"),
            outcome,
            error,
            abort_error,
        )
        self._history.complete(
            invoked,
            outcome,
            error=str(error)[:300],
            txn=invoked.extra.get("txn"),
            aborted=aborted,
            **({"abort_error": abort_error} if abort_error else {}),
        )
        return aborted
