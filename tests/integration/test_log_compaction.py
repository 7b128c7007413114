"""Log compaction on real nodes: a compacted topic shrinks and keeps every key's latest value;
``__consumer_offsets`` is compacted and committed offsets survive a coordinator reload."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cluster.client import Consumer, Producer, TopicPartition
from lograft.protocol.errors import InvalidRecordError
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.group import partition_for_group
from replica.group_service import OFFSETS_TOPIC
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, OFFSETS_PARTITIONS, QuorumCluster
from tests.integration.wire_helpers import TIMEOUT_S, create_topic, produce

pytestmark = pytest.mark.integration

QUICK_CLEANER = {"log.cleaner.backoff.ms": "100"}


def _log_bytes(directory: Path) -> int:
    """Bytes in the directory's segment files; one the cleaner swaps out between the listing
    and its ``stat`` counts as gone (its replacement is counted at the next look)."""
    total = 0
    for path in directory.glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def _latest_by_key(bootstrap: str, tp: TopicPartition) -> tuple[dict[bytes, bytes | None], int]:
    """Read ``tp`` from the beginning to its end: each key's last value, and records read."""
    latest: dict[bytes, bytes | None] = {}
    count = 0
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        deadline = time.monotonic() + TIMEOUT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=200):
                assert record.key is not None
                latest[record.key] = record.value
                count += 1
        assert consumer.position(tp) >= end, "did not reach the end of the partition"
    return latest, count


@pytest.fixture
def quick_node(tmp_path: Path) -> Iterator[NodeProcess]:
    process = NodeProcess(data_dir=tmp_path / "node-1", configs=dict(QUICK_CLEANER))
    process.start()
    try:
        yield process
    finally:
        process.kill()


def test_a_compacted_topic_shrinks_and_keeps_the_latest_value_of_every_key(
    quick_node: NodeProcess,
) -> None:
    with grpc.insecure_channel(quick_node.address) as channel:
        stub = pb_grpc.BrokerStub(channel)
        create_topic(stub, "prices", configs={"cleanup.policy": "compact", "segment.bytes": "1024"})
        # Kafka's rule: a compacted topic refuses records without a key.
        refused = produce(stub, "prices", 0, encode_batch([b"no key"]))
        assert refused.error_code == InvalidRecordError.code
    keys = [f"sku-{n}".encode() for n in range(10)]
    updates = 100
    written_bytes = 0
    with Producer({"bootstrap.servers": quick_node.address, "linger.ms": 0}) as producer:
        for round_ in range(updates):
            values = [f"{key.decode()}@{round_}".encode() for key in keys]
            written_bytes += len(encode_batch(values, keys))  # about what one round stores
            for key, value in zip(keys, values, strict=True):
                producer.send("prices", value, key=key, partition=0)
            producer.flush()
        producer.send("prices", None, key=keys[0], partition=0)  # delete sku-0
    written = updates * len(keys) + 1
    directory = quick_node.data_dir / "prices-0"
    wait_until(
        lambda: _log_bytes(directory) < written_bytes // 4,
        CLUSTER_TIMEOUT_S,
        "the log cleaner to shrink the compacted partition",
    )
    latest, read = _latest_by_key(quick_node.address, TopicPartition("prices", 0))
    assert read < written // 3, "a consumer reads the compacted log, not every update"
    expected: dict[bytes, bytes | None] = {k: f"{k.decode()}@{updates - 1}".encode() for k in keys}
    expected[keys[0]] = None  # the tombstone stays (delete.retention.ms) and wins
    assert latest == expected


def _offsets_dir(cluster: QuorumCluster, node_id: int, partition: int) -> Path:
    return cluster.nodes[node_id].data_dir / f"{OFFSETS_TOPIC}-{partition}"


def _coordinator(cluster: QuorumCluster, group_id: str, exclude: int = 0) -> int:
    found: list[int] = []

    def known() -> bool:
        for node in cluster.alive_brokers():
            with grpc.insecure_channel(node.address) as channel:
                try:
                    answer = pb_grpc.BrokerStub(channel).FindCoordinator(
                        pb.FindCoordinatorRequest(group_id=group_id), timeout=5
                    )
                except grpc.RpcError:
                    return False
            if answer.error_code or answer.node_id == exclude:
                return False
            found.append(answer.node_id)
        return True

    wait_until(known, CLUSTER_TIMEOUT_S, f"a coordinator for {group_id}")
    return found[-1]


def test_committed_offsets_survive_compaction_of_consumer_offsets(tmp_path: Path) -> None:
    cluster = QuorumCluster(
        tmp_path,
        configs={
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "offsets.topic.segment.bytes": "1024",
            **QUICK_CLEANER,
        },
    )
    cluster.start()
    try:
        assert cluster.create_topic(cluster.nodes[1], "orders", 2, 3) == 0
        partitions = [TopicPartition("orders", p) for p in range(2)]
        config = {"bootstrap.servers": cluster.bootstrap, "group.id": "billing"}
        commits = 150
        with Consumer(config) as consumer:
            consumer.assign(partitions)
            for n in range(1, commits + 1):
                consumer.commit({partitions[0]: n, partitions[1]: 2 * n})
        index = partition_for_group("billing", OFFSETS_PARTITIONS)
        # Every replica cleans its own copy: each ends far below what was written
        # (150 commits of two offsets, well over 20 KiB uncompacted).
        wait_until(
            lambda: all(
                _log_bytes(_offsets_dir(cluster, n, index)) < 6 * 1024 for n in cluster.broker_ids
            ),
            CLUSTER_TIMEOUT_S,
            "every replica of the group's offsets partition to be compacted",
        )
        # The coordinator moves: its successor loads the group from its compacted copy.
        first = _coordinator(cluster, "billing")
        cluster.nodes[first].kill()
        _coordinator(cluster, "billing", exclude=first)
        with Consumer(config) as successor:
            assert successor.committed(partitions) == {
                partitions[0]: commits,
                partitions[1]: 2 * commits,
            }
    finally:
        cluster.stop()
