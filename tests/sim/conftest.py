"""Prints what the deterministic simulation ran: seed range and invariant checks passed."""

from __future__ import annotations

from _pytest.terminal import TerminalReporter

from tests.sim.report import REPORT


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    """Add the simulation summary at the end of the pytest run."""
    lines = REPORT.lines()
    if not lines:
        return
    terminalreporter.section("lograft raft simulation")
    for line in lines:
        terminalreporter.write_line(line)
