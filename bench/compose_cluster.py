"""The docker-compose cluster as a user meets it: image size, time to healthy, CLI failure times.

    python bench/compose_cluster.py [--runs 3] [--output bench/results/compose_cluster.json]

Needs the image (``make image``). Each run brings the repository's docker-compose.yml up
under a project of its own on free host ports and measures:

- ``healthy_s``: from ``docker-compose up -d`` to Docker reporting all three containers
  healthy (their health check asks each node: registered, unfenced, caught up);
- ``first_down_s``: ``lograft topics list`` bootstrapped from all three nodes while the first
  one's container is stopped (it should succeed through the others);
- ``all_down_s``: the same command with every container stopped (it should fail, quickly,
  with one line naming the addresses).

It also records the idle CPU of the three healthy containers (health checks included) over
ten seconds. Medians over the runs are in ``median``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import LOGRAFT, ROOT, write_report
from tests.docker.compose import IMAGE, NODE_IDS, ComposeCluster

IDLE_SAMPLE_S = 10.0


def _timed_cli(cluster: ComposeCluster) -> tuple[float, int, str]:
    start = time.monotonic()
    done = subprocess.run(
        [*LOGRAFT, "--bootstrap", cluster.bootstrap, "topics", "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    return time.monotonic() - start, done.returncode, done.stderr.strip()


def _container_cpu_s(cluster: ComposeCluster) -> float:
    """CPU seconds used so far by the three containers (their cgroups, v1 or v2)."""
    total = 0.0
    for node_id in NODE_IDS:
        container = cluster.container(node_id)
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{container}/cpuacct.usage")
        v2 = Path(f"/sys/fs/cgroup/system.slice/docker-{container}.scope/cpu.stat")
        if v1.exists():
            total += int(v1.read_text()) / 1e9
        elif v2.exists():
            usage = next(line for line in v2.read_text().splitlines() if line.startswith("usage"))
            total += int(usage.split()[1]) / 1e6
        else:
            return float("nan")
    return total


def one_run(index: int) -> dict[str, Any]:
    """Up, healthy, idle CPU, first node down, all down, then down with volumes."""
    work_dir = Path(tempfile.mkdtemp(prefix="lograft-bench-"))
    cluster = ComposeCluster(f"lograft-bench-{os.getpid()}-{index}", work_dir)
    try:
        start = time.monotonic()
        cluster.compose("up", "-d")
        cluster.wait_healthy(NODE_IDS, timeout_s=300)
        healthy_s = time.monotonic() - start
        cpu_before = _container_cpu_s(cluster)
        time.sleep(IDLE_SAMPLE_S)
        idle_cpu = (_container_cpu_s(cluster) - cpu_before) / IDLE_SAMPLE_S
        cluster.compose("stop", cluster.service(1))
        first_down_s, first_code, _ = _timed_cli(cluster)
        cluster.compose("stop")
        all_down_s, all_code, all_error = _timed_cli(cluster)
        return {
            "healthy_s": round(healthy_s, 2),
            "idle_cpu_fraction_of_a_core": round(idle_cpu, 3),
            "first_down_s": round(first_down_s, 2),
            "first_down_exit_code": first_code,
            "all_down_s": round(all_down_s, 2),
            "all_down_exit_code": all_code,
            "all_down_error": all_error,
        }
    finally:
        cluster.down()


def main() -> None:
    """Run the measurements and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--output", type=Path, default=ROOT / "bench" / "results" / "compose_cluster.json"
    )
    args = parser.parse_args()
    size = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", IMAGE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    runs = [one_run(i) for i in range(args.runs)]
    numeric = ("healthy_s", "idle_cpu_fraction_of_a_core", "first_down_s", "all_down_s")
    report = {
        "benchmark": "compose_cluster",
        "image": IMAGE,
        "image_size_mib": round(int(size) / 2**20, 1),
        "runs": runs,
        "median": {key: statistics.median(run[key] for run in runs) for key in numeric},
    }
    write_report(report, args.output)


if __name__ == "__main__":
    main()
