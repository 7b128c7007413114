"""Fixtures for tests against real node processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.quorum import OFFSETS_PARTITIONS, QuorumCluster

#: The node log lines a failed cluster test shows: what explains a stalled failover.
_TELLING_LINE = re.compile(
    r" (WARNING|ERROR|CRITICAL) |raft transition|controller active|broker (un)?fenced|"
    r"partition (leader start|isr committed)"
)
_TELLING_LINES_PER_NODE = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failed test against a cluster, show each node's telling log lines.

    A failure that only happens on a loaded CI machine leaves nothing else to read: the
    nodes' logs live in a temporary directory that is gone with the run.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    for running in funcargs.values():
        if isinstance(running, QuorumCluster):
            for node_id, process in sorted(running.nodes.items()):
                lines = [x for x in process.read_log().splitlines() if _TELLING_LINE.search(x)]
                report.sections.append(
                    (
                        f"node-{node_id} log, telling lines",
                        "\n".join(lines[-_TELLING_LINES_PER_NODE:]),
                    )
                )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """One running node with its data under tmp_path; killed at teardown."""
    process = NodeProcess(data_dir=tmp_path / "node-1")
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def stub(node: NodeProcess) -> Iterator[pb_grpc.BrokerStub]:
    """A raw gRPC stub to ``node``."""
    with grpc.insecure_channel(
        node.address, options=[("grpc.max_send_message_length", 256 * 1024 * 1024)]
    ) as channel:
        yield pb_grpc.BrokerStub(channel)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[QuorumCluster]:
    """Three running combined-role nodes (one quorum); all killed at teardown, even if
    a test left one stopped with SIGSTOP (SIGKILL ends it all the same)."""
    running = QuorumCluster(tmp_path)
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def shared_grouped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    """Like ``grouped``, one for all the tests of a module: for tests that stop no node and
    name their topics and groups apart."""
    running = QuorumCluster(
        tmp_path_factory.mktemp("shared-cluster"),
        configs={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)},
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def grouped(tmp_path: Path) -> Iterator[QuorumCluster]:
    """Like ``cluster``, with a three-partition ``__consumer_offsets`` for group tests."""
    running = QuorumCluster(
        tmp_path, configs={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
