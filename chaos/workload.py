"""The load a chaos run puts on the cluster, recorded op by op in the history.

- :class:`ProducerWorker`: one producer (``Producer.send``, one record at a time) writing
  unique values ``p{n}-{seq:06d}`` round-robin over the topic's partitions. Each send is an
  ``invoke`` and, when its future completes, ``ok`` (partition, offset) or ``info``: once a
  batch may have reached a broker, an error does not prove it was not written (a retry may
  have failed after a first attempt was appended), so only errors raised by ``send`` itself
  are ``fail``.
- :class:`PollWorker`: a consumer by assignment reading every partition from the start,
  recording each poll's records.
- :func:`drain`: after healing, every record of every partition from its earliest offset to
  its end (one ``drain`` op).

Every loop is bounded: workers stop when asked, and :func:`drain` by its deadline.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

from chaos.history import HistoryWriter, Op
from cluster.client import Consumer, Producer
from cluster.client.producer import RecordMetadata
from cluster.errors import LograftError
from replica.topic_partition import TopicPartition

__all__ = ["WORKLOADS", "PollWorker", "ProducerWorker", "WorkloadConfig", "drain"]

log = logging.getLogger(__name__)


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
    )
}
"""The workloads by name: ``acks-all`` is the configuration lograft promises no loss for."""


class ProducerWorker(threading.Thread):
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
    ) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.process = f"producer-{index}"
        self._history = history
        self._topic = topic
        self._partitions = partitions
        self._workload = workload
        self._interval_s = interval_s
        self._stop_event = threading.Event()
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

    def stop(self) -> None:
        """Stop sending (the records in flight complete in :meth:`close`)."""
        self._stop_event.set()

    def close(self) -> None:
        """Flush what is in flight (bounded by the delivery timeout) and close."""
        try:
            self._producer.flush(30)
        except LograftError as exc:
            log.info("flush at close failed process=%s error=%s", self.process, exc)
        self._producer.close()

    def run(self) -> None:
        while not self._stop_event.is_set():
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
            except LograftError as exc:
                # Refused before anything was sent: it certainly did not happen.
                self._history.complete(invoked, "fail", error=exc.error_name)
                self._stop_event.wait(self._interval_s)
                continue
            future.add_done_callback(functools.partial(self._completed, invoked))
            self._stop_event.wait(self._interval_s)

    def _completed(self, invoked: Op, future: Future[RecordMetadata]) -> None:
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
            name = error.error_name if isinstance(error, LograftError) else repr(error)
            self._history.complete(invoked, "info", error=name)


class PollWorker(threading.Thread):
    """A consumer by assignment reading every partition from the start until stopped."""

    def __init__(
        self, index: int, history: HistoryWriter, bootstrap: str, topic: str, partitions: int
    ) -> None:
        super().__init__(name=f"assign-consumer-{index}", daemon=True)
        self.process = f"assign-consumer-{index}"
        self._history = history
        self._topic = topic
        self._partitions = [TopicPartition(topic, p) for p in range(partitions)]
        self._stop_event = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": self.process,
                "request.timeout.ms": 5000,
            }
        )

    def stop(self) -> None:
        """Stop polling."""
        self._stop_event.set()

    def run(self) -> None:
        try:
            self._consumer.assign(self._partitions)
            while not self._stop_event.is_set():
                invoked = self._history.invoke(self.process, "poll", group=None)
                try:
                    records = self._consumer.poll(500)
                except LograftError as exc:
                    self._history.complete(invoked, "fail", error=exc.error_name)
                    self._stop_event.wait(0.2)
                    continue
                self._history.complete(
                    invoked,
                    "ok",
                    records=[
                        (r.topic, r.partition, r.offset, (r.value or b"").decode()) for r in records
                    ],
                )
        finally:
            self._consumer.close()


def drain(
    history: HistoryWriter, bootstrap: str, topic: str, partitions: int, timeout_s: float
) -> dict[tuple[str, int], list[tuple[int, str | None]]]:
    """Read every partition from its earliest offset to its end; records one ``drain`` op.

    Raises ``TimeoutError`` when the end is not reached within ``timeout_s``.
    """
    invoked = history.invoke("drain", "drain")
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "enable.auto.commit": False, "client.id": "drain"}
    )
    records: dict[tuple[str, int], list[tuple[int, str | None]]] = {
        (topic, p): [] for p in range(partitions)
    }
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"drain did not reach the end offsets {ends}")
            for record in consumer.poll(1000):
                value = None if record.value is None else record.value.decode()
                records[(record.topic, record.partition)].append((record.offset, value))
    finally:
        consumer.close()
    history.complete(
        invoked,
        "ok",
        records=[(t, p, o, v) for (t, p), rs in sorted(records.items()) for o, v in rs],
    )
    return records
