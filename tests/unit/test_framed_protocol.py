"""Frames split from a byte stream however it arrives, and a length over the limit is
refused before its body is kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.errors import NotLeaderOrFollowerError, UnknownServerError
from cluster.framed.protocol import (
    HEADER,
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
