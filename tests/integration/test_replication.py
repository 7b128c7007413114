"""Replication with real processes: acks=all against min.insync.replicas, leader loss, divergence.

Each test waits for cluster *states* (a new leader, a full ISR) with bounded polls and
asserts what a user would see: acknowledged records present exactly once and in order,
typed errors, identical replicas.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import grpc
import pytest

from cluster.client import Producer
from lograft.protocol.batch_header import iter_headers
from lograft.protocol.errors import NotEnoughReplicasError
from lograft.protocol.records import encode_batch
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from replica.log.partition_log import PartitionLog
from tests.integration.nodes import NodeProcess, wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster
from tests.integration.wire_helpers import fetch_all, fetch_once, produce

pytestmark = pytest.mark.integration

GUARDED = {"min.insync.replicas": "2"}


def _partitions(cluster: QuorumCluster, topic: str) -> list[pb.PartitionMetadata]:
    for node in cluster.alive_brokers():
        metadata = cluster.metadata(node, [topic])
        if metadata is not None and metadata.topics and not metadata.topics[0].error_code:
            return sorted(metadata.topics[0].partitions, key=lambda p: p.partition)
    return []


def _fully_replicated(cluster: QuorumCluster, topic: str, count: int) -> bool:
    partitions = _partitions(cluster, topic)
    return len(partitions) == count and all(
        p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes) for p in partitions
    )


def _stub(node: NodeProcess) -> pb_grpc.BrokerStub:
    return pb_grpc.BrokerStub(grpc.insecure_channel(node.address))


def _replica_bytes(node: NodeProcess, topic: str, partition: int, upto: int) -> bytes:
    """The log bytes of a stopped node's replica, whole batches below ``upto``."""
    opened = PartitionLog.open(
        node.data_dir / f"{topic}-{partition}", LogConfig(), int(time.time() * 1000)
    )
    try:
        chunks = []
        offset = opened.log_start_offset
        while offset < upto:
            data = opened.read(offset, 1 << 20, upto)
            headers = list(iter_headers(data))
            assert headers, f"node {node.node_id} has nothing at {offset} below {upto}"
            chunks.append(data)
            offset = headers[-1].next_offset
        return b"".join(chunks)
    finally:
        opened.close()


def _assert_identical_replicas(cluster: QuorumCluster, topic: str, count: int) -> None:
    """Stop every node cleanly and compare each replica's bytes up to the high watermark."""
    high_watermarks = {}
    for p in _partitions(cluster, topic):
        leader = cluster.nodes[p.leader_id]
        high_watermarks[p.partition] = fetch_all(_stub(leader), topic, p.partition)
    ends = {p: (records[-1].offset + 1 if records else 0) for p, records in high_watermarks.items()}
    for node in cluster.nodes.values():
        node.stop()
    for partition in range(count):
        copies = {
            n: _replica_bytes(cluster.nodes[n], topic, partition, ends[partition])
            for n in cluster.broker_ids
        }
        assert len(set(copies.values())) == 1, f"replicas of {topic}-{partition} differ"


def _kill_leader_and_restart(
    cluster: QuorumCluster,
    topic: str,
    partition: int,
    partitions: int,
    acked_count: Callable[[], int],
) -> None:
    """kill -9 the partition's leader while writes go on; restart it; wait for full ISRs."""
    before = acked_count()
    wait_until(lambda: acked_count() > before + 300, 120, "writes to be acknowledged")
    leader = _partitions(cluster, topic)[partition].leader_id
    cluster.nodes[leader].kill()
    wait_until(
        lambda: _partitions(cluster, topic)[partition].leader_id not in (leader, -1),
        CLUSTER_TIMEOUT_S,
        "a new leader",
    )
    during = acked_count()
    wait_until(lambda: acked_count() > during + 300, 120, "writes to go on")
    cluster.nodes[leader].start(wait=True)
    wait_until(
        lambda: _fully_replicated(cluster, topic, partitions),
        CLUSTER_TIMEOUT_S,
        "the restarted broker back in every ISR",
    )


