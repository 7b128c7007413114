"""Framed Produce and Fetch on a node's listener port, next to gRPC on the same port.

What a client of the framed protocol notices: answers come back for the calls made, in
whatever order the broker finishes them; a frame too large or a request that is not one is
refused with a typed error and the node goes on serving; a broken connection, a refused one
and a silent one each fail the calls waiting on them with the error a client retries on.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from lograft.protocol.errors import (
    InvalidRequestError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
)
from lograft.protocol.framed.client import FramedChannel
from lograft.protocol.framed.protocol import (
    HEADER,
    MAGIC,
    STATUS_ERROR,
    STATUS_OK,
    NotFramedError,
    error_from_text,
)
from lograft.protocol.records import encode_batch
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from tests.integration.nodes import NodeProcess, free_port
from tests.integration.wire_helpers import create_topic

pytestmark = pytest.mark.integration

REQUEST_LIMIT = 1024 * 1024


@pytest.fixture(scope="module")
def framed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    node = NodeProcess(
        data_dir=Path(tmp_path_factory.mktemp("framed")) / "node-1",
        configs={"socket.request.max.bytes": str(REQUEST_LIMIT)},
    )
    node.start()
    with grpc.insecure_channel(node.address) as channel:
        create_topic(pb_grpc.BrokerStub(channel), "framed", 1)
    try:
        yield node
    finally:
        node.kill()


@pytest.fixture
async def channel(framed_node: NodeProcess) -> AsyncIterator[FramedChannel]:
    host, _, port = framed_node.address.rpartition(":")
    framed = FramedChannel(
        host,
        int(port),
        asyncio.get_running_loop(),
        max_request_bytes=8 * REQUEST_LIMIT,
        max_response_bytes=8 * REQUEST_LIMIT,
        connect_timeout_s=5.0,
    )
    try:
        yield framed
    finally:
        framed.close()


def _produce(values: list[bytes]) -> pb.ProduceRequest:
    return pb.ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topics=[
            pb.TopicProduceData(
                name="framed",
                partitions=[pb.PartitionProduceData(partition=0, records=encode_batch(values))],
            )
        ],
    )


def _fetch(offset: int, max_wait_ms: int) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1024 * 1024,
        topics=[
            pb.FetchTopic(
                name="framed",
                partitions=[
                    pb.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=1024 * 1024
                    )
                ],
            )
        ],
    )


def _raw_call(address: str, frame: bytes, *, then_closed: bool = False) -> tuple[int, bytes, bool]:
    """Send MAGIC and ``frame`` on a new connection: the first answer's status and body, and
    (``then_closed``) whether the broker closed the connection after it."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(MAGIC + frame)
        received = b""
        while len(received) < len(MAGIC) + HEADER.size:
            chunk = conn.recv(65536)
            assert chunk, "closed before answering"
            received += chunk
        assert received.startswith(MAGIC), "the broker did not answer the handshake"
        received = received[len(MAGIC) :]
        length, _, status = HEADER.unpack_from(received)
        while len(received) < HEADER.size + length:
            chunk = conn.recv(65536)
            assert chunk, "closed mid-answer"
            received += chunk
        body = received[HEADER.size : HEADER.size + length]
        if not then_closed:
            return status, body, False
        try:
            after = conn.recv(1)
        except ConnectionResetError:
            after = b""
        return status, body, after == b""


async def test_a_held_fetch_does_not_hold_up_a_produce_behind_it(channel: FramedChannel) -> None:
    start = await channel.call("Fetch", _fetch(0, 0), 10.0)
    end = start.topics[0].partitions[0].high_watermark
    # Asks for what is not written yet: the broker holds it until the produce below lands.
    held = asyncio.ensure_future(channel.call("Fetch", _fetch(end, 5_000), 10.0))
    await asyncio.sleep(0)
    produced = await channel.call("Produce", _produce([b"one", b"two"]), 10.0)
    assert produced.topics[0].partitions[0].error_code == 0
    assert produced.topics[0].partitions[0].base_offset == end
    fetched = await held
    partition = fetched.topics[0].partitions[0]
    assert partition.error_code == 0
    assert partition.high_watermark == end + 2
    assert b"one" in partition.records and b"two" in partition.records


async def test_grpc_and_framed_clients_share_the_listener_port(
    framed_node: NodeProcess, channel: FramedChannel
) -> None:
    produced = await channel.call("Produce", _produce([b"framed"]), 10.0)
    offset = produced.topics[0].partitions[0].base_offset
    with grpc.insecure_channel(framed_node.address) as grpc_channel:
        answer = pb_grpc.BrokerStub(grpc_channel).Fetch(_fetch(offset, 0), timeout=10)
    assert b"framed" in answer.topics[0].partitions[0].records


