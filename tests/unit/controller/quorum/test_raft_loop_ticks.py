"""How the Raft driver turns event-loop time into the core's ticks (``LoopTicks``).

The core may act (time out an election, resign for want of a quorum, send a fetch) only on
its due tick. After a stall of the node's event loop, the first cycle stops a tick short of
it, so the messages peers sent during the stall are stepped first; a node stalled again and
again still acts, a tick late.
"""

from __future__ import annotations

import pytest

from controller.quorum.driver import STALL_S, LoopTicks

TICK_S = 0.05


def test_a_cycle_on_time_makes_the_ticks_passed_up_to_the_due_one() -> None:
    ticks = LoopTicks(TICK_S, now=0.0)
    assert ticks.take(now=0.01, until_due=5) == 0  # the first tick is not due yet
    due = ticks.due_at(until_due=5)
    assert due == pytest.approx(5 * TICK_S)
    assert ticks.take(now=due, until_due=5) == 5  # the timer fired on time: the core acts


def test_a_short_lateness_is_not_a_stall() -> None:
    ticks = LoopTicks(TICK_S, now=0.0)
    late = ticks.due_at(until_due=4) + STALL_S / 2
    assert ticks.take(now=late, until_due=4) == 4


def test_the_first_cycle_after_a_stall_stops_short_of_acting() -> None:
    ticks = LoopTicks(TICK_S, now=0.0)
    # The loop ran nothing for two seconds: forty ticks passed, the timeout was due at 10.
    stalled_until = 2.0
    assert ticks.take(now=stalled_until, until_due=10) == 9
    # The messages received meanwhile are stepped now; the due tick comes one tick later.
    assert ticks.due_at(until_due=1) == pytest.approx(stalled_until + TICK_S)
    assert ticks.take(now=stalled_until + TICK_S, until_due=1) == 1


def test_a_stall_before_the_due_tick_loses_nothing() -> None:
    ticks = LoopTicks(TICK_S, now=0.0)
    # Late by a stall, but the due tick is further away than the time passed.
    assert ticks.take(now=STALL_S + TICK_S, until_due=40) == 5


def test_a_node_stalled_at_every_cycle_still_acts_every_other_cycle() -> None:
    ticks = LoopTicks(TICK_S, now=0.0)
    now = 0.0
    acted = []
    for _ in range(6):
        now += 1.0  # every cycle starts a second late
        made = ticks.take(now=now, until_due=3)
        acted.append(made == 3)
    assert acted == [False, True, False, True, False, True]
