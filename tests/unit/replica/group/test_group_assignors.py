"""The server-side assignors: range (Kafka's, per topic) and roundrobin/uniform (balanced,
sticky). Example tests pin known answers; Hypothesis checks the properties on random groups
against simple reference checks."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft.protocol.errors import UnsupportedAssignorError
from lograft.protocol.topic_partition import TopicPartition as TP
from replica.group import (
    Assignment,
    assign,
    assign_range,
    assign_roundrobin,
    canonical_assignor,
)


def _tps(topic: str, *partitions: int) -> frozenset[TP]:
    return frozenset(TP(topic, p) for p in partitions)


def _check_valid(
    result: Assignment, subs: Mapping[str, frozenset[str]], counts: Mapping[str, int]
) -> None:
    """Every member present; only subscribed, existing partitions; each given exactly once."""
    assert set(result) == set(subs)
    seen: list[TP] = [tp for parts in result.values() for tp in parts]
    assert len(seen) == len(set(seen)), "a partition was given twice"
    for member, parts in result.items():
        for tp in parts:
            assert tp.topic in subs[member] and 0 <= tp.partition < counts.get(tp.topic, 0)
    wanted = {TP(t, p) for s in subs.values() for t in s for p in range(counts.get(t, 0))}
    assert set(seen) == wanted, "a subscribed partition was left out"


def _check_uniform_balance(
    result: Assignment, subs: Mapping[str, frozenset[str]], counts: Mapping[str, int]
) -> None:
    existing = {m: frozenset(t for t in s if counts.get(t, 0) > 0) for m, s in subs.items()}
    sizes = {m: len(p) for m, p in result.items()}
    if len(set(existing.values())) <= 1:
        assert not sizes or max(sizes.values()) - min(sizes.values()) <= 1
        return
    for a, parts in result.items():  # no single move to a subscriber with two fewer
        for tp in parts:
            for b, topics in existing.items():
                if tp.topic in topics:
                    assert sizes[b] >= sizes[a] - 1, (a, b, tp, sizes)


def _reference_range(
    subs: Mapping[str, frozenset[str]], counts: Mapping[str, int]
) -> dict[str, set[TP]]:
    out: dict[str, set[TP]] = {m: set() for m in subs}
    for topic, n in counts.items():
        members = sorted(m for m in subs if topic in subs[m])
        if not members or n == 0:
            continue
        per, extra = divmod(n, len(members))
        for p in range(n):  # the partition's slot, counted the slow way
            edge = 0
            for i, m in enumerate(members):
                edge += per + (1 if i < extra else 0)
                if p < edge:
                    out[m].add(TP(topic, p))
                    break
    return out


# ---- examples ------------------------------------------------------------------------------


def test_range_is_kafkas_range_per_topic() -> None:
    """Kafka's javadoc example: two consumers, two topics of three partitions each."""
    subs = {"c0": ["t0", "t1"], "c1": ["t0", "t1"]}
    result = assign_range(subs, {"t0": 3, "t1": 3})
    assert result == {
        "c0": _tps("t0", 0, 1) | _tps("t1", 0, 1),
        "c1": _tps("t0", 2) | _tps("t1", 2),
    }


def test_range_only_counts_the_subscribers_of_each_topic() -> None:
    subs = {"a": ["x"], "b": ["x", "y"], "c": ["y", "missing"]}
    result = assign_range(subs, {"x": 4, "y": 3})
    assert result == {
        "a": _tps("x", 0, 1),
        "b": _tps("x", 2, 3) | _tps("y", 0, 1),
        "c": _tps("y", 2),
    }


def test_roundrobin_three_members_six_partitions_is_balanced_and_dealt_in_turn() -> None:
    subs = {"m2": ["t"], "m0": ["t"], "m1": ["t"]}
    result = assign_roundrobin(subs, {"t": 6})
    assert result == {"m0": _tps("t", 0, 3), "m1": _tps("t", 1, 4), "m2": _tps("t", 2, 5)}


def test_uniform_is_an_alias_of_roundrobin() -> None:
    assert canonical_assignor("uniform") == "roundrobin"
    subs = {"a": ["t"], "b": ["t"]}
    assert assign("uniform", subs, {"t": 5}) == assign("roundrobin", subs, {"t": 5})


def test_unknown_assignor_is_unsupported_assignor() -> None:
    with pytest.raises(UnsupportedAssignorError) as info:
        assign("sticky", {"a": ["t"]}, {"t": 1})
    assert info.value.code == 112 and "sticky" in str(info.value)


