"""The sink's input: Spark's Kafka-sink columns, read from Arrow record batches.

The columns are those Spark's Kafka sink takes: ``value`` (binary or string, required),
``key`` (binary or string), ``topic`` (string; the ``topic`` option wins over it, as in
Spark), ``partition`` (int), ``headers`` (array of struct ``key`` string, ``value``
binary) and ``timestamp`` (timestamp; else the producer's clock). Other columns are
ignored, as Spark's sink ignores them. :func:`check_sink_schema` runs on the driver, so a
wrong column type fails the query before a task starts; :func:`columns_of` runs in the
tasks and turns one Arrow batch into Python lists in a few vectorised calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from lograft.protocol.errors import InvalidConfigError, InvalidRecordError

__all__ = ["SinkColumns", "check_sink_schema", "columns_of"]

_BYTES_TYPES = (BinaryType, StringType)


def _header_type_ok(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], _BYTES_TYPES)
    )


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Raise ``InvalidConfigError`` naming the column if ``schema`` cannot be written.

    A topic must come from the ``topic`` option or a ``topic`` column.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise InvalidConfigError("the lograft sink needs a 'value' column (binary or string)")
    expected: dict[str, tuple[str, bool]] = {
        "value": ("binary or string", isinstance(fields.get("value"), _BYTES_TYPES)),
        "key": ("binary or string", isinstance(fields.get("key"), _BYTES_TYPES)),
        "topic": ("string", isinstance(fields.get("topic"), StringType)),
        "partition": ("int", isinstance(fields.get("partition"), IntegerType)),
        "headers": (
            "array<struct<key: string, value: binary>>",
            _header_type_ok(fields["headers"]) if "headers" in fields else False,
        ),
        "timestamp": (
            "timestamp",
            isinstance(fields.get("timestamp"), TimestampType | TimestampNTZType),
        ),
    }
    for name, (wanted, ok) in expected.items():
        if name in fields and not ok:
            raise InvalidConfigError(
                f"the lograft sink's column {name!r} must be {wanted}, not "
                f"{fields[name].simpleString()}"
            )
    if topic_option is None and "topic" not in fields:
        raise InvalidConfigError(
            "the lograft sink needs a topic: the 'topic' option or a 'topic' column"
        )


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """One Arrow batch's records as Python lists (``None`` for a column that is absent)."""

    values: list[bytes | None]
    keys: list[bytes | None] | None
    topics: list[str | None] | None
    partitions: list[int | None] | None
    headers: list[list[tuple[str, bytes | None]] | None] | None
    timestamps_ms: list[int | None] | None

    @property
    def bulk_ready(self) -> bool:
        """Whether the records fit ``Producer.send_bulk``: one topic, no tombstones, and
        nothing but keys and values to say per record."""
        return (
            self.topics is None
            and self.partitions is None
            and self.headers is None
            and self.timestamps_ms is None
            and all(v is not None for v in self.values)
        )


def _as_bytes(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.large_binary())
    result: list[bytes | None] = column.to_pylist()
    return result


def _headers(column: pa.Array | pa.ChunkedArray) -> list[list[tuple[str, bytes | None]] | None]:
    rows: list[list[dict[str, object]] | None] = column.to_pylist()
    result: list[list[tuple[str, bytes | None]] | None] = []
    for row in rows:
        if row is None:
            result.append(None)
            continue
        pairs: list[tuple[str, bytes | None]] = []
        for item in row:
            key, value = item["key"], item["value"]
            if not isinstance(key, str):
                raise InvalidRecordError("a header key is null")
            if isinstance(value, str):
                value = value.encode()
            if value is not None and not isinstance(value, bytes):
                raise InvalidRecordError(f"header {key!r} has a value of {type(value).__name__}")
            pairs.append((key, value))
        result.append(pairs)
    return result


def _timestamps_ms(column: pa.Array | pa.ChunkedArray) -> list[int | None]:
    # Spark's timestamps are microseconds; Kafka's are milliseconds (truncated, as Spark's
    # Kafka sink does). A safe cast would refuse any value with sub-millisecond digits.
    millis = pc.cast(pc.cast(column, pa.timestamp("ms", tz=column.type.tz), safe=False), pa.int64())
    result: list[int | None] = millis.to_pylist()
    return result


def columns_of(batch: pa.RecordBatch, topic_option: str | None) -> SinkColumns:
    """The sink's columns of ``batch`` (see the module docstring)."""
    names: Sequence[str] = batch.schema.names

    def column(name: str) -> pa.Array | None:
        return batch.column(name) if name in names else None

    value, key, topic = column("value"), column("key"), column("topic")
    partition, headers, timestamp = column("partition"), column("headers"), column("timestamp")
    if value is None:
        raise InvalidConfigError("the lograft sink needs a 'value' column")
    topics: list[str | None] | None = None
    if topic_option is None:
        if topic is None:
            raise InvalidConfigError("the lograft sink needs a 'topic' option or column")
        topics = topic.to_pylist()
    return SinkColumns(
        values=_as_bytes(value),
        keys=_as_bytes(key) if key is not None else None,
        topics=topics,
        partitions=partition.to_pylist() if partition is not None else None,
        headers=_headers(headers) if headers is not None else None,
        timestamps_ms=_timestamps_ms(timestamp) if timestamp is not None else None,
    )
