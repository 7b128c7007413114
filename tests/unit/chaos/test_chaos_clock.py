"""Clock jumps (chaos.clock): a node started with NodeClocks' environment reads a wall clock
moved by set_offset at once, while its monotonic clock does not move."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.clock import NodeClocks, clock_unavailable

_REQUIRE = os.environ.get("LOGRAFT_REQUIRE_CHAOS_TOOLS") == "1"
needs_libfaketime = pytest.mark.skipif(
    clock_unavailable() is not None and not _REQUIRE,
    reason=f"{clock_unavailable()} (LOGRAFT_REQUIRE_CHAOS_TOOLS=1 makes this a failure)",
)

# Reads both clocks, asks the parent to move the wall clock, reads both again.
_CHILD = """
import json, sys, threading, time
wall, mono = time.time(), time.monotonic()
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps({"wall": time.time() - wall, "mono": time.monotonic() - mono}), flush=True)
"""


@needs_libfaketime
def test_a_process_on_a_node_clock_sees_its_wall_clock_jump_and_not_its_monotonic_clock(
    tmp_path: Path,
) -> None:
    clocks = NodeClocks(tmp_path / "clocks", [1, 2])
    assert (tmp_path / "clocks" / "clock-1").read_text() == "+0\n"
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        env={**os.environ, **clocks.env(1)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            clocks.set_offset(1, -86400)
            clocks.set_offset(2, 3600)  # another node's clock: not this process's
            child.stdin.write("go\n")
            child.stdin.flush()
            moved = json.loads(child.stdout.readline())
        finally:
            child.kill()
    assert -86400 - 60 < moved["wall"] < -86400 + 60, moved
    assert 0 <= moved["mono"] < 60, moved
    assert clocks.offsets == {1: -86400, 2: 3600}


def test_without_libfaketime_node_clocks_say_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chaos.clock._LIBFAKETIME_GLOBS", (str(tmp_path / "none"),))
    assert "libfaketime not found" in (clock_unavailable() or "")
    with pytest.raises(FileNotFoundError, match="libfaketime"):
        NodeClocks(tmp_path / "clocks", [1])
