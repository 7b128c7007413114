"""The asyncio clients against real node processes: a standalone node for producing and
reading by assignment (and cancelling reads), a three-node cluster for a consumer group
driven from asyncio, closed within its timeout while every node is SIGSTOPped."""

from __future__ import annotations

import asyncio
import random
import signal

import pytest

from cluster.client import (
    AdminClient,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
    partition_for_key,
)
from tests.integration.nodes import NodeProcess
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster

pytestmark = pytest.mark.integration

WAIT_S = 30.0
WATCHDOG_S = 15.0


def _create(bootstrap: str, name: str, partitions: int, replication_factor: int = 1) -> None:
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, replication_factor)])[name].result()


async def _read(consumer: AsyncConsumer, expected: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while len(records) < expected:
        assert asyncio.get_running_loop().time() < deadline, f"read {len(records)}/{expected}"
        for batch in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(batch)
    return records


async def test_produce_and_read_back_with_the_asyncio_clients(node: NodeProcess) -> None:
    _create(node.address, "aio", 2)
    keys = [f"user-{n}".encode() for n in range(40)]
    async with AsyncProducer(bootstrap_servers=node.address, linger_ms=5) as producer:
        futures = [await producer.send("aio", b"v-" + key, key=key) for key in keys]
        sent = await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
        assert [m.partition for m in sent] == [partition_for_key(k, 2) for k in keys]
        last = await producer.send_and_wait("aio", b"last", partition=0, headers=[("h", b"1")])
        bulk = await producer.send_bulk("aio", [b"b-%d" % n for n in range(300)], partition=1)
        result = await asyncio.wait_for(bulk, WAIT_S)
        await producer.flush(timeout=WAIT_S)
    assert result.record_count == 300

    config = {"bootstrap.servers": node.address, "auto.offset.reset": "earliest"}
    async with AsyncConsumer(config, max_poll_records=64) as consumer:
        partitions = [TopicPartition("aio", p) for p in (0, 1)]
        await consumer.assign(partitions)
        records = await _read(consumer, 341)
        assert len(records) == 341, "nothing more than was sent"
        for p in (0, 1):
            offsets = [r.offset for r in records if r.partition == p]
            assert offsets == list(range(len(offsets))), f"partition {p} in order, no gap"
        by_key = {r.key: r.value for r in records if r.key is not None}
        assert by_key == {key: b"v-" + key for key in keys}
        assert [r.headers for r in records if r.offset == last.offset and r.partition == 0] == [
            (("h", b"1"),)
        ]
        assert await consumer.end_offsets(partitions) == {
            partitions[0]: last.offset + 1,
            partitions[1]: result.offset_of(299)[1] + 1,
        }

        await consumer.seek_to_beginning(partitions[1])
        iterated = []
        async for record in consumer:
            iterated.append(record)
            if len(iterated) == 5:
                break
        assert [(r.partition, r.offset) for r in iterated] == [(1, n) for n in range(5)]
        assert await consumer.position(partitions[1]) == 5


async def test_cancelled_reads_lose_no_record_while_records_keep_arriving(
    node: NodeProcess,
) -> None:
    _create(node.address, "aio-cancel", 1)
    tp = TopicPartition("aio-cancel", 0)
    total = 600
    rng = random.Random(11)
    seen: list[int] = []
    cancelled = 0

    async def produce() -> None:
        async with AsyncProducer(bootstrap_servers=node.address, linger_ms=1) as producer:
            for start in range(0, total, 20):
                futures = [
                    await producer.send("aio-cancel", b"%d" % n) for n in range(start, start + 20)
                ]
                await asyncio.gather(*futures)

    config = {
        "bootstrap.servers": node.address,
        "auto.offset.reset": "earliest",
        "max.poll.records": 13,
        "fetch.max.wait.ms": 100,
    }
    async with AsyncConsumer(config) as consumer:
        await consumer.assign([tp])
        producing = asyncio.create_task(produce())
        deadline = asyncio.get_running_loop().time() + WAIT_S * 2
        while len(seen) < total:
            assert asyncio.get_running_loop().time() < deadline, f"read {len(seen)}/{total}"
            task = asyncio.create_task(consumer.getmany(timeout_ms=500))
            for _ in range(rng.randrange(8)):
                await asyncio.sleep(0)  # reach a random point of the read, then cancel it
            if rng.random() < 0.5:
                task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                cancelled += 1
                continue
            for record in got.get(tp, []):
                assert record.value == b"%d" % record.offset
                seen.append(record.offset)
        await asyncio.wait_for(producing, WAIT_S)
    assert cancelled > 0
    assert seen == list(range(total)), "every record exactly once, in order"


def _signal_all(cluster: QuorumCluster, sig: signal.Signals) -> None:
    for node in cluster.nodes.values():
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(sig)


async def test_a_group_from_asyncio_commits_and_closes_in_time_with_every_node_stopped(
    grouped: QuorumCluster,
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "aio-jobs", 3, 3) == 0
    with Producer({"bootstrap.servers": grouped.bootstrap, "acks": "all"}) as producer:
        for n in range(90):
            producer.send("aio-jobs", b"%d" % n, partition=n % 3)
    partitions = [TopicPartition("aio-jobs", p) for p in range(3)]
    assigned: list[list[TopicPartition]] = []

    async def on_assign(consumer: AsyncConsumer, tps: list[TopicPartition]) -> None:
        assigned.append(tps)
        for tp in tps:
            await consumer.position(tp)  # a callback may await the consumer's calls

    consumer = AsyncConsumer(
        {
            "bootstrap.servers": grouped.bootstrap,
            "group.id": "aio-readers",
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 3_600_000,
            "request.timeout.ms": 60_000,
        }
    )
    try:
        await consumer.subscribe(["aio-jobs"], on_assign=on_assign)
        records: list[ConsumerRecord] = []
        deadline = asyncio.get_running_loop().time() + CLUSTER_TIMEOUT_S
        while len(records) < 90:
            assert asyncio.get_running_loop().time() < deadline, f"read {len(records)}/90"
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        assert sorted(int(r.value or b"") for r in records) == list(range(90))
        assert assigned == [partitions]
        assert await consumer.commit() == {tp: 30 for tp in partitions}
        assert await consumer.committed(partitions) == {tp: 30 for tp in partitions}

        # Every node stops answering: close (revocation with its auto-commit, the leave
        # heartbeat, the threads) must still end within its timeout, not request.timeout.ms.
        _signal_all(grouped, signal.SIGSTOP)
        await asyncio.wait_for(consumer.close(timeout_ms=2000), WATCHDOG_S)
    finally:
        _signal_all(grouped, signal.SIGCONT)
        await consumer.close(timeout_ms=0)
