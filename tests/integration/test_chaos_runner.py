"""Short chaos runs on real local processes: the configuration lograft promises no loss for
(acks=all, min.insync.replicas=2, idempotence) shows no anomaly, a transactional
read-process-write pipeline under faults is exactly once (``txn-pipeline``), and each run
leaves its history, result and report behind.

The runs are the short set of ``chaos.suite`` (fixed seeds, about 25-30 s each). Scenarios
that cut the network need root, ``ip`` and ``nft`` (each node in a network namespace of its
own): skipped without them, failed instead when ``LOGRAFT_REQUIRE_NETNS=1``. Power-loss
and slow-disk scenarios need ``/dev/fuse`` (the data on LazyFS; ``LOGRAFT_REQUIRE_FUSE=1``),
clock jumps libfaketime (``LOGRAFT_REQUIRE_CHAOS_TOOLS=1``; ``chaos/install-tools.sh``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chaos.clock import clock_unavailable
from chaos.history import read_history
from chaos.lazyfs import fuse_available
from chaos.network import netns_unavailable
from chaos.runner import RunOptions, run
from chaos.scenarios import scenario, schedule
from chaos.suite import SHORT_SET, SuiteRun

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("planned", SHORT_SET, ids=lambda r: f"{r.scenario}-{r.seed}")
def test_the_short_set_finds_no_anomaly(tmp_path: Path, planned: SuiteRun) -> None:
    chosen = scenario(planned.scenario)
    needs = [
        (chosen.needs_network, netns_unavailable(), "LOGRAFT_REQUIRE_NETNS"),
        (
            chosen.needs_disk,
            None if fuse_available() else "power loss needs /dev/fuse (LazyFS)",
            "LOGRAFT_REQUIRE_FUSE",
        ),
        (chosen.needs_clocks, clock_unavailable(), "LOGRAFT_REQUIRE_CHAOS_TOOLS"),
    ]
    for needed, reason, required in needs:
        if needed and reason is not None:
            if os.environ.get(required) == "1":
                pytest.fail(f"{required}=1 but {reason}")
            pytest.skip(reason)
    summary = run(
        RunOptions(planned.scenario, planned.seed, planned.duration_s, planned.workload, tmp_path)
    )
    print(json.dumps(summary, indent=1))  # shown by pytest when an assertion below fails
    found = {k: n for k, n in summary["anomalies"].items() if n}
    assert found == {}, f"anomalies: {found}; see {summary['results']}/report.html"
    steps = schedule(planned.scenario, planned.seed, planned.duration_s)
    assert summary["faults"] == len(steps) >= 1, "every scheduled fault was injected"
    assert summary["sends"]["send-ok"] > 0
    stats = summary["stats"]
    if planned.workload == "txn-pipeline":
        assert stats["txn-ok"] > 0 and stats["txn-fail"] > 0, "transactions committed, aborted"
        assert stats["records-drained-committed"] > 0
    else:
        assert stats.get("commit-ok", 0) > 0, "the consumer group committed"
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
