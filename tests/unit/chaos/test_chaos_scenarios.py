"""Chaos schedules and the nemesis: one seed replays the same faults, faults leave quiet time
around them, and each fault is injected, healed and recorded on a target (a fake one here)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from chaos import faults as faults_module
from chaos.faults import FAULTS, LastInSync, last_in_sync
from chaos.history import HistoryWriter
from chaos.nemesis import Nemesis
from chaos.runner import RunOptions, run
from chaos.scenarios import LAST_REPLICA_FAULTS, SCENARIOS, FaultStep, scenario, schedule
from chaos.targets import Disk, Network, PartitionState, ReplicaLogs, TargetError
from chaos.torn_tails import empty_partition, tear_tail
from chaos.workload import send_outcome
from lograft.protocol.errors import (
    IllegalStateError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    RequestTimedOutError,
)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_seed_replays_the_same_schedule(name: str) -> None:
    duration = max(60.0, scenario(name).min_duration_s)
    assert schedule(name, 7, duration) == schedule(name, 7, duration)
    assert schedule(name, 7, duration), "a run of its shortest duration has a fault"


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
    for name in ("clock-jump", "mixed-all", *LAST_REPLICA_FAULTS):
        assert scenario(name).targets == ("local",), name
    for name in ("power-loss", "long-faults"):  # compose: its data on LazyFS for power loss
        assert scenario(name).targets == ("local", "compose"), name


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

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return PartitionState(2, (1, 2, 3), (1, 2, 3))

    def node_data_dir(self, node: int) -> Path | None:
        return None

    def slow_disk(self, node: int, milliseconds: float, under: str = "") -> None:
        self.calls.append(f"slow-disk {node} {milliseconds:g}" + (f" {under}" if under else ""))

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


# ---- the last in-sync replica ------------------------------------------------------------


class LastReplicaTarget(FakeTarget):
    """Node 2 leads partition 0 of replicas (1, 2, 3). The metadata follows the faults as the
    cluster would: a follower whose fsyncs are held leaves the ISR (unless ``stuck``), the
    dead leader is replaced by the first live replica when ``unclean``, else by no one."""

    def __init__(
        self,
        unclean: bool = False,
        stuck: frozenset[int] = frozenset(),
        data_dir: Path | None = None,
        isr: tuple[int, ...] = (1, 2, 3),
    ) -> None:
        super().__init__()
        self.unclean = unclean
        self.stuck = stuck
        self.data_dir = data_dir
        self.state = PartitionState(2, (1, 2, 3), isr)

    def slow_disk(self, node: int, milliseconds: float, under: str = "") -> None:
        super().slow_disk(node, milliseconds, under)
        if milliseconds >= faults_module.FSYNC_HOLD_MS and node not in self.stuck:
            isr = tuple(r for r in self.state.isr if r != node)
            self.state = PartitionState(self.state.leader, self.state.replicas, isr)

    def kill(self, node: int) -> None:
        super().kill(node)
        if node == self.state.leader:
            live = [r for r in self.state.replicas if r != node]
            if self.unclean:
                self.state = PartitionState(live[0], self.state.replicas, (live[0],))
            else:
                self.state = PartitionState(None, self.state.replicas, self.state.isr)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.state

    def node_data_dir(self, node: int) -> Path | None:
        return None if self.data_dir is None else self.data_dir / f"node-{node}"


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last-replica faults without their pauses: no time with the ISR at two or one, no
    wait for the followers to append (the fakes do not), no poll interval."""
    for name in LAST_REPLICA_FAULTS:
        monkeypatch.setitem(FAULTS, name, LastInSync(last_in_sync, FAULTS[name].then, 0.0))
    monkeypatch.setattr(faults_module, "PRIME_TIMEOUT_S", 0.0)
    monkeypatch.setattr(faults_module, "PARTITION_POLL_S", 0.0)


