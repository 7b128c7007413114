"""Transaction markers (control batches): Kafka's bytes, read back here and by kafka-python."""

from __future__ import annotations

import struct
import warnings

import pytest

with warnings.catch_warnings():  # see tests/unit/lograft/protocol/test_kafka_python_compat.py
    warnings.filterwarnings("ignore", r"\w+ is deprecated\. Use files\(\)", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

from lograft.protocol.batch_header import assign_offsets, parse_header, validate_batches
from lograft.protocol.control_records import (
    AbortedBatchFilter,
    ControlType,
    EndTxnMarker,
    decode_control_type,
    decode_marker,
    encode_marker_batch,
)
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.records import RecordBatchBuilder, iter_records

NOW_MS = 1_700_000_000_000


@pytest.mark.parametrize("committed", [True, False])
def test_a_marker_reads_back_with_its_producer_and_coordinator_epoch(committed: bool) -> None:
    batch = encode_marker_batch(EndTxnMarker(committed, 7), 4001, 3, NOW_MS)
    header = parse_header(batch)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4001, 3, -1)
    assert header.attributes == 0x30
    assert header.records_count == 1
    assert decode_marker(batch) == EndTxnMarker(committed, 7)


def test_kafka_python_reads_a_marker_as_kafka_wrote_it() -> None:
    batch = DefaultRecordBatch(bytearray(encode_marker_batch(EndTxnMarker(True, 9), 12, 1, NOW_MS)))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (12, 1, -1)
    (record,) = list(batch)
    assert record.key == struct.pack(">hh", 0, 1)  # version 0, COMMIT
    assert record.value == struct.pack(">hi", 0, 9)  # version 0, coordinator epoch


def test_clients_may_not_produce_markers() -> None:
    batch = encode_marker_batch(EndTxnMarker(False, 0), 1, 0, NOW_MS)
    with pytest.raises(CorruptMessageError, match="control"):
        validate_batches(batch, 1 << 20)


def _control_batch(key: bytes | None, value: bytes | None, records: int = 1) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=1, producer_epoch=0, is_transactional=True, is_control=True
    )
    for _ in range(records):
        builder.append(value, key=key, timestamp_ms=NOW_MS)
    return builder.build()


def test_a_newer_version_reads_as_version_0_and_other_types_are_not_markers() -> None:
    newer = _control_batch(struct.pack(">hh", 3, 1), struct.pack(">hi", 2, 5) + b"future")
    assert decode_marker(newer) == EndTxnMarker(True, 5)
    kraft_record = _control_batch(struct.pack(">hh", 0, 3), b"\x00\x00")
    assert decode_marker(kraft_record) is None
    assert decode_control_type(struct.pack(">hh", 0, 6)) is ControlType.UNKNOWN


@pytest.mark.parametrize(
    ("key", "value", "records", "why"),
    [
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), 1, "key version"),
        (struct.pack(">h", 0), struct.pack(">hi", 0, 1), 1, "key of 2 bytes"),
        (None, struct.pack(">hi", 0, 1), 1, "key of 0 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">h", 0), 1, "value of 2 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1), 1, "value version"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), 2, "one record"),
    ],
)
def test_malformed_markers_are_corrupt(
    key: bytes | None, value: bytes | None, records: int, why: str
) -> None:
    with pytest.raises(CorruptMessageError, match=why):
        decode_marker(_control_batch(key, value, records))


def test_a_data_batch_is_not_a_marker() -> None:
    data = RecordBatchBuilder(producer_id=1, producer_epoch=0, is_transactional=True)
    data.append(b"v", timestamp_ms=NOW_MS)
    with pytest.raises(CorruptMessageError, match="attributes 0x10"):
        decode_marker(data.build())


def test_a_damaged_marker_is_corrupt() -> None:
    batch = bytearray(encode_marker_batch(EndTxnMarker(True, 1), 1, 0, NOW_MS))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        decode_marker(batch)


def _stored(batches: list[bytes]) -> bytes:
    """Batches as a log holds them: consecutive offsets assigned."""
    out = bytearray()
    offset = 0
    for raw in batches:
        batch = bytearray(raw)
        header = parse_header(batch)
        assign_offsets(batch, [header], offset, 0)
        offset += header.last_offset_delta + 1
        out += batch
    return bytes(out)


def _txn_batch(producer_id: int, values: list[bytes]) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    for value in values:
        builder.append(value=value, timestamp_ms=5)
    return builder.build()


def test_read_committed_drops_aborted_batches_and_every_marker() -> None:
    abort = EndTxnMarker(committed=False, coordinator_epoch=0)
    commit = EndTxnMarker(committed=True, coordinator_epoch=0)
    log = _stored(
        [
            _txn_batch(7, [b"a1", b"a2"]),  # 0-1: producer 7, aborted below
            _txn_batch(8, [b"c1"]),  # 2: producer 8, committed below
            encode_marker_batch(abort, 7, 1, 5),  # 3
            _txn_batch(7, [b"later"]),  # 4: producer 7's next transaction, committed
            encode_marker_batch(commit, 8, 1, 5),  # 5
            encode_marker_batch(commit, 7, 2, 5),  # 6
        ]
    )
    everything = [r.value for r in iter_records(log)]
    assert everything == [b"a1", b"a2", b"c1", b"later"], "markers are never records"
    committed = [r.value for r in iter_records(log, 0, AbortedBatchFilter([(7, 0)]))]
    assert committed == [b"c1", b"later"], "aborting ends at the producer's abort marker"
    # Fetched from offset 2: the aborted transaction started before the fetch.
    assert [r.value for r in iter_records(log, 2, AbortedBatchFilter([(7, 0)]))] == [
        b"c1",
        b"later",
    ]
