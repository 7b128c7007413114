"""Producer-state snapshots as bytes: the codec of :mod:`replica.producer_state`, pure.

:func:`encode_snapshot` writes a partition's producer state and the log end offset it
covers as a versioned, CRC-32C checked snapshot; :func:`decode_snapshot` reads one back.
A snapshot is untrusted input: the decoder checks every value against what the state can
hold and raises :class:`CorruptProducerSnapshotError` for anything else, which the shell
(:mod:`replica.producer_snapshots`) answers by deleting the file and replaying the log.
:func:`snapshot_file_name` and :func:`parse_snapshot_file_name` are Kafka's file names for
them. Bytes in, bytes out: like the state, nothing here reads a clock or touches a file.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import crc32c as _crc32c

from replica.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    MAX_SEQUENCE,
    NO_COORDINATOR_EPOCH,
    NUM_BATCHES_TO_RETAIN,
    AbortedTxn,
    BatchMetadata,
    CompletedTxn,
    ProducerEntry,
    ProducerStateManager,
    last_sequence,
)

__all__ = [
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "SNAPSHOT_SUFFIX",
    "CorruptProducerSnapshotError",
    "decode_snapshot",
    "encode_snapshot",
    "parse_snapshot_file_name",
    "snapshot_file_name",
]

DEFAULT_MAX_SNAPSHOT_BYTES: Final = 64 * 1024 * 1024
"""The longest snapshot :func:`decode_snapshot` reads: a longer file is refused as corrupt
rather than read into memory."""
SNAPSHOT_SUFFIX: Final = ".snapshot"
"""The suffix of a producer snapshot file, named by its end offset (Kafka's ``.snapshot``)."""

_SNAPSHOT_MAGIC: Final = b"LGPS"
_SNAPSHOT_VERSION: Final = 2
# magic, version, crc32c (of everything after it), end offset, producer count
_SNAPSHOT_HEADER = struct.Struct(">4sHIqI")
_CRC_START: Final = 10  # bytes covered by the CRC start after magic and version and crc
# version 1: producer id, epoch, last timestamp, batch count
_ENTRY_V1 = struct.Struct(">qhqB")
# version 2: producer id, epoch, last timestamp, coordinator epoch, open transaction's
# first offset (-1: none), batch count
_ENTRY = struct.Struct(">qhqiqB")
_COUNT = struct.Struct(">I")
# producer id, first offset, marker offset, aborted
_COMPLETED = struct.Struct(">qqqB")
# producer id, first offset, marker offset
_ABORTED = struct.Struct(">qqq")
# first sequence, last sequence, first offset, last offset, max timestamp
_BATCH = struct.Struct(">iiqqq")


class CorruptProducerSnapshotError(ValueError):
    """A producer-state snapshot is too large, truncated, fails its CRC or holds bad values.

    The shell treats it like Kafka's ``CorruptSnapshotException``: delete the file and
    rebuild from an older snapshot (or the log start) by replaying the log.
    """


def snapshot_file_name(end_offset: int) -> str:
    """Kafka's snapshot file name: the 20-digit offset the snapshot covers, ``.snapshot``."""
    if end_offset < 0:
        raise ValueError(f"negative snapshot offset {end_offset}")
    return f"{end_offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> int | None:
    """The offset in a name made by :func:`snapshot_file_name`, or None for other names."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    digits = name[: -len(SNAPSHOT_SUFFIX)]
    if len(digits) != 20 or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


def encode_snapshot(state: ProducerStateManager) -> bytes:
    """Encode ``state`` and its end offset (versioned, CRC-32C); see :func:`decode_snapshot`.

    Layout (version 2), big-endian: magic ``LGPS``, version u16, CRC-32C u32 of
    everything after it, end offset i64, producer count u32, then per producer
    (ascending id): id i64, epoch i16, last timestamp i64, coordinator epoch i32, open
    transaction's first offset i64 (-1: none), batch count u8, and per batch (oldest
    first): first sequence i32, last sequence i32, first offset i64, last offset i64,
    max timestamp i64. Then the ended transactions the high watermark may not have
    passed (count u32; producer id i64, first offset i64, marker offset i64, aborted u8)
    and the aborted transactions (count u32; producer id i64, first offset i64, marker
    offset i64). Version 1 had neither list and no transaction fields per producer.
    """
    entries = state.entries()
    parts: list[bytes] = []
    for producer_id in sorted(entries):
        entry = entries[producer_id]
        txn_first = entry.current_txn_first_offset
        parts.append(
            _ENTRY.pack(
                producer_id,
                entry.producer_epoch,
                entry.last_timestamp,
                entry.coordinator_epoch,
                -1 if txn_first is None else txn_first,
                len(entry.batches),
            )
        )
        for batch in entry.batches:
            parts.append(
                _BATCH.pack(
                    batch.first_seq,
                    batch.last_seq,
                    batch.first_offset,
                    batch.last_offset,
                    batch.max_timestamp,
                )
            )
    ended = state.ended_transactions()
    parts.append(_COUNT.pack(len(ended)))
    for completed in ended:
        parts.append(
            _COMPLETED.pack(
                completed.producer_id,
                completed.first_offset,
                completed.last_offset,
                completed.aborted,
            )
        )
    aborted_txns = state.kept_aborted_transactions()
    parts.append(_COUNT.pack(len(aborted_txns)))
    for aborted in aborted_txns:
        parts.append(_ABORTED.pack(aborted.producer_id, aborted.first_offset, aborted.last_offset))
    body = struct.pack(">qI", state.end_offset, len(entries)) + b"".join(parts)
    crc = int(_crc32c.crc32c(body))
    return _SNAPSHOT_MAGIC + struct.pack(">HI", _SNAPSHOT_VERSION, crc) + body


def decode_snapshot(
    data: bytes | bytearray | memoryview,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    max_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
) -> ProducerStateManager:
    """Decode a snapshot made by :func:`encode_snapshot` (version 2, or 1); untrusted input.

    Raises :class:`CorruptProducerSnapshotError` if it is longer than ``max_bytes``,
    truncated or padded, of another magic or version, fails its CRC, or holds values
    the state cannot have (negative ids, epochs, sequences or offsets; more than five
    batches, or none in version 1; batches out of order or at or beyond the end offset;
    producer ids not strictly ascending; transaction offsets outside the log or out of
    order). Expired producers are kept: call
    :meth:`~replica.producer_state.ProducerStateManager.expire_producers` after loading.
    """
    view = memoryview(data)
    version, end_offset, count = _read_header(view, max_bytes)
    reader = _SnapshotReader(view, _SNAPSHOT_HEADER.size)
    manager = ProducerStateManager(producer_id_expiration_ms, end_offset)
    entries: list[ProducerEntry] = []
    for _ in range(count):
        previous_id = entries[-1].producer_id if entries else -1
        entries.append(_read_entry(reader, version, end_offset, previous_id))
    ended: list[CompletedTxn] = []
    aborted: list[AbortedTxn] = []
    if version != 1:
        ended = _read_ended(reader, end_offset)
        aborted = _read_aborted(reader, end_offset)
    if reader.position != len(view):
        raise CorruptProducerSnapshotError(
            f"{len(view) - reader.position} unexpected bytes after {count} producers"
        )
    manager.restore(entries, ended, aborted)
    return manager


def _read_header(view: memoryview, max_bytes: int) -> tuple[int, int, int]:
    """The snapshot's version, end offset and producer count, once its size, magic,
    version and CRC are checked."""
    if len(view) > max_bytes:
        raise CorruptProducerSnapshotError(
            f"snapshot of {len(view)} bytes exceeds the limit of {max_bytes}"
        )
    if len(view) < _SNAPSHOT_HEADER.size:
        raise CorruptProducerSnapshotError(f"snapshot truncated: {len(view)} bytes")
    magic, version, crc, end_offset, count = _SNAPSHOT_HEADER.unpack_from(view, 0)
    if magic != _SNAPSHOT_MAGIC:
        raise CorruptProducerSnapshotError(f"bad snapshot magic {bytes(magic)!r}")
    if version not in (1, _SNAPSHOT_VERSION):
        raise CorruptProducerSnapshotError(f"unsupported snapshot version {version}")
    if int(_crc32c.crc32c(view[_CRC_START:])) != crc:
        raise CorruptProducerSnapshotError("snapshot CRC mismatch")
    if end_offset < 0:
        raise CorruptProducerSnapshotError(f"negative snapshot end offset {end_offset}")
    return version, end_offset, count


def _read_entry(
    reader: _SnapshotReader, version: int, end_offset: int, previous_id: int
) -> ProducerEntry:
    """One producer and its cached batches; its id must be above ``previous_id``."""
    if version == 1:
        producer_id, epoch, last_timestamp, batch_count = reader.unpack(_ENTRY_V1)
        coordinator_epoch, txn_first = NO_COORDINATOR_EPOCH, -1
    else:
        (producer_id, epoch, last_timestamp, coordinator_epoch, txn_first, batch_count) = (
            reader.unpack(_ENTRY)
        )
    if producer_id <= previous_id:
        raise CorruptProducerSnapshotError(
            f"producer id {producer_id} not above the previous {previous_id}"
        )
    if epoch < 0 or coordinator_epoch < NO_COORDINATOR_EPOCH:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: epoch {epoch}, coordinator epoch {coordinator_epoch}"
        )
    if not (1 if version == 1 else 0) <= batch_count <= NUM_BATCHES_TO_RETAIN:
        raise CorruptProducerSnapshotError(f"producer {producer_id}: {batch_count} cached batches")
    batches: list[BatchMetadata] = []
    for _ in range(batch_count):
        batch = BatchMetadata(*reader.unpack(_BATCH))
        _check_snapshot_batch(producer_id, batch, batches, end_offset)
        batches.append(batch)
    if version == 1 and last_timestamp != batches[-1].max_timestamp:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: last timestamp {last_timestamp} is not that of its last batch"
        )
    if txn_first != -1:
        _check_txn_offsets(producer_id, txn_first, txn_first, end_offset)
    return ProducerEntry(
        producer_id,
        epoch,
        tuple(batches),
        last_timestamp,
        None if txn_first == -1 else txn_first,
        coordinator_epoch,
    )


def _read_ended(reader: _SnapshotReader, end_offset: int) -> list[CompletedTxn]:
    """The ended transactions the high watermark may not have passed (version 2)."""
    ended: list[CompletedTxn] = []
    for _ in range(reader.count(_COMPLETED.size)):
        producer_id, first, last, aborted = reader.unpack(_COMPLETED)
        _check_txn_offsets(producer_id, first, last, end_offset)
        if aborted not in (0, 1):
            raise CorruptProducerSnapshotError(f"ended transaction flag {aborted}")
        ended.append(CompletedTxn(producer_id, first, last, bool(aborted)))
    return ended


def _read_aborted(reader: _SnapshotReader, end_offset: int) -> list[AbortedTxn]:
    """The aborted transactions, their markers strictly ascending (version 2)."""
    aborted: list[AbortedTxn] = []
    for _ in range(reader.count(_ABORTED.size)):
        producer_id, first, last = reader.unpack(_ABORTED)
        _check_txn_offsets(producer_id, first, last, end_offset)
        if aborted and last <= aborted[-1].last_offset:
            raise CorruptProducerSnapshotError(
                f"aborted transaction marker {last} not after the previous"
            )
        aborted.append(AbortedTxn(producer_id, first, last))
    return aborted


class _SnapshotReader:
    """Reads fixed-size fields from an untrusted snapshot; a short read is corruption."""

    __slots__ = ("position", "view")

    def __init__(self, view: memoryview, position: int) -> None:
        self.view = view
        self.position = position

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if len(self.view) - self.position < layout.size:
            raise CorruptProducerSnapshotError(f"snapshot truncated at byte {self.position}")
        values: tuple[int, ...] = layout.unpack_from(self.view, self.position)
        self.position += layout.size
        return values

    def count(self, item_size: int) -> int:
        """A u32 count of items of ``item_size`` bytes, checked against the bytes left."""
        (count,) = self.unpack(_COUNT)
        if count * item_size > len(self.view) - self.position:
            raise CorruptProducerSnapshotError(
                f"{count} items of {item_size} bytes claimed at byte {self.position}"
            )
        return count


def _check_txn_offsets(producer_id: int, first: int, last: int, end_offset: int) -> None:
    if producer_id < 0 or not 0 <= first <= last < end_offset:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: transaction offsets {first}..{last} with end offset "
            f"{end_offset}"
        )


def _check_snapshot_batch(
    producer_id: int,
    batch: BatchMetadata,
    before: Sequence[BatchMetadata],
    end_offset: int,
) -> None:
    if not (0 <= batch.first_seq <= MAX_SEQUENCE and 0 <= batch.last_seq <= MAX_SEQUENCE):
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: sequences {batch.first_seq}..{batch.last_seq}"
        )
    if not 0 <= batch.first_offset <= batch.last_offset < end_offset:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: offsets {batch.first_offset}..{batch.last_offset} "
            f"with end offset {end_offset}"
        )
    if last_sequence(batch.first_seq, batch.last_offset - batch.first_offset) != batch.last_seq:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: sequences {batch.first_seq}..{batch.last_seq} do not "
            f"match offsets {batch.first_offset}..{batch.last_offset}"
        )
    if before and batch.first_offset <= before[-1].last_offset:
        raise CorruptProducerSnapshotError(
            f"producer {producer_id}: batch at {batch.first_offset} not after the previous"
        )
