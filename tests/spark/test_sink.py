"""The ``lograft`` sink in the test session's Spark: streams and batch writes, read back."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import PySparkException

from cluster.client.admin import AdminClient
from cluster.client.consumer import Consumer
from lograft.protocol.topic_partition import TopicPartition
from spark.sink_transactions import DEFAULT_PREFIX, PROGRESS_PARTITION
from tests.integration.quorum import QuorumCluster
from tests.spark.helpers import input_rows, make_topic, read_topic, write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180
ROOT = Path(__file__).resolve().parents[2]


def test_a_stream_writes_every_row_once_and_records_each_batch(
    spark_session: SparkSession, spark_cluster: QuorumCluster, tmp_path: Path
) -> None:
    make_topic(spark_cluster, "stream-out", 3)
    files = input_rows(files=3, rows_per_file=40)
    write_input_files(tmp_path / "in", files)
    query = (
        spark_session.readStream.schema("key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(str(tmp_path / "in"))
        .repartition(3, "key")
        .writeStream.format("lograft")
        .option("bootstrap.servers", spark_cluster.bootstrap)
        .option("topic", "stream-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    batches = [p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3

    records = read_topic(spark_cluster, "stream-out", 3)
    expected = Counter(row["value"].encode() for rows in files for row in rows)
    assert Counter(r.value for r in records) == expected
    assert all(r.key == f"k{int(r.value.decode().split('-')[1]) % 10}".encode() for r in records)

    # Each Spark partition's progress group holds the batch after the last it committed.
    with AdminClient(bootstrap_servers=spark_cluster.bootstrap) as admin:
        progress = {
            partition: admin.list_consumer_group_offsets(
                f"{DEFAULT_PREFIX}-{query.id}-{partition}", [PROGRESS_PARTITION]
            )[PROGRESS_PARTITION]
            for partition in range(3)
        }
    assert {p: (o.offset if o else None) for p, o in progress.items()} == {
        p: max(batches) + 1 for p in range(3)
    }


def test_a_batch_write_carries_topic_partition_key_headers_and_timestamp_columns(
    spark_session: SparkSession, spark_cluster: QuorumCluster
) -> None:
    make_topic(spark_cluster, "columns-a", 2)
    make_topic(spark_cluster, "columns-b", 2)
    when = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
    rows = [
        ("columns-a", 1, "k1", b"v1", [("trace", b"t1"), ("empty", None)], when),
        ("columns-b", 0, None, b"v2", [], when + timedelta(seconds=1)),
        ("columns-b", None, "k3", b"v3", None, None),
    ]
    frame = spark_session.createDataFrame(
        rows,
        "topic string, partition int, key string, value binary, "
        "headers array<struct<key: string, value: binary>>, timestamp timestamp",
    )
    frame.write.format("lograft").mode("append").option(
        "bootstrap.servers", spark_cluster.bootstrap
    ).save()

    a = read_topic(spark_cluster, "columns-a", 2)
    b = sorted(read_topic(spark_cluster, "columns-b", 2), key=lambda r: r.value or b"")
    assert [(r.partition, r.key, r.value, r.headers) for r in a] == [
        (1, b"k1", b"v1", (("trace", b"t1"), ("empty", None)))
    ]
    assert a[0].timestamp == int(when.timestamp() * 1000)
    assert [(r.key, r.value) for r in b] == [(None, b"v2"), (b"k3", b"v3")]
    assert b[0].partition == 0 and b[0].timestamp == int(when.timestamp() * 1000) + 1000


def test_a_sink_without_a_topic_fails_before_writing(
    spark_session: SparkSession, spark_cluster: QuorumCluster
) -> None:
    frame = spark_session.createDataFrame([("v",)], "value string")
    with pytest.raises(PySparkException, match="needs a topic") as failure:
        frame.write.format("lograft").mode("append").option(
            "bootstrap.servers", spark_cluster.bootstrap
        ).save()
    assert "INVALID_CONFIG" in str(failure.value)


def test_a_failed_batch_is_aborted_and_leaves_no_open_transaction(
    spark_session: SparkSession, spark_cluster: QuorumCluster, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    make_topic(spark_cluster, "aborted-out", 3)
    files = input_rows(files=1, rows_per_file=60)
    files[0].append({"key": "k0", "value": "boom"})
    write_input_files(tmp_path / "in", files)

    stream = spark_session.readStream.schema("key string, value string").json(str(tmp_path / "in"))
    query = (
        stream.repartition(3, "key")
        .withColumn(
            "value",
            F.when(
                F.col("value") == "boom", F.raise_error(F.lit("a row the query cannot process"))
            ).otherwise(F.col("value")),
        )
        .writeStream.format("lograft")
        .option("bootstrap.servers", spark_cluster.bootstrap)
        .option("topic", "aborted-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(PySparkException, match="a row the query cannot process"):
        query.awaitTermination(QUERY_TIMEOUT_S)

    # The other partitions' prepared rows reached the log, but were aborted: none is
    # visible, and no transaction is left open to hold read_committed readers back.
    assert read_topic(spark_cluster, "aborted-out", 3, "read_uncommitted")
    assert read_topic(spark_cluster, "aborted-out", 3) == []
    tps = [TopicPartition("aborted-out", p) for p in range(3)]
    with (
        Consumer(bootstrap_servers=spark_cluster.bootstrap, isolation_level="read_committed") as c,
        Consumer(bootstrap_servers=spark_cluster.bootstrap) as u,
    ):
        assert c.end_offsets(tps) == u.end_offsets(tps)


def test_the_example_pipeline_counts_every_seeded_view_once(
    spark_cluster: QuorumCluster, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark.examples.windowed_counts",
            "--bootstrap",
            spark_cluster.bootstrap,
            "--seed",
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
        check=True,
    )
    rows = [line.split() for line in done.stdout.splitlines() if line.endswith(" views")]
    # Five closed minutes of 40 seeded views each; the view made "now" is still open. Each
    # (window, page) is written once.
    assert sum(int(row[2]) for row in rows) == 200
    assert len(rows) == len({(row[0], row[1]) for row in rows})