# Over 70 lines: a test that walks one scenario in order: each leader killed in turn.
def test_acknowledged_writes_survive_killing_each_leader_in_turn(cluster: QuorumCluster) -> None:
    topic, partitions = "orders", 3
    assert cluster.create_topic(cluster.nodes[1], topic, partitions, 3, GUARDED) == 0
    wait_until(
        lambda: _fully_replicated(cluster, topic, partitions), CLUSTER_TIMEOUT_S, "full ISRs"
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
        }
    )

    def on_done(value: bytes, future: Future[object]) -> None:
        error = future.exception()
        with lock:
            if error is not None:
                failed.append(error)
            else:
                metadata = future.result()
                acked[value] = (metadata.partition, metadata.offset)  # type: ignore[attr-defined]

    def produce_loop() -> None:
        for n in range(1_000_000):
            if stop.is_set():
                return
            futures = []
            for p in range(partitions):
                value = f"{p}:{n:08d}".encode()
                future = producer.send(topic, value=value, partition=p)
                future.add_done_callback(lambda f, v=value: on_done(v, f))
                futures.append(future)
            if n % 50 == 49:
                for future in futures:
                    future.exception(timeout=180)

    def acked_count() -> int:
        with lock:
            return len(acked)

    writer = threading.Thread(target=produce_loop, name="writer")
    writer.start()
    try:
        for partition in range(partitions):
            _kill_leader_and_restart(cluster, topic, partition, partitions, acked_count)
    finally:
        stop.set()
        writer.join(timeout=240)
        producer.close(timeout=120)
    assert not writer.is_alive()
    assert not failed, failed[:3]
    assert acked_count() > 1800

    wait_until(lambda: _fully_replicated(cluster, topic, partitions), 60, "full ISRs")
    # Every killed leader is back and in sync: preferred leaders are restored.
    wait_until(
        lambda: all(p.leader_id == p.replica_nodes[0] for p in _partitions(cluster, topic)),
        CLUSTER_TIMEOUT_S,
        "the preferred replicas to lead again",
    )
    for partition, state in enumerate(_partitions(cluster, topic)):
        leader_stub = _stub(cluster.nodes[state.leader_id])
        acked_end = 1 + max(o for p, o in acked.values() if p == partition)
        # A leader that just took over learns the high watermark from its followers' next
        # fetches (Kafka's too): until then a read stops short of the acknowledged tail. A
        # lost tail never gets there, and fails here.
        wait_until(
            lambda stub=leader_stub, p=partition, end=acked_end: (
                fetch_once(stub, topic, p, 0).high_watermark >= end
            ),
            CLUSTER_TIMEOUT_S,
            f"partition {partition}'s high watermark to cover its acknowledged records",
        )
        records = fetch_all(leader_stub, topic, partition)
        values = [r.value for r in records]
        assert len(values) == len(set(values)), "a record was written twice"
        sequence = [int(v.split(b":")[1]) for v in values if v is not None]
        assert sequence == sorted(sequence), "per-partition order broken"
        at = {r.offset: r.value for r in records}
        mine = {v: o for v, (p, o) in acked.items() if p == partition}
        missing = [v for v, o in mine.items() if at.get(o) != v]
        assert not missing, f"acknowledged records lost or moved: {missing[:5]}"
    _assert_identical_replicas(cluster, topic, partitions)


