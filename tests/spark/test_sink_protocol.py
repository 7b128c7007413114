"""The sink's two-phase protocol against a real cluster, without Spark: what a task's
``write_partition`` and the driver's ``complete_partition`` do when a batch is replayed, a
commit repeated, an attempt fenced, or a task fails halfway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lograft.protocol.errors import BatchNotCommittedError, InvalidRecordError
from tests.integration.quorum import QuorumCluster
from tests.spark.conftest import require_spark
from tests.spark.helpers import make_topic, read_topic

pytestmark = pytest.mark.integration

TOPIC = "protocol-out"
PARTITIONS = 2


@pytest.fixture(autouse=True)
def _spark_available() -> None:
    require_spark()


def _rows(batch: int, count: int = 20) -> Iterator[object]:
    import pyarrow as pa

    values = [f"b{batch}-{i}".encode() for i in range(count)]
    yield pa.RecordBatch.from_pydict({"key": [b"k"] * count, "value": values})


def test_replays_repeated_commits_and_fenced_attempts_leave_each_row_once(
    spark_cluster: QuorumCluster,
) -> None:
    from spark.sink_transactions import (
        ALREADY_COMMITTED,
        PREPARED,
        SinkSettings,
        complete_partition,
        write_partition,
    )

    make_topic(spark_cluster, TOPIC, PARTITIONS)
    settings = SinkSettings.from_options(
        {"bootstrap.servers": spark_cluster.bootstrap, "topic": TOPIC}, record_progress=True
    )
    txn_id = "protocol-query-0"

    first = write_partition(settings, txn_id, 0, _rows(0))
    assert first.outcome == PREPARED and first.records == 20
    complete_partition(settings, first)
    complete_partition(settings, first)  # commit() again (a replayed commit): nothing more

    replay = write_partition(settings, txn_id, 0, _rows(0))  # batch 0 replayed after a crash
    assert replay.outcome == ALREADY_COMMITTED

    # Two attempts of batch 1 (speculation): the second fences the first, but the driver
    # holds the first one's message. Completing it fails the query (the open transaction
    # is not the one named, so it is aborted); the restarted query writes batch 1 again.
    stale = write_partition(settings, txn_id, 1, _rows(1))
    write_partition(settings, txn_id, 1, _rows(1))
    with pytest.raises(BatchNotCommittedError):
        complete_partition(settings, stale)
    rerun = write_partition(settings, txn_id, 1, _rows(1))
    assert rerun.outcome == PREPARED
    complete_partition(settings, rerun)

    values = sorted(r.value for r in read_topic(spark_cluster, TOPIC, PARTITIONS) if r.value)
    assert values == sorted([f"b0-{i}".encode() for i in range(20)] + list(_values(1)))


def _values(batch: int) -> Iterator[bytes]:
    return (f"b{batch}-{i}".encode() for i in range(20))


def test_a_task_that_fails_halfway_aborts_its_transaction_at_once(
    spark_cluster: QuorumCluster,
) -> None:
    import pyarrow as pa

    from cluster.client.admin import AdminClient
    from cluster.client.consumer import Consumer
    from lograft.protocol.topic_partition import TopicPartition
    from spark.sink_transactions import SinkSettings, write_partition

    topic = "protocol-failed"
    make_topic(spark_cluster, topic, 1)
    # No topic option, and the second row's topic column is null: the task fails there.
    settings = SinkSettings.from_options(
        {"bootstrap.servers": spark_cluster.bootstrap}, record_progress=True
    )
    rows = pa.RecordBatch.from_pydict({"topic": [topic, None], "value": [b"sent", b"bad"]})
    with pytest.raises(InvalidRecordError, match="null topic"):
        write_partition(settings, "protocol-failing-0", 0, iter([rows]))

    # The transaction the task opened is aborted already, though no later attempt of the
    # id ever ran: nothing holds read_committed readers back.
    with AdminClient(bootstrap_servers=spark_cluster.bootstrap) as admin:
        described = admin.describe_transactions(["protocol-failing-0"])["protocol-failing-0"]
    assert described.state == "CompleteAbort"
    tps = [TopicPartition(topic, 0)]
    with (
        Consumer(bootstrap_servers=spark_cluster.bootstrap, isolation_level="read_committed") as c,
        Consumer(bootstrap_servers=spark_cluster.bootstrap) as u,
    ):
        assert c.end_offsets(tps) == u.end_offsets(tps)
    assert read_topic(spark_cluster, topic, 1) == []
