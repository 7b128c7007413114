"""A local SparkSession set up for lograft: tests, benchmarks, the example and the demo.

Spark's defaults suit a cluster, not one laptop: the driver binds to the machine's outward
address and starts a web UI, and the Python workers run whatever ``python3`` is first on
the PATH, which may lack lograft. ``local_session_builder`` binds to 127.0.0.1, turns the UI
off, runs workers on this interpreter and gives the driver 1 GiB; the caller adds settings
and calls ``getOrCreate()``, then :func:`spark.datasource.register`.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

__all__ = ["local_session_builder"]


def local_session_builder(
    master: str = "local[2]", app: str = "lograft", shuffle_partitions: int = 4
) -> SparkSession.Builder:
    """A builder of a local session (see the module docstring); ``master`` as Spark's
    (``local[2,3]``: two cores, each task tried up to three times)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
