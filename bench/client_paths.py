"""The paths users feel (issue 15): per-record send, synchronous latency, end to end, idle cost.

Starts three local nodes (``lograft cluster up``, combined roles) and measures, each as a
separate client process and ``--runs`` times (the report gives every run and the median):

* ``send_acks1_rf1``: ``Producer.send`` of 100-byte records, one call per record, ``acks=1``,
  a six-partition topic with one replica; records/s from the first send to ``flush()``, and
  the share of the send loop the caller spent waiting (for the GIL, a core, or buffer
  memory) rather than running: 1 - its thread's CPU time / the loop's wall time.
* ``send_acksall_rf3``: the same with ``acks=all`` on a three-replica topic
  (``min.insync.replicas=2``).
* ``sync_send``: ``send().result()`` one record at a time, ``linger.ms=0``, ``acks=all``,
  RF 3: p50 and p99 in ms.
* ``e2e_1000``: ``lograft perf e2e --throughput 1000``, ``acks=all``, RF 3: p50 and p99.
* ``consume_one_partition``: ``lograft perf consume`` of ``--consume-records`` 100-byte
  records (written first with ``perf produce --bulk``) from a one-partition RF 3 topic, one
  consumer with default settings: decoded records/s.
* ``idle``: CPU (% of one core) and RSS of each node over ``--idle-s`` seconds with nothing
  running, after the runs above (their topics exist).
* ``one_node_killed``: then one node is killed (SIGKILL) and, with the same three-node
  bootstrap list, one record is sent at once to each partition of the six-partition RF 3
  topic (``acks=all``): the seconds from the kill to each acknowledgement (every partition
  waits for the controller to fence the node, after ``broker.session.timeout.ms``, which
  drops it from the ISRs and moves the leadership of those it led), then
  ``send_acksall_rf3`` and ``sync_send`` again on two nodes.

Prints one JSON document and writes it to bench/results/client_paths.json.

Usage: python bench/client_paths.py [--runs 3] [--records 200000] [--idle-s 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import LOGRAFT, ROOT, cpu_seconds, local_cluster, run_json, write_report

# One client run, in its own process so that its interpreter starts clean.
_SEND = """
import json, sys, time
from cluster.client import Producer
boot, topic, acks, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
payload = b"x" * 100
with Producer(bootstrap_servers=boot, acks=acks) as producer:
    producer.partitions_for(topic)
    for _ in range(2000):
        producer.send(topic, payload)
    producer.flush()
    start = time.perf_counter()
    cpu_start = time.thread_time()
    send = producer.send
    for _ in range(count):
        send(topic, payload)
    sent = time.perf_counter()
    caller_cpu = time.thread_time() - cpu_start
    producer.flush()
    done = time.perf_counter()
# While it sends, the caller either runs (its thread's CPU time) or waits: for the GIL
# (held by the sender and I/O threads), for a core, or for buffer memory.
print(json.dumps({"records_per_s": round(count / (done - start)),
                  "send_calls_s": round(sent - start, 3), "flush_s": round(done - sent, 3),
                  "caller_cpu_s": round(caller_cpu, 3),
                  "caller_waiting_share": round(1 - caller_cpu / (sent - start), 3)}))
"""

_SYNC = """
import json, sys, time
from cluster.client import Producer
boot, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
latencies = []
with Producer(bootstrap_servers=boot, acks="all", linger_ms=0) as producer:
    for _ in range(20):
        producer.send(topic, b"x" * 100).result()
    for _ in range(count):
        start = time.perf_counter()
        producer.send(topic, b"x" * 100).result()
        latencies.append((time.perf_counter() - start) * 1000.0)
