"""The local cluster launcher without running nodes: cluster.json, layout, the /proc guard, CLI."""

# Over 600 lines: the launcher's tests, beside the fake node processes and helpers they share.
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.launcher import (
    CLUSTER_FILE,
    BrokerView,
    ClusterSpec,
    ClusterStatus,
    LauncherError,
    LocalCluster,
    MetadataView,
    NodeStatus,
    add_cluster_commands,
    build_parser,
    build_voters,
    commands,
    health_problems,
    is_alive,
    is_our_node,
    is_port_free,
    local_cluster,
    node_port,
    processes,
    run_cluster_command,
    signal_node,
    tail_lines,
)
from cluster.node_health import HealthVerdict
from cluster.status import render_status


def _spawn(argv: list[str], stdout: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A child ``sleep`` process that is not a lograft node; stopped at teardown."""
    process = _spawn(["sleep", "300"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def fake_node(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child whose command line looks like node 1 of a cluster in ``tmp_path``."""
    data_dir = tmp_path / "node-1"
    code = "import time; print('ready', flush=True); time.sleep(300)"
    process = _spawn(
        [sys.executable, "-c", code, "-m", "cluster.node", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
    )
    try:
        # Popen returns once exec has closed the child's close-on-exec pipe, which the
        # kernel does before it fills in the new /proc/<pid>/cmdline: wait for the child to
        # say it runs, or the command line may still read empty.
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        yield process
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _wait_exited_unreaped(pid: int) -> None:
    """Block until the child ``pid`` has exited, leaving it a zombie (WNOWAIT)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


# ---- layout ---------------------------------------------------------------------------------


def test_ports_are_consecutive_from_the_base_port() -> None:
    assert [node_port(9092, i) for i in (1, 2, 3)] == [9092, 9093, 9094]
    spec = ClusterSpec(data_dir=Path("/tmp/c"), nodes=5, base_port=20000)
    records = spec.node_records()
    assert [n.node_id for n in records] == [1, 2, 3, 4, 5]
    assert [n.client_port for n in records] == [20000, 20001, 20002, 20003, 20004]
    assert all(n.controller_port == n.client_port for n in records)
    assert records[2].data_dir == Path("/tmp/c/node-3")
    assert records[2].log_path == Path("/tmp/c/node-3/node.log")
    assert records[0].roles == ("broker", "controller")
    with pytest.raises(ValueError):
        node_port(9092, 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nodes": 0},
        {"base_port": 0},
        {"base_port": 65534, "nodes": 3},
        {"roles": ("broker", "observer")},
        {"roles": ()},
    ],
)
def test_invalid_specs_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(LauncherError):
        ClusterSpec(data_dir=Path("/tmp/c"), **kwargs)  # type: ignore[arg-type]


def test_spec_data_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = ClusterSpec(data_dir=Path("data/cluster"))
    assert spec.data_dir == tmp_path / "data" / "cluster"


def test_voter_string() -> None:
    voters = build_voters("127.0.0.1", {2: 9093, 1: 9092, 3: 9094})
    assert voters == "1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094"
    spec = ClusterSpec(data_dir=Path("/tmp/c"), nodes=3, base_port=9092)
    assert spec.controller_quorum_voters() == voters
    assert build_voters("127.0.0.1", {1: 19092}) == "1@127.0.0.1:19092"


def test_broker_only_nodes_are_not_voters() -> None:
    spec = ClusterSpec(data_dir=Path("/tmp/c"), roles=("broker",))
    assert spec.controller_quorum_voters() == ""


def test_node_command_line(tmp_path: Path) -> None:
    spec = ClusterSpec(data_dir=tmp_path, nodes=3, base_port=9092, configs={"a.b": "1"})
    cluster = LocalCluster(spec)
    argv = cluster.node(2).command(cluster.controller_quorum_voters, cluster.configs)
    assert argv[:3] == [sys.executable, "-m", "cluster.node"]
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert options == {
        "--node-id": "2",
        "--data-dir": str(tmp_path / "node-2"),
        "--listen": "127.0.0.1:9093",
        "--process-roles": "broker,controller",
        "--controller-quorum-voters": "1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094",
        "--config": "a.b=1",
    }
    assert cluster.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    with pytest.raises(LauncherError, match="no node 4"):
        cluster.node(4)


# ---- cluster.json ---------------------------------------------------------------------------


def test_cluster_json_round_trip(tmp_path: Path) -> None:
    cluster = LocalCluster(
        ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092, configs={"x.y": "2"})
    )
    cluster.nodes[0].pid = 4242
    cluster.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == [CLUSTER_FILE]  # no temp file left
    doc = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert doc["version"] == 1
    assert doc["bootstrap"] == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    assert doc["controller_quorum_voters"] == (
        "1@127.0.0.1:19092,2@127.0.0.1:19093,3@127.0.0.1:19094"
    )
    assert doc["configs"] == {"x.y": "2"}
    assert doc["nodes"][0] == {
        "node_id": 1,
        "pid": 4242,
        "host": "127.0.0.1",
        "client_port": 19092,
        "controller_port": 19092,
        "data_dir": str(tmp_path / "node-1"),
        "log_path": str(tmp_path / "node-1" / "node.log"),
        "roles": ["broker", "controller"],
    }
    assert [n["pid"] for n in doc["nodes"]] == [4242, None, None]

    loaded = LocalCluster.load(tmp_path)
    assert loaded.to_json() == cluster.to_json()
    assert loaded.spec == cluster.spec
    assert loaded.bootstrap == cluster.bootstrap


def test_a_node_environment_is_recorded_and_restored(tmp_path: Path) -> None:
    """A node restarted from cluster.json gets the variables it was first started with
    (the chaos suite's clock jumps preload libfaketime into nodes this way)."""
    env = {2: {"LD_PRELOAD": "/lib/x.so", "FAKETIME_NO_CACHE": "1"}}
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092, env=env))
    cluster.save()
    doc = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert "env" not in doc["nodes"][0]
    assert doc["nodes"][1]["env"] == env[2]
    loaded = LocalCluster.load(tmp_path)
    assert loaded.spec.env == env
    assert [n.env for n in loaded.nodes] == [{}, env[2], {}]


def test_save_replaces_the_file(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=1))
    cluster.save()
    cluster.nodes[0].pid = 7
    cluster.save()
    assert LocalCluster.load(tmp_path).nodes[0].pid == 7


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="lograft cluster up"):
        LocalCluster.load(tmp_path)
    path = tmp_path / CLUSTER_FILE
    path.write_text("{not json")
    with pytest.raises(LauncherError, match="cannot read"):
        LocalCluster.load(tmp_path)
    path.write_text(json.dumps({"version": 2, "nodes": []}))
    with pytest.raises(LauncherError, match="version"):
        LocalCluster.load(tmp_path)
    path.write_text(json.dumps({"version": 1, "nodes": [{"node_id": 1}]}))
    with pytest.raises(LauncherError, match="malformed"):
        LocalCluster.load(tmp_path)


