"""The parts of the Raft simulation that are values or stand alone: the swarm drawn per
seed, a run's result, the simulated disk and the partition helper.

:mod:`tests.sim.simulator` re-exports them; see it for how a schedule runs.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from controller.raft import MemoryStorage, Ready

__all__ = ["RunResult", "SimDisk", "SwarmConfig", "cut_between"]


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    """Everything a seed randomises about the cluster and its faults."""

    voters: int
    observers: int
    tick_ms: int
    election_timeout_ticks: int
    max_fetch_entries: int
    fetch_max_wait_ticks: int
    drop: float
    duplicate: float
    delay_max_ms: int
    disk_delay_max_ms: int
    partial_disk_loss: bool
    nemesis_interval_ms: int
    crash_weight: int
    partition_weight: int
    link_weight: int
    propose_interval_ms: int
    snapshot_probability: float
    faulty_ms: int
    liveness_ms: int

    @classmethod
    def draw(cls, rng: random.Random, faulty_ms: int) -> SwarmConfig:
        """Pick one swarm configuration."""
        election_timeout_ticks = rng.randint(5, 10)
        tick_ms = 10
        return cls(
            voters=rng.choice((3, 3, 5)),
            observers=rng.randint(0, 2),
            tick_ms=tick_ms,
            election_timeout_ticks=election_timeout_ticks,
            max_fetch_entries=rng.choice((2, 8, 64)),
            drop=rng.choice((0.0, 0.02, 0.1, 0.3)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            delay_max_ms=rng.choice((1, 5, 20, 60)),
            disk_delay_max_ms=rng.choice((0, 2, 10)),
            partial_disk_loss=rng.random() < 0.5,
            nemesis_interval_ms=rng.choice((40, 120, 300)),
            crash_weight=rng.choice((0, 1, 2, 4)),
            partition_weight=rng.choice((0, 1, 3)),
            link_weight=rng.choice((0, 1, 2)),
            propose_interval_ms=rng.choice((8, 25, 80)),
            snapshot_probability=rng.choice((0.0, 0.05, 0.3)),
            # Drawn last, so the draws above stay what they were for every seed. Fetching
            # every tick, a short long poll, or the node's default (half the election timeout).
            fetch_max_wait_ticks=rng.choice((0, 1, election_timeout_ticks // 2)),
            faulty_ms=faulty_ms,
            # Generous: many election timeouts (each up to 2x the base) with no faults left.
            liveness_ms=30 * election_timeout_ticks * tick_ms,
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one schedule did, for the pytest summary."""

    seed: int
    voters: int
    observers: int
    events: int
    checks: Counter[str]
    max_epoch: int
    committed: int
    crashes: int
    partitions: int


class SimDisk:
    """One node's disk: ``written`` is what reads see, ``synced`` what survives a crash."""

    def __init__(self, rng: random.Random, partial_loss: bool) -> None:
        self._rng = rng
        self._partial_loss = partial_loss
        self.written = MemoryStorage()
        self._synced = MemoryStorage()
        self._unsynced: list[Ready] = []

    def write(self, ready: Ready) -> None:
        """Write (not yet durable) what ``ready`` asks to persist."""
        if ready.must_sync:
            self.written.write(ready)
            self._unsynced.append(ready)

    def fsync(self) -> None:
        """Make everything written durable."""
        for ready in self._unsynced:
            self._synced.write(ready)
        self._unsynced.clear()

    def crash(self) -> int:
        """Lose what was not fsynced (maybe keeping a prefix); returns the writes lost."""
        keep = 0
        if self._partial_loss and self._unsynced:
            keep = self._rng.randrange(len(self._unsynced) + 1)
        for ready in self._unsynced[:keep]:
            self._synced.write(ready)
        lost = len(self._unsynced) - keep
        self._unsynced.clear()
        self.written = self._synced.copy()
        return lost


def cut_between(groups: list[set[int]]) -> set[tuple[int, int]]:
    """Links to block so that traffic flows only inside each group (both directions).

    A node in no group keeps all its links (the bridge of a bridge partition).
    """
    blocked: set[tuple[int, int]] = set()
    for i, group in enumerate(groups):
        for other in groups[i + 1 :]:
            for a in group:
                for b in other:
                    blocked.add((a, b))
                    blocked.add((b, a))
    return blocked
