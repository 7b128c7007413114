"""``lograft perf produce``: producer throughput and acknowledgement latency
(``kafka-producer-perf-test``).

Per record (``Producer.send``, one latency per record), in bulk (``Producer.send_bulk``, one
latency per request), or in bulk paced at ``--throughput`` (one latency per 10 ms chunk).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import time
from array import array
from typing import TextIO

from cluster.client import Producer, RecordFuture

from ._args import progress_bar
from ._perf_stats import percentile
from .produce import ErrorTracker, producer_config

__all__ = ["PACING_INTERVAL_S", "PROGRESS_EVERY", "run_produce"]

log = logging.getLogger(__name__)

PACING_INTERVAL_S = 0.01
"""With ``--bulk --throughput``: one ``send_bulk`` chunk per this many seconds."""
PROGRESS_EVERY = 1024
"""Per-record loops refresh their progress bar once per this many records."""


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


def _per_record(
    producer: Producer, args: argparse.Namespace, payload: bytes, err: TextIO
) -> tuple[float, list[float]]:
    """Call ``send`` for each record; the elapsed seconds and each record's latency in ms.

    The harness costs little per record, so the figure is the producer's: the callback is a
    ``functools.partial`` (no Python frame of ours before ``on_done``), latencies go into an
    ``array`` of seconds (no float object kept per record, nothing for the garbage collector
    to walk), and the records done are the array's length (no lock, no counter).
    """
    tracker = ErrorTracker()
    perf_counter = time.perf_counter
    latencies_s = array("d")
    record_latency = latencies_s.append

    def on_done(sent: float, future: RecordFuture) -> None:
        if future.exception() is None:
            record_latency(perf_counter() - sent)
        else:
            tracker(future)

    with progress_bar(err, total=args.num_records, desc=f"perf produce {args.topic}") as bar:
        send = producer.send
        topic = args.topic
        partial = functools.partial
        start = perf_counter()
        for index in range(args.num_records):
            send(topic, payload, callback=partial(on_done, perf_counter()))
            if index % PROGRESS_EVERY == 0:
                bar.update(len(latencies_s) + tracker.failed - bar.n)
        producer.flush()
        elapsed = perf_counter() - start
        bar.update(len(latencies_s) + tracker.failed - bar.n)
    if tracker.first is not None:
        raise tracker.first
    return elapsed, [latency * 1000.0 for latency in latencies_s]


def run_produce(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``perf produce``: send ``--num-records`` records, report throughput and latency."""
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
            elapsed, latencies_ms = _per_record(producer, args, payload, err)
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
