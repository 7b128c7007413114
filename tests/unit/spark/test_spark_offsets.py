"""The Spark source's offset arithmetic (spark/offsets.py), without Spark or a cluster:
the checkpoint JSON, the offsets options, maxOffsetsPerTrigger's split and the ranges."""

from __future__ import annotations

import json
import random

import pytest

from lograft.protocol.errors import IllegalStateError, InvalidConfigError, OffsetOutOfRangeError
from lograft.protocol.topic_partition import TopicPartition
from spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    after_deleted_records,
    offsets_from_json,
    offsets_to_json,
    parse_assign,
    parse_offset_spec,
    plan_ranges,
    rate_limit,
    split_ranges,
)

A0, A1, A2, A10 = (TopicPartition("a", p) for p in (0, 1, 2, 10))
B0 = TopicPartition("b", 0)


def test_checkpoint_json_round_trips_and_is_the_same_text_for_equal_offsets() -> None:
    offsets = {B0: 7, A10: 3, A1: 5, A0: 0}
    document = offsets_to_json(offsets)
    assert document == {"a": {"0": 0, "1": 5, "10": 3}, "b": {"0": 7}}
    # Spark hands the offsets back through JSON; equal offsets must give equal text.
    assert offsets_from_json(json.loads(json.dumps(document))) == offsets
    shuffled = dict(reversed(list(offsets.items())))
    assert json.dumps(offsets_to_json(shuffled)) == json.dumps(document)


@pytest.mark.parametrize(
    "document", [[], {"a": [1]}, {"a": {"x": 1}}, {"a": {"0": "1"}}, {"a": {"0": True}}]
)
def test_a_malformed_checkpoint_offset_is_refused(document: object) -> None:
    with pytest.raises(IllegalStateError):
        offsets_from_json(document)


def test_offset_options_accept_words_and_json_with_the_allowed_sentinels() -> None:
    words = ("earliest", "latest")
    assert parse_offset_spec(" Earliest ", "s", allow=words, allow_sentinels=()) == "earliest"
    assert parse_offset_spec("latest", "s", allow=words, allow_sentinels=()) == "latest"
    spec = parse_offset_spec(
        '{"a": {"0": 23, "1": -2, "2": -1}}', "s", allow=words, allow_sentinels=(EARLIEST, LATEST)
    )
    assert spec == {A0: 23, A1: EARLIEST, A2: LATEST}


@pytest.mark.parametrize(
    ("text", "allow", "sentinels", "message"),
    [
        ("latest", ("earliest",), (EARLIEST,), "expected earliest or JSON"),
        ("earliest", ("latest",), (LATEST,), "expected latest or JSON"),
        ('{"a": {"0": -1}}', ("earliest",), (EARLIEST,), "special values allowed here: -2"),
        ('{"a": {"0": -3}}', ("earliest",), (EARLIEST, LATEST), "is negative"),
        ('{"a": {"zero": 1}}', ("earliest",), (), "bad offset"),
        ("[1, 2]", ("earliest",), (), "expected"),
    ],
)
def test_bad_offset_options_name_the_option(
    text: str, allow: tuple[str, ...], sentinels: tuple[int, ...], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message) as raised:
        parse_offset_spec(text, "startingOffsets", allow=allow, allow_sentinels=sentinels)
    assert "startingOffsets" in str(raised.value)


def test_assign_takes_spark_json() -> None:
    assert parse_assign('{"b": [0], "a": [1, 0]}') == [A0, A1, B0]
    for bad in ("a,b", "{}", '{"a": []}', '{"a": [-1]}', '{"a": ["0"]}'):
        with pytest.raises(InvalidConfigError, match="assign"):
            parse_assign(bad)


def test_rate_limit_takes_everything_when_it_fits() -> None:
    assert rate_limit({A0: 5, A1: 9}, {A0: 10, A1: 9, B0: 3}, 100) == {A0: 10, A1: 9, B0: 3}


