"""When ``lograft cluster status --wait`` calls a cluster ready (cluster/status.py)."""

from __future__ import annotations

from typing import Any

from cluster.status import readiness_problems


def described(leader: int, voters: list[int], brokers: dict[int, bool]) -> dict[str, Any]:
    """A describe_cluster answer: ``brokers`` maps id -> fenced."""
    return {
        "quorum": {"leader_id": leader, "voters": [{"node_id": v} for v in voters]},
        "brokers": [{"node_id": i, "fenced": fenced} for i, fenced in brokers.items()],
    }


def test_combined_nodes_are_ready_once_every_voter_is_an_unfenced_broker() -> None:
    assert readiness_problems(described(2, [1, 2, 3], {1: False, 2: False, 3: False})) == []


def test_a_voter_not_yet_registered_keeps_a_combined_cluster_waiting() -> None:
    problems = readiness_problems(described(1, [1, 2, 3], {1: False, 2: False}))
    assert problems == ["node 3 is not registered as a broker"]


def test_no_leader_no_broker_and_fenced_brokers_are_named() -> None:
    assert readiness_problems(described(-1, [1], {})) == [
        "the controller quorum has no leader",
        "no broker is registered",
    ]
    assert readiness_problems(described(1, [1, 2], {1: False, 2: True})) == ["broker 2 is fenced"]


def test_brokers_that_are_not_voters_do_not_wait_for_controller_only_voters() -> None:
    assert readiness_problems(described(1, [1, 2, 3], {4: False, 5: False})) == []
