"""``spark.readStream.format("lograft")`` against a real three-node cluster.

* a query stopped and restarted from its checkpoint goes on exactly where it stopped (no
  record twice, none missing), and ``maxOffsetsPerTrigger`` bounds each micro-batch, also
  under ``Trigger.AvailableNow``;
* records of aborted transactions are never read, nor anything from the first offset of
  an open transaction on until it ends (``read_committed``, the source's default), while a
  ``read_uncommitted`` read sees them all;
* ``startingOffsets`` as JSON and ``latest``; ``subscribePattern`` picks up a topic created
  later, and a partition added later is read from its beginning.

Every query collects its micro-batches through ``foreachBatch``; each test waits for the
query itself (``awaitTermination``, ``processAllAvailable``), never for time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from cluster.client import (
    AdminClient,
    Consumer,
    NewPartitions,
    NewTopic,
    Producer,
    TopicPartition,
)
from tests.integration.nodes import wait_until
from tests.integration.quorum import QuorumCluster

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = pytest.mark.integration

QUERY_TIMEOUT_S = 120
Row = tuple[str, int, int, bytes]
"""(topic, partition, offset, value) of a record a query read."""


def _topic(cluster: QuorumCluster, name: str, partitions: int) -> None:
    with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=60)


class Batches:
    """The micro-batches a query handed to ``foreachBatch``, in order."""

    def __init__(self) -> None:
        self.batches: list[list[Row]] = []

    def collect(self, frame: DataFrame, batch_id: int) -> None:
        rows = frame.select("topic", "partition", "offset", "value").collect()
        self.batches.append([(r.topic, r.partition, r.offset, r.value) for r in rows])

    @property
    def rows(self) -> list[Row]:
        return [row for batch in self.batches for row in batch]


def _start(
    session: SparkSession,
    cluster: QuorumCluster,
    checkpoint: Path,
    into: Batches,
    *,
    available_now: bool = False,
    **options: str,
) -> StreamingQuery:
    reader = session.readStream.format("lograft").option(
        "kafka.bootstrap.servers", cluster.bootstrap
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = (
        reader.load()
        .writeStream.foreachBatch(into.collect)
        .option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


@pytest.fixture
def running() -> Iterator[list[StreamingQuery]]:
    """Queries a test starts; any still running at its end are stopped."""
    queries: list[StreamingQuery] = []
    yield queries
    for query in queries:
        if query.isActive:
            query.stop()


def _produce(cluster: QuorumCluster, topic: str, values: list[bytes], **kwargs: Any) -> None:
    with Producer(bootstrap_servers=cluster.bootstrap, acks="all") as producer:
        sent = [producer.send(topic, value, **kwargs) for value in values]
        for future in sent:
            future.result(timeout=60)


def _partitions_known(cluster: QuorumCluster, topic: str, count: int) -> bool:
    """Whether every broker's metadata has ``count`` partitions of ``topic``."""
    for node_id in cluster.broker_ids:
        metadata = cluster.metadata(cluster.nodes[node_id], [topic])
        if metadata is None or len(metadata.topics[0].partitions) != count:
            return False
    return True


def test_a_restarted_query_resumes_exactly_where_it_stopped_and_batches_are_bounded(
    spark_session: SparkSession,
    spark_cluster: QuorumCluster,
    tmp_path: Path,
    running: list[StreamingQuery],
) -> None:
    topic = "resume"
    _topic(spark_cluster, topic, 3)
    first = [b"first-%d" % i for i in range(300)]
    with Producer(bootstrap_servers=spark_cluster.bootstrap, acks="all") as producer:
        for i, value in enumerate(first):
            producer.send(topic, value, key=b"k%d" % i)
        producer.flush()
    checkpoint = tmp_path / "checkpoint"

    # Run 1: Trigger.AvailableNow reads the backlog in micro-batches of at most 70 and stops.
    run1 = Batches()
    query = _start(
        spark_session,
        spark_cluster,
        checkpoint,
        run1,
        available_now=True,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="70",
    )
    running.append(query)
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not finish"
    assert query.exception() is None
    sizes = [len(batch) for batch in run1.batches]
    assert max(sizes) <= 70 and len(sizes) >= 5, sizes
    assert sorted(value for *_, value in run1.rows) == sorted(first)

    # Records written while the query is down are read by the restarted query, and
    # nothing it had read before comes again (the checkpoint holds its offsets).
    second = [b"second-%d" % i for i in range(150)]
    _produce(spark_cluster, topic, second)
    run2 = Batches()
    query = _start(
        spark_session,
        spark_cluster,
        checkpoint,
        run2,
        subscribe=topic,
        startingOffsets="earliest",  # applies to a new query only, not to a restart
        maxOffsetsPerTrigger="70",
    )
    running.append(query)
    query.processAllAvailable()
    query.stop()
    assert all(len(batch) <= 70 for batch in run2.batches)
    assert sorted(value for *_, value in run2.rows) == sorted(second)
    read = [(t, p, o) for t, p, o, _ in run1.rows + run2.rows]
    assert max(Counter(read).values()) == 1
    with Consumer(bootstrap_servers=spark_cluster.bootstrap) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
    assert sorted(read) == sorted(
        (topic, tp.partition, o) for tp, end in ends.items() for o in range(end)
    )


def _last_stable_offset(cluster: QuorumCluster, tp: TopicPartition) -> int:
    with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed") as c:
        return c.end_offsets([tp])[tp]


