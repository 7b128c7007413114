"""``make run``: start a node in ./data, show produce and consume, keep the node serving.

This is a user-facing entry point (it prints to the terminal); the node runs as a child
process and receives SIGTERM on Ctrl-C, so it shuts down cleanly.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc

from cluster.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from cluster.errors import TopicAlreadyExistsError

READY_TIMEOUT_S = 60.0
DEMO_TOPIC = "demo"


def _wait_ready(address: str, node: subprocess.Popen[bytes]) -> None:
    with grpc.insecure_channel(address) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=READY_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            node.terminate()
            raise SystemExit(f"the node did not start listening on {address}") from None


def _demo(bootstrap: str) -> None:
    config = {"bootstrap.servers": bootstrap}
    try:
        AdminClient(config).create_topics([NewTopic(DEMO_TOPIC, num_partitions=3)])
        print(f"created topic {DEMO_TOPIC!r} with 3 partitions")
    except TopicAlreadyExistsError:
        print(f"topic {DEMO_TOPIC!r} exists already (data kept from an earlier run)")
    with Producer({**config, "acks": "all"}) as producer:
        futures = [
            producer.send(DEMO_TOPIC, f"hello {n}".encode(), key=f"user-{n % 4}".encode())
            for n in range(12)
        ]
        producer.flush()
        for future in futures[:3]:
            meta = future.result()
            print(f"produced to partition {meta.partition} at offset {meta.offset}")
    consumer = Consumer({**config, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(DEMO_TOPIC, p) for p in range(3)])
        consumer.seek_to_beginning(*consumer.assignment())
        seen = 0
        for _ in range(20):
            for record in consumer.poll(timeout_ms=500):
                seen += 1
                if seen <= 5:
                    key = record.key.decode() if record.key else None
                    value = record.value.decode() if record.value else None
                    print(f"consumed p{record.partition}@{record.offset} key={key} value={value}")
            if seen >= 12:
                break
        print(f"consumed {seen} records in total")
    finally:
        consumer.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Start the node, run the demo, then serve until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m cluster.demo")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("DATA", "data")))
    parser.add_argument("--listen", default="127.0.0.1:9092")
    args = parser.parse_args(argv)
    command = [
        sys.executable,
        "-m",
        "cluster.node",
        "--node-id",
        "1",
        "--data-dir",
        str(args.data_dir / "node-1"),
        "--listen",
        args.listen,
    ]
    print(f"starting node 1 on {args.listen}, data in {args.data_dir / 'node-1'}")
    node = subprocess.Popen(command)
    try:
        _wait_ready(args.listen, node)
        _demo(args.listen)
        print(
            "\nThe node keeps running. In another terminal:\n"
            "  source .venv/bin/activate\n"
            "  lograft topics list\n"
            "  printf 'a\\nb\\n' | lograft produce demo\n"
            "  lograft consume demo --from-beginning --max-messages 14\n"
            "Press Ctrl-C to stop the node."
        )
        return node.wait()
    except KeyboardInterrupt:
        node.send_signal(signal.SIGTERM)
        return node.wait(timeout=30)
    finally:
        if node.poll() is None:
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
