"""One chaos run: start a cluster, load it, inject the scheduled faults, heal, drain, check.

:func:`run` starts its own three-node cluster on a :class:`~chaos.targets.Target` (local
processes on free ports with their data under the results directory, each node in a network
namespace of its own when the scenario cuts the network, the data on LazyFS when it loses
power; or the compose project, its data on LazyFS when it loses power), creates a
topic of three replicas with the workload's configs, starts the producers, the group
consumers and a consumer by assignment, performs the scenario's schedule
(:func:`chaos.scenarios.schedule`) through a :class:`~chaos.nemesis.Nemesis`, heals
everything, stops the producers, waits (bounded) until every partition's ISR is whole again,
stops the consumers, drains every partition, stops the cluster, reads each replica's log
below its high watermark from its data directory (local target; compose on LazyFS), runs
the checker and writes
``history.jsonl``, ``result.json`` and ``report.html`` into
``RESULTS/<scenario>-<workload>-<seed>-<time>/``. The summary it returns is what
``python -m chaos run --json`` prints. A partition the drain cannot read (no leader: its
replicas halted, or none in sync) is drained no further and named to the checker
(``undrained``), as is each node that halted, from the nodes' logs (``node-halted``).

A workload with a pipeline (``txn-pipeline``) also creates the output topic, runs
transactional pipeline workers, a ``read_committed`` reader of the output and an observer of
the pipeline group's committed offsets in place of the group consumers; after the faults it
waits (bounded) until the group's committed offsets reach the input's end, stops them, reads
the committed offsets once more, and drains the output with ``read_uncommitted`` and (once
every transaction ended) ``read_committed``. Its faults aimed at a leader (``kill-leader``,
``pause-leader``, ``partition-leader``, ...) aim at the leader of the pipeline group's
``__consumer_offsets`` partition, its group coordinator (which takes its members'
heartbeats, transactional offset commits and offset fetches), instead of the input's
partition 0.
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
from chaos.compose_target import ComposeTarget
from chaos.history import HistoryWriter, Op
from chaos.nemesis import END_OF_FAULTS, Nemesis
from chaos.node_events import mark_logs, read_events, read_halts
from chaos.report import render_report
from chaos.scenarios import scenario, schedule
from chaos.targets import LocalTarget, ReplicaLogs, Target, under_replicated
from chaos.workload import (
    WORKLOADS,
    AssignConsumerWorker,
    GroupConsumerWorker,
    OffsetObserver,
    OpenTransactionsError,
    PipelineWorker,
    ProducerWorker,
    drain,
    observe_committed,
    wait_consumed,
    warm_up_transactions,
)
from cluster.client import AdminClient, Consumer
from cluster.client.admin import NewTopic
from lograft.protocol.topic_partition import TopicPartition, partition_for_name

__all__ = ["TARGETS", "RunOptions", "run"]

log = logging.getLogger(__name__)

TOPIC = "chaos"
GROUP = "g0"
SINK = "chaos-out"
"""The pipeline's output topic (``txn-pipeline``); its input is ``TOPIC``."""
PIPELINE_GROUP = "pipeline"
OFFSETS_TOPIC = "__consumer_offsets"
PIPELINE_TIMEOUT_S = 120.0
"""How long after the producers stop the pipeline may take to commit the input's end."""
TARGETS = ("local", "compose")
"""Where a run's cluster lives: ``local`` node processes here, or the ``compose`` project."""
RECOVERY_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
PARTITION_DRAIN_TIMEOUT_S = 30.0
"""Bound of each partition's drain when the whole topic's drain failed."""
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
    pipelines: int = 3
    """Pipeline workers (a workload with a pipeline only)."""
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
        return ComposeTarget(out / "compose", configs=configs, lazyfs=chosen.needs_disk)
    return LocalTarget(
        out / "cluster",
        nodes=3,
        configs=configs,
        netns=chosen.needs_network,
        lazyfs=chosen.needs_disk,
        clocks=chosen.needs_clocks,
    )