latencies.sort()
print(json.dumps({"p50_ms": round(latencies[len(latencies) // 2], 3),
                  "p99_ms": round(latencies[int(len(latencies) * 0.99)], 3)}))
"""


# One record to each partition right after a node was killed: when is each acknowledged?
_RECOVER = """
import json, sys, time
from cluster.client import Producer
boot, topic, killed_at = sys.argv[1], sys.argv[2], float(sys.argv[3])
acked = {}
with Producer(bootstrap_servers=boot, acks="all", linger_ms=0) as producer:
    futures = [
        producer.send(topic, b"x" * 100, partition=p,
                      callback=lambda f, p=p: acked.__setitem__(p, time.time() - killed_at))
        for p in range(len(producer.partitions_for(topic)))
    ]
    for future in futures:
        future.result(timeout=120)  # a record not acknowledged by then fails the benchmark
print(json.dumps({"acked_after_s": [round(acked[p], 2) for p in sorted(acked)]}))
"""


def _create(bootstrap: str, topic: str, partitions: int, replicas: int) -> None:
    from cluster.client import AdminClient, NewTopic

    configs = {"min.insync.replicas": str(min(replicas, 2))}
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions, replicas, configs=configs)])[topic].result(
            timeout=60
        )


def _client(code: str, *args: str) -> dict[str, Any]:
    return run_json([sys.executable, "-c", code, *args])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _idle(data: str, seconds: float) -> dict[str, Any]:
    pids = [node["pid"] for node in json.loads(Path(data, "cluster.json").read_text())["nodes"]]
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(seconds)  # measuring idle cost over a fixed window
    per_node = {
        str(pid): {
            "cpu_percent": round((cpu_seconds(pid) - before[pid]) / seconds * 100, 2),
            "rss_mib": _rss_mib(pid),
        }
        for pid in pids
    }
    total = round(sum(n["cpu_percent"] for n in per_node.values()), 2)
    return {"seconds": seconds, "total_cpu_percent_of_one_core": total, "nodes": per_node}


def _one_node_killed(data: str, bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    nodes = json.loads(Path(data, "cluster.json").read_text())["nodes"]
    victim = nodes[-1]
    killed_at = time.time()
    os.kill(victim["pid"], signal.SIGKILL)  # a node of the cluster this script started
    recovery = _client(_RECOVER, bootstrap, "send-rf3", str(killed_at))
    send = [
        _client(_SEND, bootstrap, "send-rf3", "all", str(args.records)) for _ in range(args.runs)
    ]
    sync = [_client(_SYNC, bootstrap, "sync-rf3", str(args.sync_records)) for _ in range(args.runs)]
    return {
        "killed_node": victim["node_id"],
        "acked_after_kill_s": recovery["acked_after_s"],
        "send_acksall_rf3": {
            "median_records_per_s": _median(send, "records_per_s"),
            "runs": send,
        },
        "sync_send": {
            "median_p50_ms": _median(sync, "p50_ms"),
            "median_p99_ms": _median(sync, "p99_ms"),
            "runs": sync,
        },
    }


def _median(runs: list[dict[str, Any]], field: str) -> float:
    return round(float(statistics.median(run[field] for run in runs)), 3)


# Over 70 lines: the benchmark's cases run and summarised in order, on one cluster.
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sync-records", type=int, default=500)
    parser.add_argument("--e2e-records", type=int, default=5_000)
    parser.add_argument("--consume-records", type=int, default=2_000_000)
    parser.add_argument("--idle-s", type=float, default=30.0)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "hardware": f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}",
        "setup": "three local nodes (combined roles), min.insync.replicas=2 where RF 3",
        "runs": args.runs,
    }
    with tempfile.TemporaryDirectory() as data, local_cluster(data) as bootstrap:
        _create(bootstrap, "send-rf1", 6, 1)
        _create(bootstrap, "send-rf3", 6, 3)
        _create(bootstrap, "sync-rf3", 1, 3)
        _create(bootstrap, "e2e-rf3", 1, 3)
        _create(bootstrap, "consume-rf3", 1, 3)
        fill = [*LOGRAFT, "--bootstrap", bootstrap, "perf", "produce", "--topic", "consume-rf3"]
        fill += ["--num-records", str(args.consume_records), "--record-size", "100"]
        run_json([*fill, "--bulk", "--acks", "all", "--json"])
        cases: dict[str, list[dict[str, Any]]] = {
            "send_acks1_rf1": [],
            "send_acksall_rf3": [],
            "sync_send": [],
            "e2e_1000": [],
            "consume_one_partition": [],
        }
        for _ in range(args.runs):
            n = str(args.records)
            cases["send_acks1_rf1"].append(_client(_SEND, bootstrap, "send-rf1", "1", n))
            cases["send_acksall_rf3"].append(_client(_SEND, bootstrap, "send-rf3", "all", n))
            cases["sync_send"].append(_client(_SYNC, bootstrap, "sync-rf3", str(args.sync_records)))
            e2e = [*LOGRAFT, "--bootstrap", bootstrap, "perf", "e2e", "--topic", "e2e-rf3"]
            e2e += ["--num-records", str(args.e2e_records), "--throughput", "1000"]
            e2e += ["--acks", "all", "--json"]
            result = run_json(e2e)
            cases["e2e_1000"].append(
                {"p50_ms": result["latency_ms_p50"], "p99_ms": result["latency_ms_p99"]}
            )
            consume = [*LOGRAFT, "--bootstrap", bootstrap, "perf", "consume"]
            consume += ["--topic", "consume-rf3", "--messages", str(args.consume_records)]
            result = run_json([*consume, "--json"])
            cases["consume_one_partition"].append(
                {"records_per_s": round(result["records_per_sec"])}
            )
        report["cases"] = {
            "send_acks1_rf1": {
                "median_records_per_s": _median(cases["send_acks1_rf1"], "records_per_s"),
                "runs": cases["send_acks1_rf1"],
            },
            "send_acksall_rf3": {
                "median_records_per_s": _median(cases["send_acksall_rf3"], "records_per_s"),
                "runs": cases["send_acksall_rf3"],
            },
            "sync_send": {
                "median_p50_ms": _median(cases["sync_send"], "p50_ms"),
                "median_p99_ms": _median(cases["sync_send"], "p99_ms"),
                "runs": cases["sync_send"],
            },
            "e2e_1000": {
                "median_p50_ms": _median(cases["e2e_1000"], "p50_ms"),
                "median_p99_ms": _median(cases["e2e_1000"], "p99_ms"),
                "runs": cases["e2e_1000"],
            },
            "consume_one_partition": {
                "median_records_per_s": _median(cases["consume_one_partition"], "records_per_s"),
                "runs": cases["consume_one_partition"],
            },
        }
        report["idle"] = _idle(data, args.idle_s)
        report["one_node_killed"] = _one_node_killed(data, bootstrap, args)
    write_report(report, ROOT / "bench" / "results" / "client_paths.json")


if __name__ == "__main__":
    main()
