"""Breaking-change check of the public gRPC API ``lograft.v1`` against its last release.

Usage::

    python proto/api_compat.py check     # exit 1 and one line per breaking change, if any
    python proto/api_compat.py baseline  # on release: freeze today's API (make api-baseline)

Both take ``--proto-dir DIR`` (default: this directory) and ``--baseline FILE`` (default:
``proto/api/lograft.v1.binpb``).

The baseline is a ``FileDescriptorSet`` of the public files (:data:`PUBLIC_PROTOS`), written
by protoc's ``--descriptor_set_out --include_imports`` without ``--include_source_info``, so
it changes only when the API does, never with a comment. The check compiles the current
files the same way (protoc in-process, from grpcio-tools) and compares the two descriptor
sets with :mod:`google.protobuf.descriptor_pb2`: see :func:`breaking_changes` for the rules.
Names are compared relative to the package, so a renamed package is one finding and not one
per message.

Why our own checker: buf (``buf breaking``) is the usual tool, but it is a Go binary that
neither PyPI nor Debian 12 ships, and this project's build reaches only PyPI; the rules we
need (those of buf's ``WIRE_JSON`` category, plus renames, which break generated code) are a
few hundred lines over descriptors protoc already gives us.

Rules, as ``docs/reference/grpc-api.md`` states them for people evolving the API:

* breaking: a removed package (or a renamed one), service, method, message, enum or enum
  value; a method whose input or output type or streaming changed; a field renumbered,
  renamed (same number, new name: JSON and generated code break), or whose type, label
  (``repeated``), ``optional`` presence (scalars) or oneof changed; an enum value
  renumbered or renamed;
* a removed field or enum value is *not* breaking when the current definition reserves both
  its number and its name: the number keeps old and new peers from misreading each other on
  the wire, the name keeps JSON and text encodings from being given a new meaning;
* allowed: new services, methods, messages, enums, fields and enum values.
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import descriptor_pb2 as d
from grpc_tools import protoc

__all__ = [
    "BASELINE",
    "PROTO_DIR",
    "PUBLIC_PACKAGE",
    "PUBLIC_PROTOS",
    "BreakingChange",
    "ProtocError",
    "breaking_changes",
    "compile_protos",
    "load_baseline",
    "main",
    "write_baseline",
]

PROTO_DIR = Path(__file__).resolve().parent
"""The directory holding the ``.proto`` files (and the include root protoc is given)."""

PUBLIC_PACKAGE = "lograft.v1"
"""The client-facing API: stable under the rules above. Other packages are internal."""

PUBLIC_PROTOS: tuple[str, ...] = ("broker.proto",)
"""The files that make up :data:`PUBLIC_PACKAGE`, relative to :data:`PROTO_DIR`."""

BASELINE = PROTO_DIR / "api" / f"{PUBLIC_PACKAGE}.binpb"
"""The last released descriptor set of :data:`PUBLIC_PACKAGE` (committed)."""

_WELL_KNOWN = importlib.resources.files("grpc_tools") / "_proto"


class ProtocError(RuntimeError):
    """protoc could not compile the files (it printed why on stderr)."""


@dataclass(frozen=True, order=True)
class BreakingChange:
    """One way the current API breaks clients of the baseline."""

    subject: str
    """What changed, by its full name in the baseline: ``lograft.v1.ProduceRequest.acks``."""
    change: str
    """How: ``field renumbered from 1 to 8``."""

    def __str__(self) -> str:
        return f"{self.subject}: {self.change}"


def compile_protos(
    proto_dir: Path = PROTO_DIR,
    files: Sequence[str] = PUBLIC_PROTOS,
    *,
    source_info: bool = False,
) -> d.FileDescriptorSet:
    """``files`` (relative to ``proto_dir``) and their imports, compiled by protoc in-process.

    ``source_info`` keeps the comments (``SourceCodeInfo``), for the reference docs; the
    baseline and the check leave it out.
    """
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "set.binpb"
        args = [
            "protoc",
            f"-I{proto_dir}",
            f"-I{_WELL_KNOWN}",
            f"--descriptor_set_out={out}",
            "--include_imports",
            *(["--include_source_info"] if source_info else []),
            *(str(proto_dir / name) for name in files),
        ]
        if protoc.main(args) != 0:
            raise ProtocError(f"protoc failed on {', '.join(files)} in {proto_dir}")
        return d.FileDescriptorSet.FromString(out.read_bytes())


def write_baseline(proto_dir: Path = PROTO_DIR, baseline: Path = BASELINE) -> d.FileDescriptorSet:
    """Compile the public files of ``proto_dir`` and store them as the released baseline."""
    descriptors = compile_protos(proto_dir)
    baseline.parent.mkdir(parents=True, exist_ok=True)
    baseline.write_bytes(descriptors.SerializeToString(deterministic=True))
    return descriptors


def load_baseline(baseline: Path = BASELINE) -> d.FileDescriptorSet:
    """The descriptor set stored at ``baseline``."""
    return d.FileDescriptorSet.FromString(baseline.read_bytes())


# ---- indexing: every definition of the public package by its package-relative name ------


@dataclass
class _Api:
    """The public package's definitions in one descriptor set, by package-relative name."""

    package: str
    services: dict[str, d.ServiceDescriptorProto]
    messages: dict[str, d.DescriptorProto]
    enums: dict[str, d.EnumDescriptorProto]

    def relative(self, type_name: str) -> str:
        """``.lograft.v1.Foo`` → ``Foo``; a type of another package keeps its full name."""
        prefix = f".{self.package}."
        return type_name[len(prefix) :] if type_name.startswith(prefix) else type_name

    def full(self, name: str) -> str:
        return f"{self.package}.{name}" if self.package else name


