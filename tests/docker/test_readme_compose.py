"""The README's docker steps, run line by line as a new user would on a fresh clone.

Only where the cluster lives differs from the README: the docker tests' compose project
(``COMPOSE_PROJECT_NAME``, already up: the steps' ``docker-compose up -d`` finds it running)
on free host ports (``LOGRAFT_PORT_1..3``, which the compose file
reads), and ``LOGRAFT_BOOTSTRAP`` naming those ports, so a user's own cluster on 9092-9094 is
left alone. The virtualenv's ``bin`` is on ``PATH`` (what ``source .venv/bin/activate`` does
for the lines after it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker.compose import REPO, ComposeCluster

pytestmark = pytest.mark.docker

STEP_TIMEOUT_S = 600


def docker_steps() -> list[str]:
    """The README's shell block that starts with ``make image``."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    for block in blocks:
        lines = [line for line in block.strip().splitlines() if line.strip()]
        if lines and lines[0].startswith("make image"):
            return lines
    raise AssertionError("the README has no shell block starting with `make image`")


def test_the_readme_compose_steps_work_verbatim(compose_cluster: ComposeCluster) -> None:
    # The docker tests' compose project: its `docker-compose up -d` finds the cluster the
    # fixture started from the same file (bringing up a second one would double the cost),
    # and the steps after it run as on a fresh clone.
    cluster = compose_cluster
    env = {
        **cluster.env,
        "COMPOSE_PROJECT_NAME": cluster.project,
        "LOGRAFT_BOOTSTRAP": cluster.bootstrap,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    steps = docker_steps()
    assert "docker-compose up -d" in "\n".join(steps)
    outputs: list[str] = []
    for step in steps:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", step],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"README step failed: {step}\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout)
    # The last step reads back what the steps before it produced.
    assert sorted(outputs[-1].splitlines()) == ["one", "three", "two"]
