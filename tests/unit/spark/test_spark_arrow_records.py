"""The Spark sink's input columns: schema checks on the driver, Arrow batches in tasks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pa = pytest.importorskip("pyarrow")
types = pytest.importorskip("pyspark.sql.types")

from lograft.protocol.errors import InvalidConfigError  # noqa: E402
from spark.arrow_records import check_sink_schema, columns_of  # noqa: E402


def _headers_type(value_type: object | None = None) -> object:
    element = types.StructType(
        [
            types.StructField("key", types.StringType()),
            types.StructField("value", value_type or types.BinaryType()),
        ]
    )
    return types.ArrayType(element)


TYPES = {
    "string": types.StringType(),
    "binary": types.BinaryType(),
    "int": types.IntegerType(),
    "bigint": types.LongType(),
    "double": types.DoubleType(),
    "timestamp": types.TimestampType(),
    "headers": _headers_type(),
    "array<string>": types.ArrayType(types.StringType()),
}


def _schema(ddl: str) -> types.StructType:
    """``"name type, ..."`` with the few types these tests use (no JVM needed)."""
    fields = [part.strip().split(" ", 1) for part in ddl.split(",")]
    return types.StructType([types.StructField(n, TYPES[t.strip()]) for n, t in fields])


def test_a_schema_of_kafka_sink_columns_is_accepted() -> None:
    check_sink_schema(
        _schema(
            "topic string, partition int, key string, value binary, headers headers, "
            "timestamp timestamp, other double"
        ),
        None,
    )
    check_sink_schema(_schema("value string"), "out")


@pytest.mark.parametrize(
    ("ddl", "topic", "message"),
    [
        ("key string", "out", "needs a 'value' column"),
        ("value int", "out", "column 'value' must be binary or string, not int"),
        ("value binary, partition bigint", "out", "column 'partition' must be int"),
        ("value binary, headers array<string>", "out", "column 'headers' must be array"),
        ("value binary, timestamp string", "out", "column 'timestamp' must be timestamp"),
        ("value binary", None, "needs a topic"),
        ("value binary, topic int", None, "column 'topic' must be string"),
    ],
)
def test_a_schema_the_sink_cannot_write_is_refused_naming_the_column(
    ddl: str, topic: str | None, message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        check_sink_schema(_schema(ddl), topic)


def test_columns_become_bytes_partitions_headers_and_milliseconds() -> None:
    when = datetime(2026, 11, 28, 12, 0, 0, 123_456, tzinfo=UTC)  # microseconds, as Spark's
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["a", "b"],
            "partition": pa.array([1, None], pa.int32()),
            "key": ["k", None],
            "value": pa.array([b"v", None], pa.binary()),
            "headers": pa.array(
                [[{"key": "h", "value": b"x"}], None],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
            "timestamp": pa.array([when, None], pa.timestamp("us", tz="UTC")),
        }
    )
    columns = columns_of(batch, None)
    assert columns.topics == ["a", "b"]
    assert columns.partitions == [1, None]
    assert columns.keys == [b"k", None]
    assert columns.values == [b"v", None]
    assert columns.headers == [[("h", b"x")], None]
    assert columns.timestamps_ms == [int(when.timestamp()) * 1000 + 123, None]
    assert not columns.bulk_ready


def test_only_keys_and_values_to_one_topic_go_the_bulk_way() -> None:
    batch = pa.RecordBatch.from_pydict({"key": ["k1", "k2"], "value": ["v1", "v2"]})
    columns = columns_of(batch, "out")
    assert columns.values == [b"v1", b"v2"]
    assert columns.topics is None
    assert columns.bulk_ready
    tombstone = pa.RecordBatch.from_pydict({"value": pa.array([b"v", None], pa.binary())})
    assert not columns_of(tombstone, "out").bulk_ready
