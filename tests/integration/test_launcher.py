"""``lograft cluster`` against real node processes: up, status, kill -9, restart, down.

The launcher runs as its own process (``python -m cluster.launcher``), as a user runs it,
so these tests also show that the nodes outlive the command that started them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.client import AdminClient, NewTopic, Producer
from cluster.launcher import CLUSTER_FILE, ClusterSpec, LauncherError, LocalCluster, is_alive
from cluster.node_health import check_health
from cluster.status import describe_cluster
from tests.integration.nodes import free_consecutive_ports

LAUNCHER_TIMEOUT_S = 120.0


pytestmark = pytest.mark.integration


def _launcher(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "cluster.launcher", *argv],
        capture_output=True,
        text=True,
        timeout=LAUNCHER_TIMEOUT_S,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"`lograft cluster {' '.join(argv)}` exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def _status(data_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        _launcher("status", "--json", "--data-dir", str(data_dir)).stdout
    )
    return doc


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose cluster, if any, is stopped at teardown whatever happened."""
    data_dir = tmp_path / "cluster"
    try:
        yield data_dir
    finally:
        if (data_dir / CLUSTER_FILE).exists():
            cluster = LocalCluster.load(data_dir)
            pids = [n.pid for n in cluster.nodes if n.pid is not None]
            try:
                cluster.down(timeout_s=10)
            except LauncherError as exc:
                pytest.fail(f"teardown could not stop the cluster: {exc} (pids {pids})")


# Over 70 lines: a test that walks the launcher's commands in order on one cluster.
def test_up_status_kill_restart_down(cluster_dir: Path) -> None:
    base_port = free_consecutive_ports(3)
    dir_flag = ("--data-dir", str(cluster_dir))

    up = _launcher("up", "--nodes", "3", "--base-port", str(base_port), *dir_flag)
    bootstrap = f"127.0.0.1:{base_port},127.0.0.1:{base_port + 1},127.0.0.1:{base_port + 2}"
    assert f"Bootstrap: {bootstrap}" in up.stdout
    assert "lograft topics create" in up.stdout

    saved = json.loads((cluster_dir / CLUSTER_FILE).read_text())
    assert saved["bootstrap"] == bootstrap
    assert saved["controller_quorum_voters"] == (
        f"1@127.0.0.1:{base_port},2@127.0.0.1:{base_port + 1},3@127.0.0.1:{base_port + 2}"
    )
    pids = {n["node_id"]: n["pid"] for n in saved["nodes"]}
    # The launcher process has exited; the nodes it started still run.
    assert all(is_alive(pid) for pid in pids.values())

    status = _status(cluster_dir)
    assert status["healthy"], status["problems"]
    assert [n["alive"] for n in status["nodes"]] == [True, True, True]
    assert status["controller_id"] in (1, 2, 3)
    assert sorted(b["node_id"] for b in status["brokers"]) == [1, 2, 3]
    assert all(n["brokers"] == [1, 2, 3] for n in status["nodes"])

    # The quorum, the brokers and each partition with the high watermark its leader reports.
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic("status-demo", 2, 3)])["status-demo"].result()
    with Producer({"bootstrap.servers": bootstrap, "acks": "all"}) as producer:
        for value in (b"a", b"b", b"c"):
            producer.send("status-demo", value, partition=1).result(timeout=30)
    status = _status(cluster_dir)
    assert status["quorum"]["leader_id"] == status["controller_id"]
    assert status["quorum"]["epoch"] >= 1
    assert sorted(v["node_id"] for v in status["quorum"]["voters"]) == [1, 2, 3]
    assert [(b["fenced"], b["in_controlled_shutdown"]) for b in status["brokers"]] == [
        (False, False)
    ] * 3
    rows = {p["partition"]: p for p in status["partitions"] if p["topic"] == "status-demo"}
    assert [rows[p]["high_watermark"] for p in (0, 1)] == [0, 3]
    for row in rows.values():
        assert row["leader"] in row["isr"]
        assert sorted(row["replicas"]) == [1, 2, 3]
    text = _launcher("status", *dir_flag).stdout
    assert f"Quorum: leader {status['quorum']['leader_id']}" in text
    assert "unfenced" in text
    leader_1 = rows[1]["leader"]
    assert any(
        line.split()[:3] == ["status-demo", "1", str(leader_1)] and line.split()[-1] == "3"
        for line in text.splitlines()
    ), text

    again = _launcher("up", *dir_flag)
    assert "already running" in again.stdout
    assert {n["node_id"]: n["pid"] for n in _status(cluster_dir)["nodes"]} == pids

    victim = 2
    _launcher("kill", str(victim), *dir_flag)
    assert not is_alive(pids[victim])
    status = _status(cluster_dir)
    by_id = {n["node_id"]: n for n in status["nodes"]}
    assert by_id[victim]["alive"] is False
    assert by_id[1]["alive"] and by_id[3]["alive"]
    assert not status["healthy"]

    _launcher("restart", str(victim), *dir_flag)
    status = _status(cluster_dir)
    assert status["healthy"], status["problems"]
    new_pid = {n["node_id"]: n["pid"] for n in status["nodes"]}[victim]
    assert new_pid != pids[victim]
    assert json.loads((cluster_dir / CLUSTER_FILE).read_text())["nodes"][victim - 1]["pid"] == (
        new_pid
    )

    down = _launcher("down", *dir_flag)
    assert "Cluster stopped" in down.stdout
    final_pids = [pids[1], new_pid, pids[3]]
    assert not any(is_alive(pid) for pid in final_pids)
    assert all(
        n["pid"] is None for n in json.loads((cluster_dir / CLUSTER_FILE).read_text())["nodes"]
    )
    assert (cluster_dir / "node-1" / "node.log").stat().st_size > 0  # data and logs kept


