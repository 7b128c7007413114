"""The records inside a Kafka RecordBatch v2, encoded and decoded byte for byte.

The broker never needs this module on its produce path (it validates headers only, see
:mod:`lograft.protocol.batch_header`); clients, tools and tests do. Each record is::

    length          varint   bytes after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers         keyLength varint, key (UTF-8), valueLength varint (-1 = null), value

Varints are zigzag-encoded base-128, least significant group first, as protobuf's ``sint``.
With compression, the bytes of all records (not the 61-byte header) are compressed together.

The code lives in one module per concept; this module gathers their public names, the
import path every caller uses:

* :mod:`lograft.protocol.varints`: zigzag varints (``encode_varlong``, ``read_varlong``);
* :mod:`lograft.protocol.record_codec`: one record's bytes, and decoding the records of a batch
  (``Record``, ``decode_records``, ``iter_records``, ``check_compressed_records``);
* :mod:`lograft.protocol.batch_builder`: building batches (``RecordBatchBuilder``,
  ``encode_batch``).
"""

from __future__ import annotations

import logging

from lograft.protocol.batch_builder import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    RecordBatchBuilder,
    encode_batch,
)
from lograft.protocol.record_codec import (
    Header,
    Record,
    check_compressed_records,
    decode_records,
    iter_records,
)
from lograft.protocol.varints import encode_varlong, read_varlong

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "Header",
    "Record",
    "RecordBatchBuilder",
    "check_compressed_records",
    "decode_records",
    "encode_batch",
    "encode_varlong",
    "iter_records",
    "read_varlong",
]

logger = logging.getLogger(__name__)
