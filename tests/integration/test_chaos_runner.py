"""A short chaos run on real local processes: the configuration lograft promises no loss for
(acks=all, min.insync.replicas=2, idempotence) shows no anomaly, and the run leaves its
history, result and report behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.history import read_history
from chaos.runner import RunOptions, run
from chaos.suite import SHORT_SET, SuiteRun

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("planned", SHORT_SET, ids=lambda r: f"{r.scenario}-{r.seed}")
def test_the_short_set_finds_no_anomaly_with_acks_all(tmp_path: Path, planned: SuiteRun) -> None:
    summary = run(
        RunOptions(planned.scenario, planned.seed, planned.duration_s, planned.workload, tmp_path)
    )
    assert summary["faults"] >= 1
    assert summary["sends"]["send-ok"] > 0
    assert {k: n for k, n in summary["anomalies"].items() if n} == {}
    out = Path(summary["results"])
    ops = read_history(out / "history.jsonl")
    assert any(op.f == "fault" and op.fault in ("kill", "pause") and op.type == "ok" for op in ops)
    assert any(op.f == "drain" and op.type == "ok" for op in ops)
    assert json.loads((out / "result.json").read_text())["check"]["valid"] is True
    assert "no anomaly found" in (out / "report.html").read_text()
