"""``lograft consume``: print the records of a topic (``kafka-console-consumer``)."""

from __future__ import annotations

import argparse
import time

from cluster.client import Consumer, TopicPartition
from cluster.errors import InvalidConfigError

from ._args import Streams, client_properties, config_pair, non_negative, offset, positive

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``consume`` to the ``lograft`` parser."""
    consume = commands.add_parser("consume", help="print records, one value per line")
    consume.set_defaults(handler=run)
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=non_negative, default=None)
    consume.add_argument(
        "--offset", type=offset, default=None, help="earliest, latest or an offset"
    )
    consume.add_argument("--max-messages", type=positive, default=None)
    consume.add_argument("--group", default=None, help="consumer group (not available yet)")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t", metavar="SEP")
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
        help="any consumer config (repeatable)",
    )


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Print records of a topic until ``--max-messages`` or ``--timeout-ms``."""
    out = streams.stdout_bytes
    err = streams.stderr
    if args.group is not None:
        print(
            f"lograft: --group {args.group} accepted, but consumer groups arrive later: "
            "reading without a group, committing nothing",
            file=err,
        )
    if args.offset is not None and args.partition is None:
        raise InvalidConfigError("--offset needs --partition")
    if args.offset is not None and args.from_beginning:
        raise InvalidConfigError("--offset and --from-beginning exclude each other")
    config = client_properties(args, args.consumer_property)
    config.setdefault("auto.offset.reset", "earliest" if args.from_beginning else "latest")
    separator = args.key_separator.encode()
    count = 0
    with Consumer(config) as consumer:
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
        last_record = time.monotonic()
        try:
            while args.max_messages is None or count < args.max_messages:
                poll_ms = 500
                if args.timeout_ms is not None:
                    left_ms = args.timeout_ms - (time.monotonic() - last_record) * 1000.0
                    if left_ms <= 0:
                        break
                    poll_ms = max(1, min(poll_ms, int(left_ms)))
                records = consumer.poll(poll_ms)
                if records:
                    last_record = time.monotonic()
                for record in records:
                    value = record.value if record.value is not None else b"null"
                    if args.print_key:
                        key = record.key if record.key is not None else b"null"
                        out.write(key + separator + value + b"\n")
                    else:
                        out.write(value + b"\n")
                    count += 1
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                out.flush()
        except KeyboardInterrupt:
            pass
    print(f"Processed a total of {count} messages", file=err)
    return 0
