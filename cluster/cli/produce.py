"""``lograft produce``: send lines of stdin as records (``kafka-console-producer``)."""

from __future__ import annotations

import argparse
import logging
import os
import stat
import threading
from collections.abc import Sequence
from typing import BinaryIO

from cluster.client import Producer, RecordFuture
from lograft.protocol.errors import InvalidConfigError

from ._args import (
    Streams,
    acks,
    client_properties,
    config_pair,
    non_negative,
    progress_bar,
    separator,
)
from ._formats import FORMATS, JSON_SCHEMA, RecordFormat, parse_line

__all__ = ["ErrorTracker", "input_format", "producer_config", "register", "run"]

logger = logging.getLogger(__name__)

PROGRESS_DELAY_S = 1.0
"""A progress bar appears only once a produce has run this long (small inputs show none)."""

DESCRIPTION = f"""\
Send each line of stdin to TOPIC as one record, as Kafka's kafka-console-producer. The
command stops at the first record the cluster refuses and reports its error; the exit code
is 0 only when every record was acknowledged (as --acks asks).

Formats (--format):
  raw   the line is the value, no key (default)
  kv    KEY<SEP>VALUE: split at the first --key-separator (giving --key-separator alone
        means kv); --null-marker TEXT reads a key or value equal to TEXT as null
  json  one JSON object per line, the same objects `lograft consume --format json` prints

{JSON_SCHEMA}

Records without a key and partition are spread by the sticky partitioner; keyed records go
to the partition of their key (murmur2, as Kafka's clients). A json line's "partition" is
ignored unless --keep-partition is given, so that a topic can be copied to one with a
different number of partitions; with --keep-partition, a partition the topic lacks fails
after max.block.ms. When stderr is a terminal and
stdin is not, a progress bar shows after a second."""

EPILOG = """\
examples:
  seq 1000 | lograft produce orders --acks all
  printf 'user-1:hello\\nuser-2:bye\\n' | lograft produce orders --key-separator :
  lograft consume orders --from-beginning --format json --timeout-ms 2000 \\
      | lograft produce orders-copy --format json   # by key; --keep-partition: as read"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``produce`` to the ``lograft`` parser."""
    produce = commands.add_parser(
        "produce",
        help="send lines of stdin as records (raw, key/value or JSON lines)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    produce.set_defaults(handler=run)
    produce.add_argument("topic", help="the topic to write to")
    produce.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="raw (line = value), kv (key SEP value) or json (one object per line); "
        "default raw, or kv with --key-separator",
    )
    produce.add_argument(
        "--key-separator",
        type=separator,
        default=None,
        metavar="SEP",
        help="split each line at the first SEP into key and value (default a tab with --format kv)",
    )
    produce.add_argument(
        "--null-marker",
        default=None,
        metavar="TEXT",
        help="in raw and kv, a key or value equal to TEXT is sent as null (e.g. null)",
    )
    produce.add_argument(
        "--acks",
        type=acks,
        default=None,
        help="all (default): every in-sync replica, 1: the leader, 0: no acknowledgement",
    )
    produce.add_argument(
        "--compression-type",
        default=None,
        help="none (default), gzip, snappy, lz4 or zstd",
    )
    produce.add_argument(
        "--partition",
        type=non_negative,
        default=None,
        help="send every record to this partition (with --keep-partition, a json line's "
        "partition wins)",
    )
    produce.add_argument(
        "--keep-partition",
        action="store_true",
        help='with --format json: send each record to the "partition" of its line (by '
        "default that field is ignored and records are partitioned by key)",
    )
    produce.add_argument("--linger-ms", type=non_negative, default=None, help="producer linger.ms")
    produce.add_argument(
        "--batch-size", type=non_negative, default=None, help="producer batch.size in bytes"
    )
    produce.add_argument(
        "--producer-property",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any producer config, e.g. enable.idempotence=true (repeatable)",
    )


def producer_config(
    args: argparse.Namespace, extra: Sequence[tuple[str, str]]
) -> dict[str, object]:
    """The producer's configs: defaults, the config file, ``extra`` (``--producer-property``),
    then the flags given (``--acks``, ``--compression-type``, ``--linger-ms``, ...)."""
    config = client_properties(args, extra, kind="producer")
    config = {
        "max.block.ms": args.api_timeout_ms,
        "acks": "all",
        **config,
    }
    for flag, name in (
        ("acks", "acks"),
        ("compression_type", "compression.type"),
        ("linger_ms", "linger.ms"),
        ("batch_size", "batch.size"),
    ):
        value = getattr(args, flag, None)
        if value is not None:
            config[name] = value
    return config


def input_format(args: argparse.Namespace) -> RecordFormat:
    """``--format``, else kv when ``--key-separator`` is given."""
    chosen: RecordFormat | None = args.format
    if chosen is None:
        chosen = "kv" if args.key_separator is not None else "raw"
    elif args.key_separator is not None and chosen != "kv":
        raise InvalidConfigError(f"--key-separator means --format kv, not --format {chosen}")
    if getattr(args, "keep_partition", False) and chosen != "json":
        raise InvalidConfigError(
            f"--keep-partition needs --format json (only json lines carry a partition), "
            f"not --format {chosen}"
        )
    return chosen


class ErrorTracker:
    """Counts failed sends and keeps the first error (futures complete in the sender)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: BaseException | None = None
        self.failed = 0
        self.acknowledged = 0

    def __call__(self, future: RecordFuture) -> None:
        error = future.exception()
        with self.lock:
            if error is None:
                self.acknowledged += 1
                return
            self.failed += 1
            if self.first is None:
                self.first = error


def _input_size(stream: BinaryIO) -> int | None:
    """Bytes left in stdin when it is a regular file (for a bar with an end), else ``None``."""
    try:
        info = os.fstat(stream.fileno())
        if stat.S_ISREG(info.st_mode):
            return max(info.st_size - stream.tell(), 0)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _interactive(stream: BinaryIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, AttributeError):
        return False


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Send each line of stdin; stop at the first failed send and raise its error."""
    fmt = input_format(args)
    separator = (args.key_separator if args.key_separator is not None else "\t").encode()
    null_marker = args.null_marker.encode() if args.null_marker is not None else None
    tracker = ErrorTracker()
    sent = 0
    bar = progress_bar(
        streams.stderr,
        total=_input_size(streams.stdin),
        desc=f"produce {args.topic}",
        unit="B",
        unit_scale=True,
        delay_s=PROGRESS_DELAY_S,
        enabled=not _interactive(streams.stdin),
    )
    with bar, Producer(producer_config(args, args.producer_property)) as producer:
        for number, raw in enumerate(streams.stdin, start=1):
            bar.update(len(raw))
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            if fmt == "json" and not line.strip():
                continue  # blank lines between JSON objects carry no record
            record = parse_line(line, fmt, number, separator, null_marker)
            partition = args.partition
            if args.keep_partition and record.partition is not None:
                partition = record.partition
            producer.send(
                args.topic,
                record.value,
                key=record.key,
                partition=partition,
                timestamp_ms=record.timestamp_ms,
                headers=record.headers or None,
                callback=tracker,
            )
            sent += 1
            if tracker.first is not None:
                break
        producer.flush()
    if tracker.first is not None:
        raise tracker.first
    logger.info("produced records=%d topic=%s", sent, args.topic)
    return 0
