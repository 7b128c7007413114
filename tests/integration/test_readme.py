"""The README's quick start, run verbatim as a new user would after ``make run``.

The demo (what ``make run`` runs after installing) starts a three-node cluster; then every
line of the README's "next steps" block runs in a shell. Only where the cluster lives
differs: the working directory is a temporary one (so ``data/cluster`` is there) and
``LOGRAFT_BOOTSTRAP`` names its ports (so the user's own cluster on 9092 is left alone).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.nodes import free_consecutive_ports

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 300


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``argv`` as the user would run it from ``cwd``, its output captured."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )


def next_steps() -> list[str]:
    """The shell block of the README that starts by activating the virtualenv."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    for block in blocks:
        lines = block.strip().splitlines()
        if lines and lines[0].startswith("source .venv/bin/activate"):
            return lines[1:]
    raise AssertionError("the README has no block starting with `source .venv/bin/activate`")


@pytest.fixture
def demo_cluster(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """``make run`` without the install: the demo's cluster, in ``tmp_path/data/cluster``."""
    base_port = free_consecutive_ports(3)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "LOGRAFT_BOOTSTRAP": ",".join(f"127.0.0.1:{base_port + n}" for n in range(3)),
    }
    try:
        demo = run(
            [sys.executable, "-m", "cluster.demo", "--base-port", str(base_port)], tmp_path, env
        )
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert "consumed 12 records in group" in demo.stdout, demo.stdout
        yield tmp_path, env
    finally:
        run([sys.executable, "-m", "cluster.cli", "cluster", "down"], tmp_path, env)


def python_examples() -> list[str]:
    """The README's Python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)


def test_the_readme_next_steps_work_verbatim(demo_cluster: tuple[Path, dict[str, str]]) -> None:
    workdir, env = demo_cluster
    steps = next_steps()
    assert any(step.startswith("lograft cluster down") for step in steps)
    for step in steps:
        done = run(["bash", "-euo", "pipefail", "-c", step], workdir, env)
        assert done.returncode == 0, f"README step failed: {step}\n{done.stdout}{done.stderr}"


def test_the_readme_python_examples_run(demo_cluster: tuple[Path, dict[str, str]]) -> None:
    workdir, env = demo_cluster
    examples = python_examples()
    assert len(examples) >= 2
    for example in examples:
        # Only the address differs: the examples name the default 127.0.0.1:9092.
        source = example.replace("127.0.0.1:9092", env["LOGRAFT_BOOTSTRAP"])
        done = run([sys.executable, "-c", source], workdir, env)
        assert done.returncode == 0, f"README example failed:\n{example}\n{done.stderr}"
