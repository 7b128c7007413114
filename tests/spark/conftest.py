"""Fixtures of the Spark tests: one local SparkSession for the whole run, and a cluster.

Without pyspark or Java these tests skip, unless ``LOGRAFT_REQUIRE_SPARK=1`` (``.ci/run``
sets it): then they fail, so that a CI machine without Spark cannot pass them by skipping.
A session takes 6-12 s to start, so there is one (``local[2,3]``: two cores, a failed task
is tried up to three times, as the task-retry tests need).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.quorum import QuorumCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REQUIRE_SPARK_ENV = "LOGRAFT_REQUIRE_SPARK"


def spark_missing_reason() -> str | None:
    """Why no local Spark can run here, or ``None`` if one can."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark or pyarrow is not installed ({exc}); make install installs lograft[spark]"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return (
            "no java on PATH and no JAVA_HOME: Spark needs a JDK (Debian: openjdk-17-jre-headless)"
        )
    return None


def require_spark() -> None:
    """Skip the test if Spark cannot run here; fail it instead under
    ``LOGRAFT_REQUIRE_SPARK=1``."""
    reason = spark_missing_reason()
    if reason is not None:
        if os.environ.get(REQUIRE_SPARK_ENV) == "1":
            pytest.fail(f"{REQUIRE_SPARK_ENV}=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark_session() -> Iterator[SparkSession]:
    """The run's SparkSession with the ``lograft`` data source registered."""
    require_spark()
    from spark.datasource import register
    from spark.session import local_session_builder

    session = local_session_builder("local[2,3]", "lograft-tests").getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    """Three running nodes for one test module (tests make topics of their own names)."""
    running = QuorumCluster(Path(tmp_path_factory.mktemp("spark-cluster")))
    running.start()
    try:
        yield running
    finally:
        running.stop()
