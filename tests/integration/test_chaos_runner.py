"""Short chaos runs on real local processes: the configuration lograft promises no loss for
(acks=all, min.insync.replicas=2, idempotence) shows no anomaly, and each run leaves its
history, result and report behind.

The runs are the short set of ``chaos.suite`` (fixed seeds, about 25-30 s each). Scenarios
that cut the network need root, ``ip`` and ``nft`` (each node in a network namespace of its
own): skipped without them, failed instead when ``LOGRAFT_REQUIRE_NETNS=1``. Power-loss
scenarios need ``/dev/fuse`` (the data on LazyFS): skipped without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chaos.history import read_history
from chaos.lazyfs import fuse_available
from chaos.network import netns_unavailable
from chaos.runner import RunOptions, run
from chaos.scenarios import scenario, schedule
from chaos.suite import SHORT_SET, SuiteRun

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("planned", SHORT_SET, ids=lambda r: f"{r.scenario}-{r.seed}")
def test_the_short_set_finds_no_anomaly_with_acks_all(tmp_path: Path, planned: SuiteRun) -> None:
    if scenario(planned.scenario).needs_network:
        reason = netns_unavailable()
        if reason is not None:
            if os.environ.get("LOGRAFT_REQUIRE_NETNS") == "1":
                pytest.fail(f"LOGRAFT_REQUIRE_NETNS=1 but {reason}")
            pytest.skip(reason)
    if scenario(planned.scenario).needs_disk and not fuse_available():
        pytest.skip("power loss needs /dev/fuse (LazyFS)")
    summary = run(
        RunOptions(planned.scenario, planned.seed, planned.duration_s, planned.workload, tmp_path)
    )
    print(json.dumps(summary, indent=1))  # shown by pytest when an assertion below fails
    found = {k: n for k, n in summary["anomalies"].items() if n}
    assert found == {}, f"anomalies: {found}; see {summary['results']}/report.html"
    steps = schedule(planned.scenario, planned.seed, planned.duration_s)
    assert summary["faults"] == len(steps) >= 1, "every scheduled fault was injected"
    assert summary["sends"]["send-ok"] > 0
    assert summary["stats"].get("commit-ok", 0) > 0, "the consumer group committed"
    assert summary["replicas_compared"]
    out = Path(summary["results"])
    ops = read_history(out / "history.jsonl")
    assert len(ops) == summary["operations"]
    assert any(op.f == "fault" and op.type == "ok" for op in ops)
    assert any(op.f == "poll" and op.type == "ok" and op.records for op in ops)
    assert any(op.f == "drain" and op.type == "ok" for op in ops)
    assert json.loads((out / "result.json").read_text())["check"]["valid"] is True
    report = (out / "report.html").read_text()
    assert "no anomaly found" in report
    assert "<svg" in report
