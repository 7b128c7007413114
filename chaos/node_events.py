"""What the nodes' logs say happened to the cluster during a run.

A run marks where each node's log ends when the load starts (:func:`mark_logs`); afterwards
:func:`read_events` reads what the nodes logged after the marks: each time a controller
became active (a new controller leader), each broker fenced when its session ran out, and
each stall of a node's event loop the node measured. On a machine that is busy with
something else these tell whether the cluster degraded gracefully (no churn) or not.
:func:`read_halts` reads each time a node halted (:mod:`cluster.halt`: a broken invariant, a
failed log directory), for the checker's ``node-halted``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClusterEvents", "mark_logs", "read_events", "read_halts"]

_ACTIVE = re.compile(rb"controller active node_id=(\d+) epoch=(\d+)")
_FENCED = re.compile(rb"brokers fenced after session timeout broker_ids=\[([\d, ]*)\]")
_STALL = re.compile(rb"event loop stalled .*?lag_ms=(\d+)")
_HALT = re.compile(rb"(?:invariant broken|log directory failed), halting node ([^\n]*)")
_MAX_READ_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClusterEvents:
    """Counted from the nodes' logs after the marks."""

    controller_changes: int
    """Times a controller became active (each is a new Raft leader serving)."""
    brokers_fenced: int
    """Brokers fenced by the active controller when their session ran out."""
    loop_stalls: int
    """Event-loop stalls the nodes logged (``event loop stalled``)."""
    longest_stall_ms: int
    """The longest of them (0 when none)."""

    def to_json(self) -> dict[str, int]:
        """As the run's summary holds it."""
        return {
            "controller_changes": self.controller_changes,
            "brokers_fenced": self.brokers_fenced,
            "loop_stalls": self.loop_stalls,
            "longest_stall_ms": self.longest_stall_ms,
        }


def mark_logs(logs: Mapping[int, Path]) -> dict[int, int]:
    """Where each node's log ends now (0 for a log not written yet)."""
    marks: dict[int, int] = {}
    for node, path in logs.items():
        try:
            marks[node] = path.stat().st_size
        except FileNotFoundError:
            marks[node] = 0
    return marks


def _read_after(path: Path, mark: int) -> bytes | None:
    """What ``path`` holds after ``mark`` (all of it when it shrank); None when absent."""
    try:
        with path.open("rb") as f:
            start = mark
            if f.seek(0, 2) < start:
                start = 0
            f.seek(start)
            return f.read(_MAX_READ_BYTES)
    except FileNotFoundError:
        return None


def read_halts(logs: Mapping[int, Path], marks: Mapping[int, int]) -> list[str]:
    """One line per node that halted after ``marks``: how many times, and the first halt's
    reason as the node logged it (``where=... error_type=... error=... exit_code=...``)."""
    lines = []
    for node, path in sorted(logs.items()):
        text = _read_after(path, marks.get(node, 0))
        halts = _HALT.findall(text) if text is not None else []
        if halts:
            first = halts[0].decode(errors="replace").strip()
            lines.append(f"node {node} halted {len(halts)} time(s), first: {first}")
    return lines


def read_events(logs: Mapping[int, Path], marks: Mapping[int, int]) -> ClusterEvents:
    """The events the nodes logged after ``marks`` (a log that shrank is read whole)."""
    changes = fenced = stalls = longest = 0
    for node, path in logs.items():
        text = _read_after(path, marks.get(node, 0))
        if text is None:
            continue
        changes += len(_ACTIVE.findall(text))
        for ids in _FENCED.findall(text):
            fenced += len([i for i in ids.split(b",") if i.strip()])
        lags = [int(lag) for lag in _STALL.findall(text)]
        stalls += len(lags)
        longest = max([longest, *lags])
    return ClusterEvents(changes, fenced, stalls, longest)
