"""``Consumer.poll_batches`` against a real node process: the record batches as stored,
handed out whole after ``poll`` returned part of one, and the same records ``poll`` gives."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster.client import (
    AdminClient,
    AsyncConsumer,
    Consumer,
    ConsumerBatch,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from lograft.protocol.batch_header import parse_header
from lograft.protocol.records import iter_records
from tests.integration.nodes import NodeProcess

pytestmark = pytest.mark.integration

WAIT_S = 30.0
TP = TopicPartition("raw", 0)


def _poll_records(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + WAIT_S
    while len(records) < count:
        assert time.monotonic() < deadline, f"read {len(records)}/{count}"
        records += consumer.poll(200)
    return records


def _poll_batches(consumer: Consumer, end: int) -> list[ConsumerBatch]:
    batches: list[ConsumerBatch] = []
    deadline = time.monotonic() + WAIT_S
    while not batches or batches[-1].next_offset < end:
        assert time.monotonic() < deadline, f"batches up to {batches[-1:]}"
        batches += consumer.poll_batches(200)
    return batches


def test_poll_batches_returns_the_stored_batches_and_poll_s_records(node: NodeProcess) -> None:
    with AdminClient(bootstrap_servers=node.address) as admin:
        admin.create_topics([NewTopic(TP.topic, 1, 1)])[TP.topic].result(timeout=WAIT_S)
    with Producer(bootstrap_servers=node.address, linger_ms=50) as producer:
        for n in range(10):
            producer.send(TP.topic, b"v%d" % n, key=b"k%d" % n, headers=[("n", b"%d" % n)])
        producer.flush(WAIT_S)
        bulk = producer.send_bulk(TP.topic, [b"b%d" % n for n in range(300)], partition=0)
        end = bulk.result(timeout=WAIT_S).offset_of(299)[1] + 1
    config = {"bootstrap.servers": node.address, "auto.offset.reset": "earliest"}

    with Consumer(config) as reference:
        reference.assign([TP])
        expected = _poll_records(reference, end)
    assert len(expected) == end == 310

    with Consumer(config, max_poll_records=3) as consumer:
        consumer.assign([TP])
        first = _poll_records(consumer, 3)
        assert first == expected[: len(first)]
        batches = _poll_batches(consumer, end)
        assert consumer.position(TP) == end
    # The batch poll() was inside comes whole, from where poll() stopped.
    assert batches[0].start_offset == len(first)
    assert batches[0].base_offset <= len(first)
    assert [b.base_offset for b in batches[1:]] == [b.next_offset for b in batches[:-1]]
    for batch in batches:
        header = parse_header(batch.data)
        assert (batch.topic, batch.partition) == (TP.topic, TP.partition)
        assert (header.base_offset, header.next_offset) == (batch.base_offset, batch.next_offset)
        assert len(batch.data) == header.size, "one whole batch"
    got = [record for batch in batches for record in batch.records()]
    assert first + got == expected
    # The bytes are Kafka's format: any RecordBatch v2 reader decodes them.
    raw = b"".join(batch.data for batch in batches)
    assert [r.value for r in iter_records(raw, len(first))] == [r.value for r in got]


async def test_async_poll_batches_starts_at_the_first_record_not_handed_out(
    node: NodeProcess,
) -> None:
    with AdminClient(bootstrap_servers=node.address) as admin:
        admin.create_topics([NewTopic(TP.topic, 1, 1)])[TP.topic].result(timeout=WAIT_S)
    with Producer(bootstrap_servers=node.address) as producer:
        end = (
            producer.send_bulk(TP.topic, [b"a%d" % n for n in range(200)], partition=0)
            .result(timeout=WAIT_S)
            .offset_of(199)[1]
            + 1
        )
    config = {"bootstrap.servers": node.address, "auto.offset.reset": "earliest"}
    async with AsyncConsumer(config) as consumer:
        await consumer.assign([TP])
        first = [await consumer.getone() for _ in range(5)]  # the rest of that poll is buffered
        # A batch poll cancelled once under way (on the worker) gives back what it took.
        waiting = asyncio.ensure_future(consumer.poll_batches(200))
        await asyncio.sleep(0)  # one turn of the loop: the call reaches the worker
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        batches: list[ConsumerBatch] = []
        deadline = time.monotonic() + WAIT_S
        while not batches or batches[-1].next_offset < end:
            assert time.monotonic() < deadline, f"batches up to {batches[-1:]}"
            batches += await consumer.poll_batches(200)
    assert [r.offset for r in first] == list(range(5))
    assert batches[0].start_offset == 5
    got = [record for batch in batches for record in batch.records()]
    assert [r.offset for r in got] == list(range(5, end))
    assert [r.value for r in first + got] == [b"a%d" % n for n in range(200)]
