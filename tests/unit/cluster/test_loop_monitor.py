"""The node's loop monitor: garbage-collector pauses are timed and a long one is logged."""

from __future__ import annotations

import gc

import pytest

from cluster.loop_monitor import LoopLagMonitor


def test_a_collection_as_long_as_the_threshold_is_logged_with_its_generation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor = LoopLagMonitor(3, log_above_ms=0.0)  # every collection is "long"
    gc.callbacks.append(monitor.on_gc)
    try:
        with caplog.at_level("WARNING", logger="cluster.loop_monitor"):
            gc.collect(2)
    finally:
        gc.callbacks.remove(monitor.on_gc)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("gc pause long node_id=3 generation=2 ms=") for m in messages)
    assert monitor.longest_gc_ms > 0.0


def test_short_collections_are_timed_but_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopLagMonitor(3, log_above_ms=60_000.0)
    with caplog.at_level("WARNING", logger="cluster.loop_monitor"):
        monitor.on_gc("start", {"generation": 0})
        monitor.on_gc("stop", {"generation": 0, "collected": 0})
    assert caplog.records == []
