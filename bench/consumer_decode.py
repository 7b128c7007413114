"""Consumer decode benchmark: fetched bytes → ``ConsumerRecord`` objects, no network.

Encodes ``--records`` records of ``--record-size`` random bytes into batches of about
``--batch-bytes`` (as producers send them), groups the batches into fetch responses of
``max.partition.fetch.bytes`` (1 MiB), and times the consumer's own path over them:
``Fetcher.drain`` with ``max.poll.records`` 500 (CRC check, decoding, building the records,
moving the position), and ``Fetcher.drain_batches`` (``Consumer.poll_batches``: CRC check,
bytes out). Shapes:

* ``bulk``: ``encode_batch`` batches (one timestamp, no keys), what ``perf produce --bulk``
  and ``Producer.send_bulk`` write;
* ``builder``: ``RecordBatchBuilder`` batches with a 12-byte key and a timestamp a
  millisecond apart per record, what ``Producer.send`` writes;
* ``headers``: as ``builder`` with one header per record (the general decoder);
* ``zstd``: ``bulk`` compressed with zstd.

Each figure is the median of ``--rounds`` rounds. Prints one JSON document and writes it
to bench/results/consumer_decode.json.

Usage: python bench/consumer_decode.py [--records 200000] [--record-size 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import ROOT, write_report

from cluster.client._clock import SYSTEM_CLOCK
from cluster.client._connection import TopicPartition
from cluster.client._fetch import Fetcher
from cluster.client._subscription import CompletedFetch, SubscriptionState
from cluster.client.consumer import ConsumerBatch, ConsumerRecord
from lograft.protocol.batch_builder import RecordBatchBuilder, encode_batch
from lograft.protocol.compression import CompressionType

FETCH_BYTES = 1 << 20
MAX_POLL_RECORDS = 500
TP = TopicPartition("bench", 0)


def _batches(shape: str, values: list[bytes], batch_bytes: int) -> list[bytes]:
    per_batch = max(1, batch_bytes // (len(values[0]) + 8))
    batches = []
    timestamp = 1_700_000_000_000
    for start in range(0, len(values), per_batch):
        chunk = values[start : start + per_batch]
        if shape in ("bulk", "zstd"):
            codec = CompressionType.ZSTD if shape == "zstd" else CompressionType.NONE
            batches.append(encode_batch(chunk, timestamp_ms=timestamp, compression=codec))
            continue
        builder = RecordBatchBuilder()
        for i, value in enumerate(chunk):
            headers = [("trace", b"%08d" % i)] if shape == "headers" else []
            builder.append(value, b"key-%08d" % i, timestamp + i, headers)
        batches.append(builder.build())
    return batches


def _fetches(batches: list[bytes]) -> list[tuple[bytes, int, int]]:
    """Fetch responses of whole batches: (bytes, fetch offset, next offset), offsets set."""
    fetches: list[tuple[bytes, int, int]] = []
    parts: list[bytes] = []
    size = 0
    offset = first = 0
    for batch in batches:
        if parts and size + len(batch) > FETCH_BYTES:
            fetches.append((b"".join(parts), first, offset))
            parts, size, first = [], 0, offset
        count = int.from_bytes(batch[57:61], "big")
        # baseOffset is outside the CRC: the broker sets it the same way.
        parts.append(offset.to_bytes(8, "big") + batch[8:])
        size += len(batch)
        offset += count
    fetches.append((b"".join(parts), first, offset))
    return fetches


def _fetcher() -> tuple[Fetcher, SubscriptionState]:
    subscriptions = SubscriptionState("earliest", committed_first=False, discard=lambda _: None)
    fetcher = Fetcher(
        None,  # type: ignore[arg-type]  # draining never touches the connections
        subscriptions,
        respond=lambda _: None,
        want_metadata=lambda: None,
        record_type=ConsumerRecord,
        batch_type=ConsumerBatch,
        fetch_min_bytes=1,
        fetch_max_wait_ms=500,
        fetch_max_bytes=FETCH_BYTES,
        partition_max_bytes=FETCH_BYTES,
        request_timeout_ms=30000,
        backoff_s=0.1,
        clock=SYSTEM_CLOCK,
    )
    return fetcher, subscriptions


def _round(fetches: list[tuple[bytes, int, int]], raw: bool) -> tuple[int, float]:
    """Drain every fetch as a consumer's polls would; (records or batches, seconds)."""
    fetcher, subscriptions = _fetcher()
    state = subscriptions.new_state()
    subscriptions.states[TP] = state
    state.position = 0
    drain: Callable[[int], list[Any]] = fetcher.drain_batches if raw else fetcher.drain
    handed_out = 0
    started = time.perf_counter()
    for data, fetch_offset, next_offset in fetches:
        state.buffered.append(CompletedFetch(data, fetch_offset, next_offset))
        while state.buffered:
            handed_out += len(drain(MAX_POLL_RECORDS))
    return handed_out, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="bulk,builder,headers,zstd")
    args = parser.parse_args()

    values = [os.urandom(args.record_size) for _ in range(args.records)]
    results: dict[str, Any] = {}
    for shape in args.shapes.split(","):
        fetches = _fetches(_batches(shape, values, args.batch_bytes))
        decoded = [_round(fetches, raw=False) for _ in range(args.rounds)]
        assert all(count == args.records for count, _ in decoded), decoded
        raw = [_round(fetches, raw=True) for _ in range(args.rounds)]
        decoded_s = statistics.median(seconds for _, seconds in decoded)
        raw_s = statistics.median(seconds for _, seconds in raw)
        results[shape] = {
            "records_per_sec": round(args.records / decoded_s),
            "raw_batches_records_per_sec": round(args.records / raw_s),
            "batches": raw[0][0],
            "fetches": len(fetches),
        }
    report = {
        "benchmark": "consumer_decode",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "records": args.records,
        "record_size": args.record_size,
        "batch_bytes": args.batch_bytes,
        "max_poll_records": MAX_POLL_RECORDS,
        "rounds": args.rounds,
        "shapes": results,
    }
    write_report(report, ROOT / "bench" / "results" / "consumer_decode.json")


if __name__ == "__main__":
    main()
