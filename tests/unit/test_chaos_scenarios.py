"""Chaos schedules: one seed replays the same faults; faults leave quiet time around them."""

from __future__ import annotations

import pytest

from chaos.nemesis import SCENARIOS, schedule


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_seed_replays_the_same_schedule(scenario: str) -> None:
    assert schedule(scenario, 7, 60) == schedule(scenario, 7, 60)
    assert schedule(scenario, 7, 60), "a 60 s run has at least one fault"


def test_other_seeds_give_other_schedules() -> None:
    schedules = {tuple(schedule("mixed", seed, 120)) for seed in range(10)}
    assert len(schedules) == 10


def test_faults_start_after_the_first_tenth_and_heal_before_the_last_fifth() -> None:
    for seed in range(20):
        for step in schedule("mixed", seed, 100):
            assert step.at_s >= 10
            assert step.at_s + step.hold_s <= 80
            assert 1 <= step.node_choice <= 3


def test_an_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        schedule("flood", 1, 10)
