"""The sink's exactly-once argument (docs/spark.md), walked with real crashes.

A streaming query's driver runs as its own process (``tests/spark/sink_driver.py``): it is
killed with its JVM and workers between ``write()`` and ``commit()``, and inside
``commit()`` after one partition's transaction was completed, then restarted from its
checkpoint; tasks fail on their first attempt, after preparing and halfway through their
rows; a broker is killed while the query writes. Each time, a ``read_committed`` reader
finds every input row in the output topic exactly once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from cluster.client.admin import AdminClient
from cluster.client.consumer import Consumer
from lograft.protocol.topic_partition import TopicPartition
from spark.sink_transactions import DEFAULT_PREFIX, PROGRESS_PARTITION, transactional_id
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.spark.conftest import require_spark
from tests.spark.helpers import input_rows, make_topic, read_topic, write_input_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT_S = 300
PARTITIONS = 3


@pytest.fixture(autouse=True)
def _spark_available() -> None:
    """These tests run Spark in driver processes of their own, not in the test session."""
    require_spark()


def _driver(
    cluster: QuorumCluster, work: Path, topic: str, fault: str = "none", fault_batch: int = 1
) -> subprocess.Popen[bytes]:
    with (work / f"driver-{fault}-{time.monotonic_ns()}.log").open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.spark.sink_driver",
                "--bootstrap",
                cluster.bootstrap,
                "--input",
                str(work / "in"),
                "--checkpoint",
                str(work / "checkpoint"),
                "--topic",
                topic,
                "--fault",
                fault,
                "--fault-batch",
                str(fault_batch),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its process group is the driver's: a fault kills it
        )


def _finish(driver: subprocess.Popen[bytes]) -> int:
    try:
        return driver.wait(timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        driver.kill()
        raise


def _expected(files: list[list[dict[str, str]]]) -> Counter[bytes]:
    return Counter(row["value"].encode() for rows in files for row in rows)


def _input(
    cluster: QuorumCluster, work: Path, topic: str, files: int, rows_per_file: int
) -> list[list[dict[str, str]]]:
    """The output topic, and the input files the driver reads (one per micro-batch)."""
    make_topic(cluster, topic, PARTITIONS)
    rows = input_rows(files=files, rows_per_file=rows_per_file)
    write_input_files(work / "in", rows)
    return rows


def _progress(cluster: QuorumCluster, work: Path) -> dict[int, int | None]:
    """Each Spark partition's progress (the next batch id to write) in its group, for the
    query the first driver in ``work`` ran (it prints ``QUERY <id>``)."""
    first_log = min(work.glob("driver-*.log"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    (query_id,) = re.findall(r"^QUERY (\S+)$", first_log.read_text(), re.MULTILINE)
    with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        found = {
            p: admin.list_consumer_group_offsets(
                transactional_id(DEFAULT_PREFIX, query_id, p), [PROGRESS_PARTITION]
            )[PROGRESS_PARTITION]
            for p in range(PARTITIONS)
        }
    return {p: (o.offset if o is not None else None) for p, o in found.items()}


def _committed(cluster: QuorumCluster, topic: str, settled: bool = True) -> Counter[bytes]:
    """The values a read_committed reader finds in ``topic``, counted (see ``read_topic``
    for ``settled``)."""
    records = read_topic(cluster, topic, PARTITIONS, settled=settled)
    return Counter(r.value for r in records if r.value)


@pytest.mark.parametrize("fault", ["kill-before-commit", "kill-inside-commit"])
def test_a_driver_killed_around_commit_restarts_to_exactly_once(
    spark_cluster: QuorumCluster, tmp_path: Path, fault: str
) -> None:
    topic = f"crash-{fault}"
    files = _input(spark_cluster, tmp_path, topic, 3, 60)

    assert _finish(_driver(spark_cluster, tmp_path, topic, fault, fault_batch=1)) == -9
    # Batch 1's prepared transactions are open: read at once. (Batch 0's markers are all
    # written: batch 1's init_transactions waited for them.)
    seen = _committed(spark_cluster, topic, settled=False)
    batch0, batch1 = _expected(files[:1]), _expected(files[1:2])
    if fault == "kill-before-commit":
        # Batch 1 is prepared, not committed: in the log, but read_committed sees batch 0.
        assert seen == batch0
        written = read_topic(spark_cluster, topic, PARTITIONS, "read_uncommitted")
        assert Counter(r.value for r in written) == batch0 + batch1
    else:
        # One Spark partition's transaction of batch 1 was committed before the kill, the
        # others stay prepared. Its rows may stay hidden behind the prepared transactions'
        # first offsets (the LSO), but its progress shows the commit once its marker reaches
        # the progress group; the others' rows are hidden, and nothing is there twice.
        wait_until(
            lambda: 2 in _progress(spark_cluster, tmp_path).values(),
            60,
            "batch 1's committed partition in its progress group",
        )
        assert sorted(_progress(spark_cluster, tmp_path).values()) == [1, 1, 2]
        assert max(seen.values()) == 1
        assert set(seen) <= set(batch0 | batch1)
        assert set(batch1) - set(seen)

    assert _finish(_driver(spark_cluster, tmp_path, topic)) == 0
    assert _committed(spark_cluster, topic) == _expected(files)
    if fault == "kill-before-commit":
        # The replay wrote batch 1 again; only the aborted first copy is hidden.
        everything = read_topic(spark_cluster, topic, PARTITIONS, "read_uncommitted")
        assert len(everything) > sum(_expected(files).values())


@pytest.mark.parametrize("fault", ["fail-first-attempt", "fail-mid-write"])
def test_a_task_retry_writes_its_partition_once(
    spark_cluster: QuorumCluster, tmp_path: Path, fault: str
) -> None:
    topic = f"retry-{fault}"
    files = _input(spark_cluster, tmp_path, topic, 3, 60)

    assert _finish(_driver(spark_cluster, tmp_path, topic, fault, fault_batch=1)) == 0
    assert (tmp_path / "checkpoint.fault").exists()  # the fault fired
    assert _committed(spark_cluster, topic) == _expected(files)
    if fault == "fail-first-attempt":
        # The failed attempt's prepared rows are in the log, aborted by the retry.
        everything = read_topic(spark_cluster, topic, PARTITIONS, "read_uncommitted")
        assert len(everything) > sum(_expected(files).values())


def _committed_count(cluster: QuorumCluster, topic: str) -> int:
    """Records below the read_committed end offsets (markers included: a lower bound)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed") as c:
        return sum(c.end_offsets(tps).values())


def test_a_broker_killed_during_a_streaming_write_still_leaves_each_row_once(
    spark_cluster: QuorumCluster, tmp_path: Path
) -> None:
    topic = "broker-kill"
    files = _input(spark_cluster, tmp_path, topic, 8, 300)
    victim = spark_cluster.nodes[spark_cluster.leaders(spark_cluster.nodes[1], topic)[0]]

    driver = _driver(spark_cluster, tmp_path, topic)
    wait_until(lambda: _committed_count(spark_cluster, topic) >= 300, 120, "a committed batch")
    assert driver.poll() is None, "the query ended before the broker was killed"
    assert _committed_count(spark_cluster, topic) < sum(_expected(files).values())
    victim.kill()
    outcome = _finish(driver)
    victim.start(wait=False)
    wait_until(spark_cluster.healthy, CLUSTER_TIMEOUT_S, "the cluster healthy again")
    if outcome != 0:
        # The query may fail with a clear error; restarted, it finishes the job.
        assert _finish(_driver(spark_cluster, tmp_path, topic)) == 0
    assert _committed(spark_cluster, topic) == _expected(files)
