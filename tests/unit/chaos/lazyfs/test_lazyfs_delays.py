"""The slow-disk table of LazyFS: which fsyncs a delay holds up, and the control commands
that set it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.lazyfs.control import ControlServer
from chaos.lazyfs.delays import FsyncDelays
from chaos.lazyfs.store import LazyStore


def test_a_delay_covers_its_prefix_and_what_lies_under_it_only() -> None:
    delays = FsyncDelays()
    delays.set("/node-2", 0.4)
    assert delays.for_path("/node-2") == 0.4
    assert delays.for_path("/node-2/chaos-0/00000000000000000000.log") == 0.4
    assert delays.for_path("/node-20/x") == 0.0, "a sibling that shares the name's start"
    assert delays.for_path("/node-1/x") == 0.0
    assert delays.for_path(None) == 0.0, "a handle whose path is unknown"
    delays.set("/", 0.1)
    delays.set("/node-2/chaos-0/", 0.9)
    assert delays.for_path("/node-1/x") == 0.1
    assert delays.for_path("/node-2/chaos-0/f") == 0.9, "the longest prefix wins"
    delays.set("/node-2/chaos-0", 0)
    assert delays.snapshot() == {"/": 0.1, "/node-2": 0.4}
    delays.clear()
    assert delays.for_path("/node-2/x") == 0.0


@pytest.mark.parametrize(("prefix", "seconds"), [("node-2", 1.0), ("/", -1.0), ("/", 31.0)])
def test_a_relative_prefix_or_a_delay_out_of_bounds_is_refused(prefix: str, seconds: float) -> None:
    with pytest.raises(ValueError):
        FsyncDelays().set(prefix, seconds)


def test_hold_returns_at_once_without_a_delay() -> None:
    FsyncDelays().hold("/anything")  # would block for the delay otherwise


def test_the_control_commands_set_and_clear_delays(tmp_path: Path) -> None:
    delays = FsyncDelays()
    server = ControlServer(LazyStore(tmp_path / "backing"), tmp_path / "c.sock", delays)
    try:
        server.execute("slow /node-3 250")
        assert delays.snapshot() == {"/node-3": 0.25}
        server.execute("fast")
        assert delays.snapshot() == {}
        for bad in ("slow /node-3", "slow /node-3 soon", "slow node-3 10", "slow / nan"):
            with pytest.raises(ValueError):
                server.execute(bad)
        assert delays.snapshot() == {}
    finally:
        server.close()
