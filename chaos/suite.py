"""Sets of chaos runs and the results table of docs/guarantees.md.

:data:`SHORT_SET` is what ``make test`` runs (tests/integration/test_chaos_runner.py): the
configuration lograft promises no loss for, a few minutes in all, fixed seeds.
:data:`LONG_SET` (``make chaos``, about an hour) runs every scenario with that configuration
on the local target (power loss long enough for more than 20 crashes), the scenarios the
compose target can inject on docker-compose.yml, and the workloads that trade safety away
(``acks-1``, ``no-idempotence``, ``unclean``, ``flush-interval``) on the faults that show
what the checker finds there. :func:`update_guarantees` writes the table between the
markers of ``docs/guarantees.md``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
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
    "merged_results",
    "results_table",
    "run_set",
    "update_guarantees",
]

log = logging.getLogger(__name__)

BEGIN = "<!-- chaos-results:begin -->"
END = "<!-- chaos-results:end -->"


@dataclass(frozen=True, slots=True)
class SuiteRun:
    """One run of a set."""

    scenario: str
    workload: str
    seed: int
    duration_s: float
    target: str = "local"


SHORT_SET = (
    SuiteRun("kill-leader", "acks-all", 1, 25),
    SuiteRun("kill-controller", "acks-all", 2, 25),
    SuiteRun("kill-all", "acks-all", 3, 25),
    SuiteRun("pause-leader", "acks-all", 4, 25),
    SuiteRun("mixed", "acks-all", 5, 30),
    SuiteRun("partition-leader", "acks-all", 6, 30),
    SuiteRun("torn-tail", "acks-all", 15, 25),
    SuiteRun("clock-jump", "acks-all", 15, 25),
)
"""In ``make test``: must find no anomaly."""

POWER_LOSS_S = 240
"""The long set's power-loss run: 23-26 whole-cluster crashes (its schedule holds a crash
2-5 s, then 2-5 s of load)."""

TRADE_SCENARIOS = ("kill-leader", "kill-all", "partition-halves", "mixed-network")
TRADE_WORKLOADS = ("acks-1", "no-idempotence", "unclean")
COMPOSE_SCENARIOS = ("kill-leader", "kill-all", "pause-leader", "partition-leader", "mixed-network")

LONG_SET = (
    *(
        SuiteRun(name, "acks-all", seed, POWER_LOSS_S if name == "power-loss" else 60)
        for seed, name in enumerate(SCENARIOS, start=11)
    ),
    SuiteRun("power-loss", "flush-interval", 41, 60),
    *(
        SuiteRun(name, workload, seed, 60)
        for seed, name in enumerate(TRADE_SCENARIOS, start=51)
        for workload in TRADE_WORKLOADS
    ),
    *(
        SuiteRun(name, "acks-all", seed, 60, "compose")
        for seed, name in enumerate(COMPOSE_SCENARIOS, start=61)
    ),
)
"""``make chaos``: every scenario with acks-all locally, the trades, compose."""

SETS = {"short": SHORT_SET, "long": LONG_SET}


def run_set(
    runs: Sequence[SuiteRun],
    results_dir: Path,
    after_each: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run each of ``runs``; their summaries. A run that breaks (its cluster does not come
    up, its target is missing) gets a summary with ``error`` and ``valid`` false, and the
    set goes on; ``after_each`` sees the summaries so far after every run."""
    summaries: list[dict[str, Any]] = []
    for r in runs:
        options = RunOptions(r.scenario, r.seed, r.duration_s, r.workload, results_dir, r.target)
        try:
            summary = run(options)
        except Exception as exc:
            log.error("chaos run broke scenario=%s target=%s error=%r", r.scenario, r.target, exc)
            summary = {
                **asdict(r),
                "error": f"{type(exc).__name__}: {exc}"[:300],
                "valid": False,
                "anomalies": {},
            }
        summaries.append(summary)
        if after_each is not None:
            after_each(summaries)
    return summaries


