"""``lograft perf``: throughput and latency tests (``kafka-*-perf-test``, ``EndToEndLatency``).

* ``perf produce``: producer throughput and acknowledgement latency
  (``kafka-producer-perf-test``).
* ``perf consume``: consumer throughput from the start of a topic
  (``kafka-consumer-perf-test``).
* ``perf e2e``: end-to-end latency, from before ``send`` to the record coming out of
  ``poll`` (Kafka's ``EndToEndLatency`` tool).

With ``--json`` each prints one JSON object on stdout; progress bars go to stderr, and only
when it is a terminal.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TextIO

from cluster.client import Consumer, NewTopic, Producer, RecordMetadata, TopicPartition
from cluster.errors import (
    InvalidConfigError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from ._args import (
    Streams,
    acks,
    admin_client,
    client_config_file,
    client_properties,
    config_pair,
    non_negative,
    positive,
    progress_bar,
)
from .produce import ErrorTracker, producer_config

__all__ = ["e2e_summary", "percentile", "register", "run"]

PACING_INTERVAL_S = 0.01
PROGRESS_EVERY = 1024
"""Per-record loops refresh their progress bar once per this many records."""

DESCRIPTION = """\
Throughput and latency tests, as Kafka's kafka-producer-perf-test, kafka-consumer-perf-test
and EndToEndLatency tools. Each prints one summary line, or one JSON object with --json.
A progress bar goes to stderr when it is a terminal."""

EPILOG = """\
examples:
  lograft perf produce --topic perf --num-records 100000 --record-size 100 --json
  lograft perf consume --topic perf --messages 100000 --json
  lograft perf e2e --topic latency --num-records 1000 --acks all --json"""

PRODUCE_DESCRIPTION = """\
Send --num-records records of --record-size random bytes to --topic and report the
throughput and the latency from send() to acknowledgement: p50, p95, p99 and max.

Per-record mode (default) calls Producer.send for each record (latency per record);
--bulk hands all records to Producer.send_bulk at once (latency per request), and with
--throughput paces them in 10 ms chunks (latency per chunk). JSON fields: mode, records,
record_size, elapsed_s, records_per_sec, mb_per_sec, latency_ms_avg, latency_ms_p50,
latency_ms_p95, latency_ms_p99, latency_ms_max, latency_samples, target_records_per_sec,
acks."""

PRODUCE_EPILOG = """\
examples:
  lograft perf produce --topic perf --num-records 100000 --record-size 100
  lograft perf produce --topic perf --num-records 1000000 --record-size 100 --bulk --json
  lograft perf produce --topic perf --num-records 50000 --record-size 1000 --acks 1 \\
      --linger-ms 10 --compression-type lz4"""

CONSUME_DESCRIPTION = """\
Read --messages records from the start of every partition of --topic (no group) and report
the throughput. Exits 1 if fewer arrive before --timeout-ms passes without a record.
JSON fields: records, bytes, elapsed_s, records_per_sec, mb_per_sec."""

CONSUME_EPILOG = """\
examples:
  lograft perf consume --topic perf --messages 100000
  lograft perf consume --topic perf --messages 100000 --json \\
      --consumer-property max.poll.records=2000"""

E2E_DESCRIPTION = """\
End-to-end latency, as Kafka's EndToEndLatency tool: send --num-records records of
--record-size bytes to one partition, each with --acks, and consume them with a consumer
reading that partition; a record's latency is the time it comes out of poll() minus the
time just before its send(). By default records go one at a time: the next is sent once
the previous was consumed. With --throughput R they are sent at R records/s from another
thread while the consumer reads. The producer's linger.ms is 0 unless set.

