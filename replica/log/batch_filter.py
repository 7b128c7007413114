"""Filtering one stored batch for the log cleaner: keep each key's latest record.

Kafka's ``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter``; pure (bytes in,
bytes out), so :mod:`replica.log.cleaner` can run it on a worker thread. Rules:

* Offsets never change. A rewritten RecordBatch v2 keeps its base offset and its
  ``lastOffsetDelta`` (so its last offset), producer id, epoch and base sequence, leader
  epoch; ``recordsCount``, the records, ``maxTimestamp`` (recomputed from the kept
  records, as Kafka's ``MemoryRecordsBuilder`` does, unless the batch is LogAppendTime,
  whose records all carry it) and the CRC change. Kept records are copied byte for byte
  (their offset and timestamp deltas stay valid). A compressed batch is decompressed and
  its kept records recompressed with its codec.
* A batch left without records is dropped, unless it is the last batch of its producer
  (``retain_if_empty``): it is then kept with no records, so that the producer's epoch and
  sequence survive a rebuild of the producer state (Kafka's filterTo).
* Tombstones (null value) follow Kafka's delete horizon (KIP-534): the first cleaning
  that keeps a tombstone stamps its batch with a delete horizon, ``now +
  delete.retention.ms``, stored as the batch's ``baseTimestamp`` with attribute bit 6 set
  (record timestamp deltas are re-encoded against it, so record timestamps do not
  change). A later cleaning after the horizon drops the tombstone. Consumers that read
  the log from the start within ``delete.retention.ms`` of that first cleaning see the
  delete.
* A record without a key cannot be compacted; it is dropped (Kafka counts it as invalid).
  Brokers refuse unkeyed records for compacted topics at produce time, so only records
  written before the topic became compacted can be affected.
* Transactions (Kafka's rules): the cleaner works below the last stable offset only, where
  every transaction is decided. The records of an aborted transaction are removed (the
  batch is kept empty while it is its producer's last) and never count as the latest of
  their key; a committed transaction's records are compacted like any others. A marker
  whose transaction has nothing left before it (no batch, not even an empty one) goes like
  a tombstone: it gets a delete horizon (``delete.retention.ms``), and a cleaning after
  the horizon drops it. Until then a reader that saw the transaction's records still finds
  its end.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import crc32c as _crc32c

from lograft.protocol.batch_header import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    parse_header,
)
from lograft.protocol.compression import compress, decompress
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.records import encode_varlong, read_varlong
from lograft.protocol.topic_config import MAX_LONG

__all__ = ["DELETE_HORIZON_FLAG", "FilteredBatch", "filter_batch", "keyed_offsets"]

log = logging.getLogger(__name__)

DELETE_HORIZON_FLAG = ATTR_DELETE_HORIZON
"""Batch attribute bit 6 (KIP-534): ``baseTimestamp`` holds the batch's delete horizon."""

_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_CRC = struct.Struct(">I")
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount


@dataclass(frozen=True, slots=True)
class FilteredBatch:
    """One batch after filtering: ``data`` (None: drop it) and what was removed."""

    data: bytes | None
    kept: int
    removed: int
    tombstones_removed: int
    unkeyed_removed: int
    tombstone_horizon_ms: int = -1
    """The delete horizon of the tombstones ``data`` still holds; -1 if it holds none."""


@dataclass(frozen=True, slots=True)
class _RawRecord:
    start: int
    end: int
    body: int
    """Where the record's body starts (after its length varint)."""
    ts_end: int
    """Where its timestamp delta varint ends."""
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool


def _encode_varint(value: int) -> bytes:
    # A record's timestamp far from the delete horizon cannot be re-based on it: refuse the
    # batch (the partition is then left uncleaned, loudly) rather than write a wrong delta.
    try:
        return encode_varlong(value)
    except ValueError as exc:
        raise CorruptMessageError(str(exc)) from None


