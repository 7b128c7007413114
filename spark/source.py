"""The lograft source: ``spark.readStream.format("lograft")`` and ``spark.read.format(...)``.

It behaves as Spark's Kafka source (spark-sql-kafka) does, with lograft's clients:

* **What it reads**: exactly one of ``subscribe`` (topics, comma-separated),
  ``subscribePattern`` (a regular expression over topic names; internal ``__`` topics
  excluded) and ``assign`` (JSON ``{"topic": [0, 1]}``).
* **Where it starts**: ``startingOffsets``, ``earliest`` or ``latest`` (the default of a
  streaming query) or JSON ``{"topic": {"0": 23, "1": -2}}`` naming every partition, -2
  for earliest and -1 for latest. It applies when a query starts; a restarted query goes on
  from its checkpoint, and partitions that appear later (``create_partitions``, a new topic
  matching ``subscribePattern``) are read from their beginning.
* **Offsets are Spark's**: each micro-batch's end offsets, ``{"topic": {"0": 42}}``, are
  checkpointed by Spark; the source never joins or commits to a consumer group (the
  ``group.id``, ``auto.offset.reset`` and ``enable.auto.commit`` client settings are refused).
* **Only committed data**: ``isolation.level`` is ``read_committed`` unless the user sets
  ``read_uncommitted``; a batch then ends at each partition's last stable offset, so
  records of aborted transactions are skipped and nothing at or after the first offset of
  an open transaction is read until it ends.
* ``maxOffsetsPerTrigger`` bounds the offsets of a micro-batch (Spark's default read
  limit); ``Trigger.AvailableNow`` reads what is there when the query starts, in batches
  of that bound; ``minPartitions`` splits large ranges into more tasks.
* ``failOnDataLoss`` (default ``true``): records deleted (retention) before they were read,
  partitions gone, or offsets that went back fail the query; ``false`` logs and skips.
* ``kafkaConsumer.pollTimeoutMs`` (default 120000): a task whose partition makes no
  progress for that long fails with ``RequestTimedOutError``.
* A batch read takes ``startingOffsets`` (default ``earliest``; -2 in JSON) and
  ``endingOffsets`` (default ``latest``; -1 in JSON): one task per partition range.
* Client settings by Kafka's consumer names, with or without the ``kafka.`` prefix
  (``kafka.bootstrap.servers``, ``fetch.max.bytes``); see :mod:`spark.options`.

Columns are those of Spark's Kafka source (:func:`read_schema`). Tasks read their range
with a ``Consumer`` and hand Spark Arrow record batches.
"""

# Over 600 lines: the stream and batch readers share the options, offset lookups and Arrow batches.
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cluster.client.admin import ADMIN_CONFIGS, AdminClient
from cluster.client.consumer import CONSUMER_CONFIGS, Consumer, ConsumerRecord
from lograft.protocol.errors import (
    IllegalStateError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from lograft.protocol.topic_partition import TopicPartition
from spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    OffsetSpec,
    after_deleted_records,
    offsets_from_json,
    offsets_to_json,
    parse_assign,
    parse_offset_spec,
    plan_ranges,
    rate_limit,
    split_ranges,
)
from spark.options import client_config, option, option_int, settings_for

__all__ = [
    "DEFAULT_POLL_TIMEOUT_MS",
    "TIMESTAMP_TYPE_CREATE_TIME",
    "LograftBatchReader",
    "LograftStreamReader",
    "SourceOptions",
    "read_schema",
]

log = logging.getLogger(__name__)

DEFAULT_POLL_TIMEOUT_MS: Final = 120_000
"""``kafkaConsumer.pollTimeoutMs``'s default, Spark's: how long a task may make no progress."""

TIMESTAMP_TYPE_CREATE_TIME: Final = 0
"""The ``timestampType`` column: Kafka's 0, CreateTime (see :func:`read_schema`)."""

_ARROW_BATCH_ROWS: Final = 10_000
"""Rows per Arrow record batch a task yields (Spark's ``maxRecordsPerBatch`` default)."""

_POLL_RECORDS: Final = 5_000
"""``max.poll.records`` of a task's consumer unless the user sets it: fewer, larger polls."""

_INTERNAL_TOPIC_PREFIX: Final = "__"

_REFUSED_CLIENT_CONFIGS: Final = {
    "group.id": "offsets are checkpointed by Spark, not committed to a consumer group",
    "auto.offset.reset": "use the option startingOffsets instead",
    "enable.auto.commit": "offsets are checkpointed by Spark, never committed",
}


