"""Offsets of the lograft source, without Spark: their JSON form, the offset options, the
micro-batch size limit and the offset ranges that become Spark tasks.

Spark checkpoints a streaming source's offsets as JSON. This source's are those of Spark's
Kafka source, ``{"topic": {"partition": offset}}`` (partition numbers as strings, as JSON
object keys must be), each offset the next one to read. Options use the same form, where
-2 stands for a partition's earliest offset and -1 for its latest (``startingOffsets``,
``endingOffsets``).

Everything here is pure: the source (:mod:`spark.source`) looks the offsets up and passes
them in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from lograft.protocol.errors import IllegalStateError, InvalidConfigError, OffsetOutOfRangeError
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetRange",
    "OffsetSpec",
    "Offsets",
    "after_deleted_records",
    "offsets_from_json",
    "offsets_to_json",
    "parse_assign",
    "parse_offset_spec",
    "plan_ranges",
    "rate_limit",
    "split_ranges",
]

EARLIEST: Final = -2
"""In an offsets option: the partition's first offset (Spark's Kafka source's -2)."""
LATEST: Final = -1
"""In an offsets option: the partition's end offset (Spark's Kafka source's -1)."""

Offsets = dict[TopicPartition, int]
"""The next offset to read of each partition."""

OffsetSpec = Literal["earliest", "latest"] | Offsets
"""An offsets option: ``earliest``, ``latest`` or per-partition offsets (-2, -1 allowed)."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The records of ``topic``/``partition`` with offsets in ``[start, end)``: one task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Offsets in the range (records, markers and aborted records alike)."""
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}[{self.start},{self.end})"


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``offsets`` as Spark checkpoints them: ``{"topic": {"0": 12}}``, in a fixed order.

    The order is fixed (topics by name, partitions by number) so that equal offsets always
    serialise to the same JSON: Spark compares offsets by their JSON text.
    """
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(document: object, what: str = "offsets") -> Offsets:
    """The offsets of ``{"topic": {"0": 12}}`` (``offsets_to_json``'s form, as Spark hands a
    checkpointed offset back); raises ``IllegalStateError`` naming ``what`` otherwise."""
    if not isinstance(document, Mapping):
        raise IllegalStateError(f"{what} {document!r}: expected {{topic: {{partition: offset}}}}")
    out: Offsets = {}
    for topic, partitions in document.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise IllegalStateError(f"{what}: bad entry {topic!r}: {partitions!r}")
        for partition, offset in partitions.items():
            number = _partition_number(partition)
            if number is None or isinstance(offset, bool) or not isinstance(offset, int):
                raise IllegalStateError(f"{what}: bad offset {topic}/{partition!r}: {offset!r}")
            out[TopicPartition(topic, number)] = offset
    return out


def _partition_number(text: object) -> int | None:
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return text if text >= 0 else None
    if isinstance(text, str) and text.isdecimal():
        return int(text)
    return None


def parse_offset_spec(
    text: str, option: str, *, allow: Iterable[str], allow_sentinels: Iterable[int]
) -> OffsetSpec:
    """The offsets option ``option`` given as ``text``: one of the words ``allow``, or JSON
    ``{"topic": {"0": 23, "1": -2}}`` whose offsets are >= 0 or among ``allow_sentinels``
    (-2 earliest, -1 latest). Raises ``InvalidConfigError`` otherwise."""
    words = {w.lower() for w in allow}
    word = text.strip().lower()
    if word in words and word in ("earliest", "latest"):
        return "earliest" if word == "earliest" else "latest"
    try:
        document = json.loads(text)
    except ValueError:
        choices = " or ".join([*sorted(words), 'JSON {"topic": {"0": offset}}'])
        raise InvalidConfigError(f"option {option}={text!r}: expected {choices}") from None
    try:
        offsets = offsets_from_json(document, f"option {option}")
    except IllegalStateError as exc:
        raise InvalidConfigError(str(exc)) from None
    sentinels = set(allow_sentinels)
    for tp, offset in offsets.items():
        if offset < 0 and offset not in sentinels:
            allowed = ", ".join(str(s) for s in sorted(sentinels)) or "none"
            raise InvalidConfigError(
                f"option {option}: offset {offset} of {tp} is negative "
                f"(special values allowed here: {allowed})"
            )
    return offsets


def parse_assign(text: str) -> list[TopicPartition]:
    """The ``assign`` option, Spark's ``{"topicA": [0, 1], "topicB": [2, 4]}``."""
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not document:
        raise InvalidConfigError(
            f'option assign={text!r}: expected JSON {{"topic": [partition, ...]}}'
        )
    partitions: list[TopicPartition] = []
    for topic, numbers in document.items():
        if not isinstance(numbers, list) or not numbers:
            raise InvalidConfigError(f"option assign: {topic!r} needs a list of partitions")
        for number in numbers:
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise InvalidConfigError(f"option assign: bad partition {number!r} of {topic!r}")
            partitions.append(TopicPartition(topic, number))
    return sorted(set(partitions))


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> Offsets:
    """End offsets that read at most ``max_rows`` offsets in all from ``start`` towards
    ``latest``, each partition's share proportional to what it has available (as Spark's
    Kafka source splits ``maxOffsetsPerTrigger``).

    A partition missing from ``start`` is new and starts at 0. Shares are rounded down and
    the offsets left over go one each first to partitions whose share rounded to nothing
    (so that a small partition is not starved while large ones have a backlog), then by
    the largest remainder; unlike Spark's rounding, the sum never exceeds ``max_rows``.
    Partitions without new data keep their start; none moves backwards.
    """
    if max_rows < 1:
        raise InvalidConfigError(f"maxOffsetsPerTrigger={max_rows}: must be at least 1")
    available: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        size = end - start.get(tp, 0)
        if size > 0:
            available[tp] = size
    total = sum(available.values())
    out: Offsets = {tp: max(start.get(tp, 0), end) for tp, end in latest.items()}
    if total <= max_rows:
        return out
    shares = {tp: max_rows * size // total for tp, size in available.items()}
    left = max_rows - sum(shares.values())
    by_need = sorted(
        available,
        key=lambda tp: (shares[tp] > 0, -(max_rows * available[tp] % total), tp),
    )
    for tp in by_need[:left]:
        shares[tp] += 1
    for tp, share in shares.items():
        out[tp] = start.get(tp, 0) + share
    return out


def plan_ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> tuple[list[OffsetRange], list[str]]:
    """The offset ranges of one micro-batch (or batch read) from ``start`` to ``end``, and
    what data loss the offsets show, as sentences for the error or the warning.

    A partition in ``end`` but not in ``start`` is new and read from 0 (Spark's Kafka source
    reads new partitions from the beginning); one in ``start`` but not in ``end`` is gone
    (its topic was deleted); one whose end is below its start was reset (its topic deleted
    and created again). Ranges are ordered by topic and partition; empty ones are left out.
    """
    ranges: list[OffsetRange] = []
    losses: list[str] = []
    for tp in sorted(end):
        stop = end[tp]
        first = start.get(tp, 0)
        if stop < first:
            losses.append(
                f"the offset of {tp} went back from {first} to {stop}: the partition was "
                "recreated, some records may have been missed"
            )
            continue
        if stop > first:
            ranges.append(OffsetRange(tp.topic, tp.partition, first, stop))
    gone = sorted(set(start) - set(end))
    if gone:
        names = ", ".join(str(tp) for tp in gone)
        losses.append(f"partitions {names} are gone (deleted?): records may have been missed")
    return ranges, losses


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """``ranges`` cut into at least about ``min_partitions`` tasks (Spark's
    ``minPartitions``): each range gets a number of parts proportional to its size; with
    ``None``, or at least as many ranges as asked for, ``ranges`` as they are."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    if total <= 0:
        return ranges
    out: list[OffsetRange] = []
    for r in ranges:
        # Spark's KafkaOffsetRangeCalculator: parts by rounding; the last takes the rest.
        parts = max(round(r.size * min_partitions / total), 1)
        remaining, first = r.size, r.start
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            if this > 0:
                out.append(OffsetRange(r.topic, r.partition, first, first + this))
            first += this
    return out


def after_deleted_records(
    rng: OffsetRange, position: int, log_start: int, *, fail_on_data_loss: bool
) -> int | None:
    """Where a task reading ``rng`` goes on after the broker said ``position`` is out of
    range and the partition's log now starts at ``log_start``; ``None`` if ``position`` is
    not below it (nothing was deleted: the offset is past the end a leader knows yet).

    Records from ``position`` to ``log_start`` were deleted (retention) before they were
    read: with ``fail_on_data_loss`` that raises ``OffsetOutOfRangeError``; without, the
    task skips them (to ``log_start``, or the range's end if that is nearer).
    """
    if position >= log_start:
        return None
    if fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"reading {rng}: records {position}..{log_start - 1} were deleted before they "
            "were read (failOnDataLoss=true; set it to false to skip them)"
        )
    return min(log_start, rng.end)