def test_a_restarted_cluster_places_three_replicas_once_up_returns(cluster_dir: Path) -> None:
    """``up`` on a stopped cluster's data returns only when the restarted brokers have
    registered again and been unfenced: Metadata alone still lists the earlier processes'
    registrations, and a topic created then found fewer than three live brokers."""
    cluster = LocalCluster(
        ClusterSpec(data_dir=cluster_dir, nodes=3, base_port=free_consecutive_ports(3))
    )
    cluster.up(wait=True, timeout_s=60)
    addresses = cluster.bootstrap.split(",")
    before = {b["node_id"]: b["broker_epoch"] for b in describe_cluster(addresses)["brokers"]}
    cluster.down(timeout_s=30)

    assert cluster.up(wait=True, timeout_s=60) == [1, 2, 3]
    brokers = describe_cluster(addresses)["brokers"]
    assert [(b["node_id"], b["fenced"]) for b in brokers] == [(1, False), (2, False), (3, False)]
    assert all(b["broker_epoch"] > before[b["node_id"]] for b in brokers), (before, brokers)
    assert all(check_health(address).healthy for address in addresses)
    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        admin.create_topics([NewTopic("after-restart", 3, 3)])["after-restart"].result()


def test_up_reports_a_node_that_fails_to_start(cluster_dir: Path) -> None:
    base_port = free_consecutive_ports(3)
    result = _launcher(
        "up",
        "--base-port",
        str(base_port),
        "--config",
        "no.such.setting=1",
        "--timeout-s",
        "60",
        "--data-dir",
        str(cluster_dir),
        check=False,
    )
    assert result.returncode == 1
    assert "is not running" in result.stderr
    assert "no.such.setting" in result.stderr  # the tail of the node's log says why


def test_library_api_in_process(cluster_dir: Path) -> None:
    """What tests and chaos tools use: LocalCluster in the calling process, nodes as children."""
    cluster = LocalCluster(
        ClusterSpec(data_dir=cluster_dir, nodes=3, base_port=free_consecutive_ports(3))
    )
    assert cluster.up(wait=True, timeout_s=60) == [1, 2, 3]
    assert cluster.up(wait=False) == []  # already running: nothing started
    assert [n.node_id for n in cluster.nodes] == [1, 2, 3]

    with AdminClient({"bootstrap.servers": cluster.bootstrap}) as admin:
        # The bootstrap address reaches the cluster, and the cluster can place three replicas.
        admin.create_topics([NewTopic("launcher-demo", 3, 3)])["launcher-demo"].result()

    old_pid = cluster.node(3).pid
    assert old_pid is not None
    cluster.kill(3, signal.SIGKILL)
    assert not is_alive(old_pid)
    status = cluster.status()
    assert [n.alive for n in status.nodes] == [True, True, False]
    assert not status.healthy

    new_pid = cluster.restart(3, wait=True, timeout_s=60)
    assert new_pid != old_pid
    status = cluster.status()
    assert status.healthy, status.problems

    cluster.kill(1, signal.SIGSTOP)
    assert cluster.status().nodes[0].state == "paused"
    outcome = cluster.down(timeout_s=30)  # a paused node is continued, then stops on SIGTERM
    assert outcome == {1: "stopped", 2: "stopped", 3: "stopped"}
    assert not any(is_alive(pid) for pid in (new_pid, *(n.pid or 0 for n in cluster.nodes)))
