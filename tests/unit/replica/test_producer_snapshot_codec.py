"""The producer-state snapshot codec: round trips, file names, and corrupt or arbitrary
bytes answered with the typed error."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replica.producer_snapshot_codec import (
    CorruptProducerSnapshotError,
    decode_snapshot,
    encode_snapshot,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from replica.producer_state import MAX_SEQUENCE, ProducerStateManager
from tests.unit.producer_state_fixtures import at_offset, header, produce


def test_snapshot_round_trip() -> None:
    manager = ProducerStateManager(producer_id_expiration_ms=5)
    produce(manager, header(producer_id=-1, epoch=-1, seq=-1, count=2))
    for i in range(30):  # the replication path: no checks, epochs and sequences as given
        epoch = 1 if i == 27 else 0
        batch = header(producer_id=i % 3, epoch=epoch, seq=7 * i, count=1 + i % 2, timestamp=-i)
        manager.on_appended(at_offset(batch, manager.end_offset))
    produce(manager, header(producer_id=2**62, epoch=2**15 - 1, seq=MAX_SEQUENCE, count=2))
    assert {len(entry.batches) for entry in manager.entries().values()} == {1, 5}
    data = encode_snapshot(manager)
    loaded = decode_snapshot(data, producer_id_expiration_ms=5)
    assert loaded == manager
    assert loaded.producer_id_expiration_ms == 5
    assert encode_snapshot(loaded) == data
    empty = ProducerStateManager(end_offset=42)
    assert decode_snapshot(encode_snapshot(empty)) == empty


def test_snapshot_file_names() -> None:
    assert snapshot_file_name(42) == "00000000000000000042.snapshot"
    assert parse_snapshot_file_name(snapshot_file_name(42)) == 42
    for name in ("42.snapshot", "0000000000000000004x.snapshot", "00000000000000000042.log"):
        assert parse_snapshot_file_name(name) is None
    with pytest.raises(ValueError):
        snapshot_file_name(-1)


def _sample_snapshot() -> bytes:
    manager = ProducerStateManager()
    for seq in range(3):
        produce(manager, header(producer_id=1, seq=2 * seq, count=2))
    produce(manager, header(producer_id=2, seq=0))
    return encode_snapshot(manager)


def _resealed(body: bytes) -> bytes:
    """``body`` (everything after the CRC) framed with a correct header and CRC."""
    return b"LGPS" + struct.pack(">HI", 2, crc32c.crc32c(body)) + body


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:-1], "CRC|truncated"),
        (lambda d: d + b"\x00", "CRC|unexpected"),
        (lambda d: d[:5], "truncated"),
        (lambda d: b"XXXX" + d[4:], "magic"),
        (lambda d: d[:4] + b"\x00\x09" + d[6:], "version"),
        (lambda d: d[:30] + bytes([d[30] ^ 0x40]) + d[31:], "CRC"),
        (lambda d: _resealed(d[10:-44]), "truncated"),
        (lambda d: _resealed(d[10:18] + b"\xff\xff\xff\xff" + d[22:]), "truncated"),
        (lambda d: _resealed(b"\xff" * 8 + d[18:]), "negative"),
        (lambda d: _resealed(b"\x00" * 8 + d[18:]), "offsets"),
        (lambda d: _resealed(d[10:52] + b"\x09" + d[53:]), "cached batches"),
        (lambda d: _resealed(d[10:-8] + b"\x00\x00\x00\x09" + d[-4:]), "claimed"),
        (lambda d: _resealed(d[10:40] + b"\xff\xff\xff\xfe" + d[44:]), "coordinator epoch"),
        (lambda d: _resealed(d[10:30] + b"\xff\xff" + d[32:]), "epoch"),
    ],
)
def test_corrupt_snapshot_is_a_typed_error(mutate: object, message: str) -> None:
    data = _sample_snapshot()
    assert callable(mutate)
    with pytest.raises(CorruptProducerSnapshotError, match=message):
        decode_snapshot(mutate(data))


def test_snapshot_size_limit() -> None:
    data = _sample_snapshot()
    with pytest.raises(CorruptProducerSnapshotError, match="exceeds"):
        decode_snapshot(data, max_bytes=len(data) - 1)
    assert decode_snapshot(data, max_bytes=len(data)).end_offset == 7


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.data())
def test_arbitrary_bytes_load_or_raise_the_typed_error(noise: bytes, data: st.DataObject) -> None:
    sample = bytearray(_sample_snapshot())
    candidates = [noise, _resealed(noise)]
    if noise:
        position = data.draw(st.integers(0, len(sample) - 1))
        sample[position] ^= noise[0] or 1
        candidates += [bytes(sample), _resealed(bytes(sample[10:]))]
    for candidate in candidates:
        try:
            loaded = decode_snapshot(candidate)
        except CorruptProducerSnapshotError:
            continue
        assert decode_snapshot(encode_snapshot(loaded)) == loaded
