"""``lograft perf e2e``: end-to-end latency, from before ``send`` to the record coming out
of ``poll`` (Kafka's ``EndToEndLatency`` tool).

Records go one at a time (the next is sent once the previous was consumed), or, with
``--throughput``, from a sending thread at that rate while this thread consumes. Each record
carries a key made of this run's id and its sequence, so that the consumer matches it to its
send and skips other writers' records.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import TextIO

from cluster.client import (
    Consumer,
    NewTopic,
    Producer,
    RecordFuture,
    TopicPartition,
)
from lograft.protocol.errors import (
    InvalidConfigError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from ._args import admin_client, client_config_file, client_properties, progress_bar
from ._perf_stats import e2e_summary
from .produce import ErrorTracker, producer_config

__all__ = ["run_e2e"]

log = logging.getLogger(__name__)


def _ensure_topic(args: argparse.Namespace, err: TextIO) -> None:
    """Create ``--topic`` with one partition when it does not exist (as EndToEndLatency)."""
    with admin_client(args) as admin:
        try:
            admin.describe_topics([args.topic])
            return
        except UnknownTopicOrPartitionError:
            pass
        try:
            admin.create_topics([NewTopic(args.topic, 1, args.replication_factor)])[
                args.topic
            ].result()
            print(
                f"Created topic {args.topic} (1 partition, replication factor "
                f"{args.replication_factor})",
                file=err,
            )
        except TopicAlreadyExistsError:
            pass  # created meanwhile by someone else: fine


class _Receiver:
    """Matches consumed records to sends by key: this run's id + the record's sequence."""

    def __init__(self, consumer: Consumer, run_id: bytes, count: int, timeout_ms: int) -> None:
        self.consumer = consumer
        self.run_id = run_id
        self.received_at: list[float | None] = [None] * count
        self.received = 0
        self.timeout_s = timeout_ms / 1000.0

    def key(self, sequence: int) -> bytes:
        return self.run_id + sequence.to_bytes(8, "big")

    def poll_until(
        self,
        wanted: int,
        on_record: Callable[[], object] | None = None,
        failed: Callable[[], BaseException | None] | None = None,
    ) -> None:
        """Poll until ``wanted`` records of this run arrived; raise after ``timeout_ms``
        without one, or the sender's error (``failed``) as soon as there is one."""
        last_progress = time.perf_counter()
        while self.received < wanted:
            error = failed() if failed is not None else None
            if error is not None:
                raise error
            batch = self.consumer.poll(100)
            now = time.perf_counter()
            for record in batch:
                key = record.key
                if (
                    key is None
                    or len(key) != len(self.run_id) + 8
                    or not key.startswith(self.run_id)
                ):
                    continue  # another writer's record
                sequence = int.from_bytes(key[len(self.run_id) :], "big")
                if sequence < len(self.received_at) and self.received_at[sequence] is None:
                    self.received_at[sequence] = now
                    self.received += 1
                    last_progress = now
                    if on_record is not None:
                        on_record()
            if now - last_progress > self.timeout_s:
                raise RequestTimedOutError(
                    f"{self.received} of {wanted} records consumed; none for "
                    f"{self.timeout_s * 1000:.0f} ms (--timeout-ms)"
                )


def _failure(future: RecordFuture) -> BaseException | None:
    return future.exception() if future.done() else None


def run_e2e(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``perf e2e``: send and consume ``--num-records`` records, report their latency."""
    _ensure_topic(args, err)
    producer_cfg = producer_config(args, args.producer_property)
    config_file = client_config_file(args)
    chosen = {name for name, _ in args.producer_property} | (
        {e.name for e in config_file.entries} if config_file is not None else set()
    )
    if "linger.ms" not in chosen:
        producer_cfg["linger.ms"] = 0  # no batching delay inside the measured latency
    consumer_cfg = client_properties(args, args.consumer_property, kind="consumer")
    tp = TopicPartition(args.topic, args.partition)
    payload = random.Random(7).randbytes(args.record_size)
    count = args.num_records
    sent_at: list[float] = [0.0] * count
    with Consumer(consumer_cfg) as consumer, Producer(producer_cfg) as producer:
        if args.partition not in consumer.partitions_for_topic(args.topic):
            raise InvalidConfigError(f"topic {args.topic} has no partition {args.partition}")
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        consumer.position(tp)  # the start, resolved before the first send
        producer.partitions_for(args.topic)
        receiver = _Receiver(consumer, os.urandom(8), count, args.timeout_ms)
        bar = progress_bar(err, total=count, desc=f"perf e2e {args.topic}")
        with bar:
            start = time.perf_counter()
            if args.throughput is None:
                for sequence in range(count):
                    sent_at[sequence] = time.perf_counter()
                    future = producer.send(
                        args.topic, payload, key=receiver.key(sequence), partition=args.partition
                    )
                    receiver.poll_until(sequence + 1, failed=functools.partial(_failure, future))
                    future.result(timeout=receiver.timeout_s)  # a failed send raises here
                    bar.update(1)
            else:
                _paced_sends(producer, receiver, sent_at, payload, args, lambda: bar.update(1))
            elapsed = time.perf_counter() - start
    arrived = [
        (sent, received)
        for sent, received in zip(sent_at, receiver.received_at, strict=True)
        if received is not None
    ]
    summary = e2e_summary(
        [(received - sent) * 1000.0 for sent, received in arrived],
        elapsed,
        record_size=args.record_size,
        acks=producer_cfg["acks"],
        partition=args.partition,
        target_records_per_sec=args.throughput,
        sent_s=[sent - start for sent, _ in arrived],
    )
    if args.json:
        print(json.dumps(summary), file=out)
    else:
        print(
            f"{summary['records']} records, {summary['records_per_sec']} records/sec, "
            f"end-to-end latency: {summary['latency_ms_avg']} ms avg, "
            f"{summary['latency_ms_p50']} ms 50th, {summary['latency_ms_p95']} ms 95th, "
            f"{summary['latency_ms_p99']} ms 99th, {summary['latency_ms_p999']} ms 99.9th, "
            f"{summary['latency_ms_max']} ms max.",
            file=out,
        )
    return 0


def _paced_sends(
    producer: Producer,
    receiver: _Receiver,
    sent_at: list[float],
    payload: bytes,
    args: argparse.Namespace,
    on_record: Callable[[], object],
) -> None:
    """Send at ``--throughput`` from a thread while this thread consumes."""
    tracker = ErrorTracker()
    stop = threading.Event()
    interval_s = 1.0 / args.throughput

    def send_all() -> None:
        begin = time.perf_counter()
        try:
            for sequence in range(len(sent_at)):
                if stop.is_set() or tracker.first is not None:
                    return
                pause = begin + sequence * interval_s - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)  # pacing the load, not waiting for a result
                # Written before the send: the record cannot be consumed before this is seen.
                sent_at[sequence] = time.perf_counter()
                producer.send(
                    args.topic,
                    payload,
                    key=receiver.key(sequence),
                    partition=args.partition,
                    callback=tracker,
                )
        except Exception as exc:  # handed to the consuming thread, which raises it
            with tracker.lock:
                tracker.first = tracker.first or exc

    sender = threading.Thread(target=send_all, name="lograft-perf-e2e-sender", daemon=True)
    sender.start()
    try:
        receiver.poll_until(len(sent_at), on_record, failed=lambda: tracker.first)
    finally:
        stop.set()
        sender.join()
    producer.flush()
    if tracker.first is not None:
        raise tracker.first