def _nested(
    prefix: str, messages: Iterable[d.DescriptorProto], enums: Iterable[d.EnumDescriptorProto]
) -> Iterator[tuple[str, d.DescriptorProto | d.EnumDescriptorProto]]:
    for enum in enums:
        yield prefix + enum.name, enum
    for message in messages:
        name = prefix + message.name
        yield name, message
        yield from _nested(name + ".", message.nested_type, message.enum_type)


def _index(descriptors: d.FileDescriptorSet, files: Iterable[str]) -> _Api | None:
    """The definitions of ``files`` (their package taken as the API's), or None if absent."""
    wanted = set(files)
    chosen = [f for f in descriptors.file if f.name in wanted]
    if not chosen:
        return None
    api = _Api(chosen[0].package, {}, {}, {})
    for file in chosen:
        for service in file.service:
            api.services[service.name] = service
        for name, item in _nested("", file.message_type, file.enum_type):
            if isinstance(item, d.DescriptorProto):
                api.messages[name] = item
            else:
                api.enums[name] = item
    return api


# ---- the rules ----------------------------------------------------------------------------


def breaking_changes(
    baseline: d.FileDescriptorSet,
    current: d.FileDescriptorSet,
    files: Sequence[str] = PUBLIC_PROTOS,
) -> list[BreakingChange]:
    """Every way ``current`` breaks a client or server built on ``baseline``, sorted.

    Only ``files`` (the public ones) are compared; their definitions are matched by name
    relative to their package, so ``package lograft.v1`` becoming ``lograft.v2`` is reported
    once, as the package's change.
    """
    old = _index(baseline, files)
    if old is None:
        raise ValueError(f"the baseline holds none of {', '.join(files)}")
    new = _index(current, files)
    if new is None:
        return [BreakingChange(f"package {old.package}", "removed")]
    found: list[BreakingChange] = []
    if new.package != old.package:
        found.append(BreakingChange(f"package {old.package}", f"renamed to {new.package}"))
    for name, service in old.services.items():
        if name not in new.services:
            found.append(BreakingChange(old.full(name), "service removed"))
        else:
            found += _service_changes(old, new, service, new.services[name])
    for name, message in old.messages.items():
        if message.options.map_entry:
            continue  # a map's entry is part of its field's type (``map<K, V>``)
        if name in new.messages:
            found += _message_changes(old, new, name, message, new.messages[name])
        else:
            found.append(BreakingChange(old.full(name), "message removed"))
    for name, enum in old.enums.items():
        if name not in new.enums:
            found.append(BreakingChange(old.full(name), "enum removed"))
        else:
            found += _enum_changes(old.full(name), enum, new.enums[name])
    return sorted(found)


