"""``spark.read.format("lograft")`` against a real three-node cluster: a batch read returns
exactly the records of its offset ranges, with the columns of Spark's Kafka source."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from cluster.client import AdminClient, NewTopic, Producer
from tests.integration.quorum import QuorumCluster

if TYPE_CHECKING:
    from pyspark.sql import DataFrameReader, SparkSession

pytestmark = pytest.mark.integration

TIMESTAMP_MS = 1_700_000_000_123


def _topic(cluster: QuorumCluster, name: str, partitions: int) -> None:
    with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=60)


def _reader(session: SparkSession, cluster: QuorumCluster, topic: str) -> DataFrameReader:
    return (
        session.read.format("lograft")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
    )


def test_a_batch_read_returns_exactly_its_offset_ranges(
    spark_session: SparkSession, spark_cluster: QuorumCluster
) -> None:
    topic = "batch-ranges"
    _topic(spark_cluster, topic, 2)
    with Producer(bootstrap_servers=spark_cluster.bootstrap, acks="all") as producer:
        for partition in (0, 1):
            for i in range(20):
                producer.send(
                    topic,
                    b"v-%d-%d" % (partition, i),
                    key=b"k-%d" % i,
                    partition=partition,
                    timestamp_ms=TIMESTAMP_MS + i,
                    headers=[("trace", b"t-%d" % i)],
                )
        producer.flush()

    # Everything (earliest to latest by default), with every column a user reads.
    rows = (
        _reader(spark_session, spark_cluster, topic)
        .option("includeHeaders", "true")
        .load()
        .selectExpr("*", "unix_millis(timestamp) AS millis")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(20)
    ]
    for row in rows:
        assert row.topic == topic
        assert row.key == b"k-%d" % row.offset
        assert row.value == b"v-%d-%d" % (row.partition, row.offset)
        assert row.millis == TIMESTAMP_MS + row.offset
        assert row.timestampType == 0
        assert [(h.key, h.value) for h in row.headers] == [("trace", b"t-%d" % row.offset)]

    # Offset ranges: partition 0 from 5 to 15, partition 1 from earliest (-2) to latest
    # (-1); minPartitions cuts them into more tasks, which must not change the result.
    ranged = (
        _reader(spark_session, spark_cluster, topic)
        .option("startingOffsets", json.dumps({topic: {"0": 5, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 15, "1": -1}}))
        .option("minPartitions", "5")
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in ranged) == [(0, o) for o in range(5, 15)] + [
        (1, o) for o in range(20)
    ]
    assert "headers" not in ranged[0].asDict()


def test_bad_options_fail_the_read_with_a_clear_message(
    spark_session: SparkSession, spark_cluster: QuorumCluster
) -> None:
    from pyspark.errors import PySparkException

    topic = "batch-options"
    _topic(spark_cluster, topic, 1)
    with pytest.raises(PySparkException, match="exactly one of the options subscribe"):
        _reader(spark_session, spark_cluster, topic).option("subscribePattern", "b.*").load()
    with pytest.raises(PySparkException, match="past the end of batch-options-0"):
        _reader(spark_session, spark_cluster, topic).option(
            "endingOffsets", json.dumps({topic: {"0": 10}})
        ).load().collect()
    with pytest.raises(PySparkException, match=r"group\.id is not supported"):
        _reader(spark_session, spark_cluster, topic).option("kafka.group.id", "g").load()