def test_up_refuses_a_different_layout_without_starting_anything(tmp_path: Path) -> None:
    LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092)).save()
    with pytest.raises(LauncherError, match="another cluster"):
        LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=5, base_port=19092)).up(wait=False)
    assert all(n.pid is None for n in LocalCluster.load(tmp_path).nodes)
    assert not (tmp_path / "node-1").exists()


def test_up_flags_default_to_the_existing_cluster_file(tmp_path: Path) -> None:
    LocalCluster(
        ClusterSpec(data_dir=tmp_path, nodes=2, base_port=19092, configs={"a": "1"})
    ).save()
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path)])
    spec = commands._spec_from_args(args)
    assert (spec.nodes, spec.base_port, dict(spec.configs)) == (2, 19092, {"a": "1"})
    args = build_parser().parse_args(["up", "--data-dir", str(tmp_path), "--nodes", "4"])
    assert commands._spec_from_args(args).nodes == 4


# ---- processes and the /proc guard ----------------------------------------------------------


def test_own_process_is_never_taken_for_a_node(tmp_path: Path) -> None:
    assert is_alive(os.getpid())
    assert not is_our_node(os.getpid(), tmp_path / "node-1")
    assert not signal_node(os.getpid(), tmp_path / "node-1", signal.SIGTERM)


