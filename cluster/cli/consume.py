"""``lograft consume``: print the records of a topic (``kafka-console-consumer``)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from cluster.client import Consumer, ConsumerRecord, TopicPartition
from lograft.protocol.errors import InvalidConfigError, LeaderNotAvailableError

from ._args import (
    Streams,
    client_properties,
    config_pair,
    non_negative,
    offset,
    positive,
    separator,
)
from ._formats import FORMATS, JSON_SCHEMA, RecordFormat, format_record

__all__ = ["register", "run"]

log = logging.getLogger(__name__)

POLL_MS = 500

STALLED_WARNING_MS = 5000
"""A partition whose leader has not answered for this long is named on stderr, once."""
_STALLED_CHECK_S = 1.0

DESCRIPTION = f"""\
Print the records of TOPIC on stdout, one per line, as Kafka's kafka-console-consumer.

Without --group the command reads every partition (or --partition P) from the end, or from
the start with --from-beginning, and commits nothing. With --group G it joins consumer
group G (Kafka's subscribe): the group's members share the partitions, reading starts at
the group's committed offsets (--from-beginning: from the start where the group has none),
offsets are committed as records are printed, and on exit (--max-messages, --timeout-ms,
Ctrl-C, or the reader closing the pipe) exactly what was printed is committed, so the next
run in the group continues there. "Printed" means written to stdout: a line still in a pipe
that the reader never reads counts as printed. With enable.auto.commit=false nothing is
committed. A group.id from the config file or --consumer-property works the same as --group
(and likewise excludes --partition and --offset).

Formats (--format):
  raw   the value (default)
  kv    KEY<SEP>VALUE (--key-separator, default a tab); --print-key is the same
  json  one JSON object per record, lossless for binary data

{JSON_SCHEMA}

A null key or value prints as null in raw and kv. "Processed a total of N messages" goes to
stderr at the end.

A partition without a leader (or whose leader does not answer) holds up no other: the
others are printed while it is retried. When it stays so for more than
{STALLED_WARNING_MS // 1000} s, one WARNING line on stderr names it (unless --log-level
CRITICAL), e.g. "partition orders-1 has no leader; waiting for one (other partitions are
read)"."""

EPILOG = """\
examples:
  lograft consume orders --from-beginning --max-messages 10 --isolation-level read_committed
  lograft consume orders --group billing --format json --timeout-ms 5000 | jq .value
  lograft consume orders --partition 2 --offset 100 --format kv --key-separator ' => '"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``consume`` to the ``lograft`` parser."""
    consume = commands.add_parser(
        "consume",
        help="print records of a topic (raw, key/value or JSON lines), optionally in a group",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    consume.set_defaults(handler=run)
    consume.add_argument("topic", help="the topic to read")
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (with --group: where the group has no committed offset)",
    )
    consume.add_argument(
        "--partition", type=non_negative, default=None, help="read only this partition"
    )
    consume.add_argument(
        "--offset",
        type=offset,
        default=None,
        help="with --partition: earliest, latest or an offset to start at",
    )
    consume.add_argument(
        "--max-messages", type=positive, default=None, help="exit after printing this many"
    )
    consume.add_argument(
        "--group",
        default=None,
        metavar="GROUP",
        help="consume as a member of this consumer group, committing what is printed",
    )
    consume.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="raw (value), kv (key SEP value) or json (one object per record); default raw",
    )
    consume.add_argument(
        "--print-key", action="store_true", help="same as --format kv (Kafka's print.key)"
    )
    consume.add_argument(
        "--key-separator",
        type=separator,
        default=None,
        metavar="SEP",
        help="between key and value in kv (default a tab); implies --format kv",
    )
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default=None,
        help="read_committed: only committed transactions' records (Kafka's isolation.level)",
    )
    consume.add_argument(
        "--timeout-ms",
        type=positive,
        default=None,
        help="exit when no record arrives for this long",
    )
    consume.add_argument(
        "--consumer-property",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any consumer config, e.g. max.poll.records=100 (repeatable)",
    )