def _service_changes(
    old: _Api, new: _Api, before: d.ServiceDescriptorProto, after: d.ServiceDescriptorProto
) -> Iterator[BreakingChange]:
    methods = {m.name: m for m in after.method}
    for method in before.method:
        subject = old.full(f"{before.name}.{method.name}")
        now = methods.get(method.name)
        if now is None:
            yield BreakingChange(subject, "method removed")
            continue
        for side, was, is_ in (
            ("input", method.input_type, now.input_type),
            ("output", method.output_type, now.output_type),
        ):
            if old.relative(was) != new.relative(is_):
                change = f"{side} type changed from {old.relative(was)} to {new.relative(is_)}"
                yield BreakingChange(subject, "method " + change)
        for side, streamed, streams in (
            ("client", method.client_streaming, now.client_streaming),
            ("server", method.server_streaming, now.server_streaming),
        ):
            if streamed != streams:
                change = f"{side} streaming changed from {_yes(streamed)} to {_yes(streams)}"
                yield BreakingChange(subject, "method " + change)


def _yes(flag: bool) -> str:
    return "true" if flag else "false"


def _reserves(message: d.DescriptorProto | d.EnumDescriptorProto, name: str, number: int) -> bool:
    """Whether ``message`` reserves both ``number`` and ``name``.

    A message's reserved ranges are half-open ``[start, end)``, an enum's closed.
    """
    closed = 1 if isinstance(message, d.EnumDescriptorProto) else 0
    number_reserved = any(r.start <= number < r.end + closed for r in message.reserved_range)
    return number_reserved and name in message.reserved_name


def _message_changes(
    old: _Api, new: _Api, name: str, before: d.DescriptorProto, after: d.DescriptorProto
) -> Iterator[BreakingChange]:
    by_name = {f.name: f for f in after.field}
    by_number = {f.number: f for f in after.field}
    for field in before.field:
        subject = old.full(f"{name}.{field.name}")
        if field.name in by_name:
            now = by_name[field.name]
            if now.number != field.number:
                yield BreakingChange(
                    subject, f"field renumbered from {field.number} to {now.number}"
                )
        elif field.number in by_number:
            now = by_number[field.number]
            yield BreakingChange(
                subject, f"field {field.number} renamed from {field.name} to {now.name}"
            )
        else:
            if not _reserves(after, field.name, field.number):
                yield BreakingChange(
                    subject,
                    f"field {field.number} removed without reserving both its number and its "
                    f'name: reserved {field.number}; reserved "{field.name}";',
                )
            continue
        yield from _field_changes(old, new, subject, (before, field), (after, now))


def _field_shape(api: _Api, field: d.FieldDescriptorProto) -> str:
    """A field's type and label as the .proto states them: ``repeated int64``, ``map<...>``."""
    kind = d.FieldDescriptorProto.Type.Name(field.type).removeprefix("TYPE_").lower()
    if field.type_name:
        kind = api.relative(field.type_name)
    entry = api.messages.get(kind)
    if entry is not None and entry.options.map_entry and field.label == field.LABEL_REPEATED:
        key, value = (_field_shape(api, f) for f in entry.field)
        return f"map<{key}, {value}>"
    if field.label == field.LABEL_REPEATED:
        return f"repeated {kind}"
    return kind


