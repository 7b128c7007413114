"""The ``reset-offsets`` action of ``lograft groups``: read the offsets, plan, commit, print.

The plan itself is pure (:func:`~cluster.cli._reset_plan.plan_reset`); this module gathers
what it needs from the cluster (the group's state and committed offsets, each partition's
earliest and latest offsets, the offsets found by time), commits the plan with
``--execute`` and prints it as Kafka's ``kafka-consumer-groups`` does.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import TextIO

from cluster.client import AdminClient, TopicPartition
from lograft.protocol.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    UnknownTopicOrPartitionError,
)

from ._args import Streams
from ._group_actions import table
from ._reset_plan import ResetPlan, TopicScope, plan_reset, reset_spec

__all__ = ["reset_offsets"]

log = logging.getLogger(__name__)


def reset_offsets(admin: AdminClient, args: argparse.Namespace, streams: Streams) -> None:
    """``groups reset-offsets``: plan the group's new offsets, commit them with ``--execute``.

    Raises ``GroupNotEmptyError`` while the group has members.
    """
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
    for line in table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        ((group_id, tp.topic, tp.partition, o) for tp, o in sorted(plan.offsets.items())),
    ):
        print(line, file=out)
