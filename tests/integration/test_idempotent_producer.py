"""The idempotent producer against a real node: every record once, in order, despite retries.

Lost answers are made by a small gRPC proxy between the producer and the node: it forwards
every call and can drop the answer to a Produce the node has already handled (appended and
acknowledged), which is what a broken connection does to a producer. The producer must
retry that batch, and the node must recognise the retry and answer with the original
offset. The tests wait on futures and node states, never on sleeps, and assert what a user
sees: the records in the log, their offsets, the batch headers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from cluster.client import AdminClient, NewTopic, Producer
from lograft.protocol.batch_header import BatchHeader, iter_headers
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess
from tests.integration.wire_helpers import fetch_all, fetch_once, list_offset

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0
_MAX_MESSAGE = 64 * 1024 * 1024


class AnswerDroppingProxy(pb_grpc.BrokerServicer):  # type: ignore[misc]
    """Forwards Metadata, InitProducerId and Produce to one node; can drop Produce answers.

    ``drop_answers(count, after)`` drops the answers of the next ``count`` produce calls
    that succeed, from the ``after``-th call on (counting from 0): the node has appended
    them, the producer sees UNAVAILABLE. Metadata answers name the proxy as the broker, so
    the producer keeps going through it.
    """

    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.max_send_message_length", _MAX_MESSAGE),
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ],
        )
        self._stub = pb_grpc.BrokerStub(self._channel)
        self._lock = threading.Lock()
        self.port = 0
        self.produce_calls = 0
        self.dropped = 0
        self._drops_left = 0
        self._drop_from = 0

    def drop_answers(self, count: int, after: int = 0) -> None:
        with self._lock:
            self._drops_left = count
            self._drop_from = after

    def close(self) -> None:
        self._channel.close()

    def _forward(self, method: str, request: Any, context: Any) -> Any:
        try:
            return getattr(self._stub, method)(request, timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")

    def Metadata(self, request: Any, context: Any) -> Any:
        response = self._forward("Metadata", request, context)
        for broker in response.brokers:
            broker.host = "127.0.0.1"
            broker.port = self.port
        return response

    def InitProducerId(self, request: Any, context: Any) -> Any:
        return self._forward("InitProducerId", request, context)

    def Produce(self, request: Any, context: Any) -> Any:
        with self._lock:
            call = self.produce_calls
            self.produce_calls += 1
        response = self._forward("Produce", request, context)
        succeeded = all(p.error_code == 0 for t in response.topics for p in t.partitions)
        with self._lock:
            drop = succeeded and self._drops_left > 0 and call >= self._drop_from
            if drop:
                self._drops_left -= 1
                self.dropped += 1
        if drop:
            context.abort(grpc.StatusCode.UNAVAILABLE, "answer dropped by the test proxy")
        return response


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    process = NodeProcess(data_dir=tmp_path_factory.mktemp("idempotent-producer") / "data")
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def stub(node: NodeProcess) -> Iterator[pb_grpc.BrokerStub]:
    with grpc.insecure_channel(node.address) as channel:
        yield pb_grpc.BrokerStub(channel)


@pytest.fixture
def proxy(node: NodeProcess) -> Iterator[AnswerDroppingProxy]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=[
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ],
    )
    forwarder = AnswerDroppingProxy(node.address)
    pb_grpc.add_BrokerServicer_to_server(forwarder, server)
    forwarder.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield forwarder
    finally:
        server.stop(grace=None)
        forwarder.close()


def _create(address: str, name: str, partitions: int = 1) -> None:
    with AdminClient(bootstrap_servers=address) as admin:
        admin.create_topics([NewTopic(name, partitions)])[name].result()


def _values(stub: pb_grpc.BrokerStub, topic: str, partition: int) -> list[bytes | None]:
    return [record.value for record in fetch_all(stub, topic, partition)]


def _headers(stub: pb_grpc.BrokerStub, topic: str, partition: int) -> list[BatchHeader]:
    headers: list[BatchHeader] = []
    offset = list_offset(stub, topic, partition, -2)
    end = list_offset(stub, topic, partition, -1)
    while offset < end:
        result = fetch_once(stub, topic, partition, offset)
        assert result.error_code == 0, result
        batch = list(iter_headers(result.records))
        assert batch, f"no batch at offset {offset}"
        headers.extend(batch)
        offset = batch[-1].next_offset
    return headers


def _assert_one_producer_in_sequence(headers: list[BatchHeader]) -> None:
    """Every batch from one producer id and epoch, sequences contiguous from 0."""
    assert headers
    assert {(h.producer_id, h.producer_epoch) for h in headers} == {(headers[0].producer_id, 0)}
    assert headers[0].producer_id >= 0
    expected = 0
    for header in headers:
        assert header.base_sequence == expected
        expected += header.records_count


# ---- the happy path --------------------------------------------------------------------------


def test_records_carry_a_producer_id_and_contiguous_sequences(
    node: NodeProcess, stub: pb_grpc.BrokerStub
) -> None:
    _create(node.address, "sequenced", 3)
    with Producer(bootstrap_servers=node.address, batch_size=512, linger_ms=1) as producer:
        assert producer.config["enable.idempotence"] is True
        sent = [
            producer.send("sequenced", f"{i % 3}:{i:06d}".encode(), partition=i % 3)
            for i in range(6_000)
        ]
        producer.flush(timeout=TIMEOUT_S)
    for partition in range(3):
        values = _values(stub, "sequenced", partition)
        assert values == [f"{partition}:{i:06d}".encode() for i in range(partition, 6_000, 3)]
        headers = _headers(stub, "sequenced", partition)
        assert len(headers) > 10
        _assert_one_producer_in_sequence(headers)
    for i, future in enumerate(sent):
        meta = future.result(timeout=0)
        assert (meta.partition, meta.offset) == (i % 3, i // 3)


# ---- lost answers ------------------------------------------------------------------------------


def test_a_lost_answer_is_retried_and_written_once(
    node: NodeProcess, stub: pb_grpc.BrokerStub, proxy: AnswerDroppingProxy
) -> None:
    _create(node.address, "lost-answer")
    proxy.drop_answers(1)
    with Producer(bootstrap_servers=f"127.0.0.1:{proxy.port}", linger_ms=0) as producer:
        sent = [producer.send("lost-answer", f"r{i:04d}".encode()) for i in range(500)]
        offsets = [future.result(timeout=TIMEOUT_S).offset for future in sent]
    assert proxy.dropped == 1
    assert offsets == list(range(500))
    assert _values(stub, "lost-answer", 0) == [f"r{i:04d}".encode() for i in range(500)]
    _assert_one_producer_in_sequence(_headers(stub, "lost-answer", 0))


def test_lost_bulk_answers_with_requests_in_flight_write_every_value_once(
    node: NodeProcess, stub: pb_grpc.BrokerStub, proxy: AnswerDroppingProxy
) -> None:
    _create(node.address, "lost-bulk")
    values = [i.to_bytes(4, "big") * 25 for i in range(40_000)]
    proxy.drop_answers(3, after=2)  # later requests are in flight behind the lost ones
    config = {
        "bootstrap.servers": f"127.0.0.1:{proxy.port}",
        "max.request.size": 64 * 1024,
    }
    with Producer(config) as producer:
        result = producer.send_bulk("lost-bulk", values, partition=0).result(timeout=TIMEOUT_S)
    assert proxy.dropped == 3
    assert len(result.batches) > 20
    assert _values(stub, "lost-bulk", 0) == values
    for index in (0, 1, 12_345, 39_999):
        assert result.offset_of(index) == (0, index)
    _assert_one_producer_in_sequence(_headers(stub, "lost-bulk", 0))


def test_without_idempotence_a_lost_answer_writes_the_records_twice(
    node: NodeProcess, stub: pb_grpc.BrokerStub, proxy: AnswerDroppingProxy
) -> None:
    """The contrast that shows the proxy really makes the producer resend a written batch."""
    _create(node.address, "twice")
    proxy.drop_answers(1)
    config = {"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": False}
    with Producer(config) as producer:
        producer.send("twice", b"once?").result(timeout=TIMEOUT_S)
    assert _values(stub, "twice", 0) == [b"once?", b"once?"]


# ---- a node restart ------------------------------------------------------------------------------


def test_records_in_flight_when_the_node_is_killed_are_written_once_after_it_restarts(
    tmp_path: Path,
) -> None:
    process = NodeProcess(data_dir=tmp_path / "data")
    process.start()
    try:
        _create(process.address, "restart")
        total = 20_000
        with Producer(bootstrap_servers=process.address, batch_size=1024, linger_ms=1) as producer:
            sent = [producer.send("restart", f"r{i:06d}".encode()) for i in range(total // 2)]
            sent[0].result(timeout=TIMEOUT_S)  # the producer is under way: batches in flight
            process.kill()
            later = range(total // 2, total)
            sent += [producer.send("restart", f"r{i:06d}".encode()) for i in later]
            process.start(wait=True)
            offsets = [future.result(timeout=120).offset for future in sent]
        with grpc.insecure_channel(process.address) as channel:
            stub = pb_grpc.BrokerStub(channel)
            assert _values(stub, "restart", 0) == [f"r{i:06d}".encode() for i in range(total)]
            _assert_one_producer_in_sequence(_headers(stub, "restart", 0))
        assert offsets == list(range(total))
    finally:
        process.kill()