def test_acks_all_refused_with_two_brokers_down_and_back_when_one_returns(
    tmp_path: Path,
) -> None:
    cluster = QuorumCluster(
        tmp_path, dedicated_controller=True, configs={"default.replication.factor": "3"}
    )
    cluster.start()
    producer: Producer | None = None
    leader_only: Producer | None = None
    try:
        # No replication factor given: the broker default (default.replication.factor) holds.
        assert cluster.create_topic(cluster.nodes[1], "guarded", 1, -1, GUARDED) == 0
        wait_until(lambda: _fully_replicated(cluster, "guarded", 1), 60, "a full ISR")
        assert len(_partitions(cluster, "guarded")[0].replica_nodes) == 3
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all", "delivery.timeout.ms": 4000}
        )
        leader_only = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1})
        assert producer.send("guarded", b"before", partition=0).result(timeout=60).offset == 0

        leader = _partitions(cluster, "guarded")[0].leader_id
        followers = [n for n in cluster.broker_ids if n != leader]
        for follower in followers:
            cluster.nodes[follower].kill()
        wait_until(
            lambda: list(_partitions(cluster, "guarded")[0].isr_nodes) == [leader],
            CLUSTER_TIMEOUT_S,
            "the controller to drop the dead brokers from the ISR",
        )
        stub = _stub(cluster.nodes[leader])
        first = produce(stub, "guarded", 0, encode_batch([b"one"]), acks=1)
        assert first.error_code == 0
        refused = produce(stub, "guarded", 0, encode_batch([b"lost", b"lost"]), acks=-1)
        assert refused.error_code == NotEnoughReplicasError.code
        second = produce(stub, "guarded", 0, encode_batch([b"two"]), acks=1)
        assert second.error_code == 0
        assert second.base_offset == first.base_offset + 1, "the refused batch was appended"

        with pytest.raises(NotEnoughReplicasError):
            producer.send("guarded", b"refused", partition=0).result(timeout=60)
        assert leader_only.send("guarded", b"acks=1", partition=0).result(timeout=60).offset > 0

        cluster.nodes[followers[0]].start(wait=True)
        wait_until(
            lambda: len(_partitions(cluster, "guarded")[0].isr_nodes) == 2,
            CLUSTER_TIMEOUT_S,
            "the returning broker back in the ISR",
        )
        # The same producer, never restarted.
        metadata = producer.send("guarded", b"after", partition=0).result(timeout=60)
        values = [r.value for r in fetch_all(stub, "guarded", 0)]
        assert values == [b"before", b"one", b"two", b"acks=1", b"after"]
        assert metadata.offset == 4
        assert b"lost" not in values and b"refused" not in values
    finally:
        for client in (producer, leader_only):
            if client is not None:
                client.close(timeout=30)
        cluster.stop()


def test_a_cut_off_leader_truncates_its_uncommitted_writes_when_it_rejoins(
    cluster: QuorumCluster,
) -> None:
    assert cluster.create_topic(cluster.nodes[1], "split", 1, 3, GUARDED) == 0
    wait_until(lambda: _fully_replicated(cluster, "split", 1), CLUSTER_TIMEOUT_S, "a full ISR")
    old_leader = _partitions(cluster, "split")[0].leader_id
    old_stub = _stub(cluster.nodes[old_leader])
    # The leader opens its log just after the metadata reaches it: retriable until then.
    wait_until(
        lambda: (
            produce(old_stub, "split", 0, encode_batch([b"committed"]), acks=-1).error_code == 0
        ),
        CLUSTER_TIMEOUT_S,
        "the leader to take acks=all writes",
    )
    followers = [cluster.nodes[n] for n in cluster.broker_ids if n != old_leader]

    # Cut the followers off: the leader still takes acks=1 writes nobody replicates. The
    # first write answers any fetch the followers had already sent; the second reaches
    # nobody but the leader.
    for node in followers:
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
    assert produce(old_stub, "split", 0, encode_batch([b"maybe"]), acks=1).error_code == 0
    uncommitted = produce(old_stub, "split", 0, encode_batch([b"doomed"] * 3), acks=1)
    assert uncommitted.error_code == 0
    # Now the old leader is the one cut off, and the others carry on without it.
    assert cluster.nodes[old_leader].process is not None
    cluster.nodes[old_leader].process.send_signal(signal.SIGSTOP)
    for node in followers:
        assert node.process is not None
        node.process.send_signal(signal.SIGCONT)

    def new_leader() -> int:
        for node in followers:
            metadata = cluster.metadata(node, ["split"])
            if metadata is not None and metadata.topics and not metadata.topics[0].error_code:
                leader = metadata.topics[0].partitions[0].leader_id
                if leader not in (old_leader, -1):
                    return int(leader)
        return -1

    wait_until(lambda: new_leader() >= 0, CLUSTER_TIMEOUT_S, "a new leader")
    new_stub = _stub(cluster.nodes[new_leader()])
    wait_until(
        lambda: produce(new_stub, "split", 0, encode_batch([b"after"]), acks=-1).error_code == 0,
        CLUSTER_TIMEOUT_S,
        "an acks=all write to the new leader",
    )

    cluster.nodes[old_leader].process.send_signal(signal.SIGCONT)
    wait_until(
        lambda: "partition follower truncate" in cluster.nodes[old_leader].read_log(),
        CLUSTER_TIMEOUT_S,
        "the old leader to truncate its divergent tail",
    )
    wait_until(lambda: _fully_replicated(cluster, "split", 1), CLUSTER_TIMEOUT_S, "a full ISR")
    values = [r.value for r in fetch_all(new_stub, "split", 0)]
    assert values[0] == b"committed" and values[-1] == b"after"
    assert b"doomed" not in values
    _assert_identical_replicas(cluster, "split", 1)