def _inject(target: FakeTarget, fault: str = "last-replica") -> tuple[Nemesis, HistoryWriter]:
    history = HistoryWriter(None)
    nemesis = Nemesis(target, history, ("chaos", 0))
    injected = nemesis.inject(FaultStep(1.0, fault, (1, 2, 3), 6.0))
    assert injected.nodes == (2, 1, 3), "the leader, then its followers in replica order"
    assert nemesis.heal(injected)
    return nemesis, history


@pytest.mark.usefixtures("quick")
def test_the_last_replica_fault_shrinks_the_isr_to_the_leader_then_kills_it() -> None:
    target = LastReplicaTarget()
    nemesis, history = _inject(target)
    assert target.calls == [
        # Both followers' fsyncs a little slower first, then held: the first, then the other.
        "slow-disk 1 100 chaos-0",
        "slow-disk 3 100 chaos-0",
        "slow-disk 1 30000 chaos-0",
        "slow-disk 3 30000 chaos-0",
        "kill 2",
        "slow-disk 1 0 chaos-0",  # let go once the leader is dead: alive, lagging
        "slow-disk 3 0 chaos-0",
        # The heal: every fsync goes again, the leader restarts.
        "slow-disk 1 0 chaos-0",
        "slow-disk 3 0 chaos-0",
        "start [2, 1, 3]",
    ]
    assert target.waited_in_sync == ["chaos"], "it starts from whole ISRs"
    done = history.ops()[1]
    assert (done.type, done.fault, done.targets) == ("ok", "last-replica", (2, 1, 3))
    assert done.detail is not None
    assert "1 out of the ISR after" in done.detail
    assert "ISR [2] for 0 s, 2 killed" in done.detail
    assert done.detail.endswith("no leader: chaos-0 offline")
    assert nemesis.injected == 1


@pytest.mark.usefixtures("quick")
def test_with_unclean_election_the_first_follower_to_leave_leads() -> None:
    _, history = _inject(LastReplicaTarget(unclean=True))
    detail = history.ops()[1].detail or ""
    assert detail.endswith("leader 1 isr [1]: unclean election"), detail


@pytest.mark.usefixtures("quick")
def test_the_last_replica_fault_needs_a_whole_isr_and_touches_nothing_without_one() -> None:
    target = LastReplicaTarget(isr=(2, 1))
    _, history = _inject(target)
    failed = history.ops()[1]
    assert failed.type == "fail"
    assert "needs leader 2 and a whole ISR, found leader 2 isr [2, 1]" in (failed.error or "")
    assert target.calls == ["slow-disk 1 0 chaos-0", "slow-disk 3 0 chaos-0", "start [2, 1, 3]"]


@pytest.mark.usefixtures("quick")
def test_a_follower_that_stays_in_the_isr_fails_the_fault_before_anything_is_killed() -> None:
    target = LastReplicaTarget(stuck=frozenset({3}))
    _, history = _inject(target)
    failed = history.ops()[1]
    assert failed.type == "fail"
    assert "ISR [2]: not seen within" in (failed.error or "")
    assert "last seen: leader 2 isr [2, 3]" in (failed.error or "")
    assert not [call for call in target.calls if call.startswith("kill")]
    assert target.calls[-3:] == [
        "slow-disk 1 0 chaos-0",
        "slow-disk 3 0 chaos-0",
        "start [2, 1, 3]",
    ], "the heal lets every fsync go"


def _segment(directory: Path, size: int, seed: int = 0) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(random.Random(seed).randbytes(size))
    return segment


@pytest.mark.usefixtures("quick")
def test_the_empty_variant_empties_the_dead_leaders_directory_of_that_partition(
    tmp_path: Path,
) -> None:
    _segment(tmp_path / "node-2" / "chaos-0", 5000)
    (tmp_path / "node-2" / "chaos-0" / "partition.metadata").write_text("topic_id=x\n")
    _segment(tmp_path / "node-2" / "chaos-1", 5000)
    _, history = _inject(LastReplicaTarget(data_dir=tmp_path), "last-replica-empty")
    assert list((tmp_path / "node-2" / "chaos-0").iterdir()) == []
    assert (tmp_path / "node-2" / "chaos-1" / "00000000000000000000.log").stat().st_size == 5000
    assert "node 2: chaos-0: 2 files (5011 B) removed" in (history.ops()[1].detail or "")


