"""Test helpers for the storage layer: build valid RecordBatch v2 bytes without the codec.

Kept independent of ``lograft.protocol.records`` on purpose: the storage tests must not break when
the codec changes, and a second, tiny encoder cross-checks the header code.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Sequence
from pathlib import Path

import crc32c

from lograft.protocol.batch_header import BatchHeader, iter_headers, validate_batches
from replica.log.partition_log import AppendResult, PartitionLog

_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiibI")


def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def make_batch(
    values: Sequence[bytes],
    *,
    timestamp_ms: int = 1_000,
    timestamp_deltas: Sequence[int] | None = None,
    base_offset: int = 0,
) -> bytes:
    """One valid, uncompressed batch of ``values`` (no keys, no headers), CRC included."""
    deltas = list(timestamp_deltas) if timestamp_deltas is not None else [0] * len(values)
    records = bytearray()
    for index, (value, delta) in enumerate(zip(values, deltas, strict=True)):
        body = b"\x00" + _varint(delta) + _varint(index) + _varint(-1)
        body += _varint(len(value)) + value + _varint(0)
        records += _varint(len(body)) + body
    after_crc = _AFTER_CRC.pack(
        0, len(values) - 1, timestamp_ms, timestamp_ms + max(deltas), -1, -1, -1, len(values)
    ) + bytes(records)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return _BEFORE_CRC.pack(base_offset, batch_length, -1, 2, crc32c.crc32c(after_crc)) + after_crc


def append_values(
    log: PartitionLog,
    values: Sequence[bytes],
    *,
    timestamp_ms: int = 1_000,
    now_ms: int = 0,
    leader_epoch: int = 0,
    batches: int = 1,
) -> tuple[AppendResult, bytes]:
    """Append ``batches`` batches of ``values``; returns the result and the stored bytes."""
    buffer = bytearray(
        b"".join(make_batch(values, timestamp_ms=timestamp_ms) for _ in range(batches))
    )
    headers = validate_batches(buffer, 1 << 20)
    result = log.append(buffer, headers, leader_epoch, now_ms)
    return result, bytes(buffer)


def headers_of(data: bytes) -> list[BatchHeader]:
    """Headers of the whole batches in ``data``; asserts there is no partial tail."""
    headers = list(iter_headers(data))
    assert sum(header.size for header in headers) == len(data)
    return headers


def read_all(log: PartitionLog, max_bytes: int = 1 << 20) -> bytes:
    """Every batch from the log start to the log end, by repeated reads."""
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        assert data, f"empty read at {offset} below log end {log.log_end_offset}"
        out += data
        offset = headers_of(data)[-1].next_offset
    return bytes(out)


def crash_copy(source: Path, target: Path) -> Path:
    """Copy a live partition directory, as a kill -9 would leave it (page cache intact)."""
    shutil.copytree(source, target)
    return target


def segment_logs(directory: Path) -> list[Path]:
    """The ``.log`` files of a partition directory, oldest first."""
    return sorted(directory.glob("*.log"))
