"""Collects what the simulation tests ran, for the summary ``conftest.py`` prints."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.sim.simulator import RunResult

__all__ = ["REPORT", "SimReport"]


@dataclass
class SimReport:
    """Totals over every schedule run in this pytest session."""

    seeds: list[int] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)
    clusters: Counter[str] = field(default_factory=Counter)
    events: int = 0
    crashes: int = 0
    partitions: int = 0
    max_epoch: int = 0

    def add(self, result: RunResult) -> None:
        """Count one schedule."""
        self.seeds.append(result.seed)
        self.checks.update(result.checks)
        self.clusters[f"{result.voters}v+{result.observers}o"] += 1
        self.events += result.events
        self.crashes += result.crashes
        self.partitions += result.partitions
        self.max_epoch = max(self.max_epoch, result.max_epoch)

    def lines(self) -> list[str]:
        """The summary, one line each."""
        if not self.seeds:
            return []
        seeds = sorted(set(self.seeds))  # the replay test may run a seed a chunk ran too
        contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
        seed_text = f"{seeds[0]}..{seeds[-1]}" if contiguous else ",".join(map(str, seeds[:20]))
        clusters = ", ".join(f"{k}: {v}" for k, v in sorted(self.clusters.items()))
        out = [
            f"schedules: {len(self.seeds)}  seeds: {seed_text}  clusters: {clusters}",
            f"events: {self.events}  crashes: {self.crashes}  partitions: {self.partitions}  "
            f"highest epoch: {self.max_epoch}",
            "invariant checks passed:",
        ]
        out += [f"  {name}: {count}" for name, count in sorted(self.checks.items())]
        return out


REPORT = SimReport()
