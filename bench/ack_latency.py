"""An ``acks=all`` record's acknowledgement at fixed rates, and what it costs each node.

Starts three local nodes, creates a one-partition topic (RF 3, ``min.insync.replicas=2``
unless ``--replicas`` says otherwise) and, for each rate in ``--rates``, runs one client
process that calls ``Producer.send`` (``linger.ms=0``) at that pace for ``--seconds`` and
times each record from ``send`` to its acknowledgement (a callback given to ``send``). Each
node's CPU over the run comes from ``/proc``, the client's from its own process time; the
achieved rate is the records over the time from the first send to the end of ``flush()``,
so a rate above what the client and cluster can do measures the maximum (``--rates
1000000``). Reports p50/p99 per rate and run, the median of ``--runs``, and writes
bench/results/ack_latency.json.

``--callback`` chooses how the client times its records: ``lambda`` (the default) gives
``send`` a new lambda per record that holds its send time; ``shared`` gives every record one
function, which finds the record's send time by its offset, as the docs advise: the
producer then keeps one object alive per record (its future), not two. ``--gc-freeze`` has
the client call ``gc.freeze()`` after its warm-up: what a busy producer keeps alive per
record sets off full collections of every object its imports made, which stall it for
8-14 ms at a time, and those stalls are the p99.

Usage: python bench/ack_latency.py [--rates 50,200,1000] [--seconds 5] [--runs 3]
       [--gc-freeze] [--callback lambda|shared]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import ROOT, cpu_seconds, local_cluster, run_json, write_report

_CLIENT = """
import gc, json, sys, time
from array import array
from cluster.client import Producer
boot, topic, rate, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
# An array, not a list: a list of a million floats is walked by every full collection
# and would add the benchmark's own pauses to the producer's.
latencies = array("d")
count = int(rate * seconds)
shared = sys.argv[6] == "shared"
sent_at = array("d", bytes(8 * count if shared else 0))
with Producer(bootstrap_servers=boot, acks="all", linger_ms=0) as producer:
    for _ in range(50):
        first_offset = producer.send(topic, b"w" * 100).result(timeout=30).offset + 1
    if sys.argv[5] == "freeze":
        gc.freeze()

    def on_delivery(future):
        # One function for every record: its send time is found by its offset (this
        # client is the partition's only writer).
        latencies.append(time.perf_counter() - sent_at[future.result().offset - first_offset])

    start = time.perf_counter()
    cpu_start = time.process_time()
    for i in range(count):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(due - now, 0.001))  # pacing the sends, not synchronising
        sent = time.perf_counter()
        if shared:
            sent_at[i] = sent
            producer.send(topic, b"x" * 100, callback=on_delivery)
        else:
            producer.send(
                topic,
                b"x" * 100,
                callback=lambda _, sent=sent: latencies.append(time.perf_counter() - sent),
            )
    producer.flush()
    done = time.perf_counter()
    cpu_s = time.process_time() - cpu_start
latencies = sorted(latencies)
print(json.dumps({
    "records": len(latencies),
    "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
    "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1e3, 3),
    "achieved_rate": round(len(latencies) / (done - start)),
    "client_cpu_percent": round(cpu_s / (done - start) * 100, 1),
}))
"""


def _one_run(
    bootstrap: str,
    pids: list[int],
    rate: float,
    seconds: float,
    gc_freeze: bool,
    callback: str,
) -> dict[str, Any]:
    before = {pid: cpu_seconds(pid) for pid in pids}
    gc_mode = "freeze" if gc_freeze else "default"
    client = [sys.executable, "-c", _CLIENT, bootstrap, "acks", str(rate), str(seconds)]
    result = run_json([*client, gc_mode, callback])
    result["node_cpu_percent"] = sorted(
        (round((cpu_seconds(pid) - before[pid]) / seconds * 100, 1) for pid in pids), reverse=True
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,200,1000")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument(
        "--gc-freeze", action="store_true", help="the client calls gc.freeze() after warm-up"
    )
    parser.add_argument(
        "--callback",
        choices=("lambda", "shared"),
        default="lambda",
        help="a new lambda per record (the default) or one function for every record",
    )
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",")]
    report: dict[str, Any] = {
        "setup": f"three local nodes, one partition, RF {args.replicas}, acks=all, "
        f"linger.ms=0, 100 B, {args.seconds} s a run, {os.cpu_count()} cores; node CPU is "
        "each node's share of one core over the run (the partition leader first), client CPU "
        "the producer process's from its first paced send to its flush; achieved_rate is "
        "records over that time (a rate above the maximum measures the maximum); client "
        + ("calls gc.freeze() after warm-up" if args.gc_freeze else "with Python's default gc")
        + (
            ", one callback function for every record"
            if args.callback == "shared"
            else ", a new lambda per record as the callback"
        ),
        "runs": args.runs,
        "rates": {},
    }
    with tempfile.TemporaryDirectory() as data, local_cluster(data) as bootstrap:
        from cluster.client import AdminClient, NewTopic

        configs = {"min.insync.replicas": str(min(args.replicas, 2))}
        with AdminClient(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([NewTopic("acks", 1, args.replicas, configs=configs)])[
                "acks"
            ].result(timeout=60)
        pids = [node["pid"] for node in json.loads(Path(data, "cluster.json").read_text())["nodes"]]
        for rate in rates:
            runs = [
                _one_run(bootstrap, pids, rate, args.seconds, args.gc_freeze, args.callback)
                for _ in range(args.runs)
            ]
            report["rates"][str(int(rate))] = {
                "median_p50_ms": statistics.median(run["p50_ms"] for run in runs),
                "median_p99_ms": statistics.median(run["p99_ms"] for run in runs),
                "runs": runs,
            }
    write_report(report, ROOT / "bench" / "results" / "ack_latency.json")


if __name__ == "__main__":
    main()