def test_a_foreign_child_is_never_signalled(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    assert is_alive(sleeper.pid)
    assert not is_our_node(sleeper.pid, tmp_path / "node-1")
    assert not signal_node(sleeper.pid, tmp_path / "node-1", signal.SIGKILL)
    assert sleeper.poll() is None


def test_a_stale_pid_in_cluster_json_is_left_alone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=2, base_port=19092))
    cluster.nodes[0].pid = sleeper.pid
    cluster.nodes[1].pid = os.getpid()
    cluster.save()
    loaded = LocalCluster.load(tmp_path)

    with pytest.raises(LauncherError, match="not running"):
        loaded.kill(1, signal.SIGKILL)
    with pytest.raises(LauncherError, match="not running"):
        loaded.kill(2, signal.SIGTERM)

    current = loaded.status()
    assert [n.alive for n in current.nodes] == [False, False]
    assert all("stale pid" in (n.error or "") for n in current.nodes)
    assert not current.healthy

    outcome = loaded.down(timeout_s=1.0)
    assert all("left alone" in what for what in outcome.values())
    assert sleeper.poll() is None
    assert [n.pid for n in LocalCluster.load(tmp_path).nodes] == [None, None]


def test_a_matching_command_line_is_signalled(
    tmp_path: Path, fake_node: subprocess.Popen[bytes]
) -> None:
    assert is_our_node(fake_node.pid, tmp_path / "node-1")
    # Whole-argument match: node-1 is not node-10, and another cluster's dir does not match.
    assert not is_our_node(fake_node.pid, tmp_path / "node-10")
    assert not is_our_node(fake_node.pid, tmp_path / "other" / "node-1")
    assert not signal_node(fake_node.pid, tmp_path / "node-10", signal.SIGTERM)
    assert fake_node.poll() is None
    assert signal_node(fake_node.pid, tmp_path / "node-1", signal.SIGTERM)
    assert fake_node.wait(timeout=30) == -signal.SIGTERM


def test_down_stops_nodes_it_recognises(tmp_path: Path, fake_node: subprocess.Popen[bytes]) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=1, base_port=19092))
    cluster.nodes[0].pid = fake_node.pid
    cluster.save()
    outcome = LocalCluster.load(tmp_path).down(timeout_s=30)
    assert outcome == {1: "stopped"}
    assert fake_node.wait(timeout=30) == -signal.SIGTERM
    assert LocalCluster.load(tmp_path).nodes[0].pid is None


def test_a_zombie_is_not_alive(sleeper: subprocess.Popen[bytes]) -> None:
    sleeper.kill()
    _wait_exited_unreaped(sleeper.pid)
    assert processes.process_state(sleeper.pid) == "Z"
    assert not is_alive(sleeper.pid)
    assert not signal_node(sleeper.pid, Path("/tmp/x"), signal.SIGKILL)


def test_a_pid_that_does_not_exist_is_not_alive() -> None:
    process = _spawn(["true"])
    process.wait()
    # The pid is free again (reuse within the test is possible but astronomically unlikely).
    assert not is_alive(process.pid)
    assert not signal_node(process.pid, Path("/tmp/x"), signal.SIGKILL)
    assert not is_alive(0)
    assert not is_alive(-1)


def test_port_probe() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not is_port_free("127.0.0.1", port)
    assert is_port_free("127.0.0.1", port)


# ---- health and status ----------------------------------------------------------------------


def _status(
    cluster: LocalCluster, node_id: int, brokers: list[int] | None, controller: int = 1
) -> NodeStatus:
    node = cluster.node(node_id)
    if brokers is None:
        return NodeStatus(node, True, "running", error="UNAVAILABLE: refused")
    view = MetadataView(
        cluster_id="c",
        controller_id=controller,
        brokers=tuple(BrokerView(b, "127.0.0.1", 9091 + b) for b in brokers),
        topic_count=0,
    )
    return NodeStatus(node, True, "running", metadata=view)


