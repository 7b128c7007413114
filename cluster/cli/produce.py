"""``lograft produce``: send lines of stdin as records (``kafka-console-producer``)."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from cluster.client import Producer, RecordMetadata
from cluster.errors import InvalidRequestError

from ._args import Streams, acks, config_pair, non_negative

__all__ = ["ErrorTracker", "producer_config", "register"]

logger = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``produce`` to the ``lograft`` parser."""
    produce = commands.add_parser("produce", help="send lines of stdin as records")
    produce.set_defaults(handler=run)
    produce.add_argument("topic")
    produce.add_argument("--acks", type=acks, default="all")
    produce.add_argument(
        "--key-separator",
        default=None,
        metavar="SEP",
        help="split each line at the first SEP into key and value",
    )
    produce.add_argument("--compression-type", default="none")
    produce.add_argument("--partition", type=non_negative, default=None)
    produce.add_argument("--linger-ms", type=non_negative, default=None)
    produce.add_argument("--batch-size", type=non_negative, default=None)
    produce.add_argument(
        "--producer-property",
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any producer config (repeatable)",
    )


def producer_config(
    args: argparse.Namespace, extra: Sequence[tuple[str, str]]
) -> dict[str, object]:
    """The producer's configs from the command's flags, then ``extra`` on top."""
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": "lograft-cli",
        "max.block.ms": args.api_timeout_ms,
        "acks": args.acks,
        "compression.type": args.compression_type,
    }
    if args.linger_ms is not None:
        config["linger.ms"] = args.linger_ms
    if args.batch_size is not None:
        config["batch.size"] = args.batch_size
    config.update(dict(extra))
    return config


class ErrorTracker:
    """Counts failed sends and keeps the first error (futures complete in the sender)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: BaseException | None = None
        self.failed = 0

    def __call__(self, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        if error is not None:
            with self.lock:
                self.failed += 1
                if self.first is None:
                    self.first = error


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Send each line of stdin; stop at the first failed send and raise its error."""
    separator = args.key_separator.encode() if args.key_separator is not None else None
    tracker = ErrorTracker()
    sent = 0
    with Producer(producer_config(args, args.producer_property)) as producer:
        for number, raw in enumerate(streams.stdin, start=1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if line.endswith(b"\r"):
                line = line[:-1]
            key: bytes | None = None
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    raise InvalidRequestError(f"no key separator on line {number}")
            else:
                value = line
            producer.send(args.topic, value, key=key, partition=args.partition).add_done_callback(
                tracker
            )
            sent += 1
            if tracker.first is not None:
                break
        producer.flush()
    if tracker.first is not None:
        raise tracker.first
    logger.info("produced records=%d topic=%s", sent, args.topic)
    return 0