def _parse_records(data: bytes, header: BatchHeader) -> list[_RawRecord]:
    """Split a batch's (decompressed) record bytes; raises ``CorruptMessageError``."""
    records: list[_RawRecord] = []
    pos = 0
    for _ in range(header.records_count):
        length, body = read_varlong(data, pos)
        end = body + length
        if length < 1 or end > len(data):
            raise CorruptMessageError(f"record length {length} does not fit the batch")
        timestamp_delta, ts_end = read_varlong(data, body + 1)  # after the attributes byte
        offset_delta, cursor = read_varlong(data, ts_end)
        if not 0 <= offset_delta <= header.last_offset_delta:
            raise CorruptMessageError(f"offset delta {offset_delta} out of the batch")
        key_length, cursor = read_varlong(data, cursor)
        if key_length < -1 or cursor + max(key_length, 0) > end:
            raise CorruptMessageError(f"key length {key_length} does not fit the record")
        key = None if key_length < 0 else bytes(data[cursor : cursor + key_length])
        cursor += max(key_length, 0)
        value_length, cursor = read_varlong(data, cursor)
        if value_length < -1 or cursor + max(value_length, 0) > end:
            raise CorruptMessageError(f"value length {value_length} does not fit the record")
        records.append(
            _RawRecord(pos, end, body, ts_end, offset_delta, timestamp_delta, key, value_length < 0)
        )
        pos = end
    if pos != len(data):
        raise CorruptMessageError(f"{len(data) - pos} bytes after the last record")
    return records


def _record_bytes(batch: bytes, header: BatchHeader) -> bytes:
    payload = batch[HEADER_SIZE : header.size]
    if header.compression:
        return decompress(header.compression, payload)
    return bytes(payload)