def output_format(args: argparse.Namespace) -> RecordFormat:
    """``--format``, else kv when ``--print-key`` or ``--key-separator`` asks for keys."""
    chosen: RecordFormat | None = args.format
    wants_keys = args.print_key or args.key_separator is not None
    if chosen is None:
        return "kv" if wants_keys else "raw"
    if wants_keys and chosen != "kv":
        raise InvalidConfigError(
            f"--print-key and --key-separator mean --format kv, not --format {chosen}"
        )
    return chosen


def consumer_config(args: argparse.Namespace) -> dict[str, object]:
    """The consumer's configs: file and ``--consumer-property``, then the flags."""
    config = client_properties(args, args.consumer_property, kind="consumer")
    if args.group is not None:
        config["group.id"] = args.group
    if args.from_beginning:
        config["auto.offset.reset"] = "earliest"
    if args.isolation_level is not None:
        config["isolation.level"] = args.isolation_level
    return config


def _check_flags(args: argparse.Namespace, group: object) -> None:
    """Flags that exclude each other; ``group`` is the effective ``group.id``, which may come
    from the config file or ``--consumer-property`` as well as ``--group``."""
    source = "--group" if args.group is not None else f"group.id={group}"
    if group is not None and args.partition is not None:
        raise InvalidConfigError(
            f"{source} and --partition exclude each other: a group assigns the partitions "
            "(drop the group to read one partition without committing)"
        )
    if group is not None and args.offset is not None:
        raise InvalidConfigError(
            f"{source} and --offset exclude each other: a group starts at its committed "
            "offsets (reset them with the groups tool, or drop the group)"
        )
    if args.offset is not None and args.partition is None:
        raise InvalidConfigError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise InvalidConfigError("--offset and --from-beginning exclude each other")


def _rewind_unprinted(consumer: Consumer, unprinted: Sequence[ConsumerRecord]) -> None:
    """Move positions back to the first record ``poll`` returned but nothing printed, so that
    commits (and the one on close) cover exactly what was printed."""
    owned = consumer.assignment()
    first: dict[TopicPartition, int] = {}
    for record in unprinted:
        tp = TopicPartition(record.topic, record.partition)
        first.setdefault(tp, record.offset)
    for tp, first_offset in first.items():
        if tp in owned:
            consumer.seek(tp, first_offset)


