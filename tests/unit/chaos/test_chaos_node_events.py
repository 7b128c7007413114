"""What a chaos run reads from the nodes' logs, and the busy processes it runs beside them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.busy import BusyLoops
from chaos.node_events import ClusterEvents, mark_logs, read_events, read_halts
from cluster.loop_monitor import LoopLagMonitor

BEFORE_THE_LOAD = (
    "2026-12-07 02:42:34,776 INFO controller.quorum.controller controller active "
    "node_id=2 epoch=1\n"
)
DURING_THE_LOAD = (
    "2026-12-07 02:43:06,121 WARNING cluster.loop_monitor event loop stalled node_id=1 "
    "lag_ms=1164\n"
    "2026-12-07 02:43:07,846 INFO controller.quorum.controller controller active "
    "node_id=1 epoch=3\n"
    "2026-12-07 02:43:09,001 WARNING controller.quorum.controller brokers fenced after "
    "session timeout broker_ids=[2, 3]\n"
    "2026-12-07 02:43:11,000 WARNING cluster.loop_monitor event loop stalled node_id=1 "
    "lag_ms=302\n"
)


def test_only_what_the_nodes_logged_after_the_marks_counts(tmp_path: Path) -> None:
    logs = {1: tmp_path / "node-1.log", 2: tmp_path / "node-2.log", 3: tmp_path / "absent.log"}
    logs[1].write_text(BEFORE_THE_LOAD)
    logs[2].write_text("")
    marks = mark_logs(logs)
    with logs[1].open("a") as f:
        f.write(DURING_THE_LOAD)
    with logs[2].open("a") as f:
        f.write(BEFORE_THE_LOAD.replace("epoch=1", "epoch=4"))
    events = read_events(logs, marks)
    assert events == ClusterEvents(
        controller_changes=2, brokers_fenced=2, loop_stalls=2, longest_stall_ms=1164
    )


def test_a_log_that_started_over_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    log.write_text(BEFORE_THE_LOAD * 10)
    marks = mark_logs({1: log})
    log.write_text(BEFORE_THE_LOAD)  # shorter than the mark: a new file
    assert read_events({1: log}, marks).controller_changes == 1


def test_busy_processes_spin_until_stopped_and_are_gone_after() -> None:
    busy = BusyLoops(2, max_s=60)
    with busy:
        pids = busy.pids
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # running
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_loop_monitor_logs_a_stall_with_its_length(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopLagMonitor(7, log_above_ms=250)
    with caplog.at_level("WARNING", logger="cluster.loop_monitor"):
        monitor.record(12.0)
        monitor.record(1164.4)
    assert (monitor.stalls, monitor.longest_ms) == (1, 1164.4)
    assert [r.getMessage() for r in caplog.records] == ["event loop stalled node_id=7 lag_ms=1164"]


HALT = (
    "2026-12-07 03:17:39,522 CRITICAL cluster.halt invariant broken, halting node "
    "where=task fetcher-1 error_type=ReplicationInvariantError error=replica=3 "
    "leader_epoch=2 would truncate to 0, below its high watermark 2165 exit_code=70\n"
    "Traceback (most recent call last):\n"
)


def test_each_node_that_halted_after_the_marks_is_one_line(tmp_path: Path) -> None:
    logs = {n: tmp_path / f"node-{n}.log" for n in (1, 2, 3)}
    logs[1].write_text(HALT)  # before the load: not this run's
    logs[2].write_text("")
    marks = mark_logs(logs)
    with logs[2].open("a") as f:
        f.write(DURING_THE_LOAD + HALT + HALT.replace("2165", "2170"))
    with logs[1].open("a") as f:
        f.write(
            "2026-12-07 03:18:00,000 CRITICAL cluster.halt log directory failed, halting "
            "node dir=/d/chaos-0 error_type=OSError error=[Errno 5] EIO exit_code=74\n"
        )
    assert read_halts(logs, marks) == [
        "node 1 halted 1 time(s), first: dir=/d/chaos-0 error_type=OSError "
        "error=[Errno 5] EIO exit_code=74",
        "node 2 halted 2 time(s), first: where=task fetcher-1 "
        "error_type=ReplicationInvariantError error=replica=3 leader_epoch=2 would truncate "
        "to 0, below its high watermark 2165 exit_code=70",
    ]
    assert read_halts(logs, mark_logs(logs)) == []
