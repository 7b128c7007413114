"""A transactional id's state, and its record in ``__transaction_state``, as bytes.

Each change of a transactional id's state is one record keyed by the id whose value is the
whole new state (a tombstone, no value, when the id expires), so the topic is compacted
and a coordinator rebuilds the same state from a compacted log as from the full one.

Bytes (big-endian; ``str`` and ``set`` are :mod:`replica.coordinator_record_fields`'s, the
group coordinator's records use the same)::

    key   = version u16 (0) | transactional_id str
    value = version u16 (0) | producer_id i64 | producer_epoch i16 | last_producer_epoch i16
            | timeout_ms i32 | state i8 | flags i8 (bit 0: two-phase) | started_ms i64
            | updated_ms i64 | partitions set

    str   = length u16 | UTF-8 bytes
    set   = topics u32 | for each: topic str | count u32 | partition i32 ...   (sorted)

Every field is checked on decode (the log is untrusted input): a value that does not parse,
holds a count larger than its bytes, an invalid topic name, a partition out of range, a
partition set out of order or with repeats, names an unknown state or leaves bytes over is
``CorruptMessageError``. Encoding makes the shared field checks too (a value out of its
field's range, an invalid topic name or partition), raising the same error, so a state
that the field decoder would refuse is never written.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.topic_partition import TopicPartition
from replica.coordinator_record_fields import FieldReader, FieldWriter

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
"""The version written in, and required of, a ``__transaction_state`` record's key."""
VALUE_VERSION = 0
"""The version written in, and required of, a ``__transaction_state`` record's value."""
MAX_PRODUCER_EPOCH = 2**15 - 1
"""Epochs are int16. The coordinator hands out at most ``MAX_PRODUCER_EPOCH - 1`` so that it
can always bump once more to fence (Kafka's ``isEpochExhausted``)."""

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


def encode_record(record: TxnRecord) -> tuple[bytes, bytes | None]:
    """The record's key and value bytes (``None`` for a tombstone).

    Raises ``CorruptMessageError`` for a state whose fields cannot be written or could not
    be read back (a value out of its field's range, an invalid topic name or partition).
    """
    key = FieldWriter(CorruptMessageError)
    key.u16(KEY_VERSION, "version")
    key.string(record.transactional_id, "transactional_id")
    meta = record.metadata
    if meta is None:
        return key.done("transaction state key"), None
    value = FieldWriter(CorruptMessageError)
    value.u16(VALUE_VERSION, "version")
    value.i64(meta.producer_id, "producer_id")
    value.i16(meta.producer_epoch, "producer_epoch")
    value.i16(meta.last_producer_epoch, "last_producer_epoch")
    value.i32(meta.timeout_ms, "timeout_ms")
    value.i8(meta.state, "state")
    value.i8(_TWO_PHASE if meta.two_phase else 0, "flags")
    value.i64(meta.started_ms, "started_ms")
    value.i64(meta.updated_ms, "updated_ms")
    value.partitions(meta.partitions, "partitions")
    return key.done("transaction state key"), value.done("transaction state value")


def decode_record(key: bytes, value: bytes | None) -> TxnRecord:
    """The record these bytes hold; ``CorruptMessageError`` if they are not one."""
    reader = FieldReader(bytes(key), "transaction state key", CorruptMessageError)
    version = reader.u16("version")
    if version != KEY_VERSION:
        raise CorruptMessageError(f"transaction state key version {version}")
    transactional_id = reader.string("transactional_id")
    reader.end()
    if value is None:
        return TxnRecord(transactional_id, None)
    reader = FieldReader(bytes(value), "transaction state value", CorruptMessageError)
    version = reader.u16("version")
    if version != VALUE_VERSION:
        raise CorruptMessageError(f"transaction state value version {version}")
    pid = reader.i64("producer_id")
    epoch = reader.i16("producer_epoch")
    last_epoch = reader.i16("last_producer_epoch")
    timeout_ms = reader.i32("timeout_ms")
    raw_state = reader.i8("state")
    try:
        state = TxnState(raw_state)
    except ValueError:
        raise CorruptMessageError(f"transaction state {raw_state} is unknown") from None
    flags = reader.i8("flags")
    started = reader.i64("started_ms")
    updated = reader.i64("updated_ms")
    partitions = reader.partitions("partitions")
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
            partitions,
            started,
            updated,
            bool(flags & _TWO_PHASE),
        ),
    )