def test_a_frame_over_the_request_limit_is_refused_and_the_node_serves_on(
    framed_node: NodeProcess,
) -> None:
    oversized = HEADER.pack(REQUEST_LIMIT + 1, 7, 1)  # the body is never sent
    status, body, closed = _raw_call(framed_node.address, oversized, then_closed=True)
    assert status == STATUS_ERROR
    assert isinstance(error_from_text(body), RecordListTooLargeError)
    assert closed
    request = _fetch(0, 0).SerializeToString()
    status, _, _ = _raw_call(framed_node.address, HEADER.pack(len(request), 8, 2) + request)
    assert status == STATUS_OK


def test_a_body_that_is_not_the_request_is_answered_invalid_request(
    framed_node: NodeProcess,
) -> None:
    garbage = b"\xff\xff\xff\xff"
    status, body, _ = _raw_call(framed_node.address, HEADER.pack(len(garbage), 9, 1) + garbage)
    assert status == STATUS_ERROR
    assert isinstance(error_from_text(body), InvalidRequestError)


async def test_calls_waiting_on_a_connection_the_broker_drops_fail_retriably() -> None:
    loop = asyncio.get_running_loop()
    accepted: list[asyncio.StreamWriter] = []

    async def drop_after_request(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        accepted.append(writer)
        await reader.readexactly(len(MAGIC))
        writer.write(MAGIC)
        await reader.readexactly(HEADER.size)  # a request came: drop the connection
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(drop_after_request, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    framed = FramedChannel(
        "127.0.0.1",
        port,
        loop,
        max_request_bytes=1024,
        max_response_bytes=1024,
        connect_timeout_s=5.0,
    )
    try:
        with pytest.raises(NetworkError) as dropped:
            await framed.call("Fetch", pb.FetchRequest(), 10.0)
        assert dropped.value.retriable
        assert "timed out" not in dropped.value.message
    finally:
        framed.close()
        for writer in accepted:
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()


async def test_a_refused_connection_and_a_silent_broker_fail_with_what_happened() -> None:
    loop = asyncio.get_running_loop()
    refused = FramedChannel(
        "127.0.0.1",
        free_port(),
        loop,
        max_request_bytes=1024,
        max_response_bytes=1024,
        connect_timeout_s=5.0,
    )
    with pytest.raises(NetworkError, match="connection refused"):
        await refused.call("Fetch", pb.FetchRequest(), 10.0)
    refused.close()

    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read()  # until the client goes away

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    silent = FramedChannel(
        "127.0.0.1",
        server.sockets[0].getsockname()[1],
        loop,
        max_request_bytes=1024,
        max_response_bytes=1024,
        connect_timeout_s=5.0,
    )
    try:
        with pytest.raises(RequestTimedOutError):
            await silent.call("Fetch", pb.FetchRequest(), 0.2)
    finally:
        silent.close()
        for writer in accepted:
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()


def test_a_request_over_the_clients_limit_is_not_sent() -> None:
    async def scenario() -> None:
        framed = FramedChannel(
            "127.0.0.1",
            free_port(),
            asyncio.get_running_loop(),
            max_request_bytes=16,
            max_response_bytes=1024,
            connect_timeout_s=5.0,
        )
        with pytest.raises(RecordListTooLargeError):
            await framed.call("Produce", _produce([b"x" * 64]), 10.0)
        framed.close()

    asyncio.run(scenario())


def test_error_answers_carry_the_kafka_error_they_name() -> None:
    timed_out = error_from_text(b"REQUEST_TIMED_OUT: slow")
    assert isinstance(timed_out, RequestTimedOutError) and timed_out.message == "slow"
    assert error_from_text(b"NOT_A_KAFKA_ERROR: x").error_name == "UNKNOWN_SERVER_ERROR"


async def test_a_broker_that_speaks_only_grpc_is_told_apart() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    framed = FramedChannel(
        "127.0.0.1",
        port,
        asyncio.get_running_loop(),
        max_request_bytes=1024,
        max_response_bytes=1024,
        connect_timeout_s=5.0,
    )
    try:
        with pytest.raises(NotFramedError):
            await framed.call("Fetch", pb.FetchRequest(), 10.0)
        assert framed.speaks_frames is False
    finally:
        framed.close()
        await server.stop(None)
