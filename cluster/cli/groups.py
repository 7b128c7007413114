"""``lograft groups``: list, describe and delete consumer groups, reset and delete their
offsets (Kafka's ``kafka-consumer-groups``).

The reset plan is pure (:func:`plan_reset`): given the partitions, their committed,
earliest and latest offsets (and, for ``--to-datetime``/``--by-duration``, the offsets found
by time) it gives each partition's new offset, clamped to ``[earliest, latest]`` as Kafka's
tool does.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TextIO

from cluster.client import (
    AdminClient,
    ConsumerGroupDescription,
    GroupPartitionLag,
    TopicPartition,
)
from cluster.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)

from ._args import Streams, admin_client

__all__ = [
    "ResetPlan",
    "ResetSpec",
    "TopicScope",
    "parse_datetime_ms",
    "parse_duration_ms",
    "parse_topic_scope",
    "plan_reset",
    "register",
    "reset_spec",
    "run",
]

ResetKind = Literal["earliest", "latest", "offset", "shift", "timestamp", "current"]


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


# ---- pure pieces ---------------------------------------------------------------------------


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


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Left-aligned columns, as Kafka's tools print them; ``None`` shows as ``-``."""
    cells = [list(header)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]


# ---- the parser ----------------------------------------------------------------------------

DESCRIPTION = """\
Consumer groups, as Kafka's kafka-consumer-groups: list them, show their members, committed
offsets and lag, delete them, and move their committed offsets (reset-offsets). Groups need
a cluster with a controller quorum (lograft cluster up)."""

EPILOG = """\
examples:
  lograft groups list --state
  lograft groups describe billing
  lograft groups describe billing --members
  lograft groups reset-offsets --group billing --topic orders --to-earliest --execute
  lograft groups delete-offsets --group billing --topic old-orders
  lograft groups delete billing"""

LIST_EPILOG = """\
example:
  lograft groups list --state
  GROUP    STATE  TYPE
  billing  Stable consumer"""

DESCRIBE_DESCRIPTION = """\
Without options: one row per partition the group owns or has committed, with the committed
offset (CURRENT-OFFSET), the partition's latest offset (LOG-END-OFFSET), their difference
(LAG) and the member that owns it (CONSUMER-ID, HOST, CLIENT-ID; '-' for none).
--members: one row per member; --state: the group's state, coordinator and assignor;
--json: everything as one JSON object."""

DESCRIBE_EPILOG = """\
example:
  lograft groups describe billing
  GROUP   TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID  HOST       CLIENT-ID
  billing orders 0         120            125            5   Wl3...Q      /127.0.0.1 app-1"""

DELETE_EPILOG = """\
example:
  lograft groups delete billing
A group can be deleted only while it has no members (stop its consumers first):
otherwise GROUP_NOT_EMPTY."""

DELETE_OFFSETS_DESCRIPTION = """\
Delete a group's committed offsets of some topics (or some of their partitions): for
example of a topic the group no longer reads. Refused per partition with
GROUP_SUBSCRIBED_TO_TOPIC while a member of the group subscribes to the topic. Without
partitions, every partition of the topic the group has committed is deleted."""

DELETE_OFFSETS_EPILOG = """\
examples:
  lograft groups delete-offsets --group billing --topic old-orders
  lograft groups delete-offsets --group billing --topic orders:0,1
  TOPIC  PARTITION STATUS
  orders 0         Successful
  orders 1         Successful"""

RESET_DESCRIPTION = """\
Move the committed offsets of a group without active members (stop its consumers first:
while it has members the command refuses with GROUP_NOT_EMPTY). Without --execute the plan
is only printed (a dry run); with --execute it is committed, and the group's consumers
start there next time. A group that does not exist yet is created with these offsets.

Which partitions: --topic TOPIC (all its partitions) or --topic TOPIC:0,2 (repeatable), or
--all-topics (every partition the group has committed).
Where to: --to-earliest, --to-latest, --to-current, --to-offset N, --shift-by N (+/-, from
the committed offset), --to-datetime 2024-05-01T12:00:00[.000][Z|+02:00] (local time without
a zone), --by-duration PnDTnHnMnS (that long ago). Offsets beyond a partition's range are
clamped to its earliest or latest offset."""