# Over 70 lines: a test that walks one scenario in order: commit, abort, leave open.
def test_aborted_and_open_transactions_are_never_read(
    spark_session: SparkSession,
    spark_cluster: QuorumCluster,
    tmp_path: Path,
    running: list[StreamingQuery],
) -> None:
    topic = "transactions"
    tp = TopicPartition(topic, 0)
    _topic(spark_cluster, topic, 1)
    bootstrap = spark_cluster.bootstrap
    committer = Producer(bootstrap_servers=bootstrap, transactional_id="source-committer")
    opener = Producer(bootstrap_servers=bootstrap, transactional_id="source-opener")
    try:
        committer.init_transactions()
        with committer.transaction():
            for i in range(5):
                committer.send(topic, b"committed-%d" % i)
        committer.begin_transaction()
        for i in range(4):
            committer.send(topic, b"aborted-%d" % i)
        committer.flush()
        committer.abort_transaction()
        opener.init_transactions()
        opener.begin_transaction()
        for i in range(3):
            opener.send(topic, b"open-%d" % i)
        opener.flush()
        with committer.transaction():  # committed, but after the open transaction began
            for i in range(2):
                committer.send(topic, b"later-%d" % i)

        # A read_uncommitted batch read sees every record, and where the open one starts.
        everything = (
            spark_session.read.format("lograft")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("kafka.isolation.level", "read_uncommitted")
            .load()
            .select("offset", "value")
            .collect()
        )
        offsets = {r.value: r.offset for r in everything}
        assert sorted(offsets) == sorted(
            [b"committed-%d" % i for i in range(5)]
            + [b"aborted-%d" % i for i in range(4)]
            + [b"open-%d" % i for i in range(3)]
            + [b"later-%d" % i for i in range(2)]
        )
        open_first = offsets[b"open-0"]
        # The abort's marker is written after abort_transaction returns; wait for it.
        wait_until(
            lambda: _last_stable_offset(spark_cluster, tp) == open_first, 60, "the abort marker"
        )

        batches = Batches()
        query = _start(
            spark_session,
            spark_cluster,
            tmp_path / "checkpoint",
            batches,
            subscribe=topic,
            startingOffsets="earliest",
        )
        running.append(query)
        query.processAllAvailable()
        assert sorted(value for *_, value in batches.rows) == [
            b"committed-%d" % i for i in range(5)
        ]
        assert all(offset < open_first for _, _, offset, _ in batches.rows)

        opener.commit_transaction()
        end = offsets[b"later-1"] + 2  # past its commit marker
        wait_until(lambda: _last_stable_offset(spark_cluster, tp) >= end, 60, "the commit")
        query.processAllAvailable()
        query.stop()
        assert sorted(value for *_, value in batches.rows) == sorted(
            [b"committed-%d" % i for i in range(5)]
            + [b"open-%d" % i for i in range(3)]
            + [b"later-%d" % i for i in range(2)]
        )
    finally:
        committer.close()
        opener.close()


def test_starting_offsets_and_partitions_and_topics_that_appear_later(
    spark_session: SparkSession,
    spark_cluster: QuorumCluster,
    tmp_path: Path,
    running: list[StreamingQuery],
) -> None:
    _topic(spark_cluster, "pat-a", 2)
    for partition in (0, 1):
        _produce(
            spark_cluster,
            "pat-a",
            [b"a%d-%d" % (partition, i) for i in range(10)],
            partition=partition,
        )

    # JSON startingOffsets: partition 0 from offset 4, partition 1 from its end (-1).
    by_pattern = Batches()
    query = _start(
        spark_session,
        spark_cluster,
        tmp_path / "pattern",
        by_pattern,
        subscribePattern="pat-.*",
        startingOffsets=json.dumps({"pat-a": {"0": 4, "1": -1}}),
    )
    running.append(query)
    query.processAllAvailable()
    assert sorted((t, p, o) for t, p, o, _ in by_pattern.rows) == [
        ("pat-a", 0, o) for o in range(4, 10)
    ]

    # A new record on partition 1, a new topic matching the pattern and a new partition:
    # all read, the new ones from their first offset.
    _produce(spark_cluster, "pat-a", [b"a1-late"], partition=1)
    _topic(spark_cluster, "pat-b", 1)
    _produce(spark_cluster, "pat-b", [b"b-%d" % i for i in range(5)])
    with AdminClient(bootstrap_servers=spark_cluster.bootstrap) as admin:
        admin.create_partitions({"pat-a": NewPartitions(3)})["pat-a"].result(timeout=60)
    wait_until(lambda: _partitions_known(spark_cluster, "pat-a", 3), 60, "pat-a-2 in metadata")
    _produce(spark_cluster, "pat-a", [b"a2-0", b"a2-1"], partition=2)
    _topic(spark_cluster, "other", 1)  # does not match: never read
    _produce(spark_cluster, "other", [b"other"])
    query.processAllAvailable()
    query.stop()
    assert sorted((t, p, o) for t, p, o, _ in by_pattern.rows) == sorted(
        [("pat-a", 0, o) for o in range(4, 10)]
        + [("pat-a", 1, 10), ("pat-a", 2, 0), ("pat-a", 2, 1)]
        + [("pat-b", 0, o) for o in range(5)]
    )

    # startingOffsets=latest: only what comes after the query started.
    from_latest = Batches()
    query = _start(
        spark_session,
        spark_cluster,
        tmp_path / "latest",
        from_latest,
        subscribe="pat-a",
        startingOffsets="latest",
    )
    running.append(query)
    query.processAllAvailable()
    assert from_latest.rows == []
    _produce(spark_cluster, "pat-a", [b"after-0", b"after-1"], partition=0)
    query.processAllAvailable()
    query.stop()
    assert sorted((p, o, v) for _, p, o, v in from_latest.rows) == [
        (0, 10, b"after-0"),
        (0, 11, b"after-1"),
    ]