def read_schema(options: Mapping[str, str]) -> StructType:
    """The columns of a read, those of Spark's Kafka source: ``key`` and ``value``
    (binary), ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``, and
    ``headers`` (``array<struct<key: string, value: binary>>``) only with the option
    ``includeHeaders=true``.

    ``timestampType`` is always 0 (CreateTime): lograft's ``ConsumerRecord`` carries the
    record's timestamp but not its type (there is no LogAppendTime to report).

    Spark asks for the schema at ``load()``: the options a streaming query and a batch
    read share are checked here, so that a bad one fails there (``InvalidConfigError``).
    """
    _subscription(options)
    _consumer_config(options)
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if _bool_option(options, "includeHeaders", False):
        fields.append(
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            )
        )
    return StructType(fields)


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = option(options, name)
    if text is None:
        return default
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise InvalidConfigError(f"option {name}={text!r}: expected true or false")
    return word == "true"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The source's options, checked (see the module docstring); picklable, so tasks get
    them with the reader."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = "latest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    consumer: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        """Check ``options`` for a streaming query or (``streaming=False``) a batch read;
        raises ``InvalidConfigError`` naming the first bad option."""
        topics, pattern, assigned = _subscription(options)
        if streaming:
            starting = parse_offset_spec(
                option(options, "startingOffsets", "latest") or "latest",
                "startingOffsets",
                allow=("earliest", "latest"),
                allow_sentinels=(EARLIEST, LATEST),
            )
            if option(options, "endingOffsets") is not None:
                raise InvalidConfigError("option endingOffsets is for batch reads only")
            ending: OffsetSpec = "latest"
        else:
            # As Spark's Kafka source: a batch read cannot start at the end or stop at the
            # beginning, as either is an empty read that looks like a mistake.
            starting = parse_offset_spec(
                option(options, "startingOffsets", "earliest") or "earliest",
                "startingOffsets",
                allow=("earliest",),
                allow_sentinels=(EARLIEST,),
            )
            ending = parse_offset_spec(
                option(options, "endingOffsets", "latest") or "latest",
                "endingOffsets",
                allow=("latest",),
                allow_sentinels=(LATEST,),
            )
            if option(options, "maxOffsetsPerTrigger") is not None:
                raise InvalidConfigError("option maxOffsetsPerTrigger is for streaming queries")
        consumer = _consumer_config(options)
        return cls(
            topics=topics,
            pattern=pattern,
            assigned=assigned,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=option_int(options, "maxOffsetsPerTrigger", 1),
            min_partitions=option_int(options, "minPartitions", 1),
            fail_on_data_loss=_bool_option(options, "failOnDataLoss", True),
            include_headers=_bool_option(options, "includeHeaders", False),
            poll_timeout_ms=option_int(options, "kafkaConsumer.pollTimeoutMs", 1)
            or DEFAULT_POLL_TIMEOUT_MS,
            consumer=consumer,
        )

    @property
    def isolation_level(self) -> str:
        """``read_committed`` (this source's default) or ``read_uncommitted``."""
        return str(self.consumer.get("isolation.level", "read_committed"))

    def describe(self) -> str:
        """What the options read, for logs and errors."""
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        if self.assigned:
            return "assign=" + ",".join(str(tp) for tp in self.assigned)
        return "subscribe=" + ",".join(self.topics)


def _subscription(
    options: Mapping[str, str],
) -> tuple[tuple[str, ...], str | None, tuple[TopicPartition, ...]]:
    given = {
        name: text
        for name in ("subscribe", "subscribePattern", "assign")
        if (text := option(options, name)) is not None
    }
    if len(given) != 1:
        raise InvalidConfigError(
            "give exactly one of the options subscribe, subscribePattern and assign"
            + (f" (given: {', '.join(sorted(given))})" if given else "")
        )
    if "subscribe" in given:
        topics = tuple(dict.fromkeys(t.strip() for t in given["subscribe"].split(",")))
        if not topics or "" in topics:
            raise InvalidConfigError(
                f"option subscribe={given['subscribe']!r}: expected topic names separated by commas"
            )
        return topics, None, ()
    if "subscribePattern" in given:
        pattern = given["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidConfigError(
                f"option subscribePattern={pattern!r}: not a regular expression ({exc})"
            ) from None
        return (), pattern, ()
    return (), None, tuple(parse_assign(given["assign"]))


