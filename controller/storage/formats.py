"""Byte formats of the controller's metadata log directory, as pure functions.

Everything read back from disk is untrusted: every decoder checks magic, version, lengths
against hard limits, and CRC-32C before it believes a field. Integers are big-endian, as in
Kafka's own formats.

``quorum-state`` (JSON, so an operator can read it; the CRC makes a flipped digit fatal
instead of a silently different vote)::

    {"data_version": 1, "leaderEpoch": E, "votedId": V, "crc32c": C}

where ``V`` is ``-1`` for no vote and ``C`` is the CRC-32C of the canonical encoding of the
other three fields (sorted keys, no spaces).

Log file (one file, rewritten whole only when a snapshot moves its start)::

    header: magic "LRML" | version u16 | reserved u16 | base_offset i64
            | crc32c u32 (of the 16 header bytes before it)
    frame:  length u32 | crc32c u32 | offset i64 | epoch i32 | kind u8 | data
            (length counts the bytes after itself; the CRC covers offset..data)

Snapshot file ``<end_offset:020d>-<epoch:010d>.checkpoint`` (Kafka's naming)::

    magic "LRSN" | version u16 | reserved u16 | end_offset i64 | epoch i32 | length u32
    | crc32c u32 (of the 24 header bytes before it, then of the image) | image (length bytes)
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass

import crc32c as _crc32c

from controller.raft.messages import Entry, EntryKind, HardState, Snapshot
from lograft.protocol.errors import KafkaStorageError, MessageTooLargeError

__all__ = [
    "FRAME_OVERHEAD",
    "LOG_HEADER_SIZE",
    "MAX_ENTRY_BYTES",
    "MAX_QUORUM_STATE_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "QUORUM_STATE_VERSION",
    "SNAPSHOT_HEADER_SIZE",
    "CorruptMetadataStorageError",
    "FrameError",
    "ScannedFrame",
    "decode_frame",
    "decode_log_header",
    "decode_quorum_state",
    "decode_snapshot",
    "encode_frame",
    "encode_log_header",
    "encode_quorum_state",
    "encode_snapshot",
    "parse_snapshot_name",
    "snapshot_file_name",
]

#: Largest entry payload accepted on write and on recovery (a metadata record batch).
MAX_ENTRY_BYTES = 16 * 1024 * 1024
#: Largest snapshot image accepted on write and on recovery.
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024
#: A quorum-state file is a few dozen bytes; anything much bigger is not one.
MAX_QUORUM_STATE_BYTES = 4096
QUORUM_STATE_VERSION = 1
"""The ``data_version`` a quorum-state file is written with; any other is refused (corrupt)."""

_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1

_LOG_MAGIC = b"LRML"
_LOG_VERSION = 1
_LOG_HEADER = struct.Struct(">4sHHq")  # magic, version, reserved, base_offset
_LOG_HEADER_CRC = struct.Struct(">I")
LOG_HEADER_SIZE = _LOG_HEADER.size + _LOG_HEADER_CRC.size
"""Bytes of a log file's header, its CRC included: where the first frame starts."""

_FRAME_PREFIX = struct.Struct(">II")  # length, crc32c
_FRAME_BODY = struct.Struct(">qiB")  # offset, epoch, kind
#: Bytes a frame adds to its data.
FRAME_OVERHEAD = _FRAME_PREFIX.size + _FRAME_BODY.size
_MIN_FRAME_LENGTH = FRAME_OVERHEAD - 4  # what ``length`` counts for empty data
_MAX_FRAME_LENGTH = _MIN_FRAME_LENGTH + MAX_ENTRY_BYTES

_SNAPSHOT_MAGIC = b"LRSN"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">4sHHqiI")  # magic, version, reserved, end, epoch, length
_SNAPSHOT_CRC = struct.Struct(">I")
SNAPSHOT_HEADER_SIZE = _SNAPSHOT_HEADER.size + _SNAPSHOT_CRC.size
"""Bytes of a snapshot file's header, its CRC included: where the image starts."""
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

_KINDS = frozenset(kind.value for kind in EntryKind)


class CorruptMetadataStorageError(KafkaStorageError):
    """The metadata log directory holds state that cannot be trusted or safely repaired.

    Fatal, not retriable: the node must not start (silently resetting a vote or a log
    prefix would break Raft's safety). An operator has to look at the directory.
    """

    retriable = False


