"""``lograft perf``: producer and consumer throughput and latency (``kafka-*-perf-test``)."""

from __future__ import annotations

import argparse
import functools
import json
import random
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TextIO

from cluster.client import Consumer, Producer, RecordMetadata, TopicPartition

from ._args import Streams, acks, client_properties, config_pair, non_negative, positive
from .produce import ErrorTracker, producer_config

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perf produce|consume`` to the ``lograft`` parser."""
    perf = commands.add_parser("perf", help="throughput and latency tests (JSON with --json)")
    perf.set_defaults(handler=run)
    perf_commands = perf.add_subparsers(dest="perf_command", required=True, metavar="TEST")
    perf_produce = perf_commands.add_parser("produce", help="producer throughput")
    perf_produce.add_argument("--topic", required=True)
    perf_produce.add_argument("--num-records", type=positive, required=True)
    perf_produce.add_argument("--record-size", type=non_negative, required=True)
    perf_produce.add_argument("--acks", type=acks, default="all")
    perf_produce.add_argument(
        "--bulk", action="store_true", help="use Producer.send_bulk (latency per request)"
    )
    perf_produce.add_argument(
        "--throughput",
        type=positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="with --bulk: pace the records at this rate, in 10 ms chunks, and report each "
        "chunk's latency from send_bulk to acknowledgement",
    )
    perf_produce.add_argument("--batch-size", type=non_negative, default=None)
    perf_produce.add_argument("--linger-ms", type=non_negative, default=None)
    perf_produce.add_argument("--compression-type", default="none")
    perf_produce.add_argument("--json", action="store_true", help="print one JSON object")
    perf_produce.add_argument(
        "--producer-property",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
    )
    perf_consume = perf_commands.add_parser("consume", help="consumer throughput")
    perf_consume.add_argument("--topic", required=True)
    perf_consume.add_argument("--messages", type=positive, required=True)
    perf_consume.add_argument("--timeout-ms", type=positive, default=10000)
    perf_consume.add_argument("--json", action="store_true", help="print one JSON object")
    perf_consume.add_argument(
        "--consumer-property",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
    )


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one perf test."""
    if args.perf_command == "produce":
        return _run_produce(args, streams.stdout)
    return _run_consume(args, streams.stdout, streams.stderr)


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return sorted_values[index]


PACING_INTERVAL_S = 0.01


def _record_latency(latencies_ms: list[float], started: float, _future: object) -> None:
    latencies_ms.append((time.perf_counter() - started) * 1000.0)


def _paced_bulk(
    producer: Producer, topic: str, payload: bytes, args: argparse.Namespace
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
    for future in futures:
        future.result()
    return latencies_ms


def _run_produce(args: argparse.Namespace, out: TextIO) -> int:
    config = producer_config(args, args.producer_property)
    payload = random.Random(42).randbytes(args.record_size)
    latencies_ms: list[float] = []
    with Producer(config) as producer:
        producer.partitions_for(args.topic)  # metadata first, outside the timing
        if args.bulk and args.throughput:
            start = time.perf_counter()
            latencies_ms = _paced_bulk(producer, args.topic, payload, args)
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

            start = perf_counter()
            send = producer.send
            topic = args.topic
            for _ in range(args.num_records):
                sent_at = perf_counter()
                send(topic, payload).add_done_callback(
                    lambda f, s=sent_at: on_done(f, s)  # type: ignore[misc]
                )
            producer.flush()
            elapsed = perf_counter() - start
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
        "latency_ms_p50": round(_percentile(latencies_ms, 0.50), 3),
        "latency_ms_p95": round(_percentile(latencies_ms, 0.95), 3),
        "latency_ms_p99": round(_percentile(latencies_ms, 0.99), 3),
        "latency_ms_max": round(latencies_ms[-1], 3) if latencies_ms else 0.0,
        "latency_samples": (
            "chunk" if args.bulk and args.throughput else "request" if args.bulk else "record"
        ),
        "target_records_per_sec": args.throughput,
        "acks": args.acks,
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
    config = client_properties(args, args.consumer_property)
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
