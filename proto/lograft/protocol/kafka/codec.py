"""Encode and decode Kafka protocol messages of any version, by their JSON definitions.

A message is a ``dict`` keyed by snake_case field names (:mod:`lograft.protocol.kafka.schema`);
an array of structs is a ``list`` of such dicts; ``string`` is ``str``, ``bytes`` and
``records`` are ``bytes`` (a decoded ``records`` field is a ``memoryview`` of the frame: record
batches pass through uncopied and are never re-encoded), ``uuid`` is 16 ``bytes``; a nullable
field may be ``None``. A field missing from a dict being encoded takes its default; fields of
other versions are ignored.

Flexible versions (KIP-482) use unsigned-varint lengths (length + 1, 0 for null) and end
every struct with a tagged-field section: fields are written there in tag order when they
differ from their default, and tags this version does not know are skipped when read, as
the protocol requires of a reader.

Everything read comes from the network: a length or count that runs past the frame, a
negative length where null is not allowed, a varint of more than five bytes or a string
that is not UTF-8 raise :class:`KafkaDecodeError`, before anything is allocated for it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from lograft.protocol.kafka.schema import Field, MessageSchema, Struct

__all__ = ["KafkaDecodeError", "KafkaEncodeError", "decode", "encode", "encode_chunks"]


class KafkaDecodeError(Exception):
    """Bytes that are not the message they claim to be (the connection is not trusted after)."""


class KafkaEncodeError(Exception):
    """A value that the message's definition cannot carry at this version (our own bug)."""


_FIXED: dict[str, struct.Struct] = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_INT16 = _FIXED["int16"]
_INT32 = _FIXED["int32"]

Reader = Callable[[memoryview, int], tuple[Any, int]]
Writer = Callable[[list[bytes | memoryview], Any], None]


