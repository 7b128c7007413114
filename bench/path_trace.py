"""Where one ``acks=all`` record's time goes: each step from ``send()`` to its answer.

Starts three local nodes, creates a one-partition RF 3 topic (``min.insync.replicas=2``)
and sends ``--records`` 100-byte records one at a time with ``send().result()``
(``linger.ms=0``), ``--gap-ms`` apart, while ``perf trace`` records every process's
``sendto``, ``recvfrom``, ``write`` and ``fdatasync``. Each record's path is then rebuilt
from the system calls, by size and order (the workload is the only traffic besides the idle
calls, which are smaller):

    client sends Produce -> leader reads it -> writes the segment -> answers the followers'
    held fetches -> each follower reads, writes, fdatasyncs, sends its next fetch -> the
    leader answers the Produce -> the client reads the answer

and the median of each step is reported. The client's own steps (the caller's ``send``,
the hand-offs between the caller, the sender thread and the I/O thread) come from
timestamps taken in this process around the producer's private methods, so this script
names them and fails loudly if they are renamed.

``perf trace`` slows every traced system call down by some microseconds, so the absolute
figures run above an untraced run's: read the steps against each other. Needs ``perf``
(Debian: ``apt-get install linux-perf``, as root) and root. Writes
``bench/results/path_trace.json``.

Usage: python bench/path_trace.py [--records 300] [--gap-ms 10]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import ROOT, create_topic, local_cluster, write_report

from cluster.client import AdminClient, Producer
from cluster.client import _sender as sender_module
from lograft.protocol.framed import client as framed_client

TOPIC = "trace-rf3"
_TRACED = "sendto,recvfrom,write,pwrite64,fdatasync"
VALUE = b"y" * 100

_FULL = re.compile(r"^\s*([\d.]+) \(\s*([\d.]+) ms\): \S+/(\d+) (\w+)\((.*)\)\s+= (-?\d+)")
_START = re.compile(r"^\s*([\d.]+) \(\s*\): \S+/(\d+) (\w+)\(.*\)\s+\.\.\.")
_DONE = re.compile(
    r"^\s*([\d.]+) \(\s*([\d.]+) ms\): \S+/(\d+)\s+\.\.\. \[continued\]: (\w+)\(\)\)\s+= (-?\d+)"
)

_Event = tuple[float, float, int, str, int]
"""start ms, end ms, thread id, system call, its result (bytes for reads and writes)."""


def _parse(path: Path) -> list[_Event]:
    events: list[_Event] = []
    started: dict[int, tuple[float, str]] = {}
    for line in path.read_text(errors="replace").splitlines():
        full = _FULL.match(line)
        if full:
            at, took, tid, call, _, result = full.groups()
            events.append((float(at), float(at) + float(took), int(tid), call, int(result)))
            continue
        start = _START.match(line)
        if start:
            started[int(start.group(2))] = (float(start.group(1)), start.group(3))
            continue
        done = _DONE.match(line)
        if done and int(done.group(3)) in started:
            at, call = started.pop(int(done.group(3)))
            end = float(done.group(1)) + float(done.group(2))
            events.append((at, end, int(done.group(3)), call, int(done.group(5))))
    events.sort()
    return events


class _Timeline:
    """The traced calls in time order, each thread named by its role."""

    def __init__(self, events: list[_Event], roles: dict[int, str]) -> None:
        self.events = events
        self.starts = [event[0] for event in events]
        self.roles = roles

    def first(
        self, after: float, role: str, calls: tuple[str, ...], low: int, high: int
    ) -> _Event | None:
        """The first call at or after ``after`` (within 30 ms) by a thread of ``role``,
        one of ``calls``, whose result is in ``[low, high]``."""
        index = bisect.bisect_left(self.starts, after)
        while index < len(self.events) and self.events[index][0] <= after + 30.0:
            event = self.events[index]
            if (
                self.roles.get(event[2], "").startswith(role)
                and event[3] in calls
                and low <= event[4] <= high
            ):
                return event
            index += 1
        return None


def _node_steps(timeline: _Timeline) -> dict[str, list[float]]:
    steps: dict[str, list[float]] = defaultdict(list)
    big = (150, 1 << 20)
    produces = [
        event
        for event in timeline.events
        if timeline.roles.get(event[2]) == "client" and event[3] == "sendto" and event[4] > 150
    ]
    for sent in produces:
        read = timeline.first(sent[0], "leader", ("recvfrom",), sent[4], sent[4])
        written = read and timeline.first(read[0], "leader", ("write", "pwrite64"), 100, big[1])
        answered = written and timeline.first(written[1], "leader", ("sendto",), *big)
        if not (read and written and answered):
            continue
        followers = {}
        for name in ("follower-a", "follower-b"):
            got = timeline.first(answered[0] - 0.5, name, ("recvfrom",), *big)
            wrote = got and timeline.first(got[0], name, ("write", "pwrite64"), 100, big[1])
            synced = wrote and timeline.first(wrote[1], name, ("fdatasync",), 0, 0)
            asked = synced and timeline.first(synced[1], name, ("sendto",), 21, 149)
            if got and wrote and synced and asked:
                followers[name] = (got, wrote, synced, asked)
        if len(followers) < 2:
            continue
        last_ask = max(f[3][0] for f in followers.values())
        produce_answer = timeline.first(last_ask, "leader", ("sendto",), 21, 80)
        client_read = produce_answer and timeline.first(
            produce_answer[0], "client", ("recvfrom",), 1, big[1]
        )
        if not (produce_answer and client_read):
            continue
        steps["client sends Produce -> leader reads it"].append(read[0] - sent[0])
        steps["leader reads -> writes the segment"].append(written[0] - read[0])
        steps["leader writes -> answers the first held follower fetch"].append(
            answered[0] - written[1]
        )
        for got, wrote, synced, asked in followers.values():
            steps["leader answers -> follower reads"].append(got[0] - answered[0])
            steps["follower reads -> writes"].append(wrote[0] - got[0])
            steps["follower writes -> starts fdatasync"].append(synced[0] - wrote[1])
            steps["follower fdatasync"].append(synced[1] - synced[0])
            steps["follower fdatasync ends -> sends its next fetch"].append(asked[0] - synced[1])
        steps["second follower's fetch sent -> leader answers the Produce"].append(
            produce_answer[0] - last_ask
        )
        steps["leader answers -> client reads"].append(client_read[0] - produce_answer[0])
        steps["client sends -> client reads (the wire)"].append(client_read[0] - sent[0])
        leader_sync = timeline.first(read[0], "leader", ("fdatasync",), 0, 0)
        if leader_sync:
            steps["leader fdatasync (beside the above)"].append(leader_sync[1] - leader_sync[0])
    return steps


class _ClientClock:
    """Timestamps at the producer's hand-offs, for the record being sent."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}
        clock = self

        def wrap(owner: Any, name: str, mark: str, *, produce_only: bool = False) -> None:
            original = getattr(owner, name)

            def marked(self: Any, *args: Any) -> Any:
                if not produce_only or args[0] == framed_client.METHOD_IDS["Produce"]:
                    clock.marks.setdefault(mark, time.perf_counter())
                return original(self, *args)

            setattr(owner, name, marked)

        wrap(sender_module.Sender, "_send", "sender drains")
        wrap(framed_client.FramedChannel, "_start", "I/O thread writes", produce_only=True)
        wrap(framed_client.FramedChannel, "answered", "I/O thread reads the answer")
        wrap(sender_module.Sender, "_handle_answer", "sender handles the answer")