def results_table(summaries: Sequence[dict[str, Any]]) -> str:
    """The markdown table of ``summaries``: one row per run."""
    lines = [
        "| scenario | workload | target | seed | duration | operations | sends ok / unknown |"
        " faults | anomalies | recovery after each heal (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        if "error" in s:
            lines.append(
                f"| {s['scenario']} | {s['workload']} | {s['target']} | {s['seed']} |"
                f" {s['duration_s']:g} s | - | - | - | run broke: {s['error']} | - |"
            )
            continue
        found = {kind: s["anomalies"].get(kind, 0) for kind in KINDS}
        shown = ", ".join(f"{kind} {n}" for kind, n in found.items() if n) or "none"
        sends = s["sends"]
        recovery = ", ".join("-" if ms is None else f"{ms:g}" for ms in s["recovery_ms"])
        lines.append(
            f"| {s['scenario']} | {s['workload']} | {s['target']} | {s['seed']} |"
            f" {s['duration_s']:g} s |"
            f" {s['operations']} | {sends.get('send-ok', 0)} / {sends.get('send-info', 0)} |"
            f" {s['faults']} | {shown} | {recovery} |"
        )
    return "\n".join(lines)


RESULTS_FILE = "chaos-results.json"
"""Beside the guarantees page: the summaries its table shows, one per (scenario, workload,
target), so that a run of a few scenarios replaces their rows and keeps the others."""
_KEPT = (
    "scenario",
    "workload",
    "target",
    "seed",
    "duration_s",
    "operations",
    "faults",
    "valid",
    "anomalies",
    "sends",
    "recovery_ms",
    "recovery_ms_by_fault",
    "error",
)


def _row_key(summary: dict[str, Any]) -> tuple[str, str, str]:
    return summary["scenario"], summary["workload"], summary["target"]


def merged_results(results_file: Path, summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summaries recorded in ``results_file`` (if any) with ``summaries`` in place of
    those of the same scenario, workload and target; the order of :data:`LONG_SET` first."""
    recorded: list[dict[str, Any]] = []
    if results_file.exists():
        recorded = json.loads(results_file.read_text())
    by_key = {_row_key(s): s for s in recorded}
    for summary in summaries:
        by_key[_row_key(summary)] = {k: v for k, v in summary.items() if k in _KEPT}
    order = {(r.scenario, r.workload, r.target): n for n, r in enumerate(LONG_SET)}
    return sorted(by_key.values(), key=lambda s: order.get(_row_key(s), len(order)))


def update_guarantees(path: Path, summaries: Sequence[dict[str, Any]]) -> None:
    """Record ``summaries`` in :data:`RESULTS_FILE` beside ``path`` (replacing earlier runs
    of the same scenario, workload and target) and write the table of every recorded run
    between the markers of ``path``."""
    results_file = path.with_name(RESULTS_FILE)
    recorded = merged_results(results_file, summaries)
    results_file.write_text(json.dumps(recorded, indent=1) + "\n")
    text = path.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    body = (
        f"\nWritten {time.strftime('%Y-%m-%d')} by `python -m chaos suite --update-docs` "
        "(`make chaos` runs the long set; a run of some scenarios replaces their rows, the "
        f"summaries are in `{RESULTS_FILE}`), three nodes on one 2-core machine. Workloads: "
        "acks-all = `acks=all`, `min.insync.replicas=2`, idempotence on; acks-1 = `acks=1` "
        "(idempotence off: it needs acks=all); no-idempotence = `acks=all` without "
        "idempotence; unclean = acks-all with `unclean.leader.election.enable=true`; "
        "flush-interval = acks-all with `flush.policy=interval`. A send "
        "is *unknown* when its outcome was not learnt (an error after the batch may have "
        "reached a broker): it may or may not be in the log, and neither is an anomaly. "
        "Recovery is measured for acks=all sends only; the last heal of each run is its end, "
        "after which nothing is sent (-).\n\n"
        f"{results_table(recorded)}\n"
    )
    path.write_text(text[:start] + body + text[end:])
