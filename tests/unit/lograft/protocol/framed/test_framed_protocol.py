"""Frames split from a byte stream however it arrives, and a length over the limit is
refused before its body is kept."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lograft.protocol.errors import NetworkError, NotLeaderOrFollowerError, UnknownServerError
from lograft.protocol.framed import client as client_module
from lograft.protocol.framed.client import FramedChannel, _ClientConnection
from lograft.protocol.framed.protocol import (
    HEADER,
    MAGIC,
    FrameReceiver,
    OversizedFrame,
    error_from_text,
    error_text,
    take_frame,
)
from lograft.protocol.wire import broker_pb2 as pb

TIMEOUT_S = 10.0


@given(
    bodies=st.lists(st.binary(max_size=64), max_size=6),
    cut=st.lists(st.integers(min_value=1, max_value=40), max_size=20),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_arrive(
    bodies: list[bytes], cut: list[int]
) -> None:
    stream = b"".join(HEADER.pack(len(b), n, 1) + b for n, b in enumerate(bodies))
    buffer = bytearray()
    taken: list[tuple[int, int, bytes]] = []
    position = 0
    for size in [*cut, len(stream)]:
        buffer += stream[position : position + size]
        position += size
        while (frame := take_frame(buffer, 64)) is not None:
            taken.append(frame)
    assert taken == [(n, 1, b) for n, b in enumerate(bodies)]
    assert buffer == b""


def test_a_header_over_the_limit_is_refused_with_its_correlation_id() -> None:
    buffer = bytearray(HEADER.pack(65, 42, 2))  # no body has arrived yet
    with pytest.raises(OversizedFrame) as refused:
        take_frame(buffer, 64)
    assert (refused.value.length, refused.value.correlation_id) == (65, 42)


def test_an_error_answer_names_its_kafka_error() -> None:
    error = error_from_text(error_text(NotLeaderOrFollowerError("moved")))
    assert isinstance(error, NotLeaderOrFollowerError) and error.message == "moved"
    assert isinstance(error_from_text(b"no name here"), UnknownServerError)


@given(
    bodies=st.lists(
        st.binary(max_size=64) | st.integers(70_000, 300_000).map(lambda n: bytes(n)), max_size=6
    ),
    reads=st.lists(st.integers(min_value=1, max_value=100_000), max_size=30),
)
def test_a_frame_receiver_gives_every_frame_whole_and_in_order_however_reads_split(
    bodies: list[bytes], reads: list[int]
) -> None:
    # As asyncio's BufferedProtocol drives it: each read fills at most the buffer it is given.
    stream = b"".join(HEADER.pack(len(b), n, 1) + b for n, b in enumerate(bodies))
    receiver = FrameReceiver(limit=300_000)
    taken: list[tuple[int, int, bytes]] = []
    position = 0
    read_sizes = iter(reads)
    while position < len(stream):
        buffer = receiver.buffer()
        assert len(buffer) > 0
        size = min(len(buffer), next(read_sizes, len(stream)), len(stream) - position)
        buffer[:size] = stream[position : position + size]
        position += size
        receiver.received(size)
        taken += [(n, kind, bytes(body)) for n, kind, body in receiver.frames()]
    assert taken == [(n, 1, b) for n, b in enumerate(bodies)]


def test_a_frame_receiver_refuses_a_header_over_its_limit_before_the_body() -> None:
    receiver = FrameReceiver(limit=64)
    header = HEADER.pack(65, 42, 2)
    receiver.buffer()[: len(header)] = header
    receiver.received(len(header))
    with pytest.raises(OversizedFrame) as refused:
        receiver.frames()
    assert (refused.value.length, refused.value.correlation_id) == (65, 42)


def test_closing_a_channel_as_the_handshake_answer_is_read_leaves_the_loop_clean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The close and the broker's answer land in one loop turn, close first: the read
    # callback then runs after the connect was cancelled. It raised CancelledError once,
    # which asyncio logged as a fatal protocol error.
    server = socket.create_server(("127.0.0.1", 0))
    got_magic, go, answered = threading.Event(), threading.Event(), threading.Event()
    accepted: list[socket.socket] = []

    def broker() -> None:
        conn, _ = server.accept()
        accepted.append(conn)
        assert conn.recv(len(MAGIC)) == MAGIC  # the client now waits for the handshake
        got_magic.set()
        go.wait(TIMEOUT_S)
        conn.sendall(MAGIC + HEADER.pack(4, 1, 0) + b"body")
        answered.set()

    connections: list[_ClientConnection] = []

    class Recorded(_ClientConnection):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            connections.append(self)
            super().connection_made(transport)

    monkeypatch.setattr(client_module, "_ClientConnection", Recorded)
    thread = threading.Thread(target=broker, daemon=True)
    thread.start()
    loop = asyncio.new_event_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        channel = FramedChannel(
            "127.0.0.1",
            server.getsockname()[1],
            loop,
            max_request_bytes=1024,
            max_response_bytes=1024,
            connect_timeout_s=TIMEOUT_S,
        )
        call = channel.submit("Fetch", pb.FetchRequest(), TIMEOUT_S)
        loop.run_until_complete(loop.run_in_executor(None, got_magic.wait, TIMEOUT_S))
        # The loop is stopped: the answer waits in the client's socket until the next turn.
        go.set()
        assert answered.wait(TIMEOUT_S)
        (connection,) = connections
        assert connection._transport is not None
        client_socket = connection._transport.get_extra_info("socket")
        assert select.select([client_socket], [], [], TIMEOUT_S)[0]
        connecting = channel._connecting
        assert connecting is not None
        loop.call_soon(channel.close)
        # The cancelled connect ends after the read callback ran: in the close's turn.
        loop.run_until_complete(asyncio.wait([connecting]))
        with pytest.raises(NetworkError, match="channel closed"):
            call.result(timeout=0)
        assert errors == []
    finally:
        loop.close()
        for conn in accepted:
            conn.close()
        server.close()
        thread.join(TIMEOUT_S)