def test_a_joining_member_takes_partitions_from_others_with_the_fewest_moves() -> None:
    subs = {"m0": ["t"], "m1": ["t"], "m2": ["t"]}
    before = assign_roundrobin(subs, {"t": 6})
    after = assign_roundrobin({**subs, "m3": ["t"]}, {"t": 6}, before)
    assert sorted(len(p) for p in after.values()) == [1, 1, 2, 2]
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == 1, "one partition must move to the new member, and only one"
    for member in before:
        assert after[member] <= before[member], "nobody gets a partition another one had"


def test_a_leaving_members_partitions_go_to_the_others_who_keep_theirs() -> None:
    subs = {"m0": ["t"], "m1": ["t"], "m2": ["t"]}
    before = assign_roundrobin(subs, {"t": 7})
    after = assign_roundrobin({"m0": ["t"], "m2": ["t"]}, {"t": 7}, before)
    assert after["m0"] >= before["m0"] and after["m2"] >= before["m2"]
    assert sorted(len(p) for p in after.values()) == [3, 4]


def test_stickiness_survives_a_new_topic() -> None:
    subs = {"a": ["x", "y"], "b": ["x", "y"]}
    before = assign_roundrobin(subs, {"x": 4})
    after = assign_roundrobin(subs, {"x": 4, "y": 2}, before)
    for member in subs:
        assert before[member] <= after[member]


def test_no_members_and_no_topics() -> None:
    assert assign_roundrobin({}, {"t": 3}) == {}
    assert assign_range({}, {"t": 3}) == {}
    assert assign_roundrobin({"a": ["t"]}, {}) == {"a": frozenset()}
    assert assign_range({"a": []}, {"t": 2}) == {"a": frozenset()}


def test_invalid_previous_assignment_is_ignored() -> None:
    """Previous partitions of a gone topic, beyond the count, or given twice are dropped."""
    subs = {"a": ["t"], "b": ["t"]}
    previous = {"a": _tps("t", 0, 1, 9) | _tps("gone", 0), "b": _tps("t", 1, 2), "c": _tps("t", 3)}
    result = assign_roundrobin(subs, {"t": 4}, previous)
    _check_valid(result, {m: frozenset(s) for m, s in subs.items()}, {"t": 4})
    assert _tps("t", 0, 1) <= result["a"] and TP("t", 2) in result["b"]


def test_member_order_does_not_matter() -> None:
    counts = {"x": 5, "y": 3}
    subs = {"b": ["x"], "a": ["x", "y"], "c": ["y"]}
    reordered = dict(reversed(list(subs.items())))
    for name in ("range", "roundrobin"):
        assert assign(name, subs, counts) == assign(name, reordered, counts)


# ---- properties ----------------------------------------------------------------------------

_TOPICS = ["a", "b", "c", "d"]


@st.composite
def _groups(draw: st.DrawFn) -> tuple[dict[str, frozenset[str]], dict[str, int], bool]:
    counts = {t: draw(st.integers(0, 12)) for t in _TOPICS[: draw(st.integers(1, 4))]}
    members = [f"m{i:02d}" for i in range(draw(st.integers(1, 8)))]
    identical = draw(st.booleans())
    pool = [*counts, "absent"]
    if identical:
        topics = frozenset(draw(st.lists(st.sampled_from(pool), min_size=1, unique=True)))
        subs = dict.fromkeys(members, topics)
    else:
        subs = {m: frozenset(draw(st.lists(st.sampled_from(pool), unique=True))) for m in members}
    return subs, counts, identical


@settings(max_examples=300, deadline=None)
@given(_groups())
def test_range_properties(group: tuple[dict[str, frozenset[str]], dict[str, int], bool]) -> None:
    subs, counts, _ = group
    result = assign_range(subs, counts)
    _check_valid(result, subs, counts)
    assert {m: set(p) for m, p in result.items()} == _reference_range(subs, counts)
    for topic in counts:  # balanced per topic
        sizes = [sum(1 for tp in result[m] if tp.topic == topic) for m in subs if topic in subs[m]]
        assert not sizes or max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(_groups(), st.randoms(use_true_random=False))
def test_roundrobin_properties(
    group: tuple[dict[str, frozenset[str]], dict[str, int], bool], rnd: random.Random
) -> None:
    subs, counts, _ = group
    # a previous assignment that may be anything: stale, overlapping, of other members
    universe = [TP(t, p) for t in [*_TOPICS, "gone"] for p in range(14)]
    previous = {
        m: frozenset(rnd.sample(universe, rnd.randint(0, 10)))
        for m in [*subs, "departed"]
        if rnd.random() < 0.8
    }
    first = assign_roundrobin(subs, counts, previous)
    _check_valid(first, subs, counts)
    _check_uniform_balance(first, subs, counts)
    assert assign_roundrobin(subs, counts, previous) == first, "deterministic"
    again = assign_roundrobin(subs, counts, first)
    assert again == first, "a balanced assignment is kept as it is (sticky)"
