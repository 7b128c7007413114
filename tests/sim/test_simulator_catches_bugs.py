"""The simulator has teeth: deliberately broken cores fail within a few seeds.

Each test patches one Raft rule out of the core (pytest's monkeypatch restores it) and
expects :class:`SimulationFailure`. If one of these ever passes, the invariant checker has
gone blind, and a green simulation run means nothing.
"""

from __future__ import annotations

import pytest

from controller.raft import _election, _step
from controller.raft import node as raft_node
from controller.raft._core import Core
from controller.raft._fetcher import on_fetch_response
from controller.raft.messages import ErrorCode, FetchResponse
from controller.raft.node import Rejection
from tests.sim.simulator import SimulationFailure, run_seed

SEEDS = 200


def _first_failure() -> str:
    for seed in range(SEEDS):
        try:
            run_seed(seed)
        except SimulationFailure as failure:
            return str(failure)
    raise AssertionError(f"no failure in {SEEDS} seeds: the checker missed an injected bug")


def test_votes_for_stale_logs_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break section 5.4.1 (election restriction): leader completeness must fail."""
    monkeypatch.setattr(_election, "log_is_up_to_date", lambda core, epoch, end: True)
    assert "replay: LOGRAFT_SIM_SEED=" in _first_failure()


def test_trusting_the_leaders_high_watermark_blindly_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the follower's ``min(leader HW, matched end)``: a replica applies wrong entries."""

    def trusting(core: Core, m: FetchResponse) -> Rejection | None:
        result = on_fetch_response(core, m)
        if (
            m.error is ErrorCode.NONE
            and m.epoch == core.epoch
            and core.high_watermark < m.high_watermark <= core.log.log_end_offset
        ):
            core.high_watermark = m.high_watermark
        return result

    for handlers in _step.HANDLERS.values():
        monkeypatch.setitem(handlers, FetchResponse, trusting)
    message = _first_failure()
    assert "safety" in message or "committed" in message or "completeness" in message


def test_a_quiet_tick_that_acts_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claim one tick more of quiet than there is: the node shell would sleep through a
    timeout, a fetch retry or a held fetch's answer, and the simulator must see it."""
    original = raft_node.RaftNode.ticks_until_due
    monkeypatch.setattr(raft_node.RaftNode, "ticks_until_due", lambda self: original(self) + 1)
    assert "a tick called quiet acted" in _first_failure()
