"""``lograft groups``: the reset-offsets plan (Kafka's clamping rules), date-time and duration
parsing, ``--topic`` scopes, argument parsing, and the lag rows ``groups describe`` prints."""

from __future__ import annotations

import argparse
from datetime import datetime

import pytest

from cluster.cli import build_parser, main
from cluster.cli.groups import (
    ResetSpec,
    TopicScope,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_scope,
    plan_reset,
    reset_spec,
)
from cluster.client import (
    ConsumerGroupDescription,
    GroupPartitionLag,
    MemberDescription,
    Node,
    TopicPartition,
)
from cluster.client._group_admin import group_lag
from lograft.protocol.errors import InvalidRequestError

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
EARLIEST = {A0: 10, A1: 0, B0: 0}
LATEST = {A0: 100, A1: 50, B0: 0}


def _plan(
    spec: ResetSpec,
    committed: dict[TopicPartition, int | None],
    by_time: dict[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    return plan_reset(
        spec, [A0, A1], committed=committed, earliest=EARLIEST, latest=LATEST, by_time=by_time
    ).offsets


# ---- the plan -----------------------------------------------------------------------------


def test_to_earliest_and_to_latest_take_each_partitions_bounds() -> None:
    assert _plan(ResetSpec("earliest"), {}) == {A0: 10, A1: 0}
    assert _plan(ResetSpec("latest"), {A0: 20}) == {A0: 100, A1: 50}


def test_shift_by_moves_from_the_committed_offset_and_is_clamped_with_a_warning() -> None:
    assert _plan(ResetSpec("shift", -5), {A0: 30, A1: 20}) == {A0: 25, A1: 15}
    plan = plan_reset(
        ResetSpec("shift", -50),
        [A0, A1],
        committed={A0: 30, A1: 60},
        earliest=EARLIEST,
        latest=LATEST,
    )
    assert plan.offsets == {A0: 10, A1: 10}, "below earliest: earliest; within range: kept"
    assert len(plan.warnings) == 1 and "before its earliest offset 10" in plan.warnings[0]
    plan = plan_reset(
        ResetSpec("shift", 1000), [A0], committed={A0: 30}, earliest=EARLIEST, latest=LATEST
    )
    assert plan.offsets == {A0: 100}
    assert "after its latest offset 100" in plan.warnings[0]


def test_shift_by_needs_a_committed_offset() -> None:
    with pytest.raises(InvalidRequestError, match="no committed offset"):
        _plan(ResetSpec("shift", 1), {A0: 30, A1: None})


def test_to_offset_is_clamped_to_each_partitions_range() -> None:
    assert _plan(ResetSpec("offset", 40), {}) == {A0: 40, A1: 40}
    assert _plan(ResetSpec("offset", 70), {}) == {A0: 70, A1: 50}
    assert _plan(ResetSpec("offset", 5), {}) == {A0: 10, A1: 5}


def test_to_datetime_takes_the_offset_found_by_time_or_latest_when_none_is_that_late() -> None:
    found = {A0: 42, A1: -1}
    assert _plan(ResetSpec("timestamp", 1_700_000_000_000), {}, found) == {A0: 42, A1: 50}


def test_to_current_keeps_committed_offsets_and_uses_latest_elsewhere() -> None:
    assert _plan(ResetSpec("current"), {A0: 33, A1: None}) == {A0: 33, A1: 50}


# ---- parsing ------------------------------------------------------------------------------


def test_datetimes_with_and_without_a_zone() -> None:
    assert parse_datetime_ms("2024-05-01T12:00:00Z") == 1_714_564_800_000
    assert parse_datetime_ms("2024-05-01T14:00:00.250+02:00") == 1_714_564_800_250
    local = datetime(2024, 5, 1, 12, 0, 0).astimezone()
    assert parse_datetime_ms("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    assert parse_datetime_ms("2024-05-01") == int(
        datetime(2024, 5, 1).astimezone().timestamp() * 1000
    )
    with pytest.raises(argparse.ArgumentTypeError, match="ISO-8601"):
        parse_datetime_ms("yesterday")


@pytest.mark.parametrize(
    "text",
    [
        "1969-12-31T23:59:59.998Z",
        "1969-12-31T23:59:59.999Z",
        "0001-01-01",
        "1900-01-01T00:00:00+00:00",
    ],
)
def test_datetimes_before_the_epoch_are_zero_not_a_sentinel(text: str) -> None:
    # -1 and -2 mean latest and earliest to the offsets-by-time lookup.
    assert parse_datetime_ms(text) == 0


@pytest.mark.parametrize(
    ("text", "ms"),
    [("P1D", 86_400_000), ("PT1H30M", 5_400_000), ("PT0.5S", 500), ("p2dt1s", 172_801_000)],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1DT", "PT-1H", ""])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="PnDTnHnMnS"):
        parse_duration_ms(text)


def test_topic_scopes() -> None:
    assert parse_topic_scope("orders") == TopicScope("orders")
    assert parse_topic_scope("orders:2,0,2") == TopicScope("orders", (0, 2))
    for bad in ("orders:x", "orders:-1", ":1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_topic_scope(bad)


def test_reset_offsets_flags() -> None:
    args = build_parser().parse_args(
        [
            "groups",
            "reset-offsets",
            "--group",
            "billing",
            "--topic",
            "orders:0,1",
            "--topic",
            "audit",
            "--shift-by",
            "-100",
            "--execute",
        ]
    )
    assert (args.command, args.groups_command, args.group) == ("groups", "reset-offsets", "billing")
    assert args.topics == [TopicScope("orders", (0, 1)), TopicScope("audit")]
    assert args.execute and not args.dry_run
    assert reset_spec(args, now_ms=0) == ResetSpec("shift", -100)
    args = build_parser().parse_args(
        ["groups", "reset-offsets", "--group", "g", "--all-topics", "--by-duration", "PT1M"]
    )
    assert args.all_topics and not args.execute
    assert reset_spec(args, now_ms=1_000_000) == ResetSpec("timestamp", 1_000_000 - 60_000)


@pytest.mark.parametrize(
    "argv",
    [
        ["groups", "reset-offsets", "--group", "g", "--to-earliest"],  # no scope
        ["groups", "reset-offsets", "--group", "g", "--all-topics"],  # no target
        ["groups", "reset-offsets", "--group", "g", "--all-topics", "--topic", "t", "--to-latest"],
        ["groups", "reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--to-earliest"],
        ["groups", "reset-offsets", "--group", "g", "--all-topics", "--to-offset", "-1"],
        [
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--all-topics",
            "--to-latest",
            "--dry-run",
            "--execute",
        ],
        ["groups", "describe"],
        ["groups", "describe", "g", "--members", "--json"],
        ["groups", "delete"],
        ["groups", "delete-offsets", "--group", "g"],  # no topic
    ],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


def test_every_action_has_an_example_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("list", "describe", "delete", "delete-offsets", "reset-offsets"):
        with pytest.raises(SystemExit):
            main(["groups", action, "--help"])
        assert f"lograft groups {action}" in capsys.readouterr().out.split("example")[-1]


# ---- lag rows ------------------------------------------------------------------------------


def _description(*members: MemberDescription) -> ConsumerGroupDescription:
    return ConsumerGroupDescription(
        "g", "Stable", 3, 3, "range", Node(1, "127.0.0.1", 9092), tuple(members)
    )


def test_lag_rows_join_owners_committed_offsets_and_log_end_offsets() -> None:
    member = MemberDescription("m-1", "app", "/127.0.0.1", frozenset({A0, A1}))
    rows = group_lag(_description(member), {A0: 40, B0: 7, A1: None}, {A0: 100, A1: 50})
    assert rows == (
        GroupPartitionLag(A0, 40, 100, 60, "m-1", "app", "/127.0.0.1"),
        GroupPartitionLag(A1, None, 50, None, "m-1", "app", "/127.0.0.1"),
        GroupPartitionLag(B0, 7, None, None),  # committed, no owner, topic gone
    )


def test_an_empty_group_shows_its_committed_partitions_without_owners() -> None:
    rows = group_lag(_description(), {A0: 100}, {A0: 100})
    assert rows == (GroupPartitionLag(A0, 100, 100, 0),)