def test_rate_limit_splits_in_proportion_to_what_is_available() -> None:
    # 300 and 100 available: a 100-offset batch takes 75 and 25.
    assert rate_limit({A0: 0, A1: 50}, {A0: 300, A1: 150}, 100) == {A0: 75, A1: 75}


def test_rate_limit_starts_new_partitions_at_zero_and_never_moves_back() -> None:
    end = rate_limit({A0: 40}, {A0: 30, A1: 10}, 5)
    assert end == {A0: 40, A1: 5}


def test_rate_limit_does_not_starve_a_small_partition() -> None:
    # Proportionally the small partition's share rounds to 0; it gets one of the leftovers.
    end = rate_limit({}, {A0: 1000, A1: 1000, B0: 2}, 10)
    assert end[B0] == 1
    assert end[A0] + end[A1] == 9


def test_rate_limit_never_exceeds_the_limit_nor_what_is_available() -> None:
    rng = random.Random(14)
    partitions = [TopicPartition("t", p) for p in range(6)]
    for _ in range(500):
        start = {tp: rng.randrange(0, 50) for tp in partitions if rng.random() < 0.8}
        latest = {tp: rng.randrange(0, 200) for tp in partitions}
        limit = rng.randrange(1, 300)
        end = rate_limit(start, latest, limit)
        taken = {tp: end[tp] - start.get(tp, 0) for tp in latest}
        available = sum(max(latest[tp] - start.get(tp, 0), 0) for tp in latest)
        assert sum(taken.values()) == min(limit, available)
        assert all(0 <= taken[tp] <= max(latest[tp] - start.get(tp, 0), 0) for tp in latest)


def test_rate_limit_refuses_a_limit_below_one() -> None:
    with pytest.raises(InvalidConfigError):
        rate_limit({}, {A0: 1}, 0)


def test_plan_ranges_reads_new_partitions_from_zero_and_skips_empty_ones() -> None:
    ranges, losses = plan_ranges({A0: 5, A1: 7}, {A0: 9, A1: 7, B0: 4})
    assert ranges == [OffsetRange("a", 0, 5, 9), OffsetRange("b", 0, 0, 4)]
    assert losses == []


def test_plan_ranges_reports_partitions_gone_or_reset() -> None:
    ranges, losses = plan_ranges({A0: 5, A1: 7, B0: 3}, {A0: 2, A1: 8})
    assert ranges == [OffsetRange("a", 1, 7, 8)]
    assert len(losses) == 2
    assert "a-0" in losses[0] and "from 5 to 2" in losses[0]
    assert "b-0" in losses[1] and "gone" in losses[1]


def test_split_ranges_cuts_large_ranges_for_min_partitions() -> None:
    ranges = [OffsetRange("a", 0, 0, 90), OffsetRange("a", 1, 0, 10)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges
    split = split_ranges(ranges, 10)
    assert split == [OffsetRange("a", 0, 10 * i, 10 * i + 10) for i in range(9)] + [ranges[1]]
    uneven = split_ranges([OffsetRange("a", 0, 3, 13)], 3)
    assert [(r.start, r.end) for r in uneven] == [(3, 6), (6, 9), (9, 13)]


def test_records_deleted_before_they_were_read_fail_the_task_or_are_skipped() -> None:
    rng = OffsetRange("a", 0, 10, 50)
    with pytest.raises(
        OffsetOutOfRangeError, match=r"records 10\.\.29 were deleted.*failOnDataLoss"
    ):
        after_deleted_records(rng, 10, 30, fail_on_data_loss=True)
    assert after_deleted_records(rng, 10, 30, fail_on_data_loss=False) == 30
    assert after_deleted_records(rng, 10, 80, fail_on_data_loss=False) == 50  # all gone
    # Not below the log start: nothing was deleted, the task retries where it is.
    assert after_deleted_records(rng, 30, 30, fail_on_data_loss=True) is None