def _has_presence_keyword(field: d.FieldDescriptorProto) -> bool:
    """``optional`` on a scalar (a message field has presence with or without it)."""
    return field.proto3_optional and field.type not in (field.TYPE_MESSAGE, field.TYPE_GROUP)


def _real_oneof(message: d.DescriptorProto, field: d.FieldDescriptorProto) -> str:
    """The name of the (non-synthetic) oneof holding ``field``, or ``""``."""
    if not field.HasField("oneof_index") or field.proto3_optional:
        return ""
    return message.oneof_decl[field.oneof_index].name


def _field_changes(
    old: _Api,
    new: _Api,
    subject: str,
    before: tuple[d.DescriptorProto, d.FieldDescriptorProto],
    after: tuple[d.DescriptorProto, d.FieldDescriptorProto],
) -> Iterator[BreakingChange]:
    (old_message, was), (new_message, now) = before, after
    shape_was, shape_now = _field_shape(old, was), _field_shape(new, now)
    if shape_was != shape_now:
        yield BreakingChange(subject, f"field type changed from {shape_was} to {shape_now}")
    if _has_presence_keyword(was) != _has_presence_keyword(now):
        change = "dropped" if _has_presence_keyword(was) else "added"
        yield BreakingChange(subject, f"field presence changed: `optional` {change}")
    if _real_oneof(old_message, was) != _real_oneof(new_message, now):
        oneofs = (_real_oneof(old_message, was) or "none", _real_oneof(new_message, now) or "none")
        yield BreakingChange(subject, "field oneof changed from {} to {}".format(*oneofs))
    if was.name == now.name and was.json_name != now.json_name:  # a json_name option
        yield BreakingChange(
            subject, f"field JSON name changed from {was.json_name} to {now.json_name}"
        )


def _enum_changes(
    subject: str, before: d.EnumDescriptorProto, after: d.EnumDescriptorProto
) -> Iterator[BreakingChange]:
    by_name = {v.name: v for v in after.value}
    by_number: dict[int, d.EnumValueDescriptorProto] = {}
    for value in after.value:  # with allow_alias, the first name of a number is its own
        by_number.setdefault(value.number, value)
    for value in before.value:
        where = f"{subject}.{value.name}"
        if value.name in by_name:
            if by_name[value.name].number != value.number:
                number = by_name[value.name].number
                yield BreakingChange(
                    where, f"enum value renumbered from {value.number} to {number}"
                )
        elif value.number in by_number:
            renamed = by_number[value.number].name
            yield BreakingChange(where, f"enum value {value.number} renamed to {renamed}")
        elif not _reserves(after, value.name, value.number):
            yield BreakingChange(
                where,
                f"enum value {value.number} removed without reserving both its number and its "
                f'name: reserved {value.number}; reserved "{value.name}";',
            )


# ---- command line -------------------------------------------------------------------------


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python proto/api_compat.py",
        description=f"Check {PUBLIC_PACKAGE} against its released baseline, or refresh it.",
    )
    parser.add_argument("command", choices=("check", "baseline"))
    parser.add_argument("--proto-dir", type=Path, default=PROTO_DIR)
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> int:
    """Run ``check`` (exit 1 on a breaking change) or ``baseline``; returns the exit code."""
    args = _parse(argv)
    if args.command == "baseline":
        written = write_baseline(args.proto_dir, args.baseline)
        names = ", ".join(f.name for f in written.file)
        print(f"{args.baseline}: the {PUBLIC_PACKAGE} baseline ({names})")
        return 0
    found = breaking_changes(load_baseline(args.baseline), compile_protos(args.proto_dir))
    for change in found:
        print(change)
    if found:
        print(
            f"{len(found)} breaking change(s) to {PUBLIC_PACKAGE} against {args.baseline}: "
            "restore them, or make the change in a new package (lograft.v2); "
            "see docs/reference/grpc-api.md",
            file=sys.stderr,
        )
        return 1
    print(f"{PUBLIC_PACKAGE}: no breaking change against {args.baseline}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
