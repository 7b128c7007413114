"""The CLI against a cluster whose first node is down, and against no cluster at all.

As a user meets it (issue 11): `lograft cluster up`, then `lograft cluster kill 1`; every
command run next to the cluster's data (no --bootstrap: the default is the nodes of
./data/cluster/cluster.json) still works. With every node down, each command fails with
exactly one line on stderr naming each address it tried and why, and exits 1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.launcher import CLUSTER_FILE, LauncherError, LocalCluster
from tests.integration.nodes import free_consecutive_ports, free_port

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 120.0
DATA_DIR = Path("data") / "cluster"


def _lograft(
    cwd: Path, *argv: str, stdin: str | None = None, bootstrap: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``lograft ARGV`` run in ``cwd`` as a user runs it: no LOGRAFT_CONFIG, and
    LOGRAFT_BOOTSTRAP only when given."""
    env = dict(os.environ)
    env.pop("LOGRAFT_CONFIG", None)
    env.pop("LOGRAFT_BOOTSTRAP", None)
    if bootstrap is not None:
        env["LOGRAFT_BOOTSTRAP"] = bootstrap
    return subprocess.run(
        [sys.executable, "-m", "cluster.cli", *argv],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lograft: ")
    return lines[0]


@pytest.fixture
def user_dir(tmp_path: Path) -> Iterator[Path]:
    """A working directory holding a local cluster (./data/cluster), stopped at teardown."""
    base_port = free_consecutive_ports(3)
    try:
        _ok(_lograft(tmp_path, "cluster", "up", "--base-port", str(base_port)))
        yield tmp_path
    finally:
        if (tmp_path / DATA_DIR / CLUSTER_FILE).exists():
            try:
                LocalCluster.load(tmp_path / DATA_DIR).down(timeout_s=10)
            except LauncherError as exc:
                pytest.fail(f"teardown could not stop the cluster: {exc}")


def test_first_node_down_commands_work_all_down_one_line(user_dir: Path) -> None:
    addresses = LocalCluster.load(user_dir / DATA_DIR).bootstrap.split(",")

    create = ["topics", "create", "orders", "--partitions", "2", "--replication-factor", "3"]
    _ok(_lograft(user_dir, *create))
    _ok(_lograft(user_dir, "produce", "orders", stdin="first\n"))

    _ok(_lograft(user_dir, "cluster", "kill", "1"))
    # Node 1, the first bootstrap address, is gone (and may have been the controller or a
    # leader of orders: the commands wait for the cluster to move on, as Kafka's do).
    create = ["topics", "create", "later", "--partitions", "1", "--replication-factor", "2"]
    _ok(_lograft(user_dir, *create))
    assert {"orders", "later"} <= set(_ok(_lograft(user_dir, "topics", "list")).split())
    _ok(_lograft(user_dir, "produce", "orders", stdin="second\n"))
    consumed = _ok(
        _lograft(user_dir, "consume", "orders", "--from-beginning", "--max-messages", "2")
    )
    assert sorted(consumed.split()) == ["first", "second"]
    status = _ok(_lograft(user_dir, "cluster", "status")).splitlines()
    assert status[0] == "Local cluster in ./data/cluster (cluster.json)"
    node_1 = next(line for line in status if line.split()[:1] == ["1"])
    assert "not running" in node_1

    for node_id in ("2", "3"):
        _ok(_lograft(user_dir, "cluster", "kill", node_id))
    tried = ", ".join(f"{address} (connection refused)" for address in addresses)
    expected = (
        f"lograft: NETWORK_EXCEPTION: no broker answered: {tried} "
        "(bootstrap from ./data/cluster/cluster.json)"
    )
    for argv, stdin in [
        (["topics", "list"], None),
        (["topics", "create", "more", "--partitions", "1"], None),
        (["produce", "orders"], "second\n"),
        (["consume", "orders", "--from-beginning", "--max-messages", "1"], None),
        (["consume", "orders", "--group", "billing", "--max-messages", "1"], None),
        (["groups", "list"], None),
        (["configs", "describe", "--topic", "orders"], None),
    ]:
        assert _one_line_error(_lograft(user_dir, *argv, stdin=stdin)) == expected, argv
    # The local record says the nodes are down: status shows them so, and no quorum.
    status = _ok(_lograft(user_dir, "cluster", "status")).splitlines()
    assert status[0] == "Local cluster in ./data/cluster (cluster.json)"
    assert "  ! node 3 is not running" in status


@pytest.fixture
def silent_address() -> Iterator[str]:
    """An address that accepts TCP connections and never says a word (a hung broker)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_no_cluster_anywhere_is_one_line_naming_each_address(
    tmp_path: Path, silent_address: str
) -> None:
    refused = f"127.0.0.1:{free_port()}"
    bootstrap = f"{refused},{silent_address},nosuch.invalid:9092"
    tried = (
        f"{refused} (connection refused), {silent_address} (timed out after 3000 ms), "
        "nosuch.invalid:9092 (name not resolved)"
    )
    line = _one_line_error(_lograft(tmp_path, "topics", "list", bootstrap=bootstrap))
    assert line == (
        f"lograft: NETWORK_EXCEPTION: no broker answered: {tried} "
        "(bootstrap from $LOGRAFT_BOOTSTRAP)"
    )
    line = _one_line_error(_lograft(tmp_path, "--bootstrap", refused, "groups", "list"))
    assert line == f"lograft: NETWORK_EXCEPTION: no broker answered: {refused} (connection refused)"

    # No ./data/cluster/cluster.json here: status looks for the cluster at the bootstrap.
    line = _one_line_error(_lograft(tmp_path, "cluster", "status", bootstrap=refused))
    assert line == (
        "lograft: CLUSTER_LAUNCHER_ERROR: no cluster in ./data/cluster (cluster.json not "
        f"found) and NETWORK_EXCEPTION: no broker answered: {refused} (connection refused)"
    )
