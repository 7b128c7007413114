"""One chaos run: start a cluster, load it, inject the scheduled faults, heal, drain, check.

:func:`run` starts its own three-node local cluster (free ports, data under the results
directory), creates a topic of three replicas, starts the producers and a consumer, performs
the scenario's schedule (:func:`chaos.nemesis.schedule`), heals everything, stops the load,
waits for every partition's ISR to be whole again (bounded), drains every partition, runs the
checker and writes ``history.jsonl``, ``result.json`` and ``report.html`` into
``RESULTS/<scenario>-<seed>-<time>/``. The summary it returns is what ``--json`` prints.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.checker import CheckResult, FinalState, check
from chaos.history import HistoryWriter
from chaos.nemesis import NETWORK_SCENARIOS, LocalTarget, schedule
from chaos.network import NetnsNetwork, free_subnet
from chaos.report import render_report
from chaos.workload import WORKLOADS, PollWorker, ProducerWorker, drain
from cluster.client import AdminClient
from cluster.client.admin import NewTopic
from cluster.errors import LograftError
from cluster.launcher import ClusterSpec, LocalCluster
from cluster.launcher.processes import free_base_port

__all__ = ["RunOptions", "run"]

log = logging.getLogger(__name__)

TOPIC = "chaos"
RECOVERY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What to run: scenario, seed, duration, workload and where results go."""

    scenario: str
    seed: int
    duration_s: float
    workload: str = "acks-all"
    results_dir: Path = Path("chaos-results")
    producers: int = 3
    partitions: int = 3
    send_interval_s: float = 0.005


def _under_replicated(bootstrap: str, topic: str) -> list[str]:
    try:
        with AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000}) as admin:
            (description,) = admin.describe_topics([topic])
            return [
                f"{topic}-{p.partition}"
                for p in description.partitions
                if len(p.isr) < len(p.replicas) or p.leader < 0
            ]
    except LograftError as exc:
        return [f"{topic}-* ({exc.error_name})"]


def _wait_recovered(bootstrap: str, topic: str, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        short = _under_replicated(bootstrap, topic)
        if not short or time.monotonic() > deadline:
            return short
        time.sleep(0.5)


def run(options: RunOptions) -> dict[str, Any]:
    """Run one scenario; returns its summary (see the module docstring)."""
    workload = WORKLOADS[options.workload]
    steps = schedule(options.scenario, options.seed, options.duration_s)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = options.results_dir / f"{options.scenario}-{options.workload}-{options.seed}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    history = HistoryWriter(out / "history.jsonl")
    configs = {"replica.lag.time.max.ms": "4000"}
    network: NetnsNetwork | None = None
    if options.scenario in NETWORK_SCENARIOS:
        # Each node in a network namespace of its own, so the network can be cut.
        network = NetnsNetwork(f"lgc{os.getpid() % 100000}", 3, free_subnet())
        network.setup()
        spec = network.cluster_spec(out / "cluster", configs=configs)
    else:
        spec = ClusterSpec(data_dir=out / "cluster", base_port=free_base_port(3), configs=configs)
    cluster = LocalCluster(spec)
    try:
        cluster.up(wait=True)
    except BaseException:
        cluster.down()
        if network is not None:
            network.teardown()
        raise
    bootstrap = cluster.bootstrap
    producers: list[ProducerWorker] = []
    consumer: PollWorker | None = None
    faults = 0
    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            topic = NewTopic(TOPIC, options.partitions, 3, dict(workload.topic_configs))
            admin.create_topics([topic])[TOPIC].result()
        target = LocalTarget(cluster, history, bootstrap, TOPIC, network)
        producers = [
            ProducerWorker(
                n, history, bootstrap, TOPIC, options.partitions, workload, options.send_interval_s
            )
            for n in range(options.producers)
        ]
        consumer = PollWorker(0, history, bootstrap, TOPIC, options.partitions)
        for worker in (*producers, consumer):
            worker.start()
        started = time.monotonic()
        for step in steps:
            _sleep_until(started + step.at_s)
            heal = target.inject(step)
            faults += 1
            _sleep_until(time.monotonic() + step.hold_s)
            heal()
        _sleep_until(started + options.duration_s)
        target.heal_everything()
        for producer in producers:
            producer.stop()
        for producer in producers:
            producer.join(timeout=30)
            producer.close()
        short = _wait_recovered(bootstrap, TOPIC, RECOVERY_TIMEOUT_S)
        consumer.stop()
        consumer.join(timeout=30)
        drained = drain(history, bootstrap, TOPIC, options.partitions, DRAIN_TIMEOUT_S)
        ops = history.ops()
        result: CheckResult = check(
            ops, FinalState(drained=drained, under_replicated_after_heal=short)
        )
    finally:
        for producer in producers:
            producer.stop()
        if consumer is not None:
            consumer.stop()
        cluster.down()
        if network is not None:
            network.teardown()
        history.close()
    summary = {
        "scenario": options.scenario,
        "workload": options.workload,
        "seed": options.seed,
        "duration_s": options.duration_s,
        "operations": len(ops),
        "faults": faults,
        "valid": result.valid,
        "anomalies": {k: n for k, n in result.counts.items()},
        "sends": {k: v for k, v in result.stats.items() if k.startswith("send-")},
        "recovery_ms": [ms for _, ms in result.recovery_ms],
        "results": str(out),
    }
    (out / "result.json").write_text(
        json.dumps({"summary": summary, "check": result.to_json()}, indent=2)
    )
    (out / "report.html").write_text(render_report(summary, ops, result))
    log.info("chaos run done scenario=%s valid=%s results=%s", options.scenario, result.valid, out)
    return summary


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
