"""The chaos suite's sets and the results table it writes into docs/guarantees.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos import suite
from chaos.runner import RunOptions
from chaos.scenarios import SCENARIOS, scenario, schedule
from chaos.suite import BEGIN, END, LONG_SET, SHORT_SET, SuiteRun, run_set, update_guarantees


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


def test_the_long_set_covers_every_scenario_both_targets_and_twenty_power_losses() -> None:
    assert {r.scenario for r in LONG_SET if r.workload == "acks-all"} == set(SCENARIOS)
    assert {r.target for r in LONG_SET} == {"local", "compose"}
    for r in LONG_SET:
        assert r.target in scenario(r.scenario).targets, r
    (power,) = [r for r in LONG_SET if r.scenario == "power-loss" and r.workload == "acks-all"]
    assert len(schedule(power.scenario, power.seed, power.duration_s)) >= 20
    assert {"acks-1", "no-idempotence", "unclean", "flush-interval"} <= {
        r.workload for r in LONG_SET
    }
    assert all(r.workload == "acks-all" and r.target == "local" for r in SHORT_SET)


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
