"""The ``list``, ``describe``, ``delete`` and ``delete-offsets`` actions of ``lograft groups``.

Each asks the cluster through an :class:`~cluster.client.AdminClient` and prints what
Kafka's ``kafka-consumer-groups`` prints: left-aligned columns (:func:`table`), or JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from cluster.client import (
    AdminClient,
    ConsumerGroupDescription,
    GroupPartitionLag,
    TopicPartition,
)

from ._reset_plan import TopicScope

__all__ = ["delete_groups", "delete_offsets", "describe_group", "list_groups", "table"]

log = logging.getLogger(__name__)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Left-aligned columns, as Kafka's tools print them; ``None`` shows as ``-``."""
    cells = [list(header)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [" ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]


def list_groups(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    """``groups list``: one id per line, a table with ``--state``, or JSON."""
    listings = admin.list_consumer_groups()
    if args.json:
        print(
            json.dumps([{"group": g.group_id, "state": g.state, "type": g.type} for g in listings]),
            file=out,
        )
    elif args.state:
        for line in table(
            ("GROUP", "STATE", "TYPE"), ((g.group_id, g.state, g.type) for g in listings)
        ):
            print(line, file=out)
    else:
        for g in listings:
            print(g.group_id, file=out)


def describe_group(admin: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    """``groups describe``: the lag table, or the members, the state, or JSON."""
    group_id: str = args.group
    description = admin.describe_consumer_groups([group_id])[group_id]
    if args.state:
        c = description.coordinator
        for line in table(
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
        for line in table(header, rows):
            print(line, file=out)
        return
    lag = admin.consumer_group_lag(group_id, description, args.isolation_level)
    if args.json:
        print(json.dumps(_describe_json(description, lag)), file=out)
        return
    _print_state_note(description, out)
    for line in table(
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


def delete_groups(admin: AdminClient, group_ids: Sequence[str], out: TextIO) -> None:
    """``groups delete``: delete the groups; raises the first failure after reporting."""
    results = admin.delete_consumer_groups(list(group_ids))
    deleted = [g for g in group_ids if results[g].exception() is None]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.", file=out)
    for g in group_ids:
        results[g].result()  # the first failure: lograft: ERROR_NAME: message, exit 1


def delete_offsets(
    admin: AdminClient, group_id: str, scopes: Sequence[TopicScope], out: TextIO
) -> None:
    """``groups delete-offsets``: delete the committed offsets the ``--topic`` scopes name.

    Prints a status per partition, then raises the first failure.
    """
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
    for line in table(("TOPIC", "PARTITION", "STATUS"), rows):
        print(line, file=out)
    for tp in sorted(results):
        results[tp].result()  # the first failure: lograft: ERROR_NAME: message, exit 1
