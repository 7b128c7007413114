"""Failover timings of a three-node combined cluster of local processes (default settings,
or those given with ``--config``).

1. kill -9 the active controller; time until a CreateTopics through a survivor succeeds.
2. kill -9 a broker that leads partitions; time until Metadata from a survivor shows a new
   leader for every partition it led.
Each is repeated (default 10) with the killed node restarted in between; prints JSON with
every sample and the medians, and writes bench/results/controller_failover.json.

Usage: python bench/controller_failover.py [--runs 10] [--config NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from _common import ROOT, write_report

from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2 as cpb
from lograft.protocol.wire import controller_pb2_grpc as cpb_grpc

POLL_S = 0.01
TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    def __init__(self, base: Path, extra: list[str] | None = None) -> None:
        self.extra = extra or []
        self.ports = {n: _free_port() for n in (1, 2, 3)}
        self.voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.ports.items())
        self.base = base
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, node_id: int) -> None:
        log = open(self.base / f"node-{node_id}.log", "ab")  # noqa: SIM115 - lives with the process
        self.procs[node_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cluster.node",
                "--node-id",
                str(node_id),
                "--data-dir",
                str(self.base / f"node-{node_id}"),
                "--listen",
                f"127.0.0.1:{self.ports[node_id]}",
                "--controller-quorum-voters",
                self.voters,
                "--log-level",
                "WARNING",
                *self.extra,
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self, node_id: int) -> None:
        self.procs[node_id].send_signal(signal.SIGKILL)
        self.procs[node_id].wait()

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            proc.wait(timeout=30)

    def alive(self) -> list[int]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.ports[node_id]}"

    def metadata(self, node_id: int, topics: list[str] | None = None) -> pb.MetadataResponse | None:
        try:
            with grpc.insecure_channel(self.address(node_id)) as channel:
                return pb_grpc.BrokerStub(channel).Metadata(
                    pb.MetadataRequest(topics=topics or []), timeout=2
                )
        except grpc.RpcError:
            return None

    def active_controller(self) -> int:
        for node_id in self.alive():
            try:
                with grpc.insecure_channel(self.address(node_id)) as channel:
                    answer = cpb_grpc.ControllerStub(channel).DescribeQuorum(
                        cpb.DescribeQuorumRequest(), timeout=2
                    )
                if answer.leader_id >= 0:
                    return int(answer.leader_id)
            except grpc.RpcError:
                continue
        return -1

    def healthy(self) -> bool:
        live = set(self.alive())
        for node_id in live:
            answer = self.metadata(node_id)
            if answer is None or answer.controller_id < 0:
                return False
            if {b.node_id for b in answer.brokers} != live:
                return False
        return True

    def wait(self, condition: Any, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(POLL_S)

    def create_topic(
        self, node_id: int, name: str, partitions: int, rf: int, timeout_s: float = 5
    ) -> int:
        try:
            with grpc.insecure_channel(self.address(node_id)) as channel:
                response = pb_grpc.BrokerStub(channel).CreateTopics(
                    pb.CreateTopicsRequest(
                        topics=[
                            pb.CreatableTopic(
                                name=name, num_partitions=partitions, replication_factor=rf
                            )
                        ]
                    ),
                    timeout=timeout_s,
                )
            return int(response.topics[0].error_code)
        except grpc.RpcError:
            return -1

    def leaders(self, node_id: int, topic: str) -> dict[int, int]:
        answer = self.metadata(node_id, [topic])
        if answer is None or answer.topics[0].error_code:
            return {}
        return {p.partition: p.leader_id for p in answer.topics[0].partitions}


# Over 70 lines: two timed failover loops in order on one cluster, then the report.
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="node setting for every node (repeatable), e.g. "
        "controller.quorum.election.timeout.ms=1000",
    )
    parser.add_argument(
        "--output", type=Path, default=ROOT / "bench/results/controller_failover.json"
    )
    args = parser.parse_args()
    controller_s: list[float] = []
    broker_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lograft-failover-") as base:
        cluster = Cluster(Path(base), [x for c in args.config for x in ("--config", c)])
        for node_id in (1, 2, 3):
            cluster.start(node_id)
        try:
            cluster.wait(cluster.healthy, "a healthy cluster")
            for run in range(args.runs):
                victim = cluster.active_controller()
                survivor = next(n for n in (1, 2, 3) if n != victim)
                started = time.monotonic()
                cluster.kill(victim)
                while cluster.create_topic(survivor, f"failover-{run}", 1, 1) != 0:
                    time.sleep(POLL_S)
                controller_s.append(time.monotonic() - started)
                cluster.start(victim)
                cluster.wait(cluster.healthy, "the cluster to heal")
            for run in range(args.runs):
                topic = f"fence-{run}"
                assert cluster.create_topic(1, topic, 6, 3) == 0
                cluster.wait(lambda t=topic: len(cluster.leaders(1, t)) == 6, "leaders")
                leaders = cluster.leaders(1, topic)
                victim = leaders[0]
                led = [p for p, leader in leaders.items() if leader == victim]
                survivor = next(n for n in (1, 2, 3) if n != victim)
                started = time.monotonic()
                cluster.kill(victim)

                def moved(
                    t: str = topic, v: int = victim, ps: list[int] = led, s: int = survivor
                ) -> bool:
                    now = cluster.leaders(s, t)
                    return all(now.get(p, v) not in (v, -1) for p in ps)

                cluster.wait(moved, "new leaders")
                broker_s.append(time.monotonic() - started)
                cluster.start(victim)
                cluster.wait(cluster.healthy, "the cluster to heal")
        finally:
            cluster.stop_all()
    report = {
        "benchmark": "controller_failover",
        "runs": args.runs,
        "configs": args.config,
        "machine": {"cpus": os.cpu_count()},
        "kill_active_controller_to_create_topics_s": {
            "median": round(statistics.median(controller_s), 3),
            "samples": [round(s, 3) for s in controller_s],
        },
        "kill_leader_broker_to_new_leader_in_metadata_s": {
            "median": round(statistics.median(broker_s), 3),
            "samples": [round(s, 3) for s in broker_s],
        },
    }
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
