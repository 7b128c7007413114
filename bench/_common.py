"""Shared by the benchmark scripts: run a client command that prints JSON, write a report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster.launcher.processes import free_base_port

ROOT = Path(__file__).resolve().parent.parent
LOGRAFT = [sys.executable, "-m", "cluster.cli"]


RUN_TIMEOUT_S = 900
"""The longest one measured run may take before the benchmark gives up on it."""


def run_json(args: list[str], timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """Run ``args`` in the repository root (at most ``timeout_s``); its last stdout line is
    one JSON object."""
    done = subprocess.run(
        args, check=True, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process ``pid`` has used so far, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_report(report: dict[str, Any], output: Path) -> None:
    """Write the report to ``output`` (bench/results/ is not committed) and print it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


@contextmanager
def local_cluster(data: str, configs: Sequence[str] = ()) -> Iterator[str]:
    """Three combined nodes from ``lograft cluster up`` in ``data``; yields the bootstrap and
    runs ``cluster down`` afterwards. ``configs`` are node ``NAME=VALUE`` settings."""
    up = [*LOGRAFT, "cluster", "up", "--data-dir", data, "--nodes", "3"]
    up += ["--base-port", str(free_base_port(3))]
    for item in configs:
        up += ["--config", item]
    started = subprocess.run(up, check=True, capture_output=True, text=True, cwd=ROOT)
    bootstrap = next(
        line.split(":", 1)[1].strip()
        for line in started.stdout.splitlines()
        if line.startswith("Bootstrap:")
    )
    try:
        yield bootstrap
    finally:
        subprocess.run(
            [*LOGRAFT, "cluster", "down", "--data-dir", data],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create ``name``: ``partitions`` partitions, RF 3, ``min.insync.replicas=2``."""
    from cluster.client import AdminClient, NewTopic

    with AdminClient(bootstrap_servers=bootstrap) as admin:
        created = admin.create_topics(
            [NewTopic(name, partitions, 3, configs={"min.insync.replicas": "2"})]
        )
        created[name].result(timeout=60)


def spark_session(app: str) -> Any:
    """A local Spark session (``local[2]``, no progress bars) with ``lograft`` registered."""
    from spark.datasource import register
    from spark.session import local_session_builder

    session = (
        local_session_builder("local[2]", app)
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session