def _frame(
    header: BatchHeader,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    payload: bytes,
    count: int,
) -> bytes:
    """A batch with ``header``'s offsets and producer fields, new CRC."""
    tail = _TAIL.pack(
        attributes,
        header.last_offset_delta,
        base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    crc = _crc32c.crc32c(payload, _crc32c.crc32c(tail))
    head = _HEAD.pack(
        header.base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch,
        MAGIC,
    )
    return b"".join((head, _CRC.pack(crc), tail, payload))


def _empty_frame(header: BatchHeader) -> bytes:
    """The batch of ``header`` with no records, and so no codec."""
    return _frame(
        header,
        header.attributes & ~ATTR_COMPRESSION_MASK,
        header.base_timestamp,
        header.max_timestamp,
        b"",
        0,
    )


def _keep_latest(
    records: list[_RawRecord],
    header: BatchHeader,
    offset_map: Mapping[bytes, int],
    horizon_passed: bool,
) -> tuple[list[_RawRecord], int, int, int]:
    """The records :func:`filter_batch` keeps, and how many it removes as older than their
    key's latest, as tombstones (or markers) past the delete horizon, and as unkeyed."""
    control = header.is_control
    kept: list[_RawRecord] = []
    removed = tombstones = unkeyed = 0
    for record in records:
        if not control:  # a marker's key is its type: no offset map speaks for it
            if record.key is None:
                unkeyed += 1
                continue
            latest = offset_map.get(record.key)
            if latest is not None and header.base_offset + record.offset_delta < latest:
                removed += 1
                continue
        if (record.tombstone or control) and horizon_passed:
            tombstones += 1
            continue
        kept.append(record)
    return kept, removed, tombstones, unkeyed


def _rebased_payload(
    source: bytes, kept: list[_RawRecord], old_base_timestamp: int, base_timestamp: int
) -> bytes:
    """The uncompressed bytes of the ``kept`` records of ``source``, each one's timestamp
    delta rebased from ``old_base_timestamp`` to ``base_timestamp``."""
    if base_timestamp == old_base_timestamp:
        return b"".join(source[r.start : r.end] for r in kept)
    parts = []
    for record in kept:
        # The timestamp delta is relative to baseTimestamp, which now holds the horizon.
        timestamp = old_base_timestamp + record.timestamp_delta
        body = b"".join(
            (
                source[record.body : record.body + 1],
                _encode_varint(timestamp - base_timestamp),
                source[record.ts_end : record.end],
            )
        )
        parts.append(_encode_varint(len(body)) + body)
    return b"".join(parts)


def filter_batch(
    batch: bytes,
    offset_map: Mapping[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    retain_if_empty: bool,
    aborted: bool = False,
    marker_removable: bool = False,
) -> FilteredBatch:
    """Filter one stored batch (its bytes exactly): keep each key's latest record.

    A record goes if its key maps to a later offset in ``offset_map``, if it has no key, or
    if it is a tombstone whose batch's delete horizon has passed. Kept tombstones in a
    batch without a horizon get one (``now_ms + delete_retention_ms``). Every record of an
    ``aborted`` batch (of an aborted transaction) goes. A control batch (a transaction
    marker) is kept as it is unless ``marker_removable`` (nothing of its transaction is left
    before it): it then goes as a tombstone does, given a delete horizon at the first
    cleaning and dropped at one after it. Pure; raises ``CorruptMessageError`` for a
    malformed batch. See the module docstring.
    """
    header = parse_header(batch)
    control = header.is_control
    if control and not marker_removable:
        return FilteredBatch(batch, header.records_count, 0, 0, 0)
    if aborted and header.records_count:
        data = _empty_frame(header) if retain_if_empty else None
        return FilteredBatch(data, 0, header.records_count, 0, 0)
    if not header.records_count:
        # Emptied by an earlier cleaning; needed only while it is its producer's last.
        return FilteredBatch(batch if retain_if_empty else None, 0, 0, 0, 0)
    records = _parse_records(_record_bytes(batch, header), header)
    has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG)
    horizon_passed = has_horizon and header.base_timestamp <= now_ms
    kept, removed, tombstones, unkeyed = _keep_latest(records, header, offset_map, horizon_passed)
    keeps_tombstones = any(record.tombstone or control for record in kept)
    needs_horizon = not has_horizon and keeps_tombstones
    dropped = removed + tombstones + unkeyed
    if not dropped and not needs_horizon:
        horizon = header.base_timestamp if keeps_tombstones else -1
        return FilteredBatch(batch, len(kept), 0, 0, 0, horizon)
    if not kept:
        # No records, so no codec: the header alone keeps the producer's sequence.
        data = _empty_frame(header) if retain_if_empty else None
        return FilteredBatch(data, 0, removed, tombstones, unkeyed)
    max_timestamp = header.max_timestamp
    if not header.is_log_append_time:
        max_timestamp = max(header.base_timestamp + r.timestamp_delta for r in kept)
    source = _record_bytes(batch, header)
    attributes = header.attributes
    base_timestamp = header.base_timestamp
    if needs_horizon:
        base_timestamp = min(now_ms + delete_retention_ms, MAX_LONG)
        attributes |= DELETE_HORIZON_FLAG
    payload = _rebased_payload(source, kept, header.base_timestamp, base_timestamp)
    if header.compression:
        payload = compress(header.compression, payload)
    return FilteredBatch(
        _frame(header, attributes, base_timestamp, max_timestamp, payload, len(kept)),
        len(kept),
        removed,
        tombstones,
        unkeyed,
        base_timestamp if keeps_tombstones else -1,
    )


def keyed_offsets(batch: bytes, header: BatchHeader) -> Iterator[tuple[bytes, int]]:
    """``(key, offset)`` of each keyed record of one stored batch (``header`` is its
    header), in record order; raises ``CorruptMessageError`` for a malformed batch."""
    for record in _parse_records(_record_bytes(batch, header), header):
        if record.key is not None:
            yield record.key, header.base_offset + record.offset_delta