The topic is created with one partition if it does not exist. JSON fields: test, mode,
records, record_size, acks, partition, elapsed_s, records_per_sec, latency_ms_avg,
latency_ms_p50, latency_ms_p95, latency_ms_p99, latency_ms_p999, latency_ms_max,
target_records_per_sec."""

E2E_EPILOG = """\
examples:
  lograft perf e2e --topic latency --num-records 1000 --json
  lograft perf e2e --topic latency --num-records 10000 --acks 1 --record-size 1000
  lograft perf e2e --topic latency --num-records 20000 --throughput 2000 --json"""


def _add_property(parser: argparse.ArgumentParser, flag: str, what: str) -> None:
    parser.add_argument(
        flag,
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"any {what} config (repeatable)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perf produce|consume|e2e`` to the ``lograft`` parser."""
    raw = argparse.RawDescriptionHelpFormatter
    perf = commands.add_parser(
        "perf",
        help="throughput and latency tests: produce, consume, e2e (JSON with --json)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=raw,
    )
    perf.set_defaults(handler=run)
    perf_commands = perf.add_subparsers(dest="perf_command", required=True, metavar="TEST")

    produce = perf_commands.add_parser(
        "produce",
        help="producer throughput and acknowledgement latency",
        description=PRODUCE_DESCRIPTION,
        epilog=PRODUCE_EPILOG,
        formatter_class=raw,
    )
    produce.add_argument("--topic", required=True, help="an existing topic")
    produce.add_argument("--num-records", type=positive, required=True, help="records to send")
    produce.add_argument(
        "--record-size", type=non_negative, required=True, help="bytes per record value"
    )
    produce.add_argument("--acks", type=acks, default=None, help="all (default), 1 or 0")
    produce.add_argument(
        "--bulk", action="store_true", help="use Producer.send_bulk (latency per request)"
    )
    produce.add_argument(
        "--throughput",
        type=positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="with --bulk: pace the records at this rate, in 10 ms chunks, and report each "
        "chunk's latency from send_bulk to acknowledgement",
    )
    produce.add_argument("--batch-size", type=non_negative, default=None, help="batch.size")
    produce.add_argument("--linger-ms", type=non_negative, default=None, help="linger.ms")
    produce.add_argument(
        "--compression-type", default=None, help="none (default), gzip, snappy, lz4 or zstd"
    )
    produce.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(produce, "--producer-property", "producer")

    consume = perf_commands.add_parser(
        "consume",
        help="consumer throughput",
        description=CONSUME_DESCRIPTION,
        epilog=CONSUME_EPILOG,
        formatter_class=raw,
    )
    consume.add_argument("--topic", required=True, help="an existing topic")
    consume.add_argument("--messages", type=positive, required=True, help="records to read")
    consume.add_argument(
        "--timeout-ms",
        type=positive,
        default=10000,
        help="give up after this long without a record (default %(default)s)",
    )
    consume.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(consume, "--consumer-property", "consumer")

    e2e = perf_commands.add_parser(
        "e2e",
        help="end-to-end latency: send, then consume, each record (EndToEndLatency)",
        description=E2E_DESCRIPTION,
        epilog=E2E_EPILOG,
        formatter_class=raw,
    )
    e2e.add_argument("--topic", required=True, help="the topic (created if missing)")
    e2e.add_argument("--num-records", type=positive, required=True, help="records to send")
    e2e.add_argument(
        "--record-size",
        type=non_negative,
        default=100,
        help="bytes per record value (default %(default)s)",
    )
    e2e.add_argument("--acks", type=acks, default=None, help="all (default), 1 or 0")
    e2e.add_argument(
        "--partition", type=non_negative, default=0, help="the partition (default %(default)s)"
    )
    e2e.add_argument(
        "--throughput",
        type=positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="send at this rate instead of one record at a time",
    )
    e2e.add_argument(
        "--replication-factor",
        type=positive,
        default=1,
        help="for a topic created by the test (default %(default)s)",
    )
    e2e.add_argument(
        "--timeout-ms",
        type=positive,
        default=10000,
        help="fail when no record arrives for this long (default %(default)s)",
    )
    e2e.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(e2e, "--producer-property", "producer")
    _add_property(e2e, "--consumer-property", "consumer")


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one perf test."""
    if args.perf_command == "produce":
        return _run_produce(args, streams.stdout, streams.stderr)
    if args.perf_command == "e2e":
        return _run_e2e(args, streams.stdout, streams.stderr)
    return _run_consume(args, streams.stdout, streams.stderr)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of ``sorted_values`` (nearest rank); 0 when empty."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return sorted_values[index]


def _record_latency(latencies_ms: list[float], started: float, _future: object) -> None:
    latencies_ms.append((time.perf_counter() - started) * 1000.0)


def _paced_bulk(
    producer: Producer, topic: str, payload: bytes, args: argparse.Namespace, err: TextIO
) -> list[float]:
    """Send ``num_records`` at ``throughput`` records/s, one ``send_bulk`` per 10 ms.

    Returns each chunk's latency in ms, from its ``send_bulk`` call to its acknowledgement,
    as a user of the bulk path sees it (queueing in the producer included).
    """
    per_chunk = max(1, round(args.throughput * PACING_INTERVAL_S))
    latencies_ms: list[float] = []
    futures = []
    begin = time.perf_counter()
    sent = 0
    chunk_index = 0
    with progress_bar(err, total=args.num_records, desc=f"perf produce {topic}") as bar:
        while sent < args.num_records:
            due = begin + chunk_index * PACING_INTERVAL_S
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)  # pacing the load, not waiting for a result
            count = min(per_chunk, args.num_records - sent)
            started = time.perf_counter()
            future = producer.send_bulk(topic, [payload] * count)
            future.add_done_callback(functools.partial(_record_latency, latencies_ms, started))
            futures.append(future)
            sent += count
            chunk_index += 1
            bar.update(count)
        for future in futures:
            future.result()
    return latencies_ms


def _run_produce(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = producer_config(args, args.producer_property)
    payload = random.Random(42).randbytes(args.record_size)
    latencies_ms: list[float] = []
    with Producer(config) as producer:
        producer.partitions_for(args.topic)  # metadata first, outside the timing
        if args.bulk and args.throughput:
            start = time.perf_counter()
            latencies_ms = _paced_bulk(producer, args.topic, payload, args, err)
            elapsed = time.perf_counter() - start
        elif args.bulk:
            values = [payload] * args.num_records
            start = time.perf_counter()
            result = producer.send_bulk(args.topic, values).result()
            elapsed = time.perf_counter() - start
            latencies_ms = [b.latency_ms for b in result.batches]
        else:
            tracker = ErrorTracker()
            perf_counter = time.perf_counter
            record_latency = latencies_ms.append

            def on_done(future: Future[RecordMetadata], sent: float) -> None:
                record_latency((perf_counter() - sent) * 1000.0)
                tracker(future)

            bar = progress_bar(err, total=args.num_records, desc=f"perf produce {args.topic}")
            with bar:
                start = perf_counter()
                send = producer.send
                topic = args.topic
                for index in range(args.num_records):
                    sent_at = perf_counter()
                    send(topic, payload).add_done_callback(
                        lambda f, s=sent_at: on_done(f, s)  # type: ignore[misc]
                    )
                    if index % PROGRESS_EVERY == 0:
                        bar.update(tracker.acknowledged + tracker.failed - bar.n)
                producer.flush()
                elapsed = perf_counter() - start
                bar.update(tracker.acknowledged + tracker.failed - bar.n)
            if tracker.first is not None:
                raise tracker.first
    latencies_ms.sort()
    records = args.num_records
    result_json: dict[str, object] = {
        "mode": "bulk" if args.bulk else "per-record",
        "records": records,
        "record_size": args.record_size,
        "elapsed_s": round(elapsed, 4),
        "records_per_sec": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_sec": round(records * args.record_size / elapsed / (1024 * 1024), 3)
        if elapsed > 0
        else 0.0,
        "latency_ms_avg": round(sum(latencies_ms) / len(latencies_ms), 3) if latencies_ms else 0.0,
        "latency_ms_p50": round(percentile(latencies_ms, 0.50), 3),
        "latency_ms_p95": round(percentile(latencies_ms, 0.95), 3),
        "latency_ms_p99": round(percentile(latencies_ms, 0.99), 3),
        "latency_ms_max": round(latencies_ms[-1], 3) if latencies_ms else 0.0,
        "latency_samples": (
            "chunk" if args.bulk and args.throughput else "request" if args.bulk else "record"
        ),
        "target_records_per_sec": args.throughput,
        "acks": config["acks"],
    }
    if args.json:
        print(json.dumps(result_json), file=out)
    else:
        print(
            f"{records} records sent, {result_json['records_per_sec']} records/sec "
            f"({result_json['mb_per_sec']} MB/sec), {result_json['latency_ms_avg']} ms avg "
            f"latency, {result_json['latency_ms_max']} ms max latency, "
            f"{result_json['latency_ms_p50']} ms 50th, {result_json['latency_ms_p95']} ms 95th, "
            f"{result_json['latency_ms_p99']} ms 99th ({result_json['latency_samples']} latency).",
            file=out,
        )
    return 0


def _run_consume(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    config = client_properties(args, args.consumer_property, kind="consumer")
    config.setdefault("auto.offset.reset", "earliest")
    records = 0
    total_bytes = 0
    with Consumer(config) as consumer:
        partitions = [
            TopicPartition(args.topic, p) for p in consumer.partitions_for_topic(args.topic)
        ]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        for tp in partitions:
            consumer.position(tp)  # offsets first, outside the timing
        with progress_bar(err, total=args.messages, desc=f"perf consume {args.topic}") as bar:
            start = time.perf_counter()
            last_record = start
            end = start
            while records < args.messages:
                batch = consumer.poll(500)
                now = time.perf_counter()
                if batch:
                    last_record = end = now
                    records += len(batch)
                    total_bytes += sum(len(r.value) for r in batch if r.value is not None)
                    bar.update(len(batch))
                elif (now - last_record) * 1000.0 >= args.timeout_ms:
                    break
    elapsed = end - start
    result_json: dict[str, object] = {
        "records": records,
        "bytes": total_bytes,
        "elapsed_s": round(elapsed, 4),
        "records_per_sec": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_sec": round(total_bytes / elapsed / (1024 * 1024), 3) if elapsed > 0 else 0.0,
    }
    if args.json:
        print(json.dumps(result_json), file=out)
    else:
        print(
            f"{records} records consumed in {result_json['elapsed_s']} s, "
            f"{result_json['records_per_sec']} records/sec ({result_json['mb_per_sec']} MB/sec)",
            file=out,
        )
    if records < args.messages:
        print(
            f"lograft: only {records} of {args.messages} records arrived within "
            f"--timeout-ms {args.timeout_ms}",
            file=err,
        )
        return 1
    return 0


# ---- end-to-end latency ----------------------------------------------------------------------


def e2e_summary(
    latencies_ms: Sequence[float],
    elapsed_s: float,
    *,
    record_size: int,
    acks: object,
    partition: int,
    target_records_per_sec: int | None,
) -> dict[str, Any]:
    """The JSON object of ``perf e2e`` from each record's latency in ms."""
    ordered = sorted(latencies_ms)
    count = len(ordered)
    return {
        "test": "e2e",
        "mode": "one-at-a-time" if target_records_per_sec is None else "paced",
        "records": count,
        "record_size": record_size,
        "acks": acks,
        "partition": partition,
        "elapsed_s": round(elapsed_s, 4),
        "records_per_sec": round(count / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "latency_ms_avg": round(sum(ordered) / count, 3) if count else 0.0,
        "latency_ms_p50": round(percentile(ordered, 0.50), 3),
        "latency_ms_p95": round(percentile(ordered, 0.95), 3),
        "latency_ms_p99": round(percentile(ordered, 0.99), 3),
        "latency_ms_p999": round(percentile(ordered, 0.999), 3),
        "latency_ms_max": round(ordered[-1], 3) if count else 0.0,
        "target_records_per_sec": target_records_per_sec,
    }


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


def _failure(future: Future[RecordMetadata]) -> BaseException | None:
    return future.exception() if future.done() else None


def _run_e2e(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
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
    latencies_ms = [
        (received - sent) * 1000.0
        for sent, received in zip(sent_at, receiver.received_at, strict=True)
        if received is not None
    ]
    summary = e2e_summary(
        latencies_ms,
        elapsed,
        record_size=args.record_size,
        acks=producer_cfg["acks"],
        partition=args.partition,
        target_records_per_sec=args.throughput,
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
                    args.topic, payload, key=receiver.key(sequence), partition=args.partition
                ).add_done_callback(tracker)
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
