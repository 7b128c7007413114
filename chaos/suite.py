"""Sets of chaos runs and the results table of docs/guarantees.md.

:data:`SHORT_SET` is what ``make test`` runs (tests/integration/test_chaos_runner.py): the
configuration lograft promises no loss for, a few minutes in all, fixed seeds, and one run of
the exactly-once transactional pipeline (``txn-pipeline``).
:data:`LONG_SET` (``make chaos``, about 80 minutes) runs every scenario with that configuration
on the local target (power loss long enough for more than 20 crashes), the scenarios the
compose target can inject on docker-compose.yml (power loss with the nodes' data on LazyFS),
faults that hold for minutes on both targets, the transactional pipeline on both targets,
and the workloads that trade safety away (``acks-1``, ``no-idempotence``, ``unclean``,
``flush-interval``) on the faults that show what the checker finds there.
:data:`PROMISED_WORKLOADS` are those that must show no anomaly (:func:`passed`).
:func:`update_guarantees` writes the table between the markers of ``docs/guarantees.md``.
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
from chaos.runner import RunOptions, run
from chaos.scenarios import SCENARIOS

__all__ = [
    "LONG_SET",
    "PROMISED_WORKLOADS",
    "SETS",
    "SHORT_SET",
    "SuiteRun",
    "merged_results",
    "passed",
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
    limit: tuple[str, ...] = ()
    """Anomaly kinds a run of a promised workload may show without failing the set: what
    ``docs/guarantees.md`` names a limit of the promise (the damage reaches the last in-sync
    replica), not a broken promise."""


SHORT_SET = (
    SuiteRun("kill-leader", "acks-all", 1, 25),
    SuiteRun("kill-controller", "acks-all", 2, 25),
    SuiteRun("kill-all", "acks-all", 3, 25),
    SuiteRun("pause-leader", "acks-all", 4, 25),
    SuiteRun("mixed", "acks-all", 5, 30),
    SuiteRun("partition-leader", "acks-all", 6, 30),
    SuiteRun("torn-tail", "acks-all", 15, 25),
    SuiteRun("clock-jump", "acks-all", 15, 25),
    SuiteRun("kill-random", "txn-pipeline", 7, 30),
)
"""In ``make test``: must find no anomaly."""

PROMISED_WORKLOADS = ("acks-all", "txn-pipeline")
"""The workloads lograft promises the checks hold for (no loss; exactly once)."""

POWER_LOSS_S = 240
"""The long set's power-loss run: 23-26 whole-cluster crashes (its schedule holds a crash
2-5 s, then 2-5 s of load)."""

TRADE_SCENARIOS = ("kill-leader", "kill-all", "partition-halves", "mixed-network")
TRADE_WORKLOADS = ("acks-1", "no-idempotence", "unclean")
COMPOSE_SCENARIOS = (
    "kill-leader",
    "kill-all",
    "pause-leader",
    "partition-leader",
    "mixed-network",
    "power-loss",  # the nodes' data on LazyFS, bind-mounted into the containers
)
COMPOSE_POWER_LOSS_S = 150
"""The compose target's power-loss run: a restart there waits for Docker's health check."""
LONG_FAULTS_S = 360
"""A run of ``long-faults``: room for two or three faults of 60-150 s."""
LONG_FAULT_RUNS = (("local", 92), ("compose", 94))
"""``long-faults`` on each target: (target, seed). Seed 92 kills every node for 71 s, splits
the nodes, then pauses the leader; seed 94 cuts the leader off for 100 s, then kills the
leader for 95 s."""
PIPELINE_RUNS = (
    ("kill-random", 71),
    ("kill-controller", 72),
    ("partition-leader", 73),
    ("mixed", 78),  # its schedule has a kill-all and pauses
)
"""The transactional pipeline's runs on the local target: (scenario, seed)."""
PIPELINE_COMPOSE_RUNS = (("kill-leader", 75), ("mixed-network", 76))
"""The transactional pipeline's runs on the compose target: (scenario, seed)."""
LAST_REPLICA_LIMIT = (
    "lost-write",
    "offset-conflict",
    "dirty-read",
    "non-monotonic-poll",
    "commit-regression",
    "replica-divergence",
    "under-replicated-after-heal",
    "undrained",
    "node-halted",
)
"""What the promise's documented limit costs when the last in-sync replica comes back
without records it had acknowledged: they are lost, their offsets written again, reads of
them and commits past them undone, its followers that hold them halt
(``ReplicationInvariantError``) and their partitions stay short (with the controller quorum,
when two of three combined nodes halt, none can be drained)."""
LIMITS = {"last-replica-empty": LAST_REPLICA_LIMIT, "last-replica-torn": LAST_REPLICA_LIMIT}
"""The acks-all runs that show a documented limit (:attr:`SuiteRun.limit`)."""
LAST_REPLICA_TRADES = (
    ("last-replica", "unclean", 81),
    ("last-replica", "unclean-min-isr-1", 82),
    ("last-replica", "min-isr-1", 83),
    ("last-replica-torn", "min-isr-1", 84),
)
"""The last in-sync replica dies (or comes back torn) where safety is traded away: unclean
election (with ``min.insync.replicas`` 2, and 1: Kafka's classic case), the ISR allowed down
to one replica: (scenario, workload, seed)."""

