"""Chaos schedules and the nemesis: one seed replays the same faults, faults leave quiet time
around them, and each fault is injected, healed and recorded on a target (a fake one here)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from chaos.history import HistoryWriter
from chaos.nemesis import FAULTS, Disk, Nemesis, Network, ReplicaLogs, TargetError
from chaos.runner import RunOptions, run
from chaos.scenarios import SCENARIOS, FaultStep, scenario, schedule
from chaos.workload import send_outcome
from cluster.errors import (
    IllegalStateError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_seed_replays_the_same_schedule(name: str) -> None:
    assert schedule(name, 7, 60) == schedule(name, 7, 60)
    assert schedule(name, 7, 60), "a 60 s run has at least one fault"


def test_other_seeds_give_other_schedules() -> None:
    schedules = {tuple(schedule("mixed", seed, 120)) for seed in range(10)}
    assert len(schedules) == 10


def test_faults_start_after_the_first_tenth_and_heal_before_the_last_fifth() -> None:
    for seed in range(20):
        steps = schedule("mixed-network", seed, 100)
        for step, following in itertools.pairwise(steps):
            assert step.at_s + step.hold_s < following.at_s, "one fault at a time"
        for step in steps:
            assert step.at_s >= 10
            assert step.at_s + step.hold_s <= 80
            assert step.nodes and set(step.nodes) <= {1, 2, 3}


def test_a_minority_is_less_than_half_of_the_nodes() -> None:
    sizes = {len(s.nodes) for seed in range(30) for s in schedule("kill-minority", seed, 100, 5)}
    assert sizes == {1, 2}
    assert {len(s.nodes) for s in schedule("kill-all", 1, 60)} == {3}
    assert {len(s.nodes) for s in schedule("power-loss", 1, 60)} == {3}


def test_every_fault_a_scenario_names_exists_and_network_scenarios_say_so() -> None:
    for name in SCENARIOS:
        assert set(scenario(name).faults) <= set(FAULTS)
    assert scenario("partition-leader").needs_network
    assert scenario("mixed-network").needs_network
    assert not scenario("mixed").needs_network
    assert scenario("power-loss").needs_disk
    assert scenario("slow-disk").needs_disk
    assert not scenario("mixed-network").needs_disk
    assert scenario("clock-jump").needs_clocks
    assert not scenario("mixed").needs_clocks


def test_scenarios_the_compose_target_cannot_inject_run_locally_only() -> None:
    for name in ("mixed", "mixed-network", "kill-all", "partition-leader", "partition-halves"):
        assert scenario(name).targets == ("local", "compose"), name
    for name in ("partition-bridge", "partition-one-way", "torn-tail", "slow-disk"):
        assert scenario(name).targets == ("local",), name
    for name in ("power-loss", "clock-jump", "mixed-all"):
        assert scenario(name).targets == ("local",), name


def test_the_runner_refuses_a_local_only_scenario_on_compose_before_starting_anything(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="runs on local only"):
        run(RunOptions("torn-tail", 1, 10, results_dir=tmp_path, target="compose"))
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        schedule("flood", 1, 10)


class FakeNetwork:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def isolate(self, node: int, cut_clients: bool = True) -> object:
        self.calls.append(f"isolate {node} clients-cut={cut_clients}")
        return None

    def partition(self, groups: Sequence[Iterable[int]], cut_clients: bool = False) -> object:
        self.calls.append(f"partition {[list(g) for g in groups]}")
        return None

    def one_way(self, src: int, dst: int | Iterable[int]) -> object:
        self.calls.append(f"one-way {src} -> {dst}")
        return None

    def heal(self) -> object:
        self.calls.append("heal")
        return None


class FakeDisk:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def crash(self) -> object:
        self.calls.append("crash")
        return None


class FakeTarget:
    """Records what the faults ask for; node 2 leads, node 3 is the controller."""

    name = "fake"

    def __init__(self, with_network: bool = True, broken: frozenset[int] = frozenset()) -> None:
        self.calls: list[str] = []
        self._network = FakeNetwork(self.calls) if with_network else None
        self._disk = FakeDisk(self.calls) if with_network else None
        self._broken = broken
        self.waited_in_sync: list[str] = []

    @property
    def bootstrap(self) -> str:
        return "fake:1"

    @property
    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    @property
    def network(self) -> Network | None:
        return self._network

    @property
    def disk(self) -> Disk | None:
        return self._disk

    def up(self) -> None:
        self.calls.append("up")

    def close(self) -> None:
        self.calls.append("close")

    def kill(self, node: int) -> None:
        if node in self._broken:
            raise TargetError(f"node {node} is not running")
        self.calls.append(f"kill {node}")

    def stop(self, node: int) -> None:
        self.calls.append(f"stop {node}")

    def start(self, nodes: Sequence[int]) -> None:
        self.calls.append(f"start {list(nodes)}")

    def pause(self, node: int) -> None:
        self.calls.append(f"pause {node}")

    def resume(self, node: int) -> None:
        self.calls.append(f"resume {node}")

    def wait_in_sync(self, topic: str, timeout_s: float) -> list[str]:
        self.waited_in_sync.append(topic)
        return []

    def leader_of(self, topic: str, partition: int) -> int | None:
        return 2

    def controller(self) -> int | None:
        return 3

    def node_data_dir(self, node: int) -> Path | None:
        return None

    def slow_disk(self, node: int, milliseconds: float) -> None:
        self.calls.append(f"slow-disk {node} {milliseconds:g}")

    def set_clock(self, node: int, offset_s: int) -> None:
        self.calls.append(f"clock {node} {offset_s:+d}")

    def replica_logs(self, topic: str, partitions: int) -> ReplicaLogs | None:
        return None


@pytest.mark.parametrize(
    ("fault", "nodes", "expected"),
    [
        ("kill-random", (1,), ["kill 1", "start [1]"]),
        ("kill-leader", (1,), ["kill 2", "start [2]"]),
        ("kill-controller", (1,), ["kill 3", "start [3]"]),
        ("kill-minority", (1,), ["kill 1", "start [1]"]),
        ("kill-all", (1, 2, 3), ["kill 1", "kill 2", "kill 3", "start [1, 2, 3]"]),
        ("pause-random", (3,), ["pause 3", "resume 3"]),
        ("pause-leader", (1,), ["pause 2", "resume 2"]),
        ("partition-leader", (1,), ["isolate 2 clients-cut=False", "heal"]),
        ("partition-halves", (3,), ["partition [[3], [1, 2]]", "heal"]),
        ("partition-bridge", (1,), ["partition [[1, 2], [1, 3]]", "heal"]),
        ("partition-one-way", (1,), ["one-way 2 -> [1, 3]", "heal"]),
        ("slow-disk", (3,), ["slow-disk 3 400", "slow-disk 3 0"]),
        ("clock-forward", (1,), ["clock 1 +86400", "clock 1 +0"]),
        ("clock-back", (2,), ["clock 2 -86400", "clock 2 +0"]),
        ("power-loss", (1, 2, 3), ["kill 1", "kill 2", "kill 3", "crash", "start [1, 2, 3]"]),
    ],
)
def test_each_fault_is_injected_healed_and_recorded(
    fault: str, nodes: tuple[int, ...], expected: list[str]
) -> None:
    target = FakeTarget()
    history = HistoryWriter(None)
    nemesis = Nemesis(target, history, ("chaos", 0))
    injected = nemesis.inject(FaultStep(1.0, fault, nodes, 2.0))
    assert nemesis.heal(injected)
    assert target.calls == expected
    ops = history.ops()
    assert [(op.type, op.fault) for op in ops] == [
        ("invoke", FAULTS[fault].name),
        ("ok", FAULTS[fault].name),
        ("invoke", FAULTS[fault].heal_name),
        ("ok", FAULTS[fault].heal_name),
    ]
    assert ops[0].targets == injected.nodes
    assert nemesis.injected == 1


def test_a_fault_that_cannot_be_done_is_recorded_as_failed_and_still_healed() -> None:
    target = FakeTarget(broken=frozenset({2}))
    history = HistoryWriter(None)
    nemesis = Nemesis(target, history, ("chaos", 0))
    injected = nemesis.inject(FaultStep(1.0, "kill-all", (1, 2, 3), 2.0))
    assert not injected.ok
    assert target.calls == ["kill 1", "kill 3"], "the other nodes are killed all the same"
    nemesis.heal(injected)
    assert target.calls[-1] == "start [1, 2, 3]"
    assert [op.type for op in history.ops()][:2] == ["invoke", "fail"]
    assert "node 2" in (history.ops()[1].error or "")
    assert nemesis.injected == 0


def test_a_network_or_disk_fault_on_a_target_without_one_fails_and_says_why() -> None:
    history = HistoryWriter(None)
    target = FakeTarget(with_network=False)
    nemesis = Nemesis(target, history, ("chaos", 0))
    assert not nemesis.inject(FaultStep(1.0, "partition-leader", (1,), 2.0)).ok
    assert "cannot cut the network" in (history.ops()[1].error or "")
    assert not nemesis.inject(FaultStep(1.0, "power-loss", (1, 2, 3), 2.0)).ok
    assert "cannot lose power" in (history.ops()[3].error or "")
    assert not nemesis.inject(FaultStep(1.0, "torn-tail", (1,), 2.0)).ok
    assert "cannot reach its nodes' data" in (history.ops()[5].error or "")
    assert target.calls == [], "nothing was killed for a fault that cannot happen"


def test_a_fault_that_takes_a_replicas_data_waits_for_whole_isrs_first() -> None:
    target = FakeTarget()
    nemesis = Nemesis(target, HistoryWriter(None), ("chaos", 0))
    nemesis.inject(FaultStep(1.0, "kill-random", (1,), 2.0))
    assert target.waited_in_sync == []
    nemesis.inject(FaultStep(1.0, "torn-tail", (1,), 2.0))
    assert target.waited_in_sync == ["chaos"]


def test_healing_everything_heals_the_network_resumes_and_starts_every_node() -> None:
    target = FakeTarget()
    nemesis = Nemesis(target, HistoryWriter(None), ("chaos", 0))
    assert nemesis.heal_everything()
    assert target.calls == ["heal", "resume 1", "resume 2", "resume 3", "start [1, 2, 3]"]


def test_only_sends_that_certainly_were_not_written_are_failed() -> None:
    assert send_outcome(RequestTimedOutError("expired"), before_send_returned=True) == "fail"
    assert send_outcome(IllegalStateError("closed"), before_send_returned=False) == "fail"
    assert send_outcome(MessageTooLargeError("big"), before_send_returned=False) == "fail"
    # Retried until the end: an earlier attempt may have been appended.
    assert send_outcome(NotEnoughReplicasError("isr 1"), before_send_returned=False) == "info"
    assert send_outcome(RequestTimedOutError("expired"), before_send_returned=False) == "info"
    assert send_outcome(ConnectionError("reset"), before_send_returned=False) == "info"
