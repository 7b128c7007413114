"""The checked fields of the coordinators' records: ``__consumer_offsets``, ``__transaction_state``.

The group coordinator (:mod:`replica.group.records`) and the transaction coordinator
(:mod:`replica.txn.metadata`) persist their state as records whose keys and values are the
same kind of bytes: big-endian fixed-size integers, strings and sets of topic-partitions.
:class:`FieldWriter` writes them and :class:`FieldReader` reads them back; each record
module lays out its own fields with them. The formats::

    u8 u16 u32 / i8 i16 i32 i64   big-endian, unsigned / two's complement
    str   = length u16 | UTF-8 bytes                                  (at most 65535 bytes)
    set   = topics u32 | for each: topic str | count u32 | partition i32 ...
            topics sorted by name, each topic's partitions sorted, no repeats

Bytes read back are untrusted (a damaged disk, a bug in another version), so the reader
checks every field: it refuses bytes that end inside a field, a count larger than the bytes
left could hold (before looping, so a bogus count cannot exhaust memory), strings that are
not UTF-8, invalid topic names, partitions outside ``[0, MAX_PARTITIONS)``, sets not sorted
or with repeats, and bytes left after the last field. The writer refuses what the reader
would refuse (a value out of its type's range, a string too long, an invalid topic name or
partition), so the fields it writes can always be read back; the checks a record makes of
its own fields (versions, states, epochs) stay with the record module.

Both take the error type to raise: each coordinator reports damage as its own corrupt-record
error (``GroupRecordError`` for groups, ``CorruptMessageError`` for transactions), so the
caller loading a partition catches one type and knows which topic's records are damaged.
Either way it is a :class:`~lograft.protocol.errors.CorruptMessageError` (``CORRUPT_MESSAGE``).
This module sits in the protocol layer so that both coordinator cores may import it
without importing each other.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from lograft.protocol.errors import CorruptMessageError, InvalidTopicError
from lograft.protocol.topic_partition import MAX_PARTITIONS, TopicPartition, validate_topic_name

__all__ = ["MAX_STRING_BYTES", "FieldReader", "FieldWriter"]

MAX_STRING_BYTES = 0xFFFF
"""Longest string field in bytes (its length is a u16)."""

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# The fewest bytes one item of a set takes, to check a count against the bytes left: a topic
# entry is at least its name's u16 length and its u32 partition count; a partition an i32.
_MIN_TOPIC_ENTRY_BYTES = _U16.size + _U32.size
_PARTITION_BYTES = _I32.size


def _range_of(shape: struct.Struct) -> tuple[int, int, str]:
    """The smallest and largest integer ``shape`` (one integer field) holds, and its name."""
    bits = 8 * shape.size
    if shape.format[-1].isupper():  # B, H, I: unsigned
        return 0, 2**bits - 1, f"uint{bits}"
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, f"int{bits}"


_RANGES = {shape: _range_of(shape) for shape in (_U8, _U16, _U32, _I8, _I16, _I32, _I64)}


class FieldWriter:
    """Builds one record key or value, field by field; :meth:`done` returns the bytes.

    Every method checks its value first and raises ``error(message)`` when it cannot be
    written (or could not be read back), naming the field by ``what``.
    """

    __slots__ = ("_error", "_parts")

    def __init__(self, error: type[CorruptMessageError]) -> None:
        """A writer raising ``error`` for a value it cannot write."""
        self._error = error
        self._parts: list[bytes] = []

    def _int(self, shape: struct.Struct, v: int, what: str) -> None:
        lo, hi, name = _RANGES[shape]
        if not lo <= v <= hi:
            # struct.error would say only "out of range": name the field and its type.
            raise self._error(f"{what}={v} does not fit in {name}")
        self._parts.append(shape.pack(v))

    def u8(self, v: int, what: str) -> None:
        """An unsigned byte."""
        self._int(_U8, v, what)

    def u16(self, v: int, what: str) -> None:
        """An unsigned 16-bit integer."""
        self._int(_U16, v, what)

    def u32(self, v: int, what: str) -> None:
        """An unsigned 32-bit integer."""
        self._int(_U32, v, what)

    def i8(self, v: int, what: str) -> None:
        """A signed byte."""
        self._int(_I8, v, what)

    def i16(self, v: int, what: str) -> None:
        """A signed 16-bit integer."""
        self._int(_I16, v, what)

    def i32(self, v: int, what: str) -> None:
        """A signed 32-bit integer."""
        self._int(_I32, v, what)

    def i64(self, v: int, what: str) -> None:
        """A signed 64-bit integer."""
        self._int(_I64, v, what)

    def string(self, v: str, what: str) -> None:
        """A ``str``: its UTF-8 length as a u16, then the bytes."""
        raw = v.encode("utf-8")
        if len(raw) > MAX_STRING_BYTES:
            raise self._error(f"{what} is {len(raw)} bytes, at most {MAX_STRING_BYTES}")
        self._parts.append(_U16.pack(len(raw)))
        self._parts.append(raw)

    def topic(self, v: str, what: str) -> None:
        """A topic name, as a ``str``; refused unless it is a valid name."""
        try:
            validate_topic_name(v)
        except InvalidTopicError as e:
            raise self._error(f"{what}: {e.message}") from None
        self.string(v, what)

    def partition(self, v: int, what: str) -> None:
        """A partition number, as an i32; refused outside ``[0, MAX_PARTITIONS)``."""
        if not 0 <= v < MAX_PARTITIONS:
            raise self._error(f"{what}={v} is not in [0, {MAX_PARTITIONS})")
        self._parts.append(_I32.pack(v))

    def partitions(self, tps: Iterable[TopicPartition], what: str) -> None:
        """A ``set``: the partitions grouped by topic, topics and partitions sorted."""
        by_topic: dict[str, set[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, set()).add(tp.partition)
        self.u32(len(by_topic), f"{what} topic count")
        for topic in sorted(by_topic):
            self.topic(topic, f"{what} topic")
            numbers = sorted(by_topic[topic])
            self.u32(len(numbers), f"{what} partition count")
            for p in numbers:
                self.partition(p, f"{what} partition")

    def done(self, what: str, limit: int | None = None) -> bytes:
        """The bytes written; refused if longer than ``limit`` (the reader's own limit)."""
        out = b"".join(self._parts)
        if limit is not None and len(out) > limit:
            raise self._error(f"{what} is {len(out)} bytes, at most {limit}")
        return out


class FieldReader:
    """Reads the fields of one record key or value in order; :meth:`end` checks nothing is left.

    ``what`` names the key or value in messages; each method's ``field`` names the field.
    Anything wrong raises ``error(message)``, never anything else.
    """

    __slots__ = ("_data", "_error", "_pos", "_what")

    def __init__(self, data: bytes, what: str, error: type[CorruptMessageError]) -> None:
        """A reader of ``data`` (``what``: e.g. ``"key"``) raising ``error`` on bad bytes."""
        self._data = data
        self._pos = 0
        self._what = what
        self._error = error

    def _take(self, n: int, field: str) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise self._error(
                f"{self._what} ends inside {field} (needs {n} bytes at {self._pos}, "
                f"has {len(self._data) - self._pos})"
            )
        raw = self._data[self._pos : end]
        self._pos = end
        return raw

    def _int(self, shape: struct.Struct, field: str) -> int:
        return int(shape.unpack(self._take(shape.size, field))[0])

    def _fail(self, message: str) -> CorruptMessageError:
        # Returned, not raised, so each caller's ``raise`` shows the branch ends there.
        return self._error(f"{self._what}: {message}")

    def left(self) -> int:
        """How many bytes are not read yet."""
        return len(self._data) - self._pos

    def u8(self, field: str) -> int:
        """An unsigned byte."""
        return self._int(_U8, field)

    def u16(self, field: str) -> int:
        """An unsigned 16-bit integer."""
        return self._int(_U16, field)

    def u32(self, field: str) -> int:
        """An unsigned 32-bit integer."""
        return self._int(_U32, field)

    def i8(self, field: str) -> int:
        """A signed byte."""
        return self._int(_I8, field)

    def i16(self, field: str) -> int:
        """A signed 16-bit integer."""
        return self._int(_I16, field)

    def i32(self, field: str) -> int:
        """A signed 32-bit integer."""
        return self._int(_I32, field)

    def i64(self, field: str) -> int:
        """A signed 64-bit integer."""
        return self._int(_I64, field)

    def non_negative_i32(self, field: str) -> int:
        """An i32 that must not be negative (an epoch, a timeout)."""
        v = self.i32(field)
        if v < 0:
            raise self._fail(f"{field}={v} is negative")
        return v

    def count(self, field: str, min_item_bytes: int) -> int:
        """A u32 count of items, each at least ``min_item_bytes`` long.

        Checked against the bytes left before the caller loops over it, so a damaged count
        fails here instead of after allocating for billions of items.
        """
        n = self.u32(field)
        if n * min_item_bytes > self.left():
            raise self._fail(f"{field}={n} cannot fit in the {self.left()} bytes left")
        return n

    def string(self, field: str) -> str:
        """A ``str``, which must be UTF-8."""
        raw = self._take(self.u16(field), field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self._fail(f"{field} is not UTF-8: {e}") from None

    def topic(self, field: str) -> str:
        """A ``str`` that must be a valid topic name."""
        name = self.string(field)
        try:
            validate_topic_name(name)
        except InvalidTopicError as e:
            raise self._fail(f"{field}: {e.message}") from None
        return name

    def partition(self, field: str) -> int:
        """An i32 partition number in ``[0, MAX_PARTITIONS)``."""
        p = self.i32(field)
        if not 0 <= p < MAX_PARTITIONS:
            raise self._fail(f"{field}={p} is not in [0, {MAX_PARTITIONS})")
        return p

    def partitions(self, field: str) -> frozenset[TopicPartition]:
        """A ``set``; topics and each topic's partitions must be sorted, without repeats.

        :meth:`FieldWriter.partitions` writes only that order, so bytes in any other order
        were not written by it: refusing them keeps one set to one encoding.
        """
        out: list[TopicPartition] = []
        previous_topic: str | None = None
        for _ in range(self.count(f"{field} topic count", _MIN_TOPIC_ENTRY_BYTES)):
            topic = self.topic(f"{field} topic")
            if previous_topic is not None and topic <= previous_topic:
                raise self._fail(f"{field} topics not sorted or repeated")
            previous_topic = topic
            previous = -1
            for _ in range(self.count(f"{field} partition count", _PARTITION_BYTES)):
                p = self.partition(f"{field} partition")
                if p <= previous:
                    raise self._fail(f"{field} partitions of {topic} not sorted or repeated")
                previous = p
                out.append(TopicPartition(topic, p))
        return frozenset(out)

    def end(self) -> None:
        """Refuse bytes left over after the last field."""
        if self._pos != len(self._data):
            raise self._error(f"{self._what} has {self.left()} bytes after its last field")