def test_health_needs_every_broker_and_a_controller(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path))
    ids = [1, 2, 3]
    healthy = [_status(cluster, i, ids) for i in ids]
    assert health_problems(ids, healthy) == []

    partial = [_status(cluster, 1, [1, 2]), *healthy[1:]]
    assert health_problems(ids, partial) == ["node 1 lists brokers [1, 2], missing [3]"]

    leaderless = [_status(cluster, i, ids, controller=-1) for i in ids]
    assert len(health_problems(ids, leaderless)) == 3

    silent = [_status(cluster, 1, None), *healthy[1:]]
    assert "does not answer" in health_problems(ids, silent)[0]

    dead = [NodeStatus(cluster.node(1), False, "not running"), *healthy[1:]]
    assert health_problems(ids, dead) == ["node 1 is not running"]

    # Restarted: Metadata still lists the earlier process's registration, the node knows
    # it has not been unfenced yet.
    fenced = dataclasses.replace(
        healthy[1], health=HealthVerdict(False, "unhealthy: broker 2 is fenced")
    )
    assert health_problems(ids, [healthy[0], fenced, healthy[2]]) == [
        "node 2: unhealthy: broker 2 is fenced"
    ]
    vouched = dataclasses.replace(healthy[1], health=HealthVerdict(True, "healthy: broker 2"))
    assert health_problems(ids, [healthy[0], vouched, healthy[2]]) == []


def test_ready_count_counts_nodes_that_see_everyone(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092))
    ids = [1, 2, 3]
    nodes = [
        NodeStatus(cluster.node(1), False, "not running"),
        _status(cluster, 2, [1, 2]),
        _status(cluster, 3, ids),
    ]
    current = ClusterStatus(tmp_path, cluster.bootstrap, nodes, False, [])
    assert current.ready_count == 1


def _described(partitions: list[dict[str, object]]) -> dict[str, object]:
    return {
        "quorum": {
            "leader_id": 2,
            "epoch": 4,
            "high_watermark": 17,
            "voters": [
                {"node_id": 1, "log_end_offset": 17, "lag": 0},
                {"node_id": 2, "log_end_offset": 17, "lag": 0},
                {"node_id": 3, "log_end_offset": -1, "lag": -1},
            ],
            "observers": [],
        },
        "metadata_offset": 17,
        "brokers": [
            {
                "node_id": n,
                "broker_epoch": n,
                "fenced": n == 3,
                "in_controlled_shutdown": False,
                "address": f"127.0.0.1:{9091 + n}",
            }
            for n in (1, 2, 3)
        ],
        "offline_partitions": ["orders-1"],
        "partitions": partitions,
    }


def test_status_text_shows_quorum_brokers_and_partitions() -> None:
    rows: list[dict[str, object]] = [
        {"topic": "__consumer_offsets", "partition": p, "leader": 1, "leader_epoch": 0,
         "replicas": [1, 2, 3], "isr": [1, 2, 3], "high_watermark": 0}
        for p in range(50)
    ]  # fmt: skip
    rows += [
        {"topic": "orders", "partition": 0, "leader": 2, "leader_epoch": 3,
         "replicas": [2, 3, 1], "isr": [2, 1], "high_watermark": 1234},
        {"topic": "orders", "partition": 1, "leader": -1, "leader_epoch": 5,
         "replicas": [3], "isr": [], "high_watermark": -1},
    ]  # fmt: skip
    text = render_status(_described(rows))
    assert "Quorum: leader 2  epoch 4  high watermark 17" in text
    assert "voter   3    lag ?" in text
    assert "3    127.0.0.1:9094        epoch 3    fenced" in text
    assert "Partitions without a leader: 1" in text
    assert "Partitions: 52 (2 under-replicated)" in text
    assert "__consumer_offsets: 50 partitions, 0 without a leader" in text
    lines = text.splitlines()
    assert any(line.split() == ["orders", "0", "2", "3", "2,3,1", "2,1", "1234"] for line in lines)
    assert any(line.split() == ["orders", "1", "none", "5", "3", "?"] for line in lines)
    assert sum(1 for line in lines if "__consumer_offsets " in line) == 0  # summed up only


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_up_progress_is_drawn_only_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092))
    ids = [1, 2, 3]
    seen = [ClusterStatus(tmp_path, "", [_status(cluster, i, ids) for i in ids], True, [])]

    def fake_wait(timeout_s: float, on_status: object = None) -> ClusterStatus:
        assert callable(on_status)
        on_status(seen[0])
        return seen[0]

    monkeypatch.setattr(cluster, "wait_healthy", fake_wait)
    terminal, pipe = _Terminal(), io.StringIO()
    assert commands._wait_with_progress(cluster, 5.0, terminal) is seen[0]
    assert "3/3" in terminal.getvalue()
    commands._wait_with_progress(cluster, 5.0, pipe)
    assert pipe.getvalue() == ""