def _read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        if pos >= len(buf):
            raise KafkaDecodeError("a varint runs past the end of the frame")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise KafkaDecodeError("a varint longer than five bytes")


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(buf: memoryview, pos: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A length prefix: -1 for null; checked to fit what is left of ``buf``."""
    if compact:
        raw, pos = _read_uvarint(buf, pos)
        length = raw - 1
    else:
        fmt = _INT32 if wide else _INT16
        if pos + fmt.size > len(buf):
            raise KafkaDecodeError("a length runs past the end of the frame")
        (length,) = fmt.unpack_from(buf, pos)
        pos += fmt.size
    if length < -1:
        raise KafkaDecodeError(f"a negative length {length}")
    return length, pos


def _fixed_reader(fmt: struct.Struct) -> Reader:
    size = fmt.size

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise KafkaDecodeError("a field runs past the end of the frame")
        return fmt.unpack_from(buf, pos)[0], pos + size

    return read


def _fixed_writer(fmt: struct.Struct) -> Writer:
    def write(out: list[bytes | memoryview], value: Any) -> None:
        try:
            out.append(fmt.pack(value))
        except struct.error as exc:
            raise KafkaEncodeError(str(exc)) from None

    return write


def _read_uuid(buf: memoryview, pos: int) -> tuple[Any, int]:
    if pos + 16 > len(buf):
        raise KafkaDecodeError("a uuid runs past the end of the frame")
    return bytes(buf[pos : pos + 16]), pos + 16


def _write_uuid(out: list[bytes | memoryview], value: Any) -> None:
    if len(value) != 16:
        raise KafkaEncodeError(f"a uuid of {len(value)} bytes")
    out.append(bytes(value))


def _sized_reader(kind: str, compact: bool, nullable: bool) -> Reader:
    wide = kind != "string"

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = _length(buf, pos, compact, wide)
        if length == -1:
            if not nullable:
                raise KafkaDecodeError(f"a null {kind} where none is allowed")
            return None, pos
        end = pos + length
        if end > len(buf):
            raise KafkaDecodeError(f"a {kind} of {length} bytes runs past the end of the frame")
        data = buf[pos:end]
        if kind == "string":
            try:
                return str(data, "utf-8"), end
            except UnicodeDecodeError:
                raise KafkaDecodeError("a string that is not UTF-8") from None
        return (data if kind == "records" else bytes(data)), end

    return read


def _sized_writer(kind: str, compact: bool) -> Writer:
    fmt = _INT16 if kind == "string" else _INT32

    def write(out: list[bytes | memoryview], value: Any) -> None:
        if value is None:
            out.append(b"\x00" if compact else fmt.pack(-1))
            return
        data = value.encode("utf-8") if kind == "string" else value
        out.append(_uvarint(len(data) + 1) if compact else fmt.pack(len(data)))
        if len(data):
            out.append(data)

    return write


class _StructCodec:
    """One struct at one version: its fields' readers and writers, in wire order."""

    __slots__ = ("_defaults", "_flexible", "_regular", "_tagged")

    def __init__(self, struct_def: Struct, version: int, flexible: bool) -> None:
        self._flexible = flexible
        self._regular: list[tuple[str, Reader, Writer]] = []
        self._tagged: dict[int, tuple[str, Reader, Writer, Any]] = {}
        self._defaults: dict[str, Any] = {}
        for field in struct_def.fields:
            if version not in field.versions:
                continue
            compact = flexible and (field.flexible is None or version in field.flexible)
            reader, writer = _field_codec(field, version, flexible, compact)
            if flexible and version in field.tagged:
                if field.tag is None:
                    raise KafkaEncodeError(f"tagged field {field.name} without a tag")
                self._tagged[field.tag] = (field.name, reader, writer, field.default)
                self._defaults[field.name] = field.default
            else:
                self._regular.append((field.name, reader, writer))
        self._tagged = dict(sorted(self._tagged.items()))

    def read(self, buf: memoryview, pos: int) -> tuple[dict[str, Any], int]:
        value: dict[str, Any] = {}
        for name, reader, _ in self._regular:
            value[name], pos = reader(buf, pos)
        if self._flexible:
            for name, default in self._defaults.items():
                value[name] = list(default) if isinstance(default, list) else default
            count, pos = _read_uvarint(buf, pos)
            for _ in range(count):
                tag, pos = _read_uvarint(buf, pos)
                size, pos = _read_uvarint(buf, pos)
                end = pos + size
                if end > len(buf):
                    raise KafkaDecodeError("a tagged field runs past the end of the frame")
                known = self._tagged.get(tag)
                if known is not None:  # an unknown tag is skipped (KIP-482)
                    value[known[0]], _ = known[1](buf[:end], pos)
                pos = end
        return value, pos

    def write(self, out: list[bytes | memoryview], value: Mapping[str, Any]) -> None:
        for name, _, writer in self._regular:
            writer(out, value.get(name, self._default_of(name)))
        if self._flexible:
            present = [
                (tag, name, writer, value[name])
                for tag, (name, _, writer, default) in self._tagged.items()
                if name in value and value[name] != default
            ]
            out.append(_uvarint(len(present)))
            for tag, _, writer, field_value in present:
                chunk: list[bytes | memoryview] = []
                writer(chunk, field_value)
                data = b"".join(chunk)
                out.append(_uvarint(tag) + _uvarint(len(data)))
                out.append(data)

    def _default_of(self, name: str) -> Any:
        raise KafkaEncodeError(f"field {name} is missing")


class _DefaultingStruct(_StructCodec):
    """A struct whose missing fields take the defaults of its definition."""

    __slots__ = ("_all_defaults",)

    def __init__(self, struct_def: Struct, version: int, flexible: bool) -> None:
        super().__init__(struct_def, version, flexible)
        self._all_defaults = {f.name: f.default for f in struct_def.fields}

    def _default_of(self, name: str) -> Any:
        default = self._all_defaults[name]
        return list(default) if isinstance(default, list) else default


def _field_codec(
    field: Field, version: int, flexible: bool, compact: bool
) -> tuple[Reader, Writer]:
    nullable = version in field.nullable
    if field.struct is not None:
        nested = _DefaultingStruct(field.struct, version, flexible)
        element_reader: Reader = nested.read
        element_writer: Writer = nested.write
    else:
        element_reader, element_writer = _primitive_codec(field.type, compact, nullable)
    if not field.is_array:
        return element_reader, element_writer
    return _array_reader(element_reader, compact, nullable), _array_writer(element_writer, compact)


def _primitive_codec(kind: str, compact: bool, nullable: bool) -> tuple[Reader, Writer]:
    if kind in _FIXED:
        return _fixed_reader(_FIXED[kind]), _fixed_writer(_FIXED[kind])
    if kind == "uuid":
        return _read_uuid, _write_uuid
    return _sized_reader(kind, compact, nullable), _sized_writer(kind, compact)


def _array_reader(element: Reader, compact: bool, nullable: bool) -> Reader:
    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        count, pos = _length(buf, pos, compact, wide=True)
        if count == -1:
            if not nullable:
                raise KafkaDecodeError("a null array where none is allowed")
            return None, pos
        if count > len(buf) - pos:  # every element takes at least one byte
            raise KafkaDecodeError(f"an array of {count} elements runs past the end of the frame")
        items = []
        for _ in range(count):
            item, pos = element(buf, pos)
            items.append(item)
        return items, pos

    return read


def _array_writer(element: Writer, compact: bool) -> Writer:
    def write(out: list[bytes | memoryview], value: Any) -> None:
        if value is None:
            out.append(b"\x00" if compact else _INT32.pack(-1))
            return
        out.append(_uvarint(len(value) + 1) if compact else _INT32.pack(len(value)))
        for item in value:
            element(out, item)

    return write


_CODECS: dict[tuple[str, int], _StructCodec] = {}


def _codec(schema: MessageSchema, version: int) -> _StructCodec:
    key = (schema.name, version)
    codec = _CODECS.get(key)
    if codec is None:
        if version not in schema.valid and schema.kind != "header":
            raise KafkaEncodeError(f"{schema.name} has no version {version}")
        codec = _DefaultingStruct(schema.body, version, version in schema.flexible)
        _CODECS[key] = codec
    return codec


def decode(
    schema: MessageSchema, version: int, buf: bytes | memoryview, pos: int = 0
) -> tuple[dict[str, Any], int]:
    """The message at ``pos`` of ``buf`` and the position just past it."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return _codec(schema, version).read(view, pos)


def encode_chunks(
    schema: MessageSchema, version: int, value: Mapping[str, Any]
) -> list[bytes | memoryview]:
    """The message as the pieces to write, in order (records fields left uncopied)."""
    out: list[bytes | memoryview] = []
    _codec(schema, version).write(out, value)
    return out


def encode(schema: MessageSchema, version: int, value: Mapping[str, Any]) -> bytes:
    """The message's bytes."""
    return b"".join(encode_chunks(schema, version, value))
