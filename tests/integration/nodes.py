"""Start and stop real node processes for integration tests (127.0.0.1, free ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cluster.launcher.processes import free_base_port
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.05


def free_consecutive_ports(count: int) -> int:
    """A base port such that ``count`` ports from it are free now (below the ephemeral range)."""
    return free_base_port(count)


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the ephemeral range: a port the kernel hands out
    for binding to 0 is an ephemeral one, and another test's outgoing connection may take it
    before the node binds (a node failed to start on "address already in use" that way)."""
    return free_base_port(1)


@dataclass
class NodeProcess:
    """A ``python -m cluster.node`` child process; restartable from its data directory."""

    data_dir: Path
    node_id: int = 1
    port: int = field(default_factory=free_port)
    configs: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"node-{self.node_id}.log"

    def start(self, wait: bool = True) -> None:
        """Start the process; with ``wait``, return once it answers a Metadata request."""
        assert self.process is None or self.process.poll() is not None, "already running"
        command = [
            sys.executable,
            "-m",
            "cluster.node",
            "--node-id",
            str(self.node_id),
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self.address,
        ]
        for name, value in self.configs.items():
            command += ["--config", f"{name}={value}"]
        command += self.extra_args
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                command, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ)
            )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)
                pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=READY_TIMEOUT_S)
            except (grpc.FutureTimeoutError, grpc.RpcError) as exc:
                self.kill()
                raise AssertionError(
                    f"node {self.node_id} not ready: {exc}\n{self.read_log()}"
                ) from exc

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """``kill -9``: no flush, no clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM and wait for a clean shutdown; SIGKILL if it does not come."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"node {self.node_id} ignored SIGTERM") from None


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll a condition on the cluster's state until it holds (bounded by ``timeout_s``).

    It waits for a state to be reached, and asserts nothing about how long that took.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_INTERVAL_S)
