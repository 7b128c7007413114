"""Zigzag varints of RecordBatch v2 records: encoding, with lookup tables, and reading.

Varints are zigzag-encoded base-128, least significant group first, as protobuf's ``sint``:
``0, -1, 1, -2`` become ``0, 1, 2, 3`` and then 7 bits a byte, the high bit set on every byte
but the last. Kafka's ``varint`` fields hold 32-bit values and ``varlong`` fields 64-bit
ones; both are the same encoding, so one encoder serves both.

Encoding is hot (producers encode many small records): values below :data:`TABLE_SIZE` come
from a precomputed table. Reading returns the raw, still zigzagged value, because the
record decoder tests its low bit (the sign) before it needs the value.
"""

from __future__ import annotations

import logging

from lograft.protocol.errors import CorruptMessageError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_VARINT_BYTES",
    "TABLE_SIZE",
    "VARINT_TABLE",
    "encode_varint",
    "encode_varlong",
    "read_raw_varint",
    "read_varlong",
    "zigzag_varint",
]

log = logging.getLogger(__name__)

INT64_MIN = -(1 << 63)
"""Java's ``Long.MIN_VALUE``, the smallest value a varlong holds."""
INT64_MAX = (1 << 63) - 1
"""Java's ``Long.MAX_VALUE``, the largest value a varlong holds."""
INT32_MAX = (1 << 31) - 1
"""Java's ``Integer.MAX_VALUE``: the most records a batch holds (``recordsCount`` is int32)."""
MAX_VARINT_BYTES = 10
"""The longest varlong; a varint never needs more than 5."""

# With 2**14 entries, values under 16 KiB and batches of up to 16384 records never leave the
# tables; this table and the two built from it in lograft.protocol.batch_builder cost about 3.5 MB
# and 10 ms at import, which the bulk encoder earns back within a few batches.
TABLE_SIZE = 1 << 14
"""Zigzag varints of ``0 .. TABLE_SIZE - 1`` are looked up in :data:`VARINT_TABLE`."""


def zigzag_varint(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer, computed (no table).

    Raises ``ValueError`` outside the 64-bit range.
    """
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{value} does not fit a 64-bit varlong")
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


VARINT_TABLE: list[bytes] = [zigzag_varint(n) for n in range(TABLE_SIZE)]
"""``VARINT_TABLE[n]`` is the zigzag varint of ``n``, for ``0 <= n < TABLE_SIZE``."""


def encode_varint(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer, from the table when it holds ``value``.

    Raises ``ValueError`` outside the 64-bit range.
    """
    return VARINT_TABLE[value] if 0 <= value < TABLE_SIZE else zigzag_varint(value)


def read_raw_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The raw (still zigzagged) varint at ``pos`` and the position after it.

    Raises ``IndexError`` past the end of ``data``, which callers turn into
    ``CorruptMessageError``, and ``CorruptMessageError`` for a varint longer than
    :data:`MAX_VARINT_BYTES`.
    """
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise CorruptMessageError(f"varint longer than {MAX_VARINT_BYTES} bytes")


def encode_varlong(value: int) -> bytes:
    """Zigzag varint of a signed 64-bit integer; ``ValueError`` outside that range."""
    return encode_varint(value)


def read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """The signed zigzag varint at ``pos`` and the position after it.

    ``CorruptMessageError`` if it runs past ``data`` or is longer than 10 bytes.
    """
    try:
        raw, pos = read_raw_varint(data, pos)
    except IndexError:
        raise CorruptMessageError("varint runs past the record data") from None
    return (raw >> 1) ^ -(raw & 1), pos
