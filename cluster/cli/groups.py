"""``lograft groups``: list, describe and delete consumer groups, reset and delete their
offsets (Kafka's ``kafka-consumer-groups``).

This module holds the command line (:func:`register`) and runs an action (:func:`run`):
``list``, ``describe``, ``delete`` and ``delete-offsets`` are in
:mod:`cluster.cli._group_actions`, ``reset-offsets`` in :mod:`cluster.cli._group_reset`.
The reset plan is pure (:func:`plan_reset`, in :mod:`cluster.cli._reset_plan`): given the
partitions, their committed, earliest and latest offsets (and, for
``--to-datetime``/``--by-duration``, the offsets found by time) it gives each partition's new
offset, clamped to ``[earliest, latest]`` as Kafka's tool does.
"""

from __future__ import annotations

import argparse
import logging
from typing import TypeAlias

from ._args import Streams, admin_client
from ._group_actions import delete_groups, delete_offsets, describe_group, list_groups
from ._group_reset import reset_offsets
from ._reset_plan import (
    ResetKind,
    ResetPlan,
    ResetSpec,
    TopicScope,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_scope,
    plan_reset,
    reset_spec,
)

__all__ = [
    "ResetKind",
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

log = logging.getLogger(__name__)

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


_RAW = argparse.RawDescriptionHelpFormatter
_Actions: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``groups`` and its actions to the ``lograft`` parser."""
    groups = commands.add_parser(
        "groups",
        help="list, describe and delete consumer groups; reset their offsets",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_RAW,
    )
    groups.set_defaults(handler=run)
    actions = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    _add_list(actions)
    _add_describe(actions)
    _add_delete(actions)
    _add_delete_offsets(actions)
    _add_reset_offsets(actions)


def _add_list(actions: _Actions) -> None:
    listing = actions.add_parser(
        "list",
        help="list consumer groups",
        description="List every consumer group of the cluster, one id per line.",
        epilog=LIST_EPILOG,
        formatter_class=_RAW,
    )
    listing.add_argument("--state", action="store_true", help="also show state and type")
    listing.add_argument("--json", action="store_true", help="print a JSON array")


def _add_describe(actions: _Actions) -> None:
    describe = actions.add_parser(
        "describe",
        help="committed offsets, lag and members of a group",
        description=DESCRIBE_DESCRIPTION,
        epilog=DESCRIBE_EPILOG,
        formatter_class=_RAW,
    )
    describe.add_argument("group", help="the group id")
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="state, coordinator, assignor")
    view.add_argument("--json", action="store_true", help="everything as one JSON object")
    describe.add_argument(
        "--verbose", action="store_true", help="with --members: each member's partitions"
    )
    describe.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: lag up to the last stable offset (for read_committed consumers)",
    )


def _add_delete(actions: _Actions) -> None:
    delete = actions.add_parser(
        "delete",
        help="delete groups without members, with their committed offsets",
        description="Delete consumer groups and their committed offsets.",
        epilog=DELETE_EPILOG,
        formatter_class=_RAW,
    )
    delete.add_argument("group", nargs="+", help="the group ids")


def _add_delete_offsets(actions: _Actions) -> None:
    delete_offsets = actions.add_parser(
        "delete-offsets",
        help="delete a group's committed offsets of some topics",
        description=DELETE_OFFSETS_DESCRIPTION,
        epilog=DELETE_OFFSETS_EPILOG,
        formatter_class=_RAW,
    )
    delete_offsets.add_argument("--group", required=True, help="the group id")
    _add_topic_scope(delete_offsets, required=True)


def _add_reset_offsets(actions: _Actions) -> None:
    reset = actions.add_parser(
        "reset-offsets",
        help="move a group's committed offsets (dry run unless --execute)",
        description=RESET_DESCRIPTION,
        epilog=RESET_EPILOG,
        formatter_class=_RAW,
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


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one ``groups`` action."""
    with admin_client(args) as admin:
        action = args.groups_command
        if action == "list":
            list_groups(admin, args, streams.stdout)
        elif action == "describe":
            describe_group(admin, args, streams.stdout)
        elif action == "delete":
            delete_groups(admin, args.group, streams.stdout)
        elif action == "delete-offsets":
            delete_offsets(admin, args.group, args.topics, streams.stdout)
        elif action == "reset-offsets":
            reset_offsets(admin, args, streams)
    return 0
