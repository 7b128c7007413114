"""A transactional id's state, and its record in ``__transaction_state``, as bytes.

Each change of a transactional id's state is one record keyed by the id whose value is the
whole new state (a tombstone, no value, when the id expires), so the topic is compacted
and a coordinator rebuilds the same state from a compacted log as from the full one.

Bytes (big-endian; strings are a u16 length and UTF-8)::

    key   = version u16 (0) | transactional_id str
    value = version u16 (0) | producer_id i64 | producer_epoch i16 | last_producer_epoch i16
            | timeout_ms i32 | state i8 | flags i8 (bit 0: two-phase) | started_ms i64
            | updated_ms i64 | topics u32 | for each: topic str | count u32 | partition i32 ...

Every field is checked on decode (the log is untrusted input): a value that does not parse,
names an unknown state or leaves bytes over is ``CorruptMessageError``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from cluster.errors import CorruptMessageError
from replica.topic_partition import TopicPartition

__all__ = [
    "KEY_VERSION",
    "MAX_PRODUCER_EPOCH",
    "VALUE_VERSION",
    "TxnMetadata",
    "TxnRecord",
    "TxnState",
    "decode_record",
    "encode_record",
]

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_PRODUCER_EPOCH = 2**15 - 1
"""Epochs are int16. The coordinator hands out at most ``MAX_PRODUCER_EPOCH - 1`` so that it
can always bump once more to fence (Kafka's ``isEpochExhausted``)."""

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_VALUE_FIXED = struct.Struct(">qhhibbqq")
_TWO_PHASE = 0x01


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState``, with its ids."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6

    @property
    def is_complete(self) -> bool:
        """No transaction open: a new one may begin."""
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_preparing(self) -> bool:
        """Decided, markers being written."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's state: its producer, the open transaction, when it began."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    """The epoch before the last bump (-1 if none): a retried request of the producer that
    held it is answered, not fenced."""
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    """The partitions the open (or deciding) transaction wrote to; empty when complete."""
    started_ms: int
    """When the open transaction added its first partition (-1: none open)."""
    updated_ms: int
    two_phase: bool = False
    """KIP-939: the producer commits through an external coordinator; never timed out."""


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A record of ``__transaction_state``: the id's new state, or ``None`` (expired)."""

    transactional_id: str
    metadata: TxnMetadata | None


def _str(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit a u16 length")
    return _U16.pack(len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._at = 0
        self._what = what

    def take(self, size: int) -> bytes:
        if self._at + size > len(self._data):
            raise CorruptMessageError(f"{self._what} ends early at byte {self._at}")
        chunk = self._data[self._at : self._at + size]
        self._at += size
        return chunk

    def unpack(self, shape: struct.Struct) -> tuple[int, ...]:
        return shape.unpack(self.take(shape.size))

    def string(self) -> str:
        (size,) = self.unpack(_U16)
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as exc:
            raise CorruptMessageError(f"{self._what} holds a string that is not UTF-8") from exc

    def end(self) -> None:
        if self._at != len(self._data):
            raise CorruptMessageError(f"{self._what} has {len(self._data) - self._at} bytes over")


def encode_record(record: TxnRecord) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes (``None`` for a tombstone)."""
    key = _U16.pack(KEY_VERSION) + _str(record.transactional_id)
    meta = record.metadata
    if meta is None:
        return key, None
    topics: dict[str, list[int]] = {}
    for tp in meta.partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    parts = [
        _U16.pack(VALUE_VERSION),
        _VALUE_FIXED.pack(
            meta.producer_id,
            meta.producer_epoch,
            meta.last_producer_epoch,
            meta.timeout_ms,
            meta.state,
            _TWO_PHASE if meta.two_phase else 0,
            meta.started_ms,
            meta.updated_ms,
        ),
        _U32.pack(len(topics)),
    ]
    for topic in sorted(topics):
        numbers = sorted(topics[topic])
        parts += [_str(topic), _U32.pack(len(numbers)), *(_I32.pack(n) for n in numbers)]
    return key, b"".join(parts)


def decode_record(key: bytes, value: bytes | None) -> TxnRecord:
    """The record these bytes hold; ``CorruptMessageError`` if they are not one."""
    reader = _Reader(bytes(key), "transaction state key")
    (version,) = reader.unpack(_U16)
    if version != KEY_VERSION:
        raise CorruptMessageError(f"transaction state key version {version}")
    transactional_id = reader.string()
    reader.end()
    if value is None:
        return TxnRecord(transactional_id, None)
    reader = _Reader(bytes(value), "transaction state value")
    (version,) = reader.unpack(_U16)
    if version != VALUE_VERSION:
        raise CorruptMessageError(f"transaction state value version {version}")
    pid, epoch, last_epoch, timeout_ms, raw_state, flags, started, updated = reader.unpack(
        _VALUE_FIXED
    )
    try:
        state = TxnState(raw_state)
    except ValueError:
        raise CorruptMessageError(f"transaction state {raw_state} is unknown") from None
    partitions: set[TopicPartition] = set()
    (topic_count,) = reader.unpack(_U32)
    for _ in range(topic_count):
        topic = reader.string()
        (count,) = reader.unpack(_U32)
        for _ in range(count):
            (number,) = reader.unpack(_I32)
            if number < 0:
                raise CorruptMessageError(f"transaction state names partition {topic}-{number}")
            partitions.add(TopicPartition(topic, number))
    reader.end()
    if pid < 0 or not -1 <= epoch <= MAX_PRODUCER_EPOCH or timeout_ms <= 0:
        raise CorruptMessageError(
            f"transaction state of {transactional_id!r}: producer {pid}, epoch {epoch}, "
            f"timeout {timeout_ms} ms"
        )
    return TxnRecord(
        transactional_id,
        TxnMetadata(
            transactional_id,
            pid,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            frozenset(partitions),
            started,
            updated,
            bool(flags & _TWO_PHASE),
        ),
    )
