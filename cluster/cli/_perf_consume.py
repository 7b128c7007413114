"""``lograft perf consume``: consumer throughput from the start of a topic
(``kafka-consumer-perf-test``)."""

from __future__ import annotations

import argparse
import json
import logging
import operator
import time
from typing import TextIO

from cluster.client import Consumer, TopicPartition

from ._args import client_properties, progress_bar

__all__ = ["run_consume"]

log = logging.getLogger(__name__)

_VALUE = operator.attrgetter("value")


def run_consume(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``perf consume``: read ``--messages`` records from the start; 1 if fewer arrive."""
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
                    # In C: a generator over the records cost a tenth of the consumer's time.
                    total_bytes += sum(map(len, filter(None, map(_VALUE, batch))))
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