def _client_steps(
    bootstrap: str, records: int, gap_s: float, warmed: Callable[[], object]
) -> tuple[dict[str, list[float]], list[int]]:
    """The client's steps, and its threads (taken while the producer's threads run);
    ``warmed`` is called between the warm-up sends and the measured ones."""
    clock = _ClientClock()
    steps: dict[str, list[float]] = defaultdict(list)
    order = [
        "sender drains",
        "I/O thread writes",
        "I/O thread reads the answer",
        "sender handles the answer",
    ]
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}) as producer:
        producer.partitions_for(TOPIC)
        for _ in range(200):  # connections, producer id, warm code paths
            producer.send(TOPIC, VALUE, partition=0).result()
        warmed()
        for _ in range(records):
            time.sleep(gap_s)  # the records go one at a time, apart, as a trace needs
            clock.marks.clear()
            start = time.perf_counter()
            future = producer.send(TOPIC, VALUE, partition=0)
            queued = time.perf_counter()
            future.result()
            done = time.perf_counter()
            marks = clock.marks
            if any(name not in marks for name in order):
                continue
            times = [start, *(marks[name] for name in order), done]
            labels = ["send() called", *order, "result() returns"]
            steps["send() returns"].append((queued - start) * 1000)
            for index in range(len(times) - 1):
                steps[f"{labels[index]} -> {labels[index + 1]}"].append(
                    (times[index + 1] - times[index]) * 1000
                )
            steps["send() called -> result() returns"].append((done - start) * 1000)
        threads = _threads(os.getpid())
    return steps, threads


def _summary(steps: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        name: {"median_ms": round(statistics.median(values), 3), "samples": len(values)}
        for name, values in steps.items()
    }


def _threads(pid: int) -> list[int]:
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    args = parser.parse_args()
    if shutil.which("perf") is None or os.geteuid() != 0:
        sys.exit("path_trace needs root and perf (Debian: apt-get install linux-perf)")
    with (
        tempfile.TemporaryDirectory(prefix="lograft-trace-") as data,
        local_cluster(data) as bootstrap,
    ):
        create_topic(bootstrap, TOPIC, 1)
        with AdminClient(bootstrap_servers=bootstrap) as admin:
            partition = admin.describe_topics([TOPIC])[0].partitions[0]
        cluster = json.loads(Path(data, "cluster.json").read_text())
        nodes = {node["node_id"]: node["pid"] for node in cluster["nodes"]}
        followers = [r for r in partition.replicas if r != partition.leader]
        trace_file = Path(data, "perf-trace.txt")
        tracers: list[subprocess.Popen[bytes]] = []

        def start_tracing() -> None:
            tracers.append(
                subprocess.Popen(
                    ["perf", "trace", "-a", "-o", str(trace_file), "-e", _TRACED],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            time.sleep(2.0)  # perf trace attaches to every CPU before the sends begin

        try:
            client, client_threads = _client_steps(
                bootstrap, args.records, args.gap_ms / 1000, start_tracing
            )
        finally:
            for tracer in tracers:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(timeout=60)
        roles: dict[int, str] = {tid: "client" for tid in client_threads}
        for role, node_id in [
            ("leader", partition.leader),
            ("follower-a", followers[0]),
            ("follower-b", followers[1]),
        ]:
            for tid in _threads(nodes[node_id]):
                roles[tid] = role
        node = _node_steps(_Timeline(_parse(trace_file), roles))
    report = {
        "hardware": f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}",
        "setup": (
            "three local nodes (combined roles), one partition RF 3, min.insync.replicas=2, "
            f"acks=all, linger.ms=0, {len(VALUE)} B values, one record at a time "
            f"{args.gap_ms} ms apart; node steps from perf trace (which slows each traced "
            "call), client steps from timestamps in the client"
        ),
        "records": args.records,
        "client": _summary(client),
        "nodes": _summary(node),
    }
    write_report(report, ROOT / "bench" / "results" / "path_trace.json")


if __name__ == "__main__":
    main()
