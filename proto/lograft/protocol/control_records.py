"""Transaction markers: Kafka's control batches that end a transaction on a partition.

When a transaction commits or aborts, its coordinator has the leader of every partition
it wrote append one *marker*: a RecordBatch v2 whose attributes say transactional and
control (``0x30``), carrying the transaction's producer id and epoch, base sequence -1 and
exactly one record, uncompressed and without headers::

    key    version int16 (0), type int16 (0 ABORT, 1 COMMIT)
    value  version int16 (0), coordinatorEpoch int32

The same bytes as Kafka's ``EndTransactionMarker`` (``MemoryRecords.withEndTransactionMarker``),
so any RecordBatch v2 reader (kafka-python, a Kafka broker's log tools) reads a lograft log.
Readers accept a higher version and read it as version 0, as Kafka does; a negative version,
a key or value too short, or a batch that is not one control record is corrupt. Record types
other than ABORT and COMMIT (KRaft uses 2-6 in its own log) are :attr:`ControlType.UNKNOWN`:
not a marker, and skipped by consumers like every control batch.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from lograft.protocol.batch_builder import RecordBatchBuilder
from lograft.protocol.batch_header import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BatchHeader,
    check_stored_batch,
    parse_header,
)
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.record_codec import decode_records

__all__ = [
    "CONTROL_RECORD_VERSION",
    "AbortedBatchFilter",
    "ControlType",
    "EndTxnMarker",
    "decode_control_type",
    "decode_marker",
    "encode_marker_batch",
]

CONTROL_RECORD_VERSION = 0
"""The version this module writes into a control record's key and a marker's value."""

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


class ControlType(enum.IntEnum):
    """A control record's type (Kafka's ``ControlRecordType``; others are UNKNOWN)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """The end of one producer's transaction on one partition: committed or aborted."""

    committed: bool
    coordinator_epoch: int
    """The epoch of the transaction coordinator that wrote it (its ``__transaction_state``
    partition's leader epoch): a leader refuses a marker from an older coordinator."""

    @property
    def control_type(self) -> ControlType:
        """COMMIT or ABORT."""
        return ControlType.COMMIT if self.committed else ControlType.ABORT


def encode_marker_batch(
    marker: EndTxnMarker, producer_id: int, producer_epoch: int, timestamp_ms: int
) -> bytes:
    """The control batch that writes ``marker`` for the producer (offsets set on append)."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(
            f"a marker needs a producer id and epoch, got {producer_id}/{producer_epoch}"
        )
    if not -(2**31) <= marker.coordinator_epoch < 2**31:
        raise ValueError(f"coordinator epoch {marker.coordinator_epoch} does not fit 32 bits")
    builder = RecordBatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(
        key=_KEY.pack(CONTROL_RECORD_VERSION, marker.control_type),
        value=_VALUE.pack(CONTROL_RECORD_VERSION, marker.coordinator_epoch),
        timestamp_ms=timestamp_ms,
    )
    return builder.build()


def decode_control_type(key: bytes | None) -> ControlType:
    """The type a control record's key names; ``CorruptMessageError`` if it is malformed."""
    if key is None or len(key) < _KEY.size:
        raise CorruptMessageError(f"control record key of {0 if key is None else len(key)} bytes")
    version, raw_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptMessageError(f"control record key version {version}")
    try:
        return ControlType(raw_type)
    except ValueError:
        return ControlType.UNKNOWN


def decode_marker(batch: bytes | bytearray | memoryview) -> EndTxnMarker | None:
    """The marker a control batch holds; ``None`` for a control record of another type.

    Raises ``CorruptMessageError`` for a batch that is not a transactional control batch of
    one record, or whose record is malformed.
    """
    header: BatchHeader = parse_header(batch)
    check_stored_batch(batch, header)
    expected = ATTR_TRANSACTIONAL | ATTR_CONTROL
    if header.attributes & expected != expected:
        raise CorruptMessageError(
            f"batch attributes 0x{header.attributes:x} are not a transaction marker's"
        )
    records = decode_records(batch, header)
    if len(records) != 1:
        raise CorruptMessageError(f"a control batch holds one record, this one {len(records)}")
    control_type = decode_control_type(records[0].key)
    if control_type is ControlType.UNKNOWN:
        return None
    value = records[0].value
    if value is None or len(value) < _VALUE.size:
        raise CorruptMessageError(
            f"transaction marker value of {0 if value is None else len(value)} bytes"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptMessageError(f"transaction marker value version {version}")
    return EndTxnMarker(control_type is ControlType.COMMIT, coordinator_epoch)


class AbortedBatchFilter:
    """What a ``read_committed`` reader drops from a fetch (Kafka's ``Fetcher`` rule); a
    :data:`~lograft.protocol.record_codec.BatchSkip` for ``iter_records``.

    ``aborted`` holds ``(producer id, first offset)`` of each aborted transaction the fetch
    answer named. Walking the batches in order, a producer is *aborting* from its first
    offset until its abort marker: its transactional batches meanwhile are dropped. Every
    control batch is dropped too. Stateful: one instance per fetched chunk, called in order.
    """

    __slots__ = ("_aborting", "_next", "_pending")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda item: item[1])
        self._next = 0
        self._aborting: set[int] = set()

    def __call__(self, buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
        """True: skip the batch."""
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= header.last_offset:
            self._aborting.add(pending[self._next][0])
            self._next += 1
        if header.is_control:
            if header.producer_id in self._aborting and header.records_count:
                records = decode_records(buf, header)
                if records and decode_control_type(records[0].key) is ControlType.ABORT:
                    self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting
