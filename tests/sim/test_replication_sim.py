"""Seeded deterministic simulation of partition replication (issue 4, deliverable 6).

``pytest tests/sim/test_replication_sim.py`` runs seeds ``0..N-1`` (N from
``LOGRAFT_REPL_SIM_SCHEDULES``, default 1500, in chunks). Each schedule checks the
replication invariants after every event (see ``tests/sim/replication_sim.py``) and, after
healing, convergence and that every acknowledged ``acks=all`` record survived exactly
once. A failure names its seed and replays with::

    LOGRAFT_REPL_SIM_SEED=<seed> .venv/bin/pytest tests/sim/test_replication_sim.py -k replay

The module prints the seeds run and the invariant checks passed at the end.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.sim.replication_sim import (
    ReplicationSimulator,
    ReplRunResult,
    ScriptedReplication,
    run_seed,
)

DEFAULT_SCHEDULES = 1500
CHUNKS = 10


class _Totals:
    def __init__(self) -> None:
        self.seeds: list[int] = []
        self.checks: Counter[str] = Counter()
        self.min_insync: Counter[int] = Counter()
        self.events = self.acked = self.refused = self.crashes = self.truncations = 0
        self.max_leader_epoch = 0

    def add(self, result: ReplRunResult) -> None:
        self.seeds.append(result.seed)
        self.checks.update(result.checks)
        self.min_insync[result.min_insync_replicas] += 1
        self.events += result.events
        self.acked += result.acked
        self.refused += result.refused
        self.crashes += result.crashes
        self.truncations += result.truncations
        self.max_leader_epoch = max(self.max_leader_epoch, result.max_leader_epoch)

    def lines(self) -> list[str]:
        seeds = sorted(set(self.seeds))
        mins = ", ".join(f"{k}: {v}" for k, v in sorted(self.min_insync.items()))
        out = [
            f"schedules: {len(seeds)}  seeds: {seeds[0]}..{seeds[-1]}  min.insync.replicas: {mins}",
            f"events: {self.events}  crashes: {self.crashes}  truncations: {self.truncations}  "
            f"highest leader epoch: {self.max_leader_epoch}",
            f"acks=all acknowledged: {self.acked}  refused NOT_ENOUGH_REPLICAS: {self.refused}",
            "invariant checks passed:",
        ]
        return out + [f"  {name}: {count}" for name, count in sorted(self.checks.items())]


TOTALS = _Totals()


@pytest.fixture(scope="module", autouse=True)
def _print_report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is None or not TOTALS.seeds:
        return
    with capture.global_and_fixture_disabled():
        print("\n--- lograft replication simulation ---")
        for line in TOTALS.lines():
            print(line)


def _schedules() -> int:
    return int(os.environ.get("LOGRAFT_REPL_SIM_SCHEDULES", DEFAULT_SCHEDULES))


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_simulated_schedules(chunk: int) -> None:
    """Every seed of this chunk keeps every invariant, converges and keeps acked records."""
    if "LOGRAFT_REPL_SIM_SEED" in os.environ:
        pytest.skip("LOGRAFT_REPL_SIM_SEED set: only the replay test runs")
    total = _schedules()
    per_chunk = -(-total // CHUNKS)
    for seed in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
        TOTALS.add(run_seed(seed))


def test_replay_seed() -> None:
    """Replays ``LOGRAFT_REPL_SIM_SEED`` (seed 0 when unset)."""
    TOTALS.add(run_seed(int(os.environ.get("LOGRAFT_REPL_SIM_SEED", 0))))


def test_same_seed_same_run() -> None:
    """Determinism: one seed gives the same schedule, event for event."""
    first, second = ReplicationSimulator(11, trace=True), ReplicationSimulator(11, trace=True)
    first.run()
    second.run()
    assert [repr(e) for e in first.trace] == [repr(e) for e in second.trace]
    assert first.acked == second.acked


def test_schedules_exercise_faults() -> None:
    """The swarm really produces elections, truncations and acked writes (not a no-op)."""
    totals = _Totals()
    for seed in range(40):
        totals.add(run_seed(seed))
    assert totals.truncations > 0
    assert totals.max_leader_epoch > 2
    assert totals.acked > 0
    assert totals.refused > 0
    assert totals.checks["new_leader_has_committed"] > 40


@pytest.mark.parametrize("seed", range(5))
def test_issue_10_history_converges_through_the_fetch_step(seed: int) -> None:
    """Issue 10's history (replicas [A, C, B], clean elections) in the simulation.

    The followers run the broker's own fetch step (``replica.follower_fetch``); C walks
    back through its epoch cache to offset 5 (KIP-279) instead of re-fetching from 8 for
    ever, and all three logs end equal.
    """
    a, b, c = 1, 2, 3
    sim = ScriptedReplication(seed, replica_order=(a, c, b))
    sim.elect(c, (a, c, b))  # 1. C leads epoch 1, writes 0-4; A and B catch up
    sim.run_for(100)
    sim.write(c, 5)
    sim.run_for(300)
    assert [len(sim.replicas[r].log) for r in (a, b, c)] == [5, 5, 5]
    sim.blocked |= {(a, c), (c, a)}  # 2. C stalls; A leads epoch 2, writes 5-7; B copies
    sim.elect(a, (a, c, b))
    sim.run_for(100)
    sim.write(a, 3)
    sim.run_for(300)
    assert len(sim.replicas[b].log) == 8 and len(sim.replicas[c].log) == 5
    sim.isolate(a)  # 3. A is fenced; C leads epoch 3, writes 5-9 before B fetches from it
    sim.blocked |= {(b, c), (c, b)}
    sim.elect(c, (c, b))
    sim.run_for(100)
    sim.write(c, 5)
    sim.run_for(100)
    sim.isolate(c, keep_controller=False)  # 4. C is fenced; B leads epoch 4, writes 8-9
    sim.elect(b, (b,))
    sim.run_for(100)
    sim.write(b, 2)
    sim.run_for(100)
    assert [(e.epoch, e.start_offset) for e in sim.replicas[b].cache.entries] == [
        (1, 0),
        (2, 5),
        (4, 8),
    ]
    assert [(e.epoch, e.start_offset) for e in sim.replicas[c].cache.entries] == [(1, 0), (3, 5)]
    sim.blocked = set()  # 5. C and A return and follow B
    sim.run_for(1000)
    assert (c, 5) in sim.truncated_to
    logs = [sim.replicas[r].log for r in (a, b, c)]
    assert logs[0] == logs[1] == logs[2] and len(logs[0]) == 10
