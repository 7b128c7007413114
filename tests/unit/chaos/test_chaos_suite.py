"""The chaos suite's sets and the results table it writes into docs/guarantees.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos import suite
from chaos.runner import RunOptions
from chaos.scenarios import SCENARIOS, scenario, schedule
from chaos.suite import (
    BEGIN,
    END,
    LONG_SET,
    PROMISED_WORKLOADS,
    SHORT_SET,
    SuiteRun,
    passed,
    run_set,
    update_guarantees,
)


def _summary(options: RunOptions, **extra: Any) -> dict[str, Any]:
    return {
        "scenario": options.scenario,
        "workload": options.workload,
        "target": options.target,
        "seed": options.seed,
        "duration_s": options.duration_s,
        "operations": 10,
        "faults": 2,
        "valid": True,
        "anomalies": {"lost-write": 0},
        "sends": {"send-ok": 7, "send-info": 1},
        "recovery_ms": [12.5, None],
        **extra,
    }


def test_the_long_set_covers_every_scenario_both_targets_power_losses_and_minutes() -> None:
    assert {r.scenario for r in LONG_SET if r.workload == "acks-all"} == set(SCENARIOS)
    assert {r.target for r in LONG_SET} == {"local", "compose"}
    for r in LONG_SET:
        assert r.target in scenario(r.scenario).targets, r
    power = {
        r.target: r for r in LONG_SET if r.scenario == "power-loss" and r.workload == "acks-all"
    }
    assert set(power) == {"local", "compose"}
    assert len(schedule("power-loss", power["local"].seed, power["local"].duration_s)) >= 20
    for r in LONG_SET:
        if r.scenario == "long-faults":
            steps = schedule(r.scenario, r.seed, r.duration_s)
            assert len(steps) >= 2 and min(step.hold_s for step in steps) >= 60, r
    assert {"acks-1", "no-idempotence", "unclean", "flush-interval"} <= {
        r.workload for r in LONG_SET
    }
    assert {r.workload for r in LONG_SET if r.target == "compose"} >= {"acks-all", "txn-pipeline"}
    assert {r.workload for r in LONG_SET if r.target == "local"} >= {"acks-all", "txn-pipeline"}
    assert all(r.workload in PROMISED_WORKLOADS and r.target == "local" for r in SHORT_SET)


def test_a_broken_run_is_reported_and_the_set_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(options: RunOptions) -> dict[str, Any]:
        if options.target == "compose":
            raise RuntimeError("no image lograft:latest")
        return _summary(options)

    monkeypatch.setattr(suite, "run", fake_run)
    seen: list[int] = []
    runs = [
        SuiteRun("kill-leader", "acks-all", 1, 30, "compose"),
        SuiteRun("kill-all", "acks-1", 2, 30),
    ]
    summaries = run_set(runs, tmp_path, lambda done: seen.append(len(done)))
    assert seen == [1, 2]
    assert summaries[0]["valid"] is False and "no image" in summaries[0]["error"]
    assert summaries[1]["valid"] is True

    doc = tmp_path / "guarantees.md"
    doc.write_text(f"# Guarantees\n\nbefore\n{BEGIN}\nold table\n{END}\nafter\n")
    update_guarantees(doc, summaries)
    text = doc.read_text()
    assert text.startswith("# Guarantees\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text
    rows = [line for line in text.splitlines() if line.startswith("| kill")]
    # In the long set's order: its trades come before its compose runs.
    assert rows[0] == "| kill-all | acks-1 | local | 2 | 30 s | 10 | 7 / 1 | 2 | none | 12.5, - |"
    assert rows[1].startswith("| kill-leader | acks-all | compose | 1 | 30 s |")
    assert "run broke: RuntimeError: no image" in rows[1]

    # A later run of one of them replaces its row and keeps the other.
    rerun = _summary(RunOptions("kill-leader", 9, 40, target="compose"))
    update_guarantees(doc, [rerun])
    rows = [line for line in doc.read_text().splitlines() if line.startswith("| kill")]
    assert rows[0].startswith("| kill-all | acks-1 | local | 2 |")
    assert rows[1].startswith("| kill-leader | acks-all | compose | 9 | 40 s | 10 |")
    assert len(rows) == 2


def test_a_set_fails_when_a_promised_workload_found_anomalies() -> None:
    assert passed([{"valid": True, "workload": "acks-all"}, {"valid": False, "workload": "acks-1"}])
    assert not passed([{"valid": False, "workload": "txn-pipeline"}])
    assert not passed([{"valid": False, "workload": "acks-all"}])


def test_a_promised_run_passes_with_anomalies_of_its_documented_limit_only() -> None:
    lost = {"lost-write": 12, "node-halted": 2, "duplicate": 0}
    limit = list(suite.LAST_REPLICA_LIMIT)
    assert passed([{"valid": False, "workload": "acks-all", "anomalies": lost, "limit": limit}])
    beyond = {**lost, "duplicate": 1}
    assert not passed(
        [{"valid": False, "workload": "acks-all", "anomalies": beyond, "limit": limit}]
    )
    assert not passed([{"valid": False, "workload": "acks-all", "anomalies": lost}])
    broken = {"valid": False, "workload": "acks-all", "anomalies": {}, "limit": limit}
    assert not passed([{**broken, "error": "RuntimeError: no cluster"}])
    # Only the runs where the damage reaches the last in-sync replica have a limit.
    limited = {(r.scenario, r.workload) for r in LONG_SET if r.limit}
    assert limited == {("last-replica-empty", "acks-all"), ("last-replica-torn", "acks-all")}


def test_a_run_within_its_limit_says_so_in_the_table_and_keeps_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(options: RunOptions) -> dict[str, Any]:
        return _summary(options, valid=False, anomalies={"lost-write": 5, "node-halted": 1})

    monkeypatch.setattr(suite, "run", fake_run)
    runs = [
        SuiteRun("last-replica-empty", "acks-all", 30, 60, limit=suite.LAST_REPLICA_LIMIT),
        SuiteRun("last-replica", "unclean", 81, 60),
    ]
    summaries = run_set(runs, tmp_path)
    assert passed(summaries)
    table = suite.results_table(summaries)
    assert "lost-write 5, node-halted 1 (the documented limit)" in table
    assert table.count("(the documented limit)") == 1, "a trade is no limit of the promise"
    guarantees = tmp_path / "guarantees.md"
    guarantees.write_text(f"# x\n{BEGIN}\n{END}\n")
    update_guarantees(guarantees, summaries)
    assert (tmp_path / suite.RESULTS_FILE).read_text().count('"limit"') == 1
