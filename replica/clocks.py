"""The broker's two clocks, and which one each kind of time reads.

* :func:`wall_clock_ms`: time as users and the log see it: record timestamps
  (``LogAppendTime``), segment rolling and time-based retention, offset-commit times. It may
  jump (an NTP step, an operator's ``date -s``); what reads it must accept that, as Kafka's
  log does.
* :func:`interval_clock_ms`: the monotonic clock, for intervals and deadlines: when a
  follower last caught up and when the ISR shrinks, consumer-group member sessions and
  rebalance timeouts. A wall clock jumping a day ahead made every follower look a day behind
  (every ISR shrank to its leader) and expired every group member; jumping back, followers
  never left the ISR and a group's deadlines lay a day ahead, so a revoked partition was
  never handed on and the group stopped committing (the chaos suite's clock-jump scenario).
"""

from __future__ import annotations

import time

__all__ = ["interval_clock_ms", "interval_clock_s", "wall_clock_ms"]


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (may jump)."""
    return int(time.time() * 1000)


def interval_clock_ms() -> int:
    """Milliseconds of the monotonic clock (never jumps; only differences mean anything)."""
    return int(time.monotonic() * 1000)


def interval_clock_s() -> float:
    """Seconds of the monotonic clock at full resolution, for durations shorter than a
    millisecond (how long a flush took)."""
    return time.monotonic()
