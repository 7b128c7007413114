"""``grpc-api.md``: the public gRPC API ``lograft.v1``, from the .proto files and their comments.

protoc compiles the public files (``api_compat.PUBLIC_PROTOS``) with ``--include_source_info``,
so each service, method, message, field and enum value comes with the comment written above
(or after) it in the .proto file. Comment lines of the form ``---- Title ----`` open a
section: of methods when they lead a method's comment, of messages when they stand detached
above a message. The top of the page (what is public, what is internal, the evolution rules,
discovery at run time) is written here, beside the rules ``proto/api_compat.py`` enforces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from api_compat import PROTO_DIR, PUBLIC_PACKAGE, PUBLIC_PROTOS, compile_protos
from google.protobuf import descriptor_pb2 as d

from refgen.markdown import GENERATED_NOTE, code_span, table

__all__ = ["INTER_BROKER_USE", "render_grpc_api"]

INTER_BROKER_USE: Mapping[str, str] = {
    "Fetch": "clients; brokers too: with `replica_id` >= 0 it is a follower's replication fetch",
    "AddPartitionsToTxn": "clients; brokers too: with `verify_only` a partition leader's "
    "KIP-890 check with the transaction coordinator",
    "WriteTxnMarkers": "brokers only: the transaction coordinator to partition leaders",
}
"""Broker methods (or uses of them) that brokers call on each other, not clients."""

# SourceCodeInfo paths: the field numbers of FileDescriptorProto and its parts.
_SYNTAX, _MESSAGE, _ENUM, _SERVICE = 12, 4, 5, 6
_FIELD, _NESTED, _METHOD, _VALUE = 2, 3, 2, 2
_SECTION = re.compile(r"^\s*-{2,}\s*(.*?)\s*-*\s*$")

_INTRO = """\
## What `lograft.v1` is