LONG_SET = (
    *(
        SuiteRun(
            name,
            "acks-all",
            seed,
            POWER_LOSS_S if name == "power-loss" else 60,
            limit=LIMITS.get(name, ()),
        )
        for seed, name in enumerate(SCENARIOS, start=11)
        if name != "long-faults"
    ),
    *(
        SuiteRun("long-faults", "acks-all", seed, LONG_FAULTS_S, target)
        for target, seed in LONG_FAULT_RUNS
    ),
    SuiteRun("power-loss", "flush-interval", 41, 60),
    *(
        SuiteRun(name, workload, seed, 60)
        for seed, name in enumerate(TRADE_SCENARIOS, start=51)
        for workload in TRADE_WORKLOADS
    ),
    *(
        SuiteRun(
            name,
            "acks-all",
            seed,
            COMPOSE_POWER_LOSS_S if name == "power-loss" else 60,
            "compose",
        )
        for seed, name in enumerate(COMPOSE_SCENARIOS, start=61)
    ),
    *(SuiteRun(name, workload, seed, 60) for name, workload, seed in LAST_REPLICA_TRADES),
    *(SuiteRun(name, "txn-pipeline", seed, 60) for name, seed in PIPELINE_RUNS),
    *(SuiteRun(name, "txn-pipeline", seed, 60, "compose") for name, seed in PIPELINE_COMPOSE_RUNS),
)
"""``make chaos``: every scenario with acks-all locally (the last-replica ones that lose
records within their documented limit; faults of minutes on both targets), the trades,
compose (power loss included), the transactional pipeline on both targets."""

SETS = {"short": SHORT_SET, "long": LONG_SET}
"""The sets of runs by the name ``python -m chaos suite --set`` takes."""


def within_limit(summary: dict[str, Any]) -> bool:
    """Whether a run found anomalies of its documented limit only (``limit``; see
    :attr:`SuiteRun.limit`); a run that broke is not."""
    limit = set(summary.get("limit") or ())
    if not limit or "error" in summary:
        return False
    return {kind for kind, n in summary.get("anomalies", {}).items() if n} <= limit


def passed(summaries: Sequence[dict[str, Any]]) -> bool:
    """Whether every run of a promised workload found no anomaly, or only those of its
    documented limit (anomalies are expected where safety is traded away)."""
    return all(
        s["valid"] or s["workload"] not in PROMISED_WORKLOADS or within_limit(s) for s in summaries
    )


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
            if r.limit:
                summary["limit"] = list(r.limit)
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
        if not s["valid"] and within_limit(s):
            shown += " (the documented limit)"
        sends = s["sends"]
        recovery = ", ".join("-" if ms is None else f"{ms:g}" for ms in s["recovery_ms"])
        txns = s.get("txns")
        committed = (
            f"; txns {txns.get('txn-ok', 0)} / {txns.get('txn-fail', 0)} / "
            f"{txns.get('txn-info', 0)}"
            if txns
            else ""
        )
        lines.append(
            f"| {s['scenario']} | {s['workload']} | {s['target']} | {s['seed']} |"
            f" {s['duration_s']:g} s |"
            f" {s['operations']} | {sends.get('send-ok', 0)} / {sends.get('send-info', 0)}"
            f"{committed} | {s['faults']} | {shown} | {recovery} |"
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
    "txns",
    "recovery_ms",
    "recovery_ms_by_fault",
    "error",
    "limit",
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
        "min-isr-1 = acks-all with `min.insync.replicas=1`; unclean-min-isr-1 = min-isr-1 "
        "with unclean election; "
        "flush-interval = acks-all with `flush.policy=interval`; txn-pipeline = acks-all "
        "input read, transformed and written again by three transactional "
        "read-process-write workers (`read_committed`, offsets committed in the "
        "transactions, one in ten aborted on purpose), checked for exactly once (its row "
        "adds the transactions committed / aborted / unknown). A send "
        "is *unknown* when its outcome was not learnt (an error after the batch may have "
        "reached a broker): it may or may not be in the log, and neither is an anomaly. "
        "Recovery is measured for acks=all sends only; the last heal of each run is its end, "
        "after which nothing is sent (-). An acks-all row marked *(the documented limit)* "
        "shows what damage that reaches the last in-sync replica costs, which the promise "
        "leaves out.\n\n"
        f"{results_table(recorded)}\n"
    )
    path.write_text(text[:start] + body + text[end:])
