"""The repository's docker-compose.yml, run as a user runs it, under a project of the test's own.

:class:`ComposeCluster` brings the three-node cluster of ``docker-compose.yml`` up under a
unique project name with free host ports (``LOGRAFT_PORT_1..3``), waits for Docker to report
every container healthy (the image's health check asks each node whether it is registered,
unfenced and caught up), and offers the faults the tests inject: ``docker kill``, ``pause``,
``network disconnect``, ``restart``. ``down()`` removes the containers and their volumes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
IMAGE = os.environ.get("LOGRAFT_IMAGE", "lograft:latest")
NODE_IDS = (1, 2, 3)
INTERNAL_BOOTSTRAP = "lograft-1:19092,lograft-2:19092,lograft-3:19092"
"""Where a container on the compose network finds the cluster."""
COMMAND_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.5


def docker_missing_reason() -> str | None:
    """Why docker tests cannot run here, or ``None`` when the engine and compose answer."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    if shutil.which("docker-compose") is None:
        return "the docker-compose command is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    if info.returncode != 0:
        return f"the docker engine does not answer: {info.stderr.strip()[-200:]}"
    return None


def build_image(python: str) -> str:
    """``make image``'s script; returns what it said about the base it used."""
    done = subprocess.run(
        [str(REPO / "docker" / "build-image.sh")],
        cwd=REPO,
        env={**os.environ, "PYTHON": python, "LOGRAFT_IMAGE": IMAGE},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise AssertionError(f"make image failed:\n{done.stdout}\n{done.stderr}")
    return done.stderr.strip().splitlines()[-1]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_INTERVAL_S)


@dataclass
class ComposeCluster:
    """``docker-compose.yml`` under project ``project`` with host ports ``ports``."""

    project: str
    ports: Sequence[int]
    env: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.env = {
            **os.environ,
            "LOGRAFT_IMAGE": IMAGE,
            **{
                f"LOGRAFT_PORT_{i}": str(port) for i, port in zip(NODE_IDS, self.ports, strict=True)
            },
        }

    # -- compose and docker commands

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker-compose -p PROJECT -f docker-compose.yml ARGS``."""
        return self._run(
            ["docker-compose", "--project-name", self.project, "--file", str(COMPOSE_FILE), *args],
            check,
        )

    def docker(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``docker ARGS``."""
        return self._run(["docker", *args], check)

    def _run(self, command: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            command,
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    # -- the cluster

    @property
    def bootstrap(self) -> str:
        """Every node, as a client on the host reaches it."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def network(self) -> str:
        """The compose network the containers share."""
        return f"{self.project}_default"

    def service(self, node_id: int) -> str:
        """The compose service of a node."""
        return f"lograft-{node_id}"

    def container(self, node_id: int) -> str:
        """The container id of a node's service."""
        return self.compose("ps", "-q", self.service(node_id)).stdout.strip()

    def up(self, timeout_s: float = 180.0) -> None:
        """``docker-compose up -d`` and wait until every container is healthy."""
        self.compose("up", "-d")
        self.wait_healthy(NODE_IDS, timeout_s)

    def down(self) -> None:
        """Remove the containers, the network and the volumes."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", check=False)

    def inspect(self, node_id: int) -> Mapping[str, object]:
        """``docker inspect``'s ``State`` of a node's container."""
        done = self.docker("inspect", "--format", "{{json .State}}", self.container(node_id))
        state: Mapping[str, object] = json.loads(done.stdout)
        return state

    def health(self, node_id: int) -> str:
        """Docker's health status of a node's container: starting, healthy or unhealthy."""
        health = self.inspect(node_id).get("Health")
        return str(health.get("Status")) if isinstance(health, dict) else "none"

    def wait_healthy(self, node_ids: Sequence[int], timeout_s: float = 120.0) -> None:
        """Wait until Docker reports the containers of ``node_ids`` healthy."""
        wait_until(
            lambda: all(self.health(n) == "healthy" for n in node_ids),
            timeout_s,
            f"containers of nodes {list(node_ids)} to be healthy "
            f"({ {n: self.health(n) for n in node_ids} })",
        )

    def logs(self) -> str:
        """The last lines of every container's output (for failure messages)."""
        return self.compose("logs", "--no-color", "--tail", "60", check=False).stdout

    def run_in_network(self, *lograft_args: str, timeout_s: float = 60.0) -> str:
        """Run ``lograft ARGS`` in a fresh container on the compose network; its stdout."""
        done = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                self.network,
                "--entrypoint",
                "lograft",
                IMAGE,
                "--bootstrap",
                INTERNAL_BOOTSTRAP,
                *lograft_args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"lograft {' '.join(lograft_args)} in the network failed:\n"
                f"{done.stdout}\n{done.stderr}"
            )
        return done.stdout