def _consumer_config(options: Mapping[str, str]) -> dict[str, object]:
    consumer = client_config(options, CONSUMER_CONFIGS, "consumer")
    for name, why in _REFUSED_CLIENT_CONFIGS.items():
        if name in consumer:
            raise InvalidConfigError(f"option {name} is not supported by this source: {why}")
    consumer.setdefault("isolation.level", "read_committed")
    return consumer


def _check_schema(schema: StructType, options: Mapping[str, str]) -> None:
    if schema != read_schema(options):
        raise InvalidConfigError(
            "the lograft source has a fixed schema (that of Spark's Kafka source): "
            "do not set one with .schema(...)"
        )


class _Lookups:
    """The driver's questions to the cluster: which partitions the options select, and
    their offsets. Holds one ``AdminClient``, opened on first use; not pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin: AdminClient | None = None

    def __getstate__(self) -> dict[str, object]:
        return {"_options": self._options, "_admin": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._options = state["_options"]
        self._admin = None

    def admin(self) -> AdminClient:
        """The admin client, with the user's common client settings (servers, timeouts)."""
        if self._admin is None:
            self._admin = AdminClient(settings_for(self._options.consumer, ADMIN_CONFIGS))
        return self._admin

    def partitions(self) -> list[TopicPartition]:
        """The partitions the options select now (a topic not created yet has none)."""
        opts = self._options
        if opts.assigned:
            return list(opts.assigned)
        admin = self.admin()
        existing = admin.list_topics()
        if opts.pattern is not None:
            regex = re.compile(opts.pattern)
            names = [
                n
                for n in existing
                if not n.startswith(_INTERNAL_TOPIC_PREFIX) and regex.fullmatch(n)
            ]
        else:
            present = set(existing)
            names = [t for t in opts.topics if t in present]
        if not names:
            return []
        return sorted(
            TopicPartition(d.name, p.partition)
            for d in admin.describe_topics(names)
            for p in d.partitions
        )

    def offsets(self, partitions: Sequence[TopicPartition], spec: int) -> Offsets:
        """The ``EARLIEST`` or ``LATEST`` offset of each partition; latest is the last stable
        offset under ``read_committed``."""
        if not partitions:
            return {}
        found = self.admin().list_offsets(
            {tp: "earliest" if spec == EARLIEST else "latest" for tp in partitions},
            isolation_level=self._options.isolation_level,
        )
        return {tp: found[tp].offset for tp in partitions}

    def resolve(self, spec: OffsetSpec, partitions: Sequence[TopicPartition], name: str) -> Offsets:
        """The offsets option ``name`` for ``partitions``: JSON must name each of them, as
        with Spark's Kafka source; its -2 and -1 are looked up."""
        if spec == "earliest":
            return self.offsets(partitions, EARLIEST)
        if spec == "latest":
            return self.offsets(partitions, LATEST)
        assert isinstance(spec, dict)
        missing = sorted(set(partitions) - set(spec))
        extra = sorted(set(spec) - set(partitions))
        if missing or extra:
            raise InvalidConfigError(
                f"option {name} must give an offset for each partition read "
                f"({self._options.describe()}; -2 earliest, -1 latest): "
                f"missing {', '.join(map(str, missing)) or '-'}; "
                f"unknown {', '.join(map(str, extra)) or '-'}"
            )
        resolved = dict(spec)
        for sentinel in (EARLIEST, LATEST):
            wanted = [tp for tp, offset in spec.items() if offset == sentinel]
            resolved.update(self.offsets(wanted, sentinel))
        return resolved

    def close(self) -> None:
        """Close the admin client, if one was opened."""
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def _report_losses(losses: Sequence[str], options: SourceOptions) -> None:
    if not losses:
        return
    if options.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            "; ".join(losses) + " (failOnDataLoss=true; set it to false to skip and go on)"
        )
    for loss in losses:
        log.warning("data loss skipped source=%s what=%s", options.describe(), loss)


def _planned(ranges: list[OffsetRange], options: SourceOptions, what: str) -> list[InputPartition]:
    """Spark's input partitions for ``ranges``, split for ``minPartitions``."""
    ranges = split_ranges(ranges, options.min_partitions)
    log.debug(
        "planned read=%s source=%s tasks=%d offsets=%d",
        what,
        options.describe(),
        len(ranges),
        sum(r.size for r in ranges),
    )
    return [InputPartition(r) for r in ranges]


class LograftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("lograft")``: offset ranges per micro-batch, checkpointed
    by Spark (see the module docstring). The planning methods run in one long-lived driver
    process per query; ``read`` runs in tasks."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        _check_schema(schema, options)
        self._options = SourceOptions.parse(options, streaming=True)
        self._schema = schema
        self._lookups = _Lookups(self._options)
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` resolved to offsets."""
        partitions = self._lookups.partitions()
        start = self._lookups.resolve(self._options.starting, partitions, "startingOffsets")
        log.info(
            "initial offsets source=%s partitions=%d offsets=%s",
            self._options.describe(),
            len(start),
            offsets_to_json(start),
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` if that option is set, else all available."""
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end offsets of a ``Trigger.AvailableNow`` run: what is there now."""
        self._target = self._latest = self._lookups.offsets(self._lookups.partitions(), LATEST)
        log.info(
            "available-now target source=%s offsets=%s",
            self._options.describe(),
            offsets_to_json(self._target),
        )

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch from ``start``, within ``limit`` (which the
        engine may make ``ReadAllAvailable`` whatever ``maxOffsetsPerTrigger`` says).

        New partitions start at 0; partitions gone from the cluster are left out, and
        :meth:`partitions` reports them. Returns ``start`` itself when there is nothing new.
        """
        begin = offsets_from_json(start, "start offset")
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = self._lookups.offsets(self._lookups.partitions(), LATEST)
            self._latest = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):
            end = {tp: max(begin.get(tp, 0), offset) for tp, offset in latest.items()}
        else:
            raise IllegalStateError(f"read limit {limit!r} is not supported by this source")
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The end offsets last looked up, for the query's progress reports."""
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One task per partition with offsets between ``start`` and ``end`` (more with
        ``minPartitions``); raises ``OffsetOutOfRangeError`` for data loss the offsets
        show, unless ``failOnDataLoss=false``."""
        ranges, losses = plan_ranges(
            offsets_from_json(start, "start offset"), offsets_from_json(end, "end offset")
        )
        _report_losses(losses, self._options)
        return _planned(ranges, self._options, "micro-batch")

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The records of one range, as Arrow record batches (runs in a task)."""
        return _read(partition, self._options, self._schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: Spark's checkpoint holds the offsets; no consumer group is told."""

    def stop(self) -> None:
        """Close the driver's admin client."""
        self._lookups.close()


class LograftBatchReader(DataSourceReader):
    """``spark.read.format("lograft")``: the records between ``startingOffsets`` and
    ``endingOffsets`` (see the module docstring), one task per partition range."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        _check_schema(schema, options)
        self._options = SourceOptions.parse(options, streaming=False)
        self._schema = schema

    def partitions(self) -> list[InputPartition]:
        """The ranges to read, looked up now; an ending offset past a partition's end, or
        below its starting offset, raises ``InvalidConfigError``."""
        lookups = _Lookups(self._options)
        try:
            parts = lookups.partitions()
            start = lookups.resolve(self._options.starting, parts, "startingOffsets")
            end = lookups.resolve(self._options.ending, parts, "endingOffsets")
            latest = end if self._options.ending == "latest" else lookups.offsets(parts, LATEST)
        finally:
            lookups.close()
        for tp in parts:
            if end[tp] > latest[tp]:
                raise InvalidConfigError(
                    f"option endingOffsets: {end[tp]} is past the end of {tp} "
                    f"({latest[tp]}, {self._options.isolation_level})"
                )
            if end[tp] < start[tp]:
                raise InvalidConfigError(
                    f"{tp}: the ending offset {end[tp]} is below the starting offset {start[tp]}"
                )
        ranges, _ = plan_ranges(start, end)
        return _planned(ranges, self._options, "batch read")

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The records of one range, as Arrow record batches (runs in a task)."""
        return _read(partition, self._options, self._schema)


# ---- reading a range, in a task ------------------------------------------------------------


def _read(partition: InputPartition, options: SourceOptions, schema: StructType) -> Iterator[Any]:
    rng = partition.value
    if rng is None:
        return iter(())  # Spark's placeholder when a batch read plans no range
    if not isinstance(rng, OffsetRange):
        raise IllegalStateError(f"not a lograft offset range: {rng!r}")
    return _read_range(rng, options, schema)


def _read_range(rng: OffsetRange, options: SourceOptions, schema: StructType) -> Iterator[Any]:
    """Yield the records of ``rng`` as Arrow record batches: poll until the consumer's
    position reaches ``rng.end``.

    The position, not a count of records, says when the range is done: under
    ``read_committed`` aborted records and transaction markers take offsets but are never
    returned, and the position jumps over them (possibly past ``rng.end``; records at or
    after it belong to the next batch and are dropped here).
    """
    tp = TopicPartition(rng.topic, rng.partition)
    config: dict[str, object] = dict(options.consumer)
    config.setdefault("max.poll.records", _POLL_RECORDS)
    # No group: nothing is committed, and an offset out of range is reported, not reset.
    config["auto.offset.reset"] = "none"
    config["enable.auto.commit"] = False
    timeout_s = options.poll_timeout_ms / 1000.0
    batches = _ArrowBatches(rng, schema, options.include_headers)
    started = time.monotonic()
    consumer = Consumer(config)
    try:
        consumer.assign([tp])
        consumer.seek(tp, rng.start)
        position = rng.start
        deadline = time.monotonic() + timeout_s
        while position < rng.end:
            try:
                records = consumer.poll(timeout_ms=int(min(timeout_s, 1.0) * 1000))
            except OffsetOutOfRangeError:
                position = _out_of_range(consumer, tp, position, rng, options)
                deadline = time.monotonic() + timeout_s
                continue
            for record in records:
                if rng.start <= record.offset < rng.end:
                    batches.add(record)
            if batches.full:
                yield batches.take()
            now_at = consumer.position(tp)
            if now_at > position:
                position = now_at
                deadline = time.monotonic() + timeout_s
            elif time.monotonic() >= deadline:
                raise RequestTimedOutError(
                    f"reading {rng}: stuck at offset {position} for "
                    f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); is the "
                    "partition's leader available?"
                )
        if batches.rows:
            yield batches.take()
    finally:
        consumer.close(timeout_ms=5000)
    log.debug("read range=%s rows=%d seconds=%.3f", rng, batches.total, time.monotonic() - started)