# Over 70 lines: a run's phases in order, sharing the workers and target its cleanup stops.
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
    consumers: list[
        GroupConsumerWorker | AssignConsumerWorker | PipelineWorker | OffsetObserver
    ] = []
    nemesis: Nemesis | None = None
    replica_logs: ReplicaLogs | None = None
    closed = False
    busy = BusyLoops(options.busy, options.duration_s + WORKER_GRACE_S + RECOVERY_TIMEOUT_S)
    node_logs = {n: path for n in target.node_ids if (path := target.node_log(n)) is not None}
    pipelines: list[PipelineWorker] = []
    pipeline_short: dict[str, int] = {}
    pipeline_wait_s = 0.0
    aimed_at = (TOPIC, 0)
    try:
        with AdminClient({"bootstrap.servers": bootstrap}) as admin:
            topics = [TOPIC, SINK] if workload.pipeline else [TOPIC]
            created = admin.create_topics(
                [NewTopic(t, options.partitions, 3, dict(workload.topic_configs)) for t in topics]
            )
            for name in topics:
                created[name].result()
            # The group's coordinator is up before the load starts, as in a cluster in
            # service: the first group lookup creates __consumer_offsets (50 partitions),
            # and creating them under the load and its fsyncs took a node up to 20 s, which
            # left the group consumers idle for most of a 25 s run.
            admin.list_consumer_group_offsets(GROUP)
        if workload.pipeline:
            warm_up_transactions(bootstrap)  # __transaction_state, likewise
            aimed_at = _coordinator_partition(bootstrap, PIPELINE_GROUP)
        nemesis = Nemesis(target, history, aimed_at)
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
                workload.send_interval_s or options.send_interval_s,
                worker_deadline,
            )
            for n in range(options.producers)
        ]
        if workload.pipeline:
            # They go on after the producers stop, until the input is consumed.
            pipeline_deadline = worker_deadline + RECOVERY_TIMEOUT_S + PIPELINE_TIMEOUT_S
            pipelines = [
                PipelineWorker(
                    n,
                    history,
                    bootstrap,
                    TOPIC,
                    SINK,
                    PIPELINE_GROUP,
                    pipeline_deadline,
                    options.seed,
                )
                for n in range(options.pipelines)
            ]
            consumers = [
                *pipelines,
                AssignConsumerWorker(
                    1,
                    history,
                    bootstrap,
                    SINK,
                    options.partitions,
                    pipeline_deadline,
                    options.seed,
                    isolation_level="read_committed",
                ),
                OffsetObserver(
                    0,
                    history,
                    bootstrap,
                    PIPELINE_GROUP,
                    TOPIC,
                    options.partitions,
                    pipeline_deadline,
                ),
            ]
        else:
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
        if workload.pipeline:
            short_sink, sink_wait_s = _wait_recovered(bootstrap, SINK, RECOVERY_TIMEOUT_S)
            short, recovery_wait_s = short + short_sink, recovery_wait_s + sink_wait_s
            pipeline_short, pipeline_wait_s = wait_consumed(
                bootstrap, PIPELINE_GROUP, TOPIC, options.partitions, PIPELINE_TIMEOUT_S
            )
        busy.stop()
        events = read_events(node_logs, log_marks)
        halts = read_halts(node_logs, log_marks)
        for consumer in consumers:
            consumer.stop()
        for consumer in consumers:
            consumer.join(timeout=30)
        drained, undrained = _drain_what_can_be(history, bootstrap, options.partitions)
        if workload.pipeline:
            drained |= _drain_pipeline(history, bootstrap, options.partitions)
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
                undrained=undrained,
                halted_nodes=halts,
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
        "faults": nemesis.injected if nemesis is not None else 0,
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
        **(
            {
                "txns": {k: v for k, v in result.stats.items() if k.startswith("txn-")},
                "pipeline_consumers_replaced": sum(w.replaced for w in pipelines),
                "pipeline_producers_recreated": sum(w.recreated for w in pipelines),
                "pipeline_crashes": sum(w.crashed for w in pipelines),
                "pipeline_wait_s": pipeline_wait_s,
                "pipeline_short": pipeline_short,
                "leader_faults_aimed_at": f"{aimed_at[0]}-{aimed_at[1]}",
            }
            if workload.pipeline
            else {}
        ),
        "results": str(out),
    }
    (out / "result.json").write_text(
        json.dumps({"summary": summary, "check": result.to_json()}, indent=2)
    )
    (out / "report.html").write_text(render_report(summary, ops, result))
    log.info("chaos run done scenario=%s valid=%s results=%s", options.scenario, result.valid, out)
    return summary


def _drain_what_can_be(
    history: HistoryWriter, bootstrap: str, partitions: int
) -> tuple[dict[tuple[str, int], list[tuple[int, str | None]]], list[tuple[str, int]]]:
    """Drain the topic; when that fails (a partition without a leader after healing: its
    replicas halted, or none of them in sync), drain each partition alone, each bounded by
    :data:`PARTITION_DRAIN_TIMEOUT_S`. The records drained, and the partitions that could
    not be (the checker reports them and counts nothing sent to them as lost)."""
    try:
        return drain(history, bootstrap, TOPIC, partitions, DRAIN_TIMEOUT_S), []
    except Exception as exc:  # recorded in the history (info); each partition goes on alone
        log.warning("drain failed, draining each partition alone error=%s", exc)
    drained: dict[tuple[str, int], list[tuple[int, str | None]]] = {}
    undrained = []
    for p in range(partitions):
        try:
            drained |= drain(
                history, bootstrap, TOPIC, partitions, PARTITION_DRAIN_TIMEOUT_S, only=[p]
            )
        except Exception as exc:
            log.warning("partition not drained partition=%s-%d error=%s", TOPIC, p, exc)
            undrained.append((TOPIC, p))
    return drained, undrained


def _coordinator_partition(bootstrap: str, group: str) -> tuple[str, int]:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group``."""
    with AdminClient({"bootstrap.servers": bootstrap}) as admin:
        (offsets,) = admin.describe_topics([OFFSETS_TOPIC])
    return OFFSETS_TOPIC, partition_for_name(group, len(offsets.partitions))


def _drain_pipeline(
    history: HistoryWriter, bootstrap: str, partitions: int
) -> dict[tuple[str, int], list[tuple[int, str | None]]]:
    """The pipeline's end (its workers stopped): the group's committed offsets once more
    (an ``offset-fetch`` op), the output as ``read_uncommitted`` reads it (returned, with the
    input's drain the log the checks compare with) and as ``read_committed`` does."""
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": PIPELINE_GROUP,
            "isolation.level": "read_committed",
            "client.id": "offset-fetch-final",
        }
    )
    try:
        for _ in range(10):  # bounded: a few coordinator moves at most
            found = observe_committed(history, "offset-fetch-final", reader, PIPELINE_GROUP, tps)
            if found is not None:
                break
            time.sleep(1.0)
    finally:
        reader.close(5000)
    drained = drain(history, bootstrap, SINK, partitions, DRAIN_TIMEOUT_S)
    try:
        drain(
            history,
            bootstrap,
            SINK,
            partitions,
            DRAIN_TIMEOUT_S,
            "read_committed",
            source=TOPIC,
            group=PIPELINE_GROUP,
        )
    except OpenTransactionsError as exc:  # the checker reports it (hanging-txn)
        log.warning("transactions never ended open=%s", exc.open)
    return drained


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
