"""The ``lograft`` data source for PySpark (its Python Data Source API, Spark 4.2 and later).

Register it once per session, then use it as Spark's Kafka connector is used::

    from spark.datasource import register
    register(session)
    session.readStream.format("lograft").option("subscribe", "events").load()
    df.writeStream.format("lograft").option("topic", "out") \
        .option("checkpointLocation", "/tmp/q1").start()

The sink (:mod:`spark.sink`) writes each micro-batch exactly once, in prepared transactions
that the driver completes; the source (:mod:`spark.source`) reads committed records by
offset ranges that Spark checkpoints. ``docs/spark.md`` has the options and the argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["FORMAT", "LograftDataSource", "register"]

FORMAT = "lograft"
"""The name ``format(...)`` takes."""


class LograftDataSource(DataSource):
    """``format("lograft")``: batch and streaming reads and writes of lograft topics."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``lograft``."""
        return FORMAT

    def schema(self) -> StructType:
        """The columns a read returns: those of Spark's Kafka source."""
        from spark.source import read_schema

        return read_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        """``spark.read.format("lograft")``: the records between two offsets."""
        from spark.source import LograftBatchReader

        return LograftBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("lograft")``: offset ranges Spark checkpoints."""
        from spark.source import LograftStreamReader

        return LograftStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("lograft")``: all rows in one set of transactions."""
        from spark.sink import LograftBatchWriter

        return LograftBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("lograft")``: each micro-batch exactly once."""
        from spark.sink import LograftStreamWriter

        return LograftStreamWriter(self.options, schema)


def register(session: SparkSession) -> None:
    """Make ``format("lograft")`` known to ``session``."""
    session.dataSource.register(LograftDataSource)
