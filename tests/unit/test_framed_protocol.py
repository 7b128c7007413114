"""Frames split from a byte stream however it arrives, and a length over the limit is
refused before its body is kept."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.errors import NotLeaderOrFollowerError, UnknownServerError
from cluster.framed.client import FramedChannel, _ClientConnection
from cluster.framed.protocol import (
    HEADER,
    MAGIC,
    FrameReceiver,
    OversizedFrame,
    error_from_text,
    error_text,
    take_frame,
)


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


def test_bytes_arriving_after_a_cancelled_connect_are_dropped() -> None:
    # Closing a channel while it connects cancels the handshake; the broker's answer may
    # still be read afterwards, and must not break the loop's read callback.
    loop = asyncio.new_event_loop()
    try:
        channel = FramedChannel(
            "127.0.0.1",
            9,
            loop,
            max_request_bytes=1024,
            max_response_bytes=1024,
            connect_timeout_s=1.0,
        )
        connection = _ClientConnection(channel)
        connection.handshake.cancel()
        answer = MAGIC + HEADER.pack(4, 1, 0) + b"body"
        buffer = connection.get_buffer(len(answer))
        buffer[: len(answer)] = answer
        connection.buffer_updated(len(answer))  # raised CancelledError before
        assert connection._receiver.frames() == []  # dropped, not kept for a later read
    finally:
        loop.close()