def test_status_json_shape(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092))
    ids = [1, 2, 3]
    nodes = [NodeStatus(cluster.node(1), False, "not running")]
    nodes += [_status(cluster, i, ids, controller=2) for i in (2, 3)]
    doc = ClusterStatus(
        tmp_path, cluster.bootstrap, nodes, False, health_problems(ids, nodes)
    ).to_json()
    assert doc["controller_id"] == 2
    assert doc["metadata_from"] == 2
    assert [b["node_id"] for b in doc["brokers"]] == ids
    assert doc["healthy"] is False
    assert doc["problems"] == ["node 1 is not running"]
    first, second = doc["nodes"][0], doc["nodes"][1]
    assert (first["alive"], first["reachable"], first["controller_id"]) == (False, False, None)
    assert (second["alive"], second["brokers"], second["topics"]) == (True, ids, 0)
    assert second["address"] == "127.0.0.1:19093"
    json.dumps(doc)  # serialisable


def test_status_of_a_stopped_cluster(tmp_path: Path) -> None:
    LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=2, base_port=19092)).save()
    out = io.StringIO()
    args = build_parser().parse_args(["status", "--data-dir", str(tmp_path), "--json"])
    assert run_cluster_command(args, out, io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    assert [n["alive"] for n in doc["nodes"]] == [False, False]
    assert doc["controller_id"] is None
    assert doc["brokers"] == []

    text = io.StringIO()
    args = build_parser().parse_args(["status", "--data-dir", str(tmp_path)])
    assert run_cluster_command(args, text, io.StringIO()) == 0
    assert "Healthy: no" in text.getvalue()
    assert "node 2 is not running" in text.getvalue()


# ---- logs -----------------------------------------------------------------------------------


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "node.log"
    path.write_text("".join(f"line {i} {'x' * 100}\n" for i in range(5000)))
    assert tail_lines(path, 3) == [f"line {i} {'x' * 100}" for i in (4997, 4998, 4999)]
    assert len(tail_lines(path, 2000)) == 2000  # spans several read blocks
    assert tail_lines(path, 0) == []
    short = tmp_path / "short.log"
    short.write_text("a\nb")
    assert tail_lines(short, 10) == ["a", "b"]
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert tail_lines(empty, 5) == []


def test_logs_command(tmp_path: Path) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=2, base_port=19092))
    cluster.save()
    err = io.StringIO()
    args = build_parser().parse_args(["logs", "2", "--data-dir", str(tmp_path)])
    assert run_cluster_command(args, io.StringIO(), err) == 1
    assert "no log yet" in err.getvalue()
    cluster.node(2).data_dir.mkdir()
    cluster.node(2).log_path.write_text("one\ntwo\nthree\n")
    out = io.StringIO()
    args = build_parser().parse_args(["logs", "2", "-n", "2", "--data-dir", str(tmp_path)])
    assert run_cluster_command(args, out, io.StringIO()) == 0
    assert out.getvalue() == "two\nthree\n"


# ---- argument parsing -----------------------------------------------------------------------


def test_up_defaults_and_flags() -> None:
    args = build_parser().parse_args(["up"])
    assert args.cluster_command == "up"
    assert (args.nodes, args.base_port, args.config) == (None, None, None)  # filled in later
    assert args.data_dir == Path("data/cluster")
    assert args.timeout_s == 60.0
    spec = commands._spec_from_args(
        build_parser().parse_args(["up", "--data-dir", "/nonexistent/lograft-test"])
    )
    assert (spec.nodes, spec.base_port, dict(spec.configs)) == (3, 9092, {})

    args = build_parser().parse_args(
        [
            "up",
            "--nodes",
            "5",
            "--data-dir",
            "/tmp/d",
            "--base-port",
            "19092",
            "--config",
            "log.segment.bytes=1048576",
            "--config",
            "min.insync.replicas = 2",
            "--timeout-s",
            "5",
        ]
    )
    assert (args.nodes, args.base_port, args.timeout_s) == (5, 19092, 5.0)
    assert dict(args.config) == {"log.segment.bytes": "1048576", "min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["kill", "2"], "KILL"),
        (["kill", "2", "--signal", "term"], "TERM"),
        (["kill", "2", "--signal", "SIGSTOP"], "STOP"),
        (["kill", "2", "--signal", "CONT"], "CONT"),
    ],
)
def test_kill_signal_names(argv: list[str], expected: str) -> None:
    args = build_parser().parse_args(argv)
    assert (args.node, args.signal) == (2, expected)


