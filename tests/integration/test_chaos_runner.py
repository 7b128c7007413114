"""A short chaos run on real local processes: the configuration lograft promises no loss for
(acks=all, min.insync.replicas=2, idempotence) shows no anomaly, and the run leaves its
history, result and report behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.history import read_history
from chaos.runner import RunOptions, run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("scenario", "seed"), [("kill-leader", 1), ("pause-leader", 2)])
def test_a_short_run_finds_no_anomaly_with_acks_all(
    tmp_path: Path, scenario: str, seed: int
) -> None:
    summary = run(RunOptions(scenario, seed, duration_s=20.0, results_dir=tmp_path))
    assert summary["faults"] >= 1
    assert summary["sends"]["send-ok"] > 0
    assert {k: n for k, n in summary["anomalies"].items() if n} == {}
    out = Path(summary["results"])
    ops = read_history(out / "history.jsonl")
    assert any(op.f == "fault" and op.fault in ("kill", "pause") for op in ops)
    assert any(op.f == "drain" and op.type == "ok" for op in ops)
    assert json.loads((out / "result.json").read_text())["check"]["valid"] is True
    assert "no anomaly found" in (out / "report.html").read_text()
