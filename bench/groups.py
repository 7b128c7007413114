"""Consumer-group benchmark: how long rebalances and a coordinator failover take.

Starts three combined nodes with ``lograft cluster up`` (temporary data directory), creates a
topic of six partitions (RF 3) and measures, with real consumers:

* ``join``: three members subscribe at once → every partition owned, two each;
* ``crash``: a member (a child process) is SIGKILLed → the two others own all six
  (bounded below by ``session.timeout.ms``, reported beside it);
* ``cooperative_join``: a new third member joins → two each again, and how many
  partitions the two others gave up (a cooperative rebalance moves only those);
* ``leave``: a member closes (leaves the group) → the other owns all six;
* ``coordinator_failover``: the coordinator's node is SIGKILLed → a commit succeeds again;
* ``e2e``: ``lograft perf e2e`` (acks=all, one partition, RF 3, min.insync.replicas=2) for
  the produce → poll latency.

Prints one JSON document and writes it to bench/results/groups.json.

Usage: python bench/groups.py [--session-timeout-ms 6000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from _common import LOGRAFT, ROOT, local_cluster, run_json, write_report

from cluster.client import AdminClient, Consumer, NewTopic, TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

PARTITIONS = 6
POLL_MS = 50
LIMIT_S = 120.0

MEMBER = """
import sys
from cluster.client import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "session.timeout.ms": int(sys.argv[3]), "auto.offset.reset": "earliest"})
consumer.subscribe(["bench"])
while True:
    consumer.poll(timeout_ms=50)
"""


def _until(condition: Callable[[], bool], what: str) -> float:
    """Seconds until ``condition`` holds (checked every poll), or raise after LIMIT_S."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > LIMIT_S:
            raise RuntimeError(f"timed out waiting for {what}")
    return time.monotonic() - start


def _poll_all(consumers: list[Consumer]) -> list[set[TopicPartition]]:
    for consumer in consumers:
        consumer.poll(timeout_ms=POLL_MS)
    return [consumer.assignment() for consumer in consumers]


def _coordinator(bootstrap: str, group: str) -> int:
    with grpc.insecure_channel(bootstrap.split(",")[0]) as channel:
        found = pb_grpc.BrokerStub(channel).FindCoordinator(
            pb.FindCoordinatorRequest(group_id=group), timeout=10
        )
    return int(found.node_id)


# Over 70 lines: one round's timed steps in order, sharing the members its cleanup closes.
def _round(bootstrap: str, data: str, group: str, session_ms: int) -> dict[str, Any]:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": session_ms,
        "auto.offset.reset": "earliest",
    }
    result: dict[str, Any] = {}
    child = subprocess.Popen(
        [sys.executable, "-c", MEMBER, bootstrap, group, str(session_ms)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    members = [Consumer(config), Consumer(config)]
    try:
        for member in members:
            member.subscribe(["bench"])

        result["join_s"] = _until(
            lambda: sorted(len(a) for a in _poll_all(members)) == [2, 2], "three members"
        )
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        result["crash_s"] = _until(
            lambda: sum(len(a) for a in _poll_all(members)) == PARTITIONS, "survivors"
        )
        before = [set(a) for a in _poll_all(members)]
        newcomer = Consumer(config)
        newcomer.subscribe(["bench"])
        members.append(newcomer)
        result["cooperative_join_s"] = _until(
            lambda: sorted(len(a) for a in _poll_all(members)) == [2, 2, 2], "the newcomer"
        )
        after = _poll_all(members)
        result["partitions_moved"] = sum(len(b - a) for b, a in zip(before, after, strict=False))
        leaving = members.pop()
        leaving.close()
        result["leave_s"] = _until(
            lambda: sum(len(a) for a in _poll_all(members)) == PARTITIONS, "after a leave"
        )
        members[0].commit()
        coordinator = _coordinator(bootstrap, group)
        subprocess.run(
            [*LOGRAFT, "cluster", "kill", str(coordinator), "--data-dir", data],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        started = time.monotonic()
        committed = False
        while not committed and time.monotonic() - started < LIMIT_S:
            _poll_all(members)
            try:
                members[0].commit()
                committed = True
            except Exception:
                continue
        result["coordinator_failover_commit_s"] = time.monotonic() - started
        subprocess.run(
            [*LOGRAFT, "cluster", "restart", str(coordinator), "--data-dir", data],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        for member in members:
            member.close()
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/groups.json")
    args = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="lograft-bench-") as data,
        local_cluster(data) as bootstrap,
    ):
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            admin.create_topics([NewTopic("bench", PARTITIONS, 3)])["bench"].result()
            # perf e2e would create a missing topic with the broker default, RF 1.
            e2e_topic = NewTopic("bench-e2e", 1, 3, {"min.insync.replicas": "2"})
            admin.create_topics([e2e_topic])["bench-e2e"].result()
        for number in range(args.rounds):
            rounds.append(_round(bootstrap, data, f"bench-{number}", args.session_timeout_ms))
            print(json.dumps(rounds[-1]), file=sys.stderr)
        e2e = run_json(
            [
                *LOGRAFT,
                "--bootstrap",
                bootstrap,
                "perf",
                "e2e",
                "--topic",
                "bench-e2e",
                "--num-records",
                "2000",
                "--acks",
                "all",
                "--json",
            ]
        )
    report = {
        "benchmark": "groups",
        "nodes": 3,
        "partitions": PARTITIONS,
        "session_timeout_ms": args.session_timeout_ms,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rounds": rounds,
        "e2e": e2e,
    }
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
