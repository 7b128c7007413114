"""The ``lograft`` sink in the test session's Spark: streams and batch writes, read back."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cluster.client.admin import AdminClient
from spark.sink_transactions import DEFAULT_PREFIX, PROGRESS_PARTITION
from tests.integration.quorum import QuorumCluster
from tests.spark.helpers import input_rows, make_topic, read_topic, write_input_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180


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
