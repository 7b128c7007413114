"""Fixtures for tests against real node processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cluster.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.quorum import OFFSETS_PARTITIONS, QuorumCluster


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