`lograft.v1` (`proto/broker.proto`, service `lograft.v1.Broker`) is lograft's public
client API: what a client in any language calls to produce, fetch, manage topics and
configs, run consumer groups and transactions. It follows Kafka's protocol: the same
operations and fields, Kafka's numeric error codes in `error_code` (0 = NONE; their names
and meanings are in [api.md](api.md#errors-lograftprotocolerrors)), and record data as
Kafka RecordBatch v2 bytes, except in `ProduceRecords` and `FetchRecords`, which carry
records as messages for clients without a RecordBatch codec. It is stable under the rules
below: a client built against any release of `lograft.v1` keeps working against later
ones.

[Writing a client](../writing-a-client.md) walks through the calls a producer and a
consumer make, in order; this page is the reference of every call and field.

## What is internal

Everything else a node serves may change in any release, without notice:

- the other packages: `lograft.raft.v1` (Raft), `lograft.controller.v1` (Controller),
  `lograft.metadata.v1` (the metadata log's records) and `lograft.node.v1` (Node).
  `lograft.node.v1.Node/NodeHealth` is what `lograft node health` and the container's
  health check ask; a tool that only needs "is this node serving" should use
  `grpc.health.v1.Health` instead (below);
- the inter-broker uses of `lograft.v1.Broker` marked "brokers" in the methods' table:
  `WriteTxnMarkers`, `Fetch` with `replica_id` >= 0 (with `last_fetched_epoch` and
  `known_high_watermark`), `AddPartitionsToTxn` with `verify_only`. Their messages are
  part of `lograft.v1` and follow its rules, but a client has no reason to call them.

## Evolving the API

`proto/api/lograft.v1.binpb` is the descriptor set of the last release (protoc
`--descriptor_set_out --include_imports`, without source info: comments never change it).
`make proto-check` (part of `make test`) runs `tests/unit/test_api_compat.py`, which
compares today's `broker.proto` with it (`python proto/api_compat.py check` does the same
from a shell); `make api-baseline` refreshes it when a release is cut. The rules:

1. **Only add**: new fields, messages, enums, enum values, methods and services are
   compatible; a peer that does not know them ignores them (a new field reads as its
   default). Write the comment a new field needs, including what its default means.
2. **Never renumber a field, never reuse a number**, never rename a field or an enum
   value (the JSON mapping and generated code use the name), never change a field's
   type (not even `int32` to `int64`), its `repeated` label, its `optional` presence
   or its oneof, nor a method's request, response or streaming.
3. **Retire, do not delete**: a field or enum value that must go is removed with
   `reserved N;` **and** `reserved "name";`, so neither can be given a new meaning; the
   server keeps accepting old clients that still send it. The checker accepts a removal
   only with both reservations.
4. **New behaviour behind new fields or methods**: a field's absence (its default)
   means the old behaviour, so old clients get what they always got.
5. **A breaking change means `lograft.v2`**: a new package served beside `lograft.v1`
   until `lograft.v1` is retired; `lograft.v1` itself never breaks.

## Discovering the API at run time

Every listener of every node serves gRPC server reflection
(`grpc.reflection.v1alpha.ServerReflection`) and the standard health check
(`grpc.health.v1.Health`). Reflection lists the services that listener serves
(`lograft.v1.Broker` where the node is a broker, `lograft.node.v1.Node` everywhere,
`lograft.raft.v1.Raft` and `lograft.controller.v1.Controller` where it is a controller)
with their full descriptors, so a tool with none of lograft's protos (grpcurl, Postman,
the `grpcio-reflection` package's Python client) can list and call them; [Writing a
client](../writing-a-client.md#what-you-need) has a Python example that lists the services
and calls `Metadata` from the reflected descriptors, and
`tests/integration/test_grpc_reflection.py` runs it against a real node.

`grpc.health.v1.Health/Check` answers `SERVING` when the node is healthy by the rules of
`lograft node health` (for the service `""` and for each service the listener serves),
`NOT_SERVING` when it is not, and `NOT_FOUND` for a service the listener does not serve;
`Watch` streams the status at once and again on each change (`SERVICE_UNKNOWN`, the
stream kept open, for a service the listener does not serve).

In protobuf's JSON mapping (what JSON-speaking gRPC tools use) field names are the
lowerCamelCase forms of the names below (`max_wait_ms` is `maxWaitMs`), and 64-bit
integers are strings.
"""


_RECURRING: tuple[tuple[str, str], ...] = (
    (
        "error_code",
        "Kafka's error code: 0 NONE, else the error's number "
        "(names and meanings: [api.md](api.md#errors-lograftprotocolerrors)).",
    ),
    ("error_message", "A readable detail of the error; empty when there is none."),
    ("name, topic", "In a topic's entry: the topic's name."),
    ("partition", "The partition's index, from 0."),
    (
        "topics, partitions, results, ...",
        "Repeated entries: one per topic, partition, "
        "resource, group or marker the request names (an answer keeps the request's order).",
    ),
    (
        "node_id, broker_id, host, port, rack",
        "A broker: its node id, the address clients reach it at, its broker.rack.",
    ),
    ("group_id, member_id", "The consumer group, and the member as the coordinator named it."),
    (
        "transactional_id, producer_id, producer_epoch",
        "The transactional id and the producer id and epoch InitProducerId gave.",
    ),
    (
        "timeout_ms",
        "How long the broker waits for the operation before answering REQUEST_TIMED_OUT.",
    ),
)
"""Field names that recur with one meaning: explained once, above the messages."""


def _glossary() -> list[str]:
    return [
        "Fields that recur with one meaning carry no comment of their own:",
        "",
        *table(("field", "meaning"), ((code_span(n), m) for n, m in _RECURRING)),
    ]


def _locations(file: d.FileDescriptorProto) -> dict[tuple[int, ...], d.SourceCodeInfo.Location]:
    return {tuple(location.path): location for location in file.source_code_info.location}


def _comment(location: d.SourceCodeInfo.Location | None) -> list[str]:
    """The lines of the comment above (and after) a definition, one leading space dropped."""
    if location is None:
        return []
    text = location.leading_comments + location.trailing_comments
    return [line.removeprefix(" ").rstrip() for line in text.splitlines()]


def _split_section(lines: list[str]) -> tuple[str, str]:
    """A leading ``---- Title ----`` line's title, and the rest of the comment as one line."""
    title = ""
    if lines and (match := _SECTION.match(lines[0])):
        title, lines = match.group(1), lines[1:]
    return title, " ".join(line.strip() for line in lines if line.strip())


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


class _Page:
    """The messages and enums of the public files, and how to link to them."""

    def __init__(self, files: list[d.FileDescriptorProto]) -> None:
        self.files = files
        self.maps: dict[str, d.DescriptorProto] = {}
        for file in files:
            for message in file.message_type:
                for nested in message.nested_type:
                    if nested.options.map_entry:
                        self.maps[f".{file.package}.{message.name}.{nested.name}"] = nested
        self.defined = {
            f".{file.package}.{name}"
            for file in files
            for name in (*(m.name for m in file.message_type), *(e.name for e in file.enum_type))
        }

    def type_name(self, field: d.FieldDescriptorProto) -> str:
        """A field's type as Markdown: a scalar, a link to a message or enum, a map."""
        if field.type_name in self.maps:
            key, value = self.maps[field.type_name].field
            return f"map<{self.type_name(key)}, {self.type_name(value)}>"
        if field.type_name in self.defined:
            name = field.type_name.rsplit(".", 1)[-1]
            return f"[`{name}`](#{_slug(name)})"
        if field.type_name:
            return code_span(field.type_name.lstrip("."))
        return code_span(d.FieldDescriptorProto.Type.Name(field.type)[5:].lower())

    def label(self, field: d.FieldDescriptorProto) -> str:
        if field.type_name in self.maps:
            return ""
        if field.label == field.LABEL_REPEATED:
            return "repeated"
        return "optional" if field.proto3_optional else ""


def _method_row(method: d.MethodDescriptorProto, text: str) -> tuple[str, ...]:
    stream_in = "stream " if method.client_streaming else ""
    stream_out = "stream " if method.server_streaming else ""
    request = method.input_type.rsplit(".", 1)[-1]
    response = method.output_type.rsplit(".", 1)[-1]
    return (
        code_span(method.name),
        f"{stream_in}[`{request}`](#{_slug(request)})",
        f"{stream_out}[`{response}`](#{_slug(response)})",
        INTER_BROKER_USE.get(method.name, "clients"),
        text,
    )


def _service_lines(file: d.FileDescriptorProto, index: int) -> Iterator[str]:
    """The service's methods, in sections opened by ``---- Title ----`` comment lines.

    A title opens a section when it leads a method's comment (the rest describes the
    method) or a comment detached above it (the rest introduces the section).
    """
    service = file.service[index]
    locations = _locations(file)
    full = f"{file.package}.{service.name}"
    _, about = _split_section(_comment(locations.get((_SERVICE, index))))
    yield from (f"## Service `{full}`", "")
    if about:
        yield from (about, "")
    sections: list[tuple[str, list[str], list[tuple[str, ...]]]] = [("", [], [])]
    for number, method in enumerate(service.method):
        location = locations.get((_SERVICE, index, _METHOD, number))
        for detached in location.leading_detached_comments if location else ():
            title, text = _split_section(_comment_lines(detached))
            if title:
                sections.append((title, [], []))
            if text:
                sections[-1][1].append(text)
        title, text = _split_section(_comment(location))
        if title:
            sections.append((title, [], []))
        sections[-1][2].append(_method_row(method, text))
    for title, intro, rows in sections:
        if not rows:
            continue
        if title:
            yield from (f"### {title[0].upper()}{title[1:]}", "")
        for paragraph in intro:
            yield from (paragraph, "")
        yield from table(("method", "request", "response", "called by", "description"), rows)
        yield ""
    missing = set(INTER_BROKER_USE) - {m.name for m in service.method}
    if missing:
        raise ValueError(f"INTER_BROKER_USE names no method of {full}: {sorted(missing)}")


def _message_lines(
    page: _Page,
    message: d.DescriptorProto,
    path: tuple[int, ...],
    locations: Mapping[tuple[int, ...], d.SourceCodeInfo.Location],
    prefix: str = "",
) -> Iterator[str]:
    yield from (f"#### {prefix}{message.name}", "")
    _, about = _split_section(_comment(locations.get(path)))
    if about:
        yield from (about, "")
    rows = []
    for number, field in enumerate(message.field):
        _, text = _split_section(_comment(locations.get((*path, _FIELD, number))))
        rows.append(
            (
                str(field.number),
                code_span(field.name),
                page.label(field),
                page.type_name(field),
                text,
            )
        )
    yield from (
        table(("#", "field", "label", "type", "description"), rows) if rows else ["No fields."]
    )
    reserved = [
        *(
            str(r.start) if r.end == r.start + 1 else f"{r.start} to {r.end - 1}"
            for r in message.reserved_range
        ),
        *(f'"{name}"' for name in message.reserved_name),
    ]
    if reserved:
        yield from ("", "Reserved (retired; never reused): " + ", ".join(reserved) + ".")
    yield ""
    for number, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:
            where = (*path, _NESTED, number)
            yield from _message_lines(page, nested, where, locations, f"{prefix}{message.name}.")


def _enum_lines(
    enum: d.EnumDescriptorProto,
    path: tuple[int, ...],
    locations: Mapping[tuple[int, ...], d.SourceCodeInfo.Location],
) -> Iterator[str]:
    yield from (f"#### {enum.name}", "")
    _, about = _split_section(_comment(locations.get(path)))
    if about:
        yield from (about, "")
    rows = [
        (
            str(value.number),
            code_span(value.name),
            _split_section(_comment(locations.get((*path, _VALUE, number))))[1],
        )
        for number, value in enumerate(enum.value)
    ]
    yield from table(("number", "value", "description"), rows)
    yield ""


def _type_lines(page: _Page, file: d.FileDescriptorProto) -> Iterator[str]:
    """Messages and enums in file order, under the sections their detached comments open."""
    locations = _locations(file)
    items: list[tuple[int, tuple[int, ...], d.DescriptorProto | d.EnumDescriptorProto]] = [
        (locations[(_MESSAGE, i)].span[0], (_MESSAGE, i), m)
        for i, m in enumerate(file.message_type)
    ]
    items += [(locations[(_ENUM, i)].span[0], (_ENUM, i), e) for i, e in enumerate(file.enum_type)]
    for _, path, item in sorted(items, key=lambda entry: entry[0]):
        for detached in locations[path].leading_detached_comments:
            title, _ = _split_section(_comment_lines(detached))
            if title:
                yield from (f"### {title}", "")
        if isinstance(item, d.DescriptorProto):
            yield from _message_lines(page, item, path, locations)
        else:
            yield from _enum_lines(item, path, locations)


def _comment_lines(text: str) -> list[str]:
    return [line.removeprefix(" ").rstrip() for line in text.splitlines()]


def _paragraphs(lines: list[str]) -> list[str]:
    """Comment lines as Markdown paragraphs (blank comment lines separate them)."""
    out: list[str] = []
    for paragraph in "\n".join(lines).split("\n\n"):
        if paragraph.strip():
            out += [" ".join(paragraph.split()), ""]
    return out


def render_grpc_api(proto_dir: Path = PROTO_DIR) -> str:
    """The text of ``grpc-api.md``, from the public .proto files in ``proto_dir``."""
    descriptors = compile_protos(proto_dir, source_info=True)
    files = [f for f in descriptors.file if f.name in PUBLIC_PROTOS]
    page = _Page(files)
    lines = [
        f"# gRPC API reference (`{PUBLIC_PACKAGE}`)",
        "",
        GENERATED_NOTE.format(
            source=", ".join(f"proto/{name}" for name in PUBLIC_PROTOS)
            + " (definitions and comments)"
        ),
        "",
    ]
    for file in files:
        header = _locations(file).get((_SYNTAX,))
        if header is not None:
            for text in (*header.leading_detached_comments, header.leading_comments):
                lines += _paragraphs(_comment_lines(text))
    lines += [_INTRO.rstrip(), ""]
    for file in files:
        for index in range(len(file.service)):
            lines += _service_lines(file, index)
    lines += ["## Messages", "", *_glossary(), ""]
    for file in files:
        lines += _type_lines(page, file)
    headings = [_slug(line.lstrip("#")) for line in lines if line.startswith("#")]
    duplicated = sorted({h for h in headings if headings.count(h) > 1})
    if duplicated:
        raise ValueError(f"headings with the same anchor on grpc-api.md: {duplicated}")
    return "\n".join(lines).rstrip() + "\n"