def test_other_actions_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["down"]).timeout_s == 15.0
    assert parser.parse_args(["status", "--json"]).json
    logs = parser.parse_args(["logs", "3", "--lines", "7"])
    assert (logs.node, logs.lines) == (3, 7)
    assert parser.parse_args(["logs", "1"]).lines == 50
    restart = parser.parse_args(["restart", "1", "--no-wait"])
    assert (restart.node, restart.no_wait) == (1, True)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["up", "--nodes", "0"],
        ["up", "--base-port", "70000"],
        ["up", "--config", "novalue"],
        ["up", "--timeout-s", "0"],
        ["kill"],
        ["kill", "1", "--signal", "HUP"],
        ["logs", "x"],
        ["restart"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2


def test_add_cluster_commands_plugs_into_a_parent_parser() -> None:
    parser = argparse.ArgumentParser(prog="lograft")
    commands = parser.add_subparsers(dest="command", required=True)
    add_cluster_commands(commands)
    args = parser.parse_args(["cluster", "status", "--json", "--data-dir", "/tmp/x"])
    assert (args.command, args.cluster_command, args.json) == ("cluster", "status", True)
    assert args.data_dir == Path("/tmp/x")


def test_missing_cluster_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    for action in (["status"], ["down"], ["kill", "1"], ["restart", "1"], ["logs", "1"]):
        err = io.StringIO()
        args = build_parser().parse_args([*action, "--data-dir", str(tmp_path)])
        args.bootstrap = "127.0.0.1:1"  # where status looks without a cluster.json: nobody
        assert run_cluster_command(args, io.StringIO(), err) == 1
        assert err.getvalue().startswith("lograft: CLUSTER_LAUNCHER_ERROR: no cluster in")


def test_up_refuses_busy_ports_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        spec = ClusterSpec(data_dir=tmp_path, nodes=1, base_port=port)
        with pytest.raises(LauncherError, match=f"ports in use by other processes: {port}"):
            LocalCluster(spec).up(wait=False)
    assert not (tmp_path / "node-1").exists()


def test_restart_waits_for_a_new_unfenced_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092))
    cluster.node(2).pid = os.getpid()  # alive, as far as the wait is concerned
    # The old registration (epoch 5, still unfenced before its session expires), then the
    # new incarnation fenced while it catches up, then unfenced.
    answers = iter([{2: (5, False)}, None, {2: (9, True)}, {2: (9, False)}])
    monkeypatch.setattr(local_cluster, "broker_registrations", lambda *a, **k: next(answers))
    monkeypatch.setattr(local_cluster, "HEALTH_POLL_INTERVAL_S", 0.001)
    healthy = ClusterStatus(tmp_path, "", [], True, [])
    calls: list[float] = []

    def fake_wait_healthy(timeout_s: float, on_status: object = None) -> ClusterStatus:
        calls.append(timeout_s)
        return healthy

    monkeypatch.setattr(cluster, "wait_healthy", fake_wait_healthy)
    assert cluster.wait_reregistered(2, previous_epoch=5, timeout_s=30) is healthy
    assert next(answers, "used up") == "used up"  # every answer was needed
    assert len(calls) == 1


def test_restart_wait_fails_when_the_node_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, nodes=3, base_port=19092))
    monkeypatch.setattr(local_cluster, "broker_registrations", lambda *a, **k: None)
    with pytest.raises(LauncherError, match="node 2 is not running"):
        cluster.wait_reregistered(2, previous_epoch=None, timeout_s=30)