class FrameError(ValueError):
    """A log frame (or log header) failed validation; ``reason`` is a short key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _crc(*parts: bytes | memoryview) -> int:
    value = 0
    for part in parts:
        value = _crc32c.crc32c(part, value)
    return int(value)


def _check_epoch(epoch: int, what: str) -> None:
    if not 0 <= epoch <= _I32_MAX:
        raise ValueError(f"{what} epoch {epoch} outside [0, {_I32_MAX}]")


def _check_offset(offset: int, what: str) -> None:
    if not 0 <= offset <= _I64_MAX:
        raise ValueError(f"{what} offset {offset} outside [0, {_I64_MAX}]")


# --- quorum-state ----------------------------------------------------------------------------


def _quorum_state_body(epoch: int, voted_id: int) -> bytes:
    fields = {"data_version": QUORUM_STATE_VERSION, "leaderEpoch": epoch, "votedId": voted_id}
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def encode_quorum_state(state: HardState) -> bytes:
    """The ``quorum-state`` file content for ``state``."""
    _check_epoch(state.epoch, "hard state")
    voted_id = -1 if state.voted_for is None else state.voted_for
    if state.voted_for is not None and not 0 <= state.voted_for <= _I32_MAX:
        raise ValueError(f"voted_for {state.voted_for} outside [0, {_I32_MAX}]")
    crc = _crc(_quorum_state_body(state.epoch, voted_id))
    fields = {
        "data_version": QUORUM_STATE_VERSION,
        "leaderEpoch": state.epoch,
        "votedId": voted_id,
        "crc32c": crc,
    }
    return json.dumps(fields).encode() + b"\n"


def decode_quorum_state(raw: bytes, where: str) -> HardState:
    """Parse a ``quorum-state`` file; raises :class:`CorruptMetadataStorageError`."""

    def corrupt(why: str) -> CorruptMetadataStorageError:
        return CorruptMetadataStorageError(f"corrupt quorum-state path={where} reason={why}")

    if len(raw) > MAX_QUORUM_STATE_BYTES:
        raise corrupt(f"size={len(raw)}>{MAX_QUORUM_STATE_BYTES}")
    try:
        fields = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(f"not_json ({exc})") from exc
    if not isinstance(fields, dict):
        raise corrupt("not_an_object")
    if set(fields) != {"data_version", "leaderEpoch", "votedId", "crc32c"}:
        raise corrupt(f"fields={sorted(fields)}")
    # bool is an int subclass in Python; a ``true`` epoch is not an epoch.
    if not all(type(value) is int for value in fields.values()):
        raise corrupt("non_integer_field")
    if fields["data_version"] != QUORUM_STATE_VERSION:
        raise corrupt(f"unsupported data_version={fields['data_version']}")
    epoch, voted_id = fields["leaderEpoch"], fields["votedId"]
    if not 0 <= epoch <= _I32_MAX or not -1 <= voted_id <= _I32_MAX:
        raise corrupt(f"out_of_range leaderEpoch={epoch} votedId={voted_id}")
    if _crc(_quorum_state_body(epoch, voted_id)) != fields["crc32c"]:
        raise corrupt("crc_mismatch")
    return HardState(epoch, None if voted_id == -1 else voted_id)


# --- log file --------------------------------------------------------------------------------


def encode_log_header(base_offset: int) -> bytes:
    """The header of a log file whose first frame (if any) holds ``base_offset``."""
    _check_offset(base_offset, "log base")
    head = _LOG_HEADER.pack(_LOG_MAGIC, _LOG_VERSION, 0, base_offset)
    return head + _LOG_HEADER_CRC.pack(_crc(head))


def decode_log_header(raw: bytes | memoryview) -> int:
    """The base offset of a log file; raises :class:`FrameError` if the header is bad."""
    if len(raw) < LOG_HEADER_SIZE:
        raise FrameError("short_header", f"size={len(raw)}")
    head = bytes(raw[: _LOG_HEADER.size])
    magic, version, _reserved, base_offset = _LOG_HEADER.unpack(head)
    if magic != _LOG_MAGIC:
        raise FrameError("bad_magic", repr(magic))
    if version != _LOG_VERSION:
        raise FrameError("unsupported_version", str(version))
    (crc,) = _LOG_HEADER_CRC.unpack_from(raw, _LOG_HEADER.size)
    if crc != _crc(head):
        raise FrameError("header_crc_mismatch")
    if base_offset < 0:
        raise FrameError("negative_base_offset", str(base_offset))
    return int(base_offset)


def encode_frame(entry: Entry) -> bytes:
    """One log frame for ``entry``; raises ``MessageTooLargeError`` past the size limit."""
    if len(entry.data) > MAX_ENTRY_BYTES:
        raise MessageTooLargeError(
            f"entry offset={entry.offset} size={len(entry.data)} max={MAX_ENTRY_BYTES}"
        )
    _check_offset(entry.offset, "entry")
    _check_epoch(entry.epoch, "entry")
    body = _FRAME_BODY.pack(entry.offset, entry.epoch, int(entry.kind))
    crc = _crc(body, entry.data)
    return _FRAME_PREFIX.pack(len(body) + len(entry.data) + 4, crc) + body + entry.data


@dataclass(frozen=True, slots=True)
class ScannedFrame:
    """A frame decoded from ``position``; the next one starts at ``end``."""

    entry: Entry
    position: int
    end: int


def decode_frame(buf: memoryview, position: int) -> ScannedFrame:
    """Decode the frame at ``position`` of ``buf``; raises :class:`FrameError`.

    A frame running past the end of ``buf`` is ``torn`` (a crash mid-append); anything else
    wrong is corruption. Either way the caller stops trusting the file at ``position``.
    """
    remaining = len(buf) - position
    if remaining < _FRAME_PREFIX.size:
        raise FrameError("torn", f"remaining={remaining}")
    length, crc = _FRAME_PREFIX.unpack_from(buf, position)
    # Check the length before using it, so a corrupt length cannot make us slice (or, in a
    # streaming reader, allocate) something absurd.
    if not _MIN_FRAME_LENGTH <= length <= _MAX_FRAME_LENGTH:
        raise FrameError("bad_length", f"length={length}")
    end = position + 4 + length
    if end > len(buf):
        raise FrameError("torn", f"length={length} remaining={remaining}")
    body_start = position + _FRAME_PREFIX.size
    if _crc(buf[body_start:end]) != crc:
        raise FrameError("crc_mismatch")
    offset, epoch, kind = _FRAME_BODY.unpack_from(buf, body_start)
    if kind not in _KINDS:
        raise FrameError("unknown_kind", str(kind))
    if offset < 0 or epoch < 0:
        raise FrameError("negative_field", f"offset={offset} epoch={epoch}")
    data = bytes(buf[body_start + _FRAME_BODY.size : end])
    return ScannedFrame(Entry(offset, epoch, data, EntryKind(kind)), position, end)


# --- snapshots -------------------------------------------------------------------------------


def snapshot_file_name(end_offset: int, epoch: int) -> str:
    """Kafka's checkpoint name: ``<end_offset:020d>-<epoch:010d>.checkpoint``."""
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    """``(end_offset, epoch)`` from a checkpoint file name, or ``None`` if it is not one."""
    match = _SNAPSHOT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """A checkpoint file's content; raises ``MessageTooLargeError`` past the size limit."""
    if len(snapshot.image) > MAX_SNAPSHOT_BYTES:
        raise MessageTooLargeError(
            f"snapshot end_offset={snapshot.end_offset} size={len(snapshot.image)} "
            f"max={MAX_SNAPSHOT_BYTES}"
        )
    _check_offset(snapshot.end_offset, "snapshot end")
    _check_epoch(snapshot.epoch, "snapshot")
    head = _SNAPSHOT_HEADER.pack(
        _SNAPSHOT_MAGIC,
        _SNAPSHOT_VERSION,
        0,
        snapshot.end_offset,
        snapshot.epoch,
        len(snapshot.image),
    )
    return head + _SNAPSHOT_CRC.pack(_crc(head, snapshot.image)) + snapshot.image


