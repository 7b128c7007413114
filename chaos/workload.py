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
  the end offset ListOffsets gave (one ``drain`` op).

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
and after ``max_ops`` operations; :func:`drain` by its deadline.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from chaos.history import HistoryWriter, Op
from cluster.client import Consumer, Producer
from cluster.client.consumer import ConsumerRecord
from cluster.client.producer import RecordFuture
from cluster.errors import (
    IllegalStateError,
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTimestampError,
    InvalidTopicError,
    LograftError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnsupportedCompressionTypeError,
)
from replica.topic_partition import TopicPartition

__all__ = [
    "WORKLOADS",
    "AssignConsumerWorker",
    "GroupConsumerWorker",
    "ProducerWorker",
    "WorkloadConfig",
    "drain",
    "send_outcome",
]

log = logging.getLogger(__name__)

MAX_OPS = 5_000_000
"""Bound of every worker's loop, beside its deadline."""
MAX_REPLACEMENTS = 1000
"""Bound of the consumers a group worker replaces after fatal errors."""

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
        names = [f"{tp.topic}/{tp.partition}" for tp in partitions]
        invoked = self._history.invoke(
            self.process, "rebalance", group=self.group, partitions=names, detail=what
        )
        self._history.complete(invoked, "ok", group=self.group, partitions=names, detail=what)

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
    ``seek_every_s`` (about) it seeks one partition back to its beginning."""

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
    ) -> None:
        super().__init__(f"assign-consumer-{index}", history, deadline)
        self._topic = topic
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._rng = random.Random(f"{self.process}/{seed}")
        self._seek_every_s = seek_every_s
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": self.process,
                "request.timeout.ms": 5000,
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
                invoked = self._history.invoke(self.process, "poll", group=None)
                try:
                    records = self._consumer.poll(500)
                except LograftError as exc:
                    self._history.complete(invoked, "fail", error=exc.error_name)
                    self._stop_event.wait(0.2)
                    continue
                self._history.complete(invoked, "ok", records=_polled(records))
        finally:
            self._consumer.close()


def drain(
    history: HistoryWriter, bootstrap: str, topic: str, partitions: int, timeout_s: float
) -> dict[tuple[str, int], list[tuple[int, str | None]]]:
    """Read every partition from its earliest offset to its end; records one ``drain`` op.

    The end is what ListOffsets answers once, before reading. Raises ``TimeoutError`` (the
    op then ends ``info``) when the end is not reached within ``timeout_s``.
    """
    invoked = history.invoke("drain", "drain")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    records: dict[tuple[str, int], list[tuple[int, str | None]]] = {
        (topic, p): [] for p in range(partitions)
    }
    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "client.id": "drain"}
    )
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
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
        history.complete(invoked, "info", error=_error_name(exc))
        raise
    finally:
        consumer.close()
    history.complete(
        invoked,
        "ok",
        records=[(t, p, o, v) for (t, p), rs in sorted(records.items()) for o, v in rs],
    )
    return records
