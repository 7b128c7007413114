"""Kafka's ``replication-offset-checkpoint``: every hosted partition's high watermark.

One file per data directory, written atomically (temporary file, fsync, rename, directory
fsync) by the broker every ``replica.high.watermark.checkpoint.interval.ms`` and at
shutdown. A partition reopens at its checkpointed high watermark, never above it: the
records between it and the log end may exist on this replica alone.

Kafka's text format::

    0                       <- version
    2                       <- number of entries
    orders 0 1200           <- topic partition high_watermark
    orders 1 977

The file is untrusted input: a bad version, count, line, duplicate partition or a file
larger than :data:`MAX_CHECKPOINT_BYTES` raises ``KafkaStorageError`` and nothing is used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from lograft.durable import write_file_atomically
from lograft.protocol.errors import InvalidTopicError, KafkaStorageError
from lograft.protocol.topic_partition import TopicPartition, validate_topic_name

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "REPLICATION_OFFSET_CHECKPOINT_FILE",
    "read_high_watermarks",
    "write_high_watermarks",
]

log = logging.getLogger(__name__)

REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
"""The file's name in each data directory (Kafka's)."""
_VERSION = 0
MAX_CHECKPOINT_BYTES = 64 * 1024 * 1024
"""A checkpoint larger than this is refused (about a million partitions' worth)."""


def encode_high_watermarks(high_watermarks: Mapping[TopicPartition, int]) -> bytes:
    """The checkpoint text for ``high_watermarks`` (sorted, so equal maps give equal files)."""
    lines = [str(_VERSION), str(len(high_watermarks))]
    for tp in sorted(high_watermarks):
        lines.append(f"{tp.topic} {tp.partition} {high_watermarks[tp]}")
    return ("\n".join(lines) + "\n").encode()


def decode_high_watermarks(text: str, source: str) -> dict[TopicPartition, int]:
    """Parse checkpoint text; raises ``KafkaStorageError`` naming ``source`` and the line."""
    lines = text.splitlines()

    def bad(line_number: int, why: str) -> KafkaStorageError:
        return KafkaStorageError(f"{source}:{line_number}: {why}")

    if len(lines) < 2:
        raise bad(len(lines), "missing version or count")
    if lines[0].strip() != str(_VERSION):
        raise bad(1, f"unsupported version {lines[0].strip()!r}")
    count_text = lines[1].strip()
    if not count_text.isdigit():
        raise bad(2, f"count {count_text!r} is not a number")
    count = int(count_text)
    entries = lines[2:]
    if len(entries) != count:
        raise bad(2, f"count {count} but {len(entries)} entries follow")
    result: dict[TopicPartition, int] = {}
    for number, line in enumerate(entries, start=3):
        fields = line.split(" ")
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            raise bad(number, f"expected 'topic partition offset', got {line!r}")
        try:
            validate_topic_name(fields[0])
        except InvalidTopicError as exc:
            raise bad(number, exc.message) from exc
        tp = TopicPartition(fields[0], int(fields[1]))
        if tp in result:
            raise bad(number, f"{tp} appears twice")
        result[tp] = int(fields[2])
    return result


def read_high_watermarks(directory: Path) -> dict[TopicPartition, int]:
    """The checkpointed high watermarks in ``directory`` (empty when there is no file)."""
    path = directory / REPLICATION_OFFSET_CHECKPOINT_FILE
    try:
        size = path.stat().st_size
        if size > MAX_CHECKPOINT_BYTES:
            raise KafkaStorageError(f"{path}: {size} bytes, more than {MAX_CHECKPOINT_BYTES}")
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc}") from exc
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as exc:
        raise KafkaStorageError(f"{path}: not ASCII text") from exc
    return decode_high_watermarks(text, str(path))


def write_high_watermarks(directory: Path, high_watermarks: Mapping[TopicPartition, int]) -> None:
    """Replace the checkpoint in ``directory`` durably, all or nothing (disk work)."""
    path = directory / REPLICATION_OFFSET_CHECKPOINT_FILE
    try:
        write_file_atomically(path, encode_high_watermarks(high_watermarks))
    except OSError as exc:
        raise KafkaStorageError(f"cannot write {path}: {exc}") from exc
    log.debug("high watermarks checkpointed path=%s partitions=%d", path, len(high_watermarks))