@pytest.mark.usefixtures("quick")
def test_the_torn_variant_tears_the_dead_leader_back_past_the_followers_log_end(
    tmp_path: Path,
) -> None:
    leader = _segment(tmp_path / "node-2" / "chaos-0", 30000)
    original = leader.read_bytes()
    _segment(tmp_path / "node-1" / "chaos-0", 20000)  # the first follower to leave
    _, history = _inject(LastReplicaTarget(data_dir=tmp_path), "last-replica-torn")
    torn = leader.read_bytes()
    # Back to the follower's log end: what the leader holds beyond it, and only that.
    assert torn[:20000] == original[:20000]
    assert len(torn) == 20000 or (len(torn) == 30000 and torn[20000:] != original[20000:])
    assert "(the follower's log ends 10000 B before)" in (history.ops()[1].detail or "")


def test_the_damage_of_a_torn_tail_with_a_reach_spans_that_reach(tmp_path: Path) -> None:
    kinds = set()
    for seed in range(20):
        directory = tmp_path / f"p{seed}"
        segment = _segment(directory, 20000, seed)
        original = segment.read_bytes()
        what = tear_tail(directory, random.Random(seed), reach=6000)
        assert what is not None and " 6000 of 20000 B" in what and " zeros " not in what
        kinds.add(what.split()[1])
        torn = segment.read_bytes()
        assert torn[:14000] == original[:14000]
        if what.split()[1] == "cut":
            assert len(torn) == 14000
        else:  # garbage over the last 6000 bytes
            assert len(torn) == 20000 and torn[14000:] != original[14000:]
    assert kinds == {"cut", "garbage"}
    big = _segment(tmp_path / "whole", 100)
    tear_tail(tmp_path / "whole", random.Random(1), reach=1000)
    assert big.stat().st_size in (0, 100), "at most the whole segment"


def test_emptying_a_partition_keeps_its_directory_and_nothing_in_it(tmp_path: Path) -> None:
    directory = tmp_path / "chaos-0"
    _segment(directory, 100)
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (directory / "sub").mkdir()
    (directory / "sub" / "x").write_bytes(b"12")
    assert empty_partition(directory) == "chaos-0: 3 files (110 B) removed"
    assert directory.is_dir() and list(directory.iterdir()) == []


@pytest.mark.usefixtures("quick")
def test_the_empty_and_torn_variants_need_the_nodes_data() -> None:
    target = LastReplicaTarget()  # no data directory, as on the compose target
    _, history = _inject(target, "last-replica-torn")
    assert "cannot reach its nodes' data" in (history.ops()[1].error or "")
    assert not [call for call in target.calls if call.startswith("kill")]


def test_last_replica_scenarios_run_on_lazyfs_locally_with_room_between_faults() -> None:
    for name in LAST_REPLICA_FAULTS:
        chosen = scenario(name)
        assert chosen.needs_disk and chosen.targets == ("local",)
        assert chosen.faults == (name,)
        for step in schedule(name, 1, 60):
            assert step.nodes == (1, 2, 3), "the nodes are found when it is injected"
    for steps in (schedule("last-replica", seed, 60) for seed in range(10)):
        # The sequence takes 10-20 s before its hold: at most two fault a minute.
        assert 1 <= len(steps) <= 2
        for step, following in itertools.pairwise(steps):
            assert following.at_s - (step.at_s + step.hold_s) >= 25
    assert all(len(schedule(name, 1, 60)) == 1 for name in LAST_REPLICA_FAULTS[1:])
