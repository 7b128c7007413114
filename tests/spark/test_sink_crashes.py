"""The sink's exactly-once argument (docs/spark.md), walked with real crashes.

A streaming query's driver runs as its own process (``tests/spark/sink_driver.py``): it is
killed with its JVM and workers between ``write()`` and ``commit()``, and inside
``commit()`` after one partition's transaction was completed, then restarted from its
checkpoint; tasks fail on their first attempt, after preparing and halfway through their
rows; a broker is killed while the query writes. Each time, a ``read_committed`` reader
finds every input row in the output topic exactly once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.quorum import QuorumCluster
from tests.spark.conftest import spark_missing_reason
from tests.spark.helpers import input_rows, make_topic, read_topic, write_input_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT_S = 300
PARTITIONS = 3


@pytest.fixture(autouse=True)
def _spark_available(spark_session: object) -> None:
    """Skip (or fail, under LOGRAFT_REQUIRE_SPARK=1) as the session fixture does."""
    assert spark_missing_reason() is None


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


@pytest.mark.parametrize("fault", ["kill-before-commit", "kill-inside-commit"])
def test_a_driver_killed_around_commit_restarts_to_exactly_once(
    spark_cluster: QuorumCluster, tmp_path: Path, fault: str
) -> None:
    topic = f"crash-{fault}"
    make_topic(spark_cluster, topic, PARTITIONS)
    files = input_rows(files=3, rows_per_file=60)
    write_input_files(tmp_path / "in", files)

    assert _finish(_driver(spark_cluster, tmp_path, topic, fault, fault_batch=1)) == -9
    seen = Counter(r.value for r in read_topic(spark_cluster, topic, PARTITIONS))
    batch0, batch1 = _expected(files[:1]), _expected(files[1:2])
    if fault == "kill-before-commit":
        # Batch 1 is prepared, not committed: read_committed sees batch 0 alone.
        assert seen == batch0
    else:
        # One partition of batch 1 committed before the kill: at most once so far.
        assert max(seen.values()) == 1
        assert set(seen) <= set(batch0 | batch1)
        assert set(seen) - set(batch0)

    assert _finish(_driver(spark_cluster, tmp_path, topic)) == 0
    assert Counter(r.value for r in read_topic(spark_cluster, topic, PARTITIONS)) == _expected(
        files
    )
    if fault == "kill-before-commit":
        # The replay wrote batch 1 again; only the aborted first copy is hidden.
        everything = read_topic(spark_cluster, topic, PARTITIONS, "read_uncommitted")
        assert len(everything) > sum(_expected(files).values())


@pytest.mark.parametrize("fault", ["fail-first-attempt", "fail-mid-write"])
def test_a_task_retry_writes_its_partition_once(
    spark_cluster: QuorumCluster, tmp_path: Path, fault: str
) -> None:
    topic = f"retry-{fault}"
    make_topic(spark_cluster, topic, PARTITIONS)
    files = input_rows(files=3, rows_per_file=60)
    write_input_files(tmp_path / "in", files)

    assert _finish(_driver(spark_cluster, tmp_path, topic, fault, fault_batch=1)) == 0
    assert (tmp_path / "checkpoint.fault").exists()  # the fault fired
    assert Counter(r.value for r in read_topic(spark_cluster, topic, PARTITIONS)) == _expected(
        files
    )
