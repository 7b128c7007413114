"""The pure pieces of ``lograft groups``: what its flags mean, and the reset-offsets plan.

``--topic`` scopes (shared by ``delete-offsets`` and ``reset-offsets``), ISO-8601 date-times
and durations are parsed here; :func:`plan_reset` turns the partitions' committed, earliest
and latest offsets (and, for ``--to-datetime``/``--by-duration``, the offsets found by time)
into each partition's new offset, clamped to ``[earliest, latest]`` as Kafka's
``kafka-consumer-groups`` does. Nothing here talks to a cluster.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from cluster.client import TopicPartition
from lograft.protocol.errors import InvalidRequestError

__all__ = [
    "ResetKind",
    "ResetPlan",
    "ResetSpec",
    "TopicScope",
    "parse_datetime_ms",
    "parse_duration_ms",
    "parse_topic_scope",
    "plan_reset",
    "reset_spec",
]

log = logging.getLogger(__name__)

ResetKind = Literal["earliest", "latest", "offset", "shift", "timestamp", "current"]
"""Where ``reset-offsets`` moves a partition's offset (:class:`ResetSpec` says each)."""


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """Where to move offsets: ``earliest``, ``latest``, ``current`` (the committed offset,
    else latest), ``offset`` (``value``), ``shift`` (committed + ``value``) or
    ``timestamp`` (the first offset at or after ``value`` ms since the epoch, else latest)."""

    kind: ResetKind
    value: int = 0


@dataclass(frozen=True, slots=True)
class TopicScope:
    """``--topic`` as given: a topic, and the partitions named (``None``: all of them)."""

    topic: str
    partitions: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """The new offset of each partition, and warnings about offsets that were clamped."""

    offsets: dict[TopicPartition, int]
    warnings: tuple[str, ...]


def parse_topic_scope(text: str) -> TopicScope:
    """``TOPIC`` or ``TOPIC:P,P,...`` (Kafka's ``--topic`` of ``--reset-offsets``)."""
    topic, sep, rest = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P..., got {text!r}")
    if not sep:
        return TopicScope(topic)
    partitions: list[int] = []
    for item in rest.split(","):
        try:
            p = int(item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"partition {item.strip()!r} of {topic} is not a number"
            ) from None
        if p < 0:
            raise argparse.ArgumentTypeError(f"partition {p} of {topic} is negative")
        partitions.append(p)
    return TopicScope(topic, tuple(sorted(set(partitions))))


def parse_datetime_ms(text: str) -> int:
    """An ISO-8601 date-time (``2024-05-01T12:00:00``, ``...:00.000``, ``...Z``,
    ``...+02:00``, or a date alone) as ms since the epoch. Without a zone it is local time,
    as Kafka's tool reads it. A moment before the epoch is 0 (before every record)."""
    raw = text.strip()
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO-8601 date-time such as 2024-05-01T12:00:00 or "
            f"2024-05-01T12:00:00.000+02:00, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        try:
            moment = moment.astimezone()  # local time, as Kafka's tool
        except (ValueError, OverflowError, OSError):
            # Too close to year 1 for the local zone: long before any record.
            return 0
    # A moment before the epoch would be a negative timestamp, which the offsets-by-time
    # lookup reads as a sentinel (-1 latest, -2 earliest); before every record means 0.
    return max(int(moment.timestamp() * 1000), 0)


_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration ``PnDTnHnMnS`` (Kafka's ``--by-duration``: ``P7D``, ``PT1H30M``,
    ``PT0.5S``) in ms."""
    raw = text.strip()
    match = _DURATION.fullmatch(raw)
    if match is None or raw.upper() in ("P", "PT") or raw.upper().endswith("T"):
        raise argparse.ArgumentTypeError(
            f"expected a duration PnDTnHnMnS such as P1D or PT1H30M, got {text!r}"
        )
    parts = {k: float(v) for k, v in match.groupdict().items() if v is not None}
    return int(timedelta(**parts).total_seconds() * 1000)


def plan_reset(
    spec: ResetSpec,
    partitions: Iterable[TopicPartition],
    *,
    committed: Mapping[TopicPartition, int | None],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int] | None = None,
) -> ResetPlan:
    """The new offset of each partition, as ``kafka-consumer-groups --reset-offsets``.

    ``--to-offset`` and ``--shift-by`` are clamped to ``[earliest, latest]`` with a warning;
    ``--shift-by`` needs a committed offset (``INVALID_REQUEST`` otherwise);
    ``--to-datetime`` takes ``by_time`` (``-1``: no record that late → latest);
    ``--to-current`` keeps the committed offset (latest where there is none).
    """
    offsets: dict[TopicPartition, int] = {}
    warnings: list[str] = []
    for tp in sorted(set(partitions)):
        low, high = earliest[tp], latest[tp]
        current = committed.get(tp)
        if spec.kind == "earliest":
            offsets[tp] = low
            continue
        if spec.kind == "latest":
            offsets[tp] = high
            continue
        if spec.kind == "current":
            offsets[tp] = high if current is None else current
            continue
        if spec.kind == "timestamp":
            found = (by_time or {}).get(tp, -1)
            offsets[tp] = high if found < 0 else found
            continue
        if spec.kind == "offset":
            wanted = spec.value
        else:
            if current is None:
                raise InvalidRequestError(
                    f"cannot shift the offset of {tp.topic}-{tp.partition}: the group has no "
                    "committed offset for it (use --to-earliest, --to-latest or --to-offset)"
                )
            wanted = current + spec.value
        if wanted > high:
            warnings.append(
                f"new offset {wanted} of {tp.topic}-{tp.partition} is after its latest offset "
                f"{high}; using {high}"
            )
            wanted = high
        elif wanted < low:
            warnings.append(
                f"new offset {wanted} of {tp.topic}-{tp.partition} is before its earliest "
                f"offset {low}; using {low}"
            )
            wanted = low
        offsets[tp] = wanted
    return ResetPlan(offsets, tuple(warnings))


def reset_spec(args: argparse.Namespace, now_ms: int) -> ResetSpec:
    """The ``ResetSpec`` the parsed ``reset-offsets`` flags ask for."""
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_current:
        return ResetSpec("current")
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec("timestamp", args.to_datetime)
    return ResetSpec("timestamp", max(now_ms - args.by_duration, 0))