RESET_EPILOG = """\
examples:
  lograft groups reset-offsets --group billing --topic orders --to-earliest
  lograft groups reset-offsets --group billing --topic orders:0,1 --shift-by -100 --execute
  lograft groups reset-offsets --group billing --all-topics --to-datetime 2024-05-01T00:00:00Z \\
      --execute
  lograft groups reset-offsets --group new-app --topic orders --by-duration PT1H --execute"""


def _signed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _offset(text: str) -> int:
    value = _signed(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"an offset must be >= 0, got {value}")
    return value


def _add_topic_scope(parser: argparse._ActionsContainer, *, required: bool) -> None:
    parser.add_argument(
        "--topic",
        dest="topics",
        type=parse_topic_scope,
        action="append",
        required=required,
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``groups`` and its actions to the ``lograft`` parser."""
    raw = argparse.RawDescriptionHelpFormatter
    groups = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups; reset their offsets",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=raw,
    )
    groups.set_defaults(handler=run)
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list",
        help="list consumer groups",
        description="List every consumer group of the cluster, one id per line.",
        epilog=LIST_EPILOG,
        formatter_class=raw,
    )
    listing.add_argument("--state", action="store_true", help="also show state and type")
    listing.add_argument("--json", action="store_true", help="print a JSON array")

    describe = actions.add_parser(
        "describe",
        help="committed offsets, lag and members of a group",
        description=DESCRIBE_DESCRIPTION,
        epilog=DESCRIBE_EPILOG,
        formatter_class=raw,
    )
    describe.add_argument("group", help="the group id")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="state, coordinator, assignor")
    view.add_argument("--json", action="store_true", help="everything as one JSON object")
    describe.add_argument(
        "--verbose", action="store_true", help="with --members: each member's partitions"
    )

    delete = actions.add_parser(
        "delete",
        help="delete groups without members, with their committed offsets",
        description="Delete consumer groups and their committed offsets.",
        epilog=DELETE_EPILOG,
        formatter_class=raw,
    )
    delete.add_argument("group", nargs="+", help="the group ids")

    delete_offsets = actions.add_parser(
        "delete-offsets",
        help="delete a group's committed offsets of some topics",
        description=DELETE_OFFSETS_DESCRIPTION,
        epilog=DELETE_OFFSETS_EPILOG,
        formatter_class=raw,
    )
    delete_offsets.add_argument("--group", required=True, help="the group id")
    _add_topic_scope(delete_offsets, required=True)

    reset = actions.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (dry run unless --execute)",
        description=RESET_DESCRIPTION,
        epilog=RESET_EPILOG,
        formatter_class=raw,
    )
    reset.add_argument("--group", required=True, help="the group id")
    scope = reset.add_mutually_exclusive_group(required=True)
    _add_topic_scope(scope, required=False)  # the group requires it or --all-topics
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="each partition's start")
    target.add_argument("--to-latest", action="store_true", help="each partition's end")
    target.add_argument(
        "--to-current", action="store_true", help="the committed offset (latest if none)"
    )
    target.add_argument("--to-offset", type=_offset, metavar="N", help="offset N")
    target.add_argument(
        "--shift-by", type=_signed, metavar="N", help="the committed offset plus N (N may be < 0)"
    )
    target.add_argument(
        "--to-datetime",
        type=parse_datetime_ms,
        metavar="ISO8601",
        help="the first offset at or after that time",
    )
    target.add_argument(
        "--by-duration",
        type=parse_duration_ms,
        metavar="PnDTnHnMnS",
        help="the first offset at or after that long ago",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--json", action="store_true", help="print the plan as a JSON array")


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


# ---- running -------------------------------------------------------------------------------


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one ``groups`` action."""
    with admin_client(args) as admin:
        action = args.groups_command
        if action == "list":
            _list(admin, args, streams.stdout)
        elif action == "describe":
            _describe(admin, args, streams.stdout)
        elif action == "delete":
            _delete(admin, args.group, streams.stdout)
        elif action == "delete-offsets":
            _delete_offsets(admin, args.group, args.topics, streams.stdout)
        elif action == "reset-offsets":
            _reset(admin, args, streams)
    return 0


def _list(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    listings = admin.list_consumer_groups()
    if args.json:
        print(
            json.dumps([{"group": g.group_id, "state": g.state, "type": g.type} for g in listings]),
            file=out,
        )
    elif args.state:
        for line in _table(
            ("GROUP", "STATE", "TYPE"), ((g.group_id, g.state, g.type) for g in listings)
        ):
            print(line, file=out)
    else:
        for g in listings:
            print(g.group_id, file=out)


def _describe(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    group_id: str = args.group
    description = admin.describe_consumer_groups([group_id])[group_id]
    if args.state:
        c = description.coordinator
        for line in _table(
            ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
            [
                (
                    group_id,
                    f"{c.host}:{c.port} ({c.id})",
                    description.assignor,
                    description.state,
                    len(description.members),
                )
            ],
        ):
            print(line, file=out)
        return
    if args.members:
        _print_state_note(description, out)
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        if args.verbose:
            header.append("ASSIGNMENT")
        rows = []
        for m in description.members:
            row: list[object] = [group_id, m.member_id, m.host or None, m.client_id or None]
            row.append(len(m.assignment))
            if args.verbose:
                row.append(_partitions_text(m.assignment))
            rows.append(row)
        for line in _table(header, rows):
            print(line, file=out)
        return
    lag = admin.consumer_group_lag(group_id, description)
    if args.json:
        print(json.dumps(_describe_json(description, lag)), file=out)
        return
    _print_state_note(description, out)
    for line in _table(
        (
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ),
        (
            (
                group_id,
                row.topic_partition.topic,
                row.topic_partition.partition,
                row.current_offset,
                row.log_end_offset,
                row.lag,
                row.member_id,
                row.host or None,
                row.client_id or None,
            )
            for row in lag
        ),
    ):
        print(line, file=out)


def _print_state_note(description: ConsumerGroupDescription, out: TextIO) -> None:
    """Kafka's notes above the table: no members, or a rebalance under way."""
    if description.state == "Empty":
        print(f"Consumer group '{description.group_id}' has no active members.", file=out)
    elif description.state in ("Assigning", "Reconciling"):
        print(
            f"Warning: consumer group '{description.group_id}' is rebalancing "
            f"(state {description.state}).",
            file=out,
        )


def _partitions_text(partitions: Iterable[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}:{'+'.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def _describe_json(
    description: ConsumerGroupDescription, lag: Sequence[GroupPartitionLag]
) -> dict[str, Any]:
    c = description.coordinator
    return {
        "group": description.group_id,
        "state": description.state,
        "type": description.type,
        "group_epoch": description.group_epoch,
        "assignment_epoch": description.assignment_epoch,
        "assignor": description.assignor,
        "coordinator": {"id": c.id, "host": c.host, "port": c.port},
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "member_epoch": m.member_epoch,
                "assignment": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in sorted(m.assignment)
                ],
            }
            for m in description.members
        ],
        "partitions": [
            {
                "topic": row.topic_partition.topic,
                "partition": row.topic_partition.partition,
                "current_offset": row.current_offset,
                "log_end_offset": row.log_end_offset,
                "lag": row.lag,
                "member_id": row.member_id,
                "host": row.host,
                "client_id": row.client_id,
            }
            for row in lag
        ],
    }


def _delete(admin: AdminClient, group_ids: Sequence[str], out: TextIO) -> None:
    results = admin.delete_consumer_groups(list(group_ids))
    deleted = [g for g in group_ids if results[g].exception() is None]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.", file=out)
    for g in group_ids:
        results[g].result()  # the first failure: lograft: ERROR_NAME: message, exit 1


def _delete_offsets(
    admin: AdminClient, group_id: str, scopes: Sequence[TopicScope], out: TextIO
) -> None:
    whole = {s.topic for s in scopes if s.partitions is None}
    chosen = {TopicPartition(s.topic, p) for s in scopes for p in s.partitions or ()}
    if whole:
        committed = admin.list_consumer_group_offsets(group_id)
        chosen.update(tp for tp in committed if tp.topic in whole)
    if not chosen:
        # Nothing committed for those topics: still tell an unknown group from a known one.
        admin.describe_consumer_groups([group_id])
        print(f"Group '{group_id}' has no committed offsets of those topics.", file=out)
        return
    results = admin.delete_consumer_group_offsets(group_id, chosen)
    rows = []
    for tp in sorted(results):
        error = results[tp].exception()
        name = getattr(error, "error_name", type(error).__name__)
        status = "Successful" if error is None else f"Error: {name}"
        rows.append((tp.topic, tp.partition, status))
    for line in _table(("TOPIC", "PARTITION", "STATUS"), rows):
        print(line, file=out)
    for tp in sorted(results):
        results[tp].result()  # the first failure: lograft: ERROR_NAME: message, exit 1


def _reset(admin: AdminClient, args: argparse.Namespace, streams: Streams) -> None:
    group_id: str = args.group
    try:
        description = admin.describe_consumer_groups([group_id])[group_id]
        state = description.state
    except GroupIdNotFoundError:
        state = None  # a new group: the commit creates it, as Kafka's tool
    if state is not None and state != "Empty":
        raise GroupNotEmptyError(
            f"assignments can only be reset if the group '{group_id}' is inactive, but the "
            f"current state is {state} (stop its consumers first)"
        )
    partitions = _reset_partitions(admin, group_id, args)
    plan = ResetPlan({}, ())
    if partitions:
        spec = reset_spec(args, int(time.time() * 1000))
        committed = {
            tp: (oam.offset if oam is not None else None)
            for tp, oam in admin.list_consumer_group_offsets(group_id, partitions).items()
        }
        earliest = {
            tp: r.offset
            for tp, r in admin.list_offsets(dict.fromkeys(partitions, "earliest")).items()
        }
        latest = {
            tp: r.offset
            for tp, r in admin.list_offsets(dict.fromkeys(partitions, "latest")).items()
        }
        by_time = None
        if spec.kind == "timestamp":
            found = admin.list_offsets(dict.fromkeys(partitions, spec.value))
            by_time = {tp: r.offset for tp, r in found.items()}
        plan = plan_reset(
            spec, partitions, committed=committed, earliest=earliest, latest=latest, by_time=by_time
        )
    for warning in plan.warnings:
        print(f"WARN: {warning}", file=streams.stderr)
    if not plan.offsets:
        print(f"WARN: group '{group_id}' has no partitions to reset", file=streams.stderr)
    if args.execute and plan.offsets:
        results = admin.alter_consumer_group_offsets(group_id, plan.offsets)
        for tp in sorted(results):
            results[tp].result()  # the first failure: lograft: ERROR_NAME: message, exit 1
    elif not args.execute and not args.dry_run:
        print(
            "WARN: no action was performed as the --execute option is missing "
            "(add --dry-run to say so explicitly)",
            file=streams.stderr,
        )
    _print_plan(group_id, plan, args.json, streams.stdout)


def _reset_partitions(
    admin: AdminClient, group_id: str, args: argparse.Namespace
) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(admin.list_consumer_group_offsets(group_id))
    scopes: list[TopicScope] = args.topics
    described = {t.name: t for t in admin.describe_topics(sorted({s.topic for s in scopes}))}
    chosen: set[TopicPartition] = set()
    for scope in scopes:
        count = len(described[scope.topic].partitions)
        if scope.partitions is None:
            chosen.update(TopicPartition(scope.topic, p) for p in range(count))
            continue
        for p in scope.partitions:
            if p >= count:
                raise UnknownTopicOrPartitionError(
                    f"partition {p} of {scope.topic} does not exist (it has {count})"
                )
            chosen.add(TopicPartition(scope.topic, p))
    return sorted(chosen)


def _print_plan(group_id: str, plan: ResetPlan, as_json: bool, out: TextIO) -> None:
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "group": group_id,
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "new_offset": o,
                    }
                    for tp, o in sorted(plan.offsets.items())
                ]
            ),
            file=out,
        )
        return
    for line in _table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        ((group_id, tp.topic, tp.partition, o) for tp, o in sorted(plan.offsets.items())),
    ):
        print(line, file=out)
