"""The Raft messages survive the gRPC envelope unchanged (controller.quorum.wire)."""

from __future__ import annotations

import pytest

from controller.quorum.wire import MalformedRaftMessageError, from_envelope, to_envelope
from controller.raft import FetchRequest


def test_fetch_request_keeps_its_long_poll_fields() -> None:
    """The fetcher's high watermark and max wait decide whether the leader holds a fetch."""
    fetch = FetchRequest("c", 2, 1, 7, 40, 6, 38, 5)
    assert from_envelope(to_envelope(fetch)) == fetch


def test_a_negative_max_wait_is_malformed() -> None:
    """A peer's envelope is not trusted: negative long-poll fields are refused."""
    envelope = to_envelope(FetchRequest("c", 2, 1, 7, 40, 6, 38, 5))
    envelope.fetch_request.max_wait_ticks = -1
    with pytest.raises(MalformedRaftMessageError, match="max_wait_ticks"):
        from_envelope(envelope)