def _stop_on_sigint(stop: threading.Event) -> signal.Handlers | Callable[..., object] | int | None:
    """Make Ctrl-C set ``stop`` instead of raising inside the client; returns the handler to
    restore, or ``None`` off the main thread (where signal handlers cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    # None: a handler not set from Python, which cannot be put back; the default will do.
    return signal.SIG_DFL if previous is None else previous


class _StalledNotices:
    """Names each partition whose leader has not answered for ``STALLED_WARNING_MS``: one
    WARNING line per partition, again only after it was read and then stalled anew.

    ``check`` asks the consumer at most once a second, and not before ``STALLED_WARNING_MS``
    since ``start`` (no partition can have stalled for that long before).
    """

    def __init__(self, start: float) -> None:
        self._named: set[TopicPartition] = set()
        self._next_check = start + STALLED_WARNING_MS / 1000.0

    def check(self, consumer: Consumer, now: float) -> None:
        """Log the partitions of ``consumer`` that stalled long enough and were not named
        (``now``: ``time.monotonic()``)."""
        if now < self._next_check:
            return
        self._next_check = now + _STALLED_CHECK_S
        if self._named:
            # Forget partitions read again since, so that a new stall is named again.
            self._named &= set(consumer._stalled_partitions(0))
        stalled = consumer._stalled_partitions(STALLED_WARNING_MS)
        if not stalled.keys() - self._named:
            return
        others = len(consumer.assignment()) > len(stalled)
        read = " (other partitions are read)" if others else ""
        for tp, reason in sorted(stalled.items()):
            if tp in self._named:
                continue
            self._named.add(tp)
            if reason.startswith(LeaderNotAvailableError.error_name):
                log.warning(
                    "partition %s-%d has no leader; waiting for one%s", tp.topic, tp.partition, read
                )
            else:
                log.warning(
                    "partition %s-%d cannot be read from its leader (%s); retrying%s",
                    tp.topic,
                    tp.partition,
                    reason,
                    read,
                )


def _show_warnings(args: argparse.Namespace) -> int:
    """Let this module's WARNING lines through at the default --log-level (ERROR): a user
    is told what the command waits for. Returns the level to restore."""
    previous = log.level
    if str(getattr(args, "log_level", "ERROR")).upper() != "CRITICAL":
        log.setLevel(min(logging.WARNING, log.getEffectiveLevel()))
    return previous


def _start_reading(consumer: Consumer, args: argparse.Namespace, group: object) -> None:
    """Subscribe with a group; else assign the partition (or all) and seek to ``--offset``."""
    if group is not None:
        consumer.partitions_for_topic(args.topic)  # an unknown topic fails here, typed
        consumer.subscribe([args.topic])
    else:
        if args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
            if args.partition not in consumer.partitions_for_topic(args.topic):
                raise InvalidConfigError(f"topic {args.topic} has no partition {args.partition}")
        else:
            partitions = [
                TopicPartition(args.topic, p) for p in consumer.partitions_for_topic(args.topic)
            ]
        consumer.assign(partitions)
        if args.offset == "earliest" or args.from_beginning:
            consumer.seek_to_beginning(*partitions)
        elif args.offset == "latest":
            consumer.seek_to_end(*partitions)
        elif isinstance(args.offset, int):
            consumer.seek(partitions[0], args.offset)


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Print records of a topic until ``--max-messages``, ``--timeout-ms`` or Ctrl-C."""
    out = streams.stdout_bytes
    err = streams.stderr
    config = consumer_config(args)
    group = config.get("group.id")
    _check_flags(args, group)
    fmt = output_format(args)
    separator = (args.key_separator if args.key_separator is not None else "\t").encode()
    count = 0
    with Consumer(config) as consumer:
        _start_reading(consumer, args, group)
        last_record = time.monotonic()
        records: list[ConsumerRecord] = []
        # Records of `records` that reached the reader: counted only once the flush after
        # them succeeded, so a broken pipe or Ctrl-C never commits what was not printed.
        printed_in_batch = 0
        stop = threading.Event()
        previous_handler = _stop_on_sigint(stop)
        stalled = _StalledNotices(time.monotonic())
        previous_level = _show_warnings(args)
        try:
            while args.max_messages is None or count < args.max_messages:
                if stop.is_set():
                    break
                poll_ms = POLL_MS
                if args.timeout_ms is not None:
                    left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000.0
                    if left_ms <= 0:
                        break
                    poll_ms = max(1, min(poll_ms, int(left_ms)))
                records, printed_in_batch = [], 0
                records = consumer.poll(poll_ms)
                stalled.check(consumer, time.monotonic())
                if records:
                    last_record = time.monotonic()
                written = 0
                for record in records:
                    if stop.is_set():
                        break
                    out.write(format_record(record, fmt, separator))
                    written += 1
                    if args.max_messages is not None and count + written >= args.max_messages:
                        break
                out.flush()
                printed_in_batch = written
                count += written
        except KeyboardInterrupt:
            # Only off the main thread (no handler installed); the main thread's Ctrl-C
            # sets `stop` instead, so that it never interrupts the client mid-poll.
            pass
        except BrokenPipeError:
            if group is not None:
                _rewind_unprinted(consumer, records[printed_in_batch:])
            raise
        finally:
            log.setLevel(previous_level)
            if previous_handler is not None:
                signal.signal(signal.SIGINT, previous_handler)
        if group is not None:
            _rewind_unprinted(consumer, records[printed_in_batch:])
            if consumer.config["enable.auto.commit"]:
                # Committed here rather than only inside close() so that a failure is
                # reported, not logged.
                consumer.commit()
    print(f"Processed a total of {count} messages", file=err)
    return 0
