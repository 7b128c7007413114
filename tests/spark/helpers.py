"""What the Spark tests share: topics, reading a topic back, input files."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from cluster.client.consumer import Consumer, ConsumerRecord
from lograft.protocol.topic_partition import TopicPartition
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster

READ_TIMEOUT_S = 60.0


def make_topic(cluster: QuorumCluster, name: str, partitions: int) -> None:
    """Create ``name`` (RF 3) and wait until every partition has a leader."""
    assert cluster.create_topic(cluster.nodes[1], name, partitions, 3) == 0

    def led() -> bool:
        leaders = cluster.leaders(cluster.nodes[1], name)
        return len(leaders) == partitions and all(leader >= 0 for leader in leaders.values())

    wait_until(led, CLUSTER_TIMEOUT_S, f"leaders for {name}")


def read_topic(
    cluster: QuorumCluster,
    topic: str,
    partitions: int,
    isolation: str = "read_committed",
    *,
    settled: bool = True,
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end offsets (the LSO for read_committed).

    With ``settled`` (for a reader after a writer finished), it first waits until no
    transaction holds an LSO back: a committed transaction's markers are written after
    its commit returns, so the rows show a little later. ``settled=False`` reads at once,
    where a transaction is meant to be open.
    """
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        bootstrap_servers=cluster.bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
    ) as consumer:
        if settled and isolation == "read_committed":
            with Consumer(bootstrap_servers=cluster.bootstrap) as uncommitted:
                wait_until(
                    lambda: consumer.end_offsets(tps) == uncommitted.end_offsets(tps),
                    READ_TIMEOUT_S,
                    f"no transaction open on {topic}",
                )
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while not all(consumer.position(tp) >= ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} in time"
            records += consumer.poll(timeout_ms=200)
        return records


def write_input_files(directory: Path, files: Sequence[Sequence[dict[str, str]]]) -> None:
    """JSON-lines files ``part-000.json``...: a file source with ``maxFilesPerTrigger=1``
    reads one per micro-batch, in order, and replays identical rows."""
    directory.mkdir(parents=True, exist_ok=True)
    base = time.time() - len(files)
    for index, rows in enumerate(files):
        text = "".join(json.dumps(row) + "\n" for row in rows)
        path = directory / f"part-{index:03d}.json"
        path.write_text(text)
        # Spark's file source takes files in modification-time order.
        os.utime(path, (base + index, base + index))


def input_rows(files: int, rows_per_file: int) -> list[list[dict[str, str]]]:
    """Rows with unique values ``r<file>-<row>`` and keys spread over ten values."""
    return [
        [{"key": f"k{row % 10}", "value": f"r{file}-{row}"} for row in range(rows_per_file)]
        for file in range(files)
    ]
