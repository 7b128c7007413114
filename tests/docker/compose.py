"""The repository's docker-compose.yml, run as a user runs it, under a project of the test's own.

:class:`ComposeCluster` is the chaos suite's compose driver
(:class:`chaos.compose_target.ComposeTarget`: a unique project, free host ports through
``LOGRAFT_PORT_1..3``, ``compose`` and ``docker`` commands, Docker's health status, which the
image's check takes from each node) with what the tests add. ``down()`` removes the
containers and their volumes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from chaos.compose_target import ComposeTarget
from chaos.targets import TargetError

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
IMAGE = os.environ.get("LOGRAFT_IMAGE", "lograft:latest")
NODE_IDS = (1, 2, 3)
INTERNAL_BOOTSTRAP = "lograft-1:19092,lograft-2:19092,lograft-3:19092"
"""Where a container on the compose network finds the cluster."""


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


class ComposeCluster(ComposeTarget):
    """``docker-compose.yml`` under project ``project`` on free host ports: the chaos suite's
    :class:`~chaos.compose_target.ComposeTarget`, with what the tests add (logs, a client container
    on the compose network) and an ``up`` that leaves a failed cluster standing for its logs."""

    def __init__(self, project: str, work_dir: Path) -> None:
        super().__init__(work_dir, image=IMAGE, project=project)

    def up(self, timeout_s: float = 180.0) -> None:
        """``docker-compose up -d`` and wait until every container is healthy."""
        self.compose("up", "-d")
        self.wait_healthy(self.node_ids, timeout_s)

    def down(self) -> None:
        """Remove the containers, the network and the volumes."""
        self.close()

    def logs(self) -> str:
        """The last lines of every container's output (for failure messages)."""
        try:
            return self.compose("logs", "--no-color", "--tail", "60").stdout
        except TargetError as exc:
            return str(exc)

    def run_in_network(self, *lograft_args: str, timeout_s: float = 60.0) -> str:
        """Run ``lograft ARGS`` in a fresh container on the compose network; its stdout."""
        done = subprocess.run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                self.network_name,
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
