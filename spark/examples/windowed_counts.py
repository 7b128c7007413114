"""An exactly-once Spark pipeline: page views in, views per page per minute out.

Reads JSON page views (``{"page": "/home", "user": "u1"}``) from the topic ``page-views``
with the ``lograft`` source (``read_committed``), counts them per page in one-minute
event-time windows (the record timestamp; a two-minute watermark lets late views in and
then closes the window), and writes each closed window's count to ``page-view-counts``
with the ``lograft`` sink, exactly once: a crash and restart from ``--checkpoint`` neither
loses nor repeats a count. ``--seed`` first produces a few minutes of views (event times
in the past, so the windows close at once) to have something to count.

Usage (against ``make run``'s cluster)::

    python -m spark.examples.windowed_counts --seed --checkpoint /tmp/lograft-spark-demo

``--bootstrap`` names the cluster (default: the local three nodes). Runs with
``Trigger.AvailableNow``: it reads what is there, writes the closed windows and stops;
``--continuous`` keeps it running, a micro-batch every five seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import time
from collections.abc import Sequence

from cluster.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from cluster.client._client_config import DEFAULT_BOOTSTRAP_SERVERS
from lograft.protocol.errors import TopicAlreadyExistsError

INPUT_TOPIC = "page-views"
OUTPUT_TOPIC = "page-view-counts"
PARTITIONS = 3
PAGES = ("/home", "/pricing", "/docs", "/blog")


def ensure_topics(bootstrap: str) -> None:
    """Create the input and output topics (three partitions, three replicas) if missing."""
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        futures = admin.create_topics(
            [NewTopic(name, PARTITIONS, 3) for name in (INPUT_TOPIC, OUTPUT_TOPIC)]
        )
        for future in futures.values():
            with contextlib.suppress(TopicAlreadyExistsError):
                future.result(timeout=60)


def seed(bootstrap: str, minutes: int = 5, views_per_minute: int = 40) -> int:
    """Produce page views spread over ``minutes`` minutes ending ten minutes ago, plus one
    view now (it moves the watermark past them all). Returns how many were sent."""
    rng = random.Random(14)
    start_ms = int(time.time() * 1000) - (minutes + 10) * 60_000
    sent = 0
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        for minute in range(minutes):
            for _ in range(views_per_minute):
                view = {"page": rng.choice(PAGES), "user": f"u{rng.randrange(100)}"}
                at = start_ms + minute * 60_000 + rng.randrange(60_000)
                producer.send(INPUT_TOPIC, json.dumps(view).encode(), timestamp_ms=at)
                sent += 1
        producer.send(INPUT_TOPIC, json.dumps({"page": "/home", "user": "now"}).encode())
        producer.flush()
    return sent + 1


def run_query(bootstrap: str, checkpoint: str, continuous: bool) -> None:
    """The pipeline (see the module docstring)."""
    from pyspark.sql import functions as F

    from spark.datasource import register
    from spark.session import local_session_builder

    session = local_session_builder("local[2]", "lograft-windowed-counts").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        views = (
            session.readStream.format("lograft")
            .option("bootstrap.servers", bootstrap)
            .option("subscribe", INPUT_TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .select(
                F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"),
                F.col("timestamp"),
            )
        )
        counts = (
            views.withWatermark("timestamp", "2 minutes")
            .groupBy(F.window("timestamp", "1 minute"), F.col("page"))
            .count()
        )
        output = counts.select(
            F.concat_ws("|", F.col("page"), F.col("window.start").cast("string")).alias("key"),
            F.to_json(
                F.struct(
                    F.col("page"),
                    F.col("window.start").alias("window_start"),
                    F.col("count").alias("views"),
                )
            ).alias("value"),
        )
        writer = (
            output.writeStream.format("lograft")
            .outputMode("append")
            .option("bootstrap.servers", bootstrap)
            .option("topic", OUTPUT_TOPIC)
            .option("checkpointLocation", checkpoint)
        )
        if continuous:
            query = writer.trigger(processingTime="5 seconds").start()
        else:
            query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        error = query.exception()
        if error is not None:
            raise SystemExit(f"the query failed: {error}")
    finally:
        session.stop()


def read_counts(bootstrap: str) -> list[dict[str, object]]:
    """Every count in the output topic, read_committed, in window order."""
    tps = [TopicPartition(OUTPUT_TOPIC, p) for p in range(PARTITIONS)]
    results: list[dict[str, object]] = []
    with Consumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in tps):
            for record in consumer.poll(timeout_ms=200):
                if record.value is not None:
                    results.append(json.loads(record.value))
    return sorted(results, key=lambda r: (str(r["window_start"]), str(r["page"])))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP_SERVERS)
    parser.add_argument("--checkpoint", default="data/spark-demo/checkpoint")
    parser.add_argument("--seed", action="store_true", help="produce page views first")
    parser.add_argument("--continuous", action="store_true")
    args = parser.parse_args(argv)
    ensure_topics(args.bootstrap)
    if args.seed:
        print(f"produced {seed(args.bootstrap)} page views to {INPUT_TOPIC!r}")
    run_query(args.bootstrap, args.checkpoint, args.continuous)
    counts = read_counts(args.bootstrap)
    print(f"{OUTPUT_TOPIC!r} holds {len(counts)} window counts (read_committed):")
    for count in counts:
        print(f"  {count['window_start']}  {count['page']:<10} {count['views']:>4} views")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
