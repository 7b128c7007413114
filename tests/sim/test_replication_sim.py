"""Seeded deterministic simulation of partition replication (issue 4, deliverable 6).

``pytest tests/sim/test_replication_sim.py`` runs seeds ``0..N-1`` (N from
``LOGRAFT_REPL_SIM_SCHEDULES``, default 1500, in chunks). Each schedule checks the
replication invariants after every event (see ``tests/sim/replication_sim.py``) and, after
healing, convergence and that every acknowledged ``acks=all`` record survived exactly
once. A failure names its seed and replays with::

    LOGRAFT_REPL_SIM_SEED=<seed> .venv/bin/pytest tests/sim/test_replication_sim.py -k replay

The same schedules with an idempotent ``acks=all`` producer (``tests/sim/producer_sim.py``,
issue 40: the client's sequencing core against every replica's producer state, kill-alls
among the faults) run seeds ``0..N-1`` of ``LOGRAFT_PRODUCER_SIM_SCHEDULES`` (default 100)
and replay with ``LOGRAFT_PRODUCER_SIM_SEED=<seed> ... -k producer_replay``.

The module prints the seeds run and the invariant checks passed at the end.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.sim.producer_sim import (
    ProducerConfig,
    ScriptedProducerReplication,
    run_producer_seed,
)
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


# ---- an idempotent producer over the replicated partition (issue 40) ----------------------------

DEFAULT_PRODUCER_SCHEDULES = 100


@pytest.mark.parametrize("chunk", range(2))
def test_producer_schedules_keep_every_batch_once_in_order(chunk: int) -> None:
    """Seeds of ``tests/sim/producer_sim.py`` (``LOGRAFT_PRODUCER_SIM_SCHEDULES``, default
    100): crashes, kill-alls, partitions and lost messages under an idempotent ``acks=all``
    producer. Acknowledged batches stay once at their offsets, nothing is written twice or
    out of order, and no batch fails with a sequencing error."""
    if "LOGRAFT_PRODUCER_SIM_SEED" in os.environ:
        pytest.skip("LOGRAFT_PRODUCER_SIM_SEED set: only the replay test runs")
    total = int(os.environ.get("LOGRAFT_PRODUCER_SIM_SCHEDULES", DEFAULT_PRODUCER_SCHEDULES))
    per_chunk = -(-total // 2)
    for seed in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
        TOTALS.add(run_producer_seed(seed))


def test_producer_replay_seed() -> None:
    """Replays ``LOGRAFT_PRODUCER_SIM_SEED`` (seed 0 when unset)."""
    TOTALS.add(run_producer_seed(int(os.environ.get("LOGRAFT_PRODUCER_SIM_SEED", 0))))


def test_kill_all_the_batch_after_one_that_ran_out_of_time_fails_as_timed_out() -> None:
    """Issue 40's kill-all finding, as a schedule.

    Batches 1 and 2 reach leader 1 only (its followers cannot fetch) when all three nodes
    are killed. The controller fences 1, 2 and 3 in turn; 3 comes back first and leads with
    itself as its only in-sync replica, so with ``min.insync.replicas=2`` it refuses the
    retries of batch 1 (NOT_ENOUGH_REPLICAS) until batch 1's ``delivery.timeout.ms`` runs out.
    Batch 2 may have been written, so it goes once more under its own sequence just as
    replica 1 rejoins the ISR; leader 3 never held batch 1 and answers
    OUT_OF_ORDER_SEQUENCE_NUMBER within batch 2's last ``retry.backoff.ms``. The producer used
    to fail batch 2 with that answer; it fails as timed out, and the partition goes on under
    a new epoch.
    """
    producer = ProducerConfig(
        batch_interval_ms=10,
        request_timeout_ms=100,
        retry_backoff_ms=20,
        delivery_timeout_ms=1000,
        metadata_max_age_ms=50,
        kill_all_weight=0,
        slow_request=0.0,
    )
    sim = ScriptedProducerReplication(0, min_insync_replicas=2, session_ms=60, producer=producer)
    sim.run_for(100)
    warm_up = sim.send_batch()
    sim.run_for(100)
    assert warm_up.index in sim.report.acked
    sim.cut_replication(1)
    sim.send_batch()
    sim.run_for(10)
    sim.send_batch()
    sim.run_for(20)
    sim.kill_all()
    sim.blocked = set()
    sim.restart_at(3, 150)
    sim.restart_at(1, 950)
    sim.restart_at(2, 1450)
    sim.run_for(2000)
    assert sim.controller.elections[-2:] == [(3, None), (4, 3)]
    assert sim.checks["leader_answered_OUT_OF_ORDER_SEQUENCE_NUMBER"] == 1
    assert sim.report.failed == {1: "NOT_ENOUGH_REPLICAS", 2: "REQUEST_TIMED_OUT"}
    after = sim.send_batch()
    sim.run_for(200)
    assert after.index in sim.report.acked
    assert (after.producer_epoch, after.base_sequence) == (1, 0)
    sim.check_producer()