def decode_snapshot(raw: bytes, end_offset: int, epoch: int) -> Snapshot:
    """Validate a checkpoint file named for ``(end_offset, epoch)``; raises :class:`FrameError`."""
    if len(raw) < SNAPSHOT_HEADER_SIZE:
        raise FrameError("short_header", f"size={len(raw)}")
    magic, version, _reserved, head_end, head_epoch, length = _SNAPSHOT_HEADER.unpack_from(raw)
    if magic != _SNAPSHOT_MAGIC:
        raise FrameError("bad_magic", repr(magic))
    if version != _SNAPSHOT_VERSION:
        raise FrameError("unsupported_version", str(version))
    if length > MAX_SNAPSHOT_BYTES:
        raise FrameError("too_large", f"length={length}")
    if len(raw) != SNAPSHOT_HEADER_SIZE + length:
        raise FrameError("size_mismatch", f"length={length} file_size={len(raw)}")
    (crc,) = _SNAPSHOT_CRC.unpack_from(raw, _SNAPSHOT_HEADER.size)
    view = memoryview(raw)
    if crc != _crc(view[: _SNAPSHOT_HEADER.size], view[SNAPSHOT_HEADER_SIZE:]):
        raise FrameError("crc_mismatch")
    # The name is what recovery sorts by; a file whose name disagrees with its (checksummed)
    # header was renamed or mixed up, so neither can be believed.
    if (head_end, head_epoch) != (end_offset, epoch):
        raise FrameError(
            "name_mismatch", f"header=({head_end},{head_epoch}) name=({end_offset},{epoch})"
        )
    return Snapshot(head_end, head_epoch, bytes(view[SNAPSHOT_HEADER_SIZE:]))
