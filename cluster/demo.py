"""``make run``: a local three-node cluster and a short demo; the cluster keeps running.

A user-facing entry point (it prints to the terminal). The cluster's processes outlive this
command; ``lograft cluster down`` stops them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from cluster.client import AdminClient, Consumer, NewTopic, Producer
from cluster.launcher import ClusterSpec, LocalCluster
from lograft.protocol.errors import LograftError, TopicAlreadyExistsError

DEMO_TOPIC = "demo"
DEMO_RECORDS = 12
DEMO_GROUP = "demo-readers"
CONSUME_DEADLINE_S = 30.0


def _demo(bootstrap: str) -> None:
    config = {"bootstrap.servers": bootstrap}
    with AdminClient(config) as admin:
        try:
            admin.create_topics([NewTopic(DEMO_TOPIC, num_partitions=3, replication_factor=3)])[
                DEMO_TOPIC
            ].result()
            print(f"created topic {DEMO_TOPIC!r}: 3 partitions, 3 replicas each")
        except TopicAlreadyExistsError:
            print(f"topic {DEMO_TOPIC!r} exists already (data kept from an earlier run)")
        for description in admin.describe_topics([DEMO_TOPIC]):
            for partition in description.partitions:
                print(
                    f"  partition {partition.partition}: leader {partition.leader}, "
                    f"replicas {list(partition.replicas)}, isr {list(partition.isr)}"
                )
    with Producer({**config, "acks": "all"}) as producer:
        futures = [
            producer.send(DEMO_TOPIC, f"hello {n}".encode(), key=f"user-{n % 4}".encode())
            for n in range(DEMO_RECORDS)
        ]
        producer.flush()
        for future in futures[:3]:
            meta = future.result()
            print(f"produced to partition {meta.partition} at offset {meta.offset}")
    # A consumer group: the coordinator assigns the partitions, the member commits what it
    # has read, and a later member of the same group resumes there (a rerun of the demo
    # reads only the records that run added).
    group_config = {
        **config,
        "group.id": DEMO_GROUP,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    with Consumer(group_config) as consumer:
        consumer.subscribe([DEMO_TOPIC])
        seen = 0
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while seen < DEMO_RECORDS and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=500):
                seen += 1
                if seen <= 5:
                    key = record.key.decode() if record.key else None
                    value = record.value.decode() if record.value else None
                    print(f"consumed p{record.partition}@{record.offset} key={key} value={value}")
        committed = consumer.commit()
        owned = sorted(tp.partition for tp in consumer.assignment())
        print(f"consumed {seen} records in group {DEMO_GROUP!r} (partitions {owned})")
        print(
            "committed offsets: "
            + ", ".join(f"p{tp.partition}={offset}" for tp, offset in sorted(committed.items()))
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Start (or find running) the local cluster, then run the demo."""
    parser = argparse.ArgumentParser(prog="python -m cluster.demo")
    parser.add_argument("--data-dir", type=Path, default=Path("data/cluster"))
    parser.add_argument("--base-port", type=int, default=9092)
    args = parser.parse_args(argv)
    cluster = LocalCluster(ClusterSpec(data_dir=args.data_dir, base_port=args.base_port))
    try:
        started = cluster.up()
    except LograftError as exc:
        print(f"lograft: {exc}")
        return 1
    if started:
        print(f"started nodes {started} with data in {args.data_dir}")
    print(f"cluster is up; bootstrap {cluster.bootstrap}\n")
    try:
        _demo(cluster.bootstrap)
    except LograftError as exc:
        print(f"lograft: demo failed: {exc}")
        return 1
    print(
        "\nThe cluster keeps running. Next:\n"
        "  source .venv/bin/activate\n"
        f"  lograft cluster status --data-dir {args.data_dir}\n"
        "  lograft topics describe demo\n"
        "  printf 'a\\nb\\n' | lograft produce demo\n"
        f"  lograft consume demo --from-beginning --max-messages {DEMO_RECORDS + 2}\n"
        f"  lograft cluster down --data-dir {args.data_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
