"""One chaos run: start a cluster, load it, inject the scheduled faults, heal, drain, check.

:func:`run` starts its own three-node cluster on a :class:`~chaos.nemesis.Target` (local
processes on free ports with their data under the results directory, each node in a network
namespace of its own when the scenario cuts the network, the data on LazyFS when it loses
power; or the compose project), creates a
topic of three replicas with the workload's configs, starts the producers, the group
consumers and a consumer by assignment, performs the scenario's schedule
(:func:`chaos.scenarios.schedule`) through a :class:`~chaos.nemesis.Nemesis`, heals
everything, stops the producers, waits (bounded) until every partition's ISR is whole again,
stops the consumers, drains every partition, stops the cluster, reads each replica's log
below its high watermark from its data directory (local target), runs the checker and writes
``history.jsonl``, ``result.json`` and ``report.html`` into
``RESULTS/<scenario>-<workload>-<seed>-<time>/``. The summary it returns is what
``python -m chaos run --json`` prints.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.busy import BusyLoops
from chaos.checker import CheckResult, FinalState, check
from chaos.history import HistoryWriter, Op
from chaos.nemesis import (
    END_OF_FAULTS,
    ComposeTarget,
    LocalTarget,
    Nemesis,
    ReplicaLogs,
    Target,
    under_replicated,
)
from chaos.node_events import mark_logs, read_events
from chaos.report import render_report
from chaos.scenarios import scenario, schedule
from chaos.workload import (
    WORKLOADS,
    AssignConsumerWorker,
    GroupConsumerWorker,
    ProducerWorker,
    drain,
)
from cluster.client import AdminClient
from cluster.client.admin import NewTopic

__all__ = ["TARGETS", "RunOptions", "run"]

log = logging.getLogger(__name__)

TOPIC = "chaos"
GROUP = "g0"
TARGETS = ("local", "compose")
RECOVERY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
WORKER_GRACE_S = 120.0
"""How long after the planned end a worker may still run before it stops on its own."""
NODE_CONFIGS = {"replica.lag.time.max.ms": "4000"}
"""Node settings of every run: a stopped follower leaves the ISR after 4 s (Kafka: 30 s),
so faults of a few seconds move ISRs."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What to run: scenario, seed, duration, workload, where results go, on which target."""

    scenario: str
    seed: int
    duration_s: float
    workload: str = "acks-all"
    results_dir: Path = Path("chaos-results")
    target: str = "local"
    producers: int = 3
    partitions: int = 3
    group_consumers: int = 2
    send_interval_s: float = 0.005
    busy: int = 0
    """CPU-bound processes spinning beside the nodes for the whole run (``--busy``)."""
    node_configs: tuple[tuple[str, str], ...] = ()
    """Node settings on top of ``NODE_CONFIGS`` (``--node-config key=value``)."""


def _wait_recovered(bootstrap: str, topic: str, timeout_s: float) -> tuple[list[str], float]:
    """Wait until no partition of ``topic`` is under-replicated, at most ``timeout_s``;
    returns the partitions still short and the seconds waited."""
    start = time.monotonic()
    with AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000}) as admin:
        while True:
            short = under_replicated(admin, topic)
            waited = time.monotonic() - start
            if not short or waited > timeout_s:
                return short, round(waited, 2)
            time.sleep(0.5)


def _check_target(options: RunOptions) -> None:
    chosen = scenario(options.scenario)
    if options.target not in TARGETS:
        raise ValueError(f"unknown target {options.target!r}; known: {', '.join(TARGETS)}")
    if options.target not in chosen.targets:
        raise ValueError(
            f"scenario {chosen.name} runs on {', '.join(chosen.targets)} only, not {options.target}"
        )


def _make_target(options: RunOptions, out: Path) -> Target:
    chosen = scenario(options.scenario)
    configs = {**NODE_CONFIGS, **dict(options.node_configs)}
    if options.target == "compose":
        return ComposeTarget(out / "compose", configs=configs)
    return LocalTarget(
        out / "cluster",
        nodes=3,
        configs=configs,
        netns=chosen.needs_network,
        lazyfs=chosen.needs_disk,
        clocks=chosen.needs_clocks,
    )