def test_a_stalled_follower_leaves_the_isr_and_rejoins_once_caught_up(tmp_path: Path) -> None:
    # A long broker session: the stalled follower stays registered and unfenced, so only
    # the leader's lag check (replica.lag.time.max.ms) can take it out of the ISR.
    cluster = QuorumCluster(
        tmp_path,
        dedicated_controller=True,
        configs={"broker.session.timeout.ms": "120000", "replica.lag.time.max.ms": "1000"},
    )
    cluster.start()
    stalled: NodeProcess | None = None
    try:
        assert cluster.create_topic(cluster.nodes[1], "lagging", 1, 3, GUARDED) == 0
        wait_until(lambda: _fully_replicated(cluster, "lagging", 1), 60, "a full ISR")
        state = _partitions(cluster, "lagging")[0]
        leader = cluster.nodes[state.leader_id]
        stalled = cluster.nodes[next(r for r in state.replica_nodes if r != state.leader_id)]
        wait_until(
            lambda: (
                produce(_stub(leader), "lagging", 0, encode_batch([b"warm"]), acks=-1).error_code
                == 0
            ),
            CLUSTER_TIMEOUT_S,
            "the leader to take acks=all writes",
        )
        assert stalled.process is not None
        stalled.process.send_signal(signal.SIGSTOP)
        # acks=all waits for the stalled follower until the leader drops it from the ISR.
        answer = produce(_stub(leader), "lagging", 0, encode_batch([b"while stalled"]), acks=-1)
        assert answer.error_code == 0, answer
        stalled_id = stalled.node_id

        def isr_seen_by_leader() -> list[int]:
            metadata = cluster.metadata(leader, ["lagging"])
            return [] if metadata is None else list(metadata.topics[0].partitions[0].isr_nodes)

        wait_until(
            lambda: stalled_id not in isr_seen_by_leader(), 30, "the shrunk ISR in the metadata"
        )
        assert len(isr_seen_by_leader()) == 2
        metadata = cluster.metadata(leader)
        assert metadata is not None
        assert stalled_id in {b.node_id for b in metadata.brokers}, "it was fenced instead"
        assert "proposing isr shrink" in leader.read_log()

        stalled.process.send_signal(signal.SIGCONT)
        stalled = None
        wait_until(
            lambda: _fully_replicated(cluster, "lagging", 1),
            CLUSTER_TIMEOUT_S,
            "the follower back in the ISR once caught up",
        )
        values = [r.value for r in fetch_all(_stub(leader), "lagging", 0)]
        assert values == [b"warm", b"while stalled"]
    finally:
        if stalled is not None and stalled.process is not None:
            stalled.process.send_signal(signal.SIGCONT)
        cluster.stop()
