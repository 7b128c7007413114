"""The broker's two clocks, and which one each kind of time reads.

* :func:`wall_clock_ms`: time as users and the log see it: record timestamps
  (``LogAppendTime``), segment rolling and time-based retention, offset-commit times. It may
  jump (an NTP step, an operator's ``date -s``); what reads it must accept that, as Kafka's
  log does.
* :func:`replication_clock_ms`: the monotonic clock, for intervals that decide replication:
  when a follower last caught up, when the ISR shrinks. A wall clock jumping a day ahead
  would make every follower look a day behind and shrink every ISR to the leader alone (seen
  by the chaos suite's clock-jump scenario); jumping back, followers would never leave.
"""

from __future__ import annotations

import time

__all__ = ["replication_clock_ms", "wall_clock_ms"]


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (may jump)."""
    return int(time.time() * 1000)


def replication_clock_ms() -> int:
    """Milliseconds of the monotonic clock (never jumps; only differences mean anything)."""
    return int(time.monotonic() * 1000)
