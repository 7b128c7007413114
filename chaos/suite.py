"""Sets of chaos runs and the results table of docs/guarantees.md.

:data:`SHORT_SET` is what ``make test`` runs (tests/integration/test_chaos_runner.py): the
configuration lograft promises no loss for, a few minutes in all, fixed seeds.
:data:`LONG_SET` (``make chaos``) runs every scenario with every workload, including the
ones that trade safety away (``acks-1``, ``no-idempotence``, ``unclean``), to show what the
checker finds there. :func:`update_guarantees` writes the table between the markers of
``docs/guarantees.md``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.checker import KINDS
from chaos.nemesis import SCENARIOS
from chaos.runner import RunOptions, run

__all__ = [
    "LONG_SET",
    "SETS",
    "SHORT_SET",
    "SuiteRun",
    "results_table",
    "run_set",
    "update_guarantees",
]

BEGIN = "<!-- chaos-results:begin -->"
END = "<!-- chaos-results:end -->"


@dataclass(frozen=True, slots=True)
class SuiteRun:
    """One run of a set."""

    scenario: str
    workload: str
    seed: int
    duration_s: float


SHORT_SET = (
    SuiteRun("kill-leader", "acks-all", 1, 25),
    SuiteRun("kill-controller", "acks-all", 2, 25),
    SuiteRun("kill-all", "acks-all", 3, 25),
    SuiteRun("pause-leader", "acks-all", 4, 25),
    SuiteRun("mixed", "acks-all", 5, 30),
    SuiteRun("partition-leader", "acks-all", 6, 30),
)
"""In ``make test``: must find no anomaly."""

LONG_SET = tuple(
    SuiteRun(scenario, workload, seed, 60)
    for seed, scenario in enumerate(SCENARIOS, start=11)
    for workload in ("acks-all", "acks-1", "no-idempotence", "unclean")
)
"""``make chaos``: every scenario with every workload."""

SETS = {"short": SHORT_SET, "long": LONG_SET}


def run_set(runs: Sequence[SuiteRun], results_dir: Path) -> list[dict[str, Any]]:
    """Run each of ``runs``; their summaries."""
    return [
        run(RunOptions(r.scenario, r.seed, r.duration_s, r.workload, results_dir)) for r in runs
    ]


def results_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The markdown table of ``summaries``: one row per run."""
    lines = [
        "| scenario | workload | target | seed | duration | operations | sends ok / unknown |"
        " faults | anomalies | recovery after each heal (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        found = {kind: s["anomalies"].get(kind, 0) for kind in KINDS}
        shown = ", ".join(f"{kind} {n}" for kind, n in found.items() if n) or "none"
        sends = s["sends"]
        recovery = ", ".join("-" if ms is None else f"{ms:g}" for ms in s["recovery_ms"])
        lines.append(
            f"| {s['scenario']} | {s['workload']} | local | {s['seed']} | {s['duration_s']:g} s |"
            f" {s['operations']} | {sends.get('send-ok', 0)} / {sends.get('send-info', 0)} |"
            f" {s['faults']} | {shown} | {recovery} |"
        )
    return "\n".join(lines)


def update_guarantees(path: Path, summaries: Sequence[dict[str, Any]]) -> None:
    """Replace the results between the markers of ``path`` with the table of ``summaries``."""
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    body = (
        f"\nWritten {time.strftime('%Y-%m-%d')} by `python -m chaos suite --update-docs` "
        "(`make chaos` runs the long set), three local nodes on one machine. Workloads: "
        "acks-all = `acks=all`, `min.insync.replicas=2`, idempotence on; acks-1 = `acks=1` "
        "(idempotence off: it needs acks=all); no-idempotence = `acks=all` without "
        "idempotence; unclean = acks-all with `unclean.leader.election.enable=true`. A send "
        "is *unknown* when its outcome was not learnt (an error after the batch may have "
        "reached a broker): it may or may not be in the log, and neither is an anomaly. "
        "Recovery is measured for acks=all sends only; the last heal of each run is its end, "
        "after which nothing is sent (-).\n\n"
        f"{results_table(summaries)}\n"
    )
    path.write_text(text[:start] + body + text[end:])