def run(options: RunOptions) -> dict[str, Any]:
    """Run one scenario; returns its summary (see the module docstring)."""
    workload = WORKLOADS[options.workload]
    _check_target(options)
    steps = schedule(options.scenario, options.seed, options.duration_s)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = _new_directory(
        options.results_dir / f"{options.scenario}-{options.workload}-{options.seed}-{stamp}"
    )
    target = _make_target(options, out)
    target.up()
    # The history's clock starts once the cluster serves: time 0 is the start of the load.
    history = HistoryWriter(out / "history.jsonl")
    bootstrap = target.bootstrap
    producers: list[ProducerWorker] = []
    consumers: list[GroupConsumerWorker | AssignConsumerWorker] = []
    nemesis = Nemesis(target, history, (TOPIC, 0))
    replica_logs: ReplicaLogs | None = None
    closed = False
    busy = BusyLoops(options.busy, options.duration_s + WORKER_GRACE_S + RECOVERY_TIMEOUT_S)
    node_logs = {n: path for n in target.node_ids if (path := target.node_log(n)) is not None}
    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            topic = NewTopic(TOPIC, options.partitions, 3, dict(workload.topic_configs))
            admin.create_topics([topic])[TOPIC].result()
            # The group's coordinator is up before the load starts, as in a cluster in
            # service: the first group lookup creates __consumer_offsets (50 partitions),
            # and creating them under the load and its fsyncs took a node up to 20 s, which
            # left the group consumers idle for most of a 25 s run.
            admin.list_consumer_group_offsets(GROUP)
        busy.start()
        log_marks = mark_logs(node_logs)
        started = time.monotonic()
        worker_deadline = started + options.duration_s + WORKER_GRACE_S
        producers = [
            ProducerWorker(
                n,
                history,
                bootstrap,
                TOPIC,
                options.partitions,
                workload,
                options.send_interval_s,
                worker_deadline,
            )
            for n in range(options.producers)
        ]
        consumers = [
            GroupConsumerWorker(GROUP, n, history, bootstrap, TOPIC, worker_deadline)
            for n in range(options.group_consumers)
        ]
        consumers.append(
            AssignConsumerWorker(
                0, history, bootstrap, TOPIC, options.partitions, worker_deadline, options.seed
            )
        )
        for worker in (*producers, *consumers):
            worker.start()
        for step in steps:
            _sleep_until(started + step.at_s)
            injected = nemesis.inject(step)
            _sleep_until(time.monotonic() + step.hold_s)
            nemesis.heal(injected)
        _sleep_until(started + options.duration_s)
        nemesis.heal_everything()
        for producer in producers:
            producer.stop()
        for producer in producers:
            producer.join(timeout=60)
            producer.close()
        short, recovery_wait_s = _wait_recovered(bootstrap, TOPIC, RECOVERY_TIMEOUT_S)
        busy.stop()
        events = read_events(node_logs, log_marks)
        for consumer in consumers:
            consumer.stop()
        for consumer in consumers:
            consumer.join(timeout=30)
        drained = drain(history, bootstrap, TOPIC, options.partitions, DRAIN_TIMEOUT_S)
        target.close()
        closed = True
        try:
            replica_logs = target.replica_logs(TOPIC, options.partitions)
        except Exception as exc:  # the comparison is extra evidence, not the run's purpose
            log.warning("reading the replicas' logs failed error=%s", exc)
        ops = history.ops()
        result: CheckResult = check(
            ops,
            FinalState(
                drained=drained,
                replica_logs=replica_logs or {},
                under_replicated_after_heal=short,
            ),
        )
    finally:
        busy.stop()
        for worker in (*producers, *consumers):
            worker.stop()
        if not closed:
            target.close()
        history.close()
    summary = {
        "scenario": options.scenario,
        "workload": options.workload,
        "target": options.target,
        "seed": options.seed,
        "duration_s": options.duration_s,
        "operations": len(ops),
        "faults": nemesis.injected,
        "valid": result.valid,
        "anomalies": dict(result.counts),
        "sends": {k: v for k, v in result.stats.items() if k.startswith("send-")},
        "stats": dict(result.stats),
        "recovery_ms": [ms for _, ms in result.recovery_ms],
        "recovery_ms_by_fault": _recovery_by_fault(ops, result),
        "recovery_wait_s": recovery_wait_s,
        "busy": options.busy,
        # From the nodes' logs, from the start of the load to the ISRs whole again (local
        # target only: zeros where the logs cannot be read).
        "events": events.to_json(),
        "replicas_compared": replica_logs is not None,
        "group_consumers_replaced": sum(
            c.replaced for c in consumers if isinstance(c, GroupConsumerWorker)
        ),
        "results": str(out),
    }
    (out / "result.json").write_text(
        json.dumps({"summary": summary, "check": result.to_json()}, indent=2)
    )
    (out / "report.html").write_text(render_report(summary, ops, result))
    log.info("chaos run done scenario=%s valid=%s results=%s", options.scenario, result.valid, out)
    return summary


def _new_directory(path: Path) -> Path:
    """Create ``path``, or ``path-2``, ``path-3``, ... when it exists (two runs started in
    the same second must not share a cluster)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path} and 998 numbered variants exist")


def _recovery_by_fault(ops: list[Op], result: CheckResult) -> dict[str, list[float | None]]:
    """Recovery times grouped by the fault each heal ended (the heal op's ``detail``); the
    final heal counts only when a send followed it."""
    by_index = {op.index: op for op in ops}
    grouped: dict[str, list[float | None]] = defaultdict(list)
    for index, ms in result.recovery_ms:
        op = by_index.get(index)
        detail = (op.detail if op is not None else None) or "?"
        if detail == END_OF_FAULTS and ms is None:
            continue  # the producers stop after it: nothing to measure
        grouped[detail].append(ms)
    return dict(grouped)


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