def _out_of_range(
    consumer: Consumer,
    tp: TopicPartition,
    position: int,
    rng: OffsetRange,
    options: SourceOptions,
) -> int:
    """Where to go on after the broker said ``position`` is out of range: past records
    deleted before they were read (or fail, with ``failOnDataLoss``); else retry, as a new
    leader may not have the end yet. Returns the new position."""
    first = consumer.beginning_offsets([tp])[tp]
    skipped_to = after_deleted_records(
        rng, position, first, fail_on_data_loss=options.fail_on_data_loss
    )
    if skipped_to is not None:
        log.warning("data loss skipped range=%s from=%d to=%d", rng, position, skipped_to)
        position = skipped_to
    else:
        log.info("offset out of range, retrying range=%s offset=%d", rng, position)
        backoff_ms = consumer.config["retry.backoff.ms"]
        assert isinstance(backoff_ms, int)
        time.sleep(backoff_ms / 1000.0)
    if position < rng.end:
        consumer.seek(tp, position)
    return position


class _ArrowBatches:
    """Collects records of one range as columns and hands them out as Arrow record batches
    of Spark's Arrow schema for the source's columns."""

    def __init__(self, rng: OffsetRange, schema: StructType, include_headers: bool) -> None:
        # Exactly the schema Spark checks a data source's batches against.
        self._schema = to_arrow_schema(schema, timezone="UTC")
        self._topic = rng.topic
        self._partition = rng.partition
        self._include_headers = include_headers
        self._records: list[ConsumerRecord] = []
        self.total = 0

    @property
    def rows(self) -> int:
        """Records collected and not yet taken."""
        return len(self._records)

    @property
    def full(self) -> bool:
        """Whether a batch's worth of records is collected."""
        return len(self._records) >= _ARROW_BATCH_ROWS

    def add(self, record: ConsumerRecord) -> None:
        """Collect ``record``."""
        self._records.append(record)

    def take(self) -> Any:
        """The collected records as one ``pyarrow.RecordBatch``; starts a new one."""
        records, self._records = self._records, []
        n = len(records)
        self.total += n
        columns = [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.repeat(pa.scalar(self._topic, pa.string()), n),
            pa.repeat(pa.scalar(self._partition, pa.int32()), n),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.repeat(pa.scalar(TIMESTAMP_TYPE_CREATE_TIME, pa.int32()), n),
        ]
        if self._include_headers:
            columns.append(
                pa.array(
                    [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                    self._schema.field("headers").type,
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)
