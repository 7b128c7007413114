"""The ``lograft`` command line: topics, console produce and consume, perf tools, the node.

Flags follow Kafka's tools (``kafka-topics``, ``kafka-console-producer``,
``kafka-console-consumer``, ``kafka-producer-perf-test``, ``kafka-consumer-perf-test``)::

    lograft topics create NAME --partitions N --replication-factor R [--config k=v ...]
    lograft topics list | describe [NAME] | delete NAME
    lograft produce TOPIC [--acks all|1|0] [--key-separator SEP] [--compression-type T]
    lograft consume TOPIC [--from-beginning] [--partition P] [--offset O] [--max-messages N]
                          [--print-key] [--timeout-ms T]
    lograft perf produce --topic T --num-records N --record-size B [--bulk] [--json]
    lograft perf consume --topic T --messages N [--json]
    lograft node --node-id 1 --data-dir DIR --listen 127.0.0.1:9092

``--bootstrap`` (before the command) names the cluster; its default comes from the
``LOGRAFT_BOOTSTRAP`` environment variable, else ``127.0.0.1:9092``. A typed error is
printed as one line, ``lograft: ERROR_NAME: message``, on stderr, with exit code 1; usage
errors exit with 2.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import BinaryIO, TextIO

from cluster.client import (
    DEFAULT_BOOTSTRAP_SERVERS,
    AdminClient,
    Consumer,
    NewTopic,
    Producer,
    RecordMetadata,
    TopicPartition,
)
from cluster.errors import InvalidConfigError, InvalidRequestError, LograftError
from cluster.launcher import add_cluster_commands, run_cluster_command

__all__ = ["build_parser", "main"]

logger = logging.getLogger(__name__)

BOOTSTRAP_ENV = "LOGRAFT_BOOTSTRAP"
_GLOBAL_OPTIONS_WITH_VALUE = (
    "--bootstrap",
    "--bootstrap-server",
    "--log-level",
    "--api-timeout-ms",
)


def default_bootstrap() -> str:
    """``LOGRAFT_BOOTSTRAP`` if set and not empty, else ``127.0.0.1:9092``."""
    return os.environ.get(BOOTSTRAP_ENV, "").strip() or DEFAULT_BOOTSTRAP_SERVERS


def _config_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _acks(text: str) -> str:
    if text.strip().lower() not in ("all", "-1", "0", "1"):
        raise argparse.ArgumentTypeError(f"acks must be all, -1, 0 or 1, got {text!r}")
    return text.strip().lower()


def _offset(text: str) -> str | int:
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    return _non_negative(text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lograft`` (``node`` is dispatched before parsing)."""
    parser = argparse.ArgumentParser(
        prog="lograft", description="lograft: a replicated commit log, Kafka-style."
    )
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help=f"brokers to contact (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP_SERVERS})",
    )
    parser.add_argument(
        "--api-timeout-ms",
        type=_positive,
        default=60000,
        help="how long a command may wait for the cluster (default %(default)s)",
    )
    parser.add_argument(
        "--log-level", default="ERROR", help="client log level on stderr (default ERROR)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topics = commands.add_parser("topics", help="create, list, describe and delete topics")
    topic_commands = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=_positive, default=1)
    create.add_argument("--replication-factor", type=_positive, default=1)
    create.add_argument(
        "--config",
        type=_config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="topic config, e.g. retention.ms=60000 (repeatable)",
    )
    topic_commands.add_parser("list", help="list topic names")
    describe = topic_commands.add_parser("describe", help="partitions, leaders, ISR, configs")
    describe.add_argument("name", nargs="?")
    delete = topic_commands.add_parser("delete", help="delete a topic")
    delete.add_argument("name")

    produce = commands.add_parser("produce", help="send lines of stdin as records")
    produce.add_argument("topic")
    produce.add_argument("--acks", type=_acks, default="all")
    produce.add_argument(
        "--key-separator",
        default=None,
        metavar="SEP",
        help="split each line at the first SEP into key and value",
    )
    produce.add_argument("--compression-type", default="none")
    produce.add_argument("--partition", type=_non_negative, default=None)
    produce.add_argument("--linger-ms", type=_non_negative, default=None)
    produce.add_argument("--batch-size", type=_non_negative, default=None)
    produce.add_argument(
        "--producer-property",
        type=_config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any producer config (repeatable)",
    )

    consume = commands.add_parser("consume", help="print records, one value per line")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=_non_negative, default=None)
    consume.add_argument(
        "--offset", type=_offset, default=None, help="earliest, latest or an offset"
    )
    consume.add_argument("--max-messages", type=_positive, default=None)
    consume.add_argument("--group", default=None, help="consumer group (not available yet)")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t", metavar="SEP")
    consume.add_argument(
        "--timeout-ms",
        type=_positive,
        default=None,
        help="exit when no record arrives for this long",
    )
    consume.add_argument(
        "--consumer-property",
        type=_config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any consumer config (repeatable)",
    )

    perf = commands.add_parser("perf", help="throughput and latency tests (JSON with --json)")
    perf_commands = perf.add_subparsers(dest="perf_command", required=True, metavar="TEST")
    perf_produce = perf_commands.add_parser("produce", help="producer throughput")
    perf_produce.add_argument("--topic", required=True)
    perf_produce.add_argument("--num-records", type=_positive, required=True)
    perf_produce.add_argument("--record-size", type=_non_negative, required=True)
    perf_produce.add_argument("--acks", type=_acks, default="all")
    perf_produce.add_argument(
        "--bulk", action="store_true", help="use Producer.send_bulk (latency per request)"
    )
    perf_produce.add_argument(
        "--throughput",
        type=_positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="with --bulk: pace the records at this rate, in 10 ms chunks, and report each "
        "chunk's latency from send_bulk to acknowledgement",
    )
    perf_produce.add_argument("--batch-size", type=_non_negative, default=None)
    perf_produce.add_argument("--linger-ms", type=_non_negative, default=None)
    perf_produce.add_argument("--compression-type", default="none")
    perf_produce.add_argument("--json", action="store_true", help="print one JSON object")
    perf_produce.add_argument(
        "--producer-property",
        type=_config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
    )
    perf_consume = perf_commands.add_parser("consume", help="consumer throughput")
    perf_consume.add_argument("--topic", required=True)
    perf_consume.add_argument("--messages", type=_positive, required=True)
    perf_consume.add_argument("--timeout-ms", type=_positive, default=10000)
    perf_consume.add_argument("--json", action="store_true", help="print one JSON object")
    perf_consume.add_argument(
        "--consumer-property",
        type=_config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
    )

    add_cluster_commands(commands)
    commands.add_parser(
        "node",
        help="run a node: arguments go to `python -m cluster.node` (see `lograft node -h`)",
        add_help=False,
    )
    return parser


def _split_node_command(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """``(global args, node args)`` when the command is ``node``, else ``None``."""
    index = 0
    while index < len(argv):
        token = argv[index]
        if token in _GLOBAL_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if (
            token.startswith("--")
            and "=" in token
            and token.split("=", 1)[0] in (_GLOBAL_OPTIONS_WITH_VALUE)
        ):
            index += 1
            continue
        if token == "node":
            return list(argv[:index]), list(argv[index + 1 :])
        return None
    return None


# ---- commands ------------------------------------------------------------------------------


def _admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": "lograft-cli",
            "default.api.timeout.ms": args.api_timeout_ms,
            "request.timeout.ms": min(30000, args.api_timeout_ms),
        }
    )


def _cmd_topics(args: argparse.Namespace, out: TextIO) -> int:
    with _admin(args) as admin:
        action = args.topics_command
        if action == "create":
            new = NewTopic(args.name, args.partitions, args.replication_factor, dict(args.config))
            admin.create_topics([new])[args.name].result()
            print(f"Created topic {args.name}.", file=out)
        elif action == "list":
            for name in admin.list_topics():
                print(name, file=out)
        elif action == "describe":
            for topic in admin.describe_topics([args.name] if args.name else None):
                replication = len(topic.partitions[0].replicas) if topic.partitions else 0
                configs = ",".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
                print(
                    f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
                    f"ReplicationFactor: {replication}\tConfigs: {configs}",
                    file=out,
                )
                for p in topic.partitions:
                    print(
                        f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: "
                        f"{p.leader if p.leader >= 0 else 'none'}\t"
                        f"Replicas: {','.join(map(str, p.replicas))}\t"
                        f"Isr: {','.join(map(str, p.isr))}",
                        file=out,
                    )
        elif action == "delete":
            admin.delete_topics([args.name])[args.name].result()
            print(f"Deleted topic {args.name}.", file=out)
    return 0


def _producer_config(
    args: argparse.Namespace, extra: Sequence[tuple[str, str]]
) -> dict[str, object]:
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


class _ErrorTracker:
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


def _cmd_produce(args: argparse.Namespace, stdin: BinaryIO, err: TextIO) -> int:
    separator = args.key_separator.encode() if args.key_separator is not None else None
    tracker = _ErrorTracker()
    sent = 0
    with Producer(_producer_config(args, args.producer_property)) as producer:
        for number, raw in enumerate(stdin, start=1):
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


def _consumer_config(
    args: argparse.Namespace, extra: Sequence[tuple[str, str]]
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": "lograft-cli",
        "request.timeout.ms": min(30000, args.api_timeout_ms),
    }
    config.update(dict(extra))
    return config


def _cmd_consume(args: argparse.Namespace, out: BinaryIO, err: TextIO) -> int:
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
    config = _consumer_config(args, args.consumer_property)
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


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return sorted_values[index]


PACING_INTERVAL_S = 0.01


def _record_latency(latencies_ms: list[float], started: float, _future: object) -> None:
    latencies_ms.append((time.perf_counter() - started) * 1000.0)


def _paced_bulk(
    producer: Producer, topic: str, payload: bytes, args: argparse.Namespace
) -> list[float]:
    """Send ``num_records`` at ``throughput`` records/s, one ``send_bulk`` per 10 ms.

    Returns each chunk's latency in ms, from its ``send_bulk`` call to its acknowledgement,
    as a user of the bulk path sees it (queueing in the producer included).
    """
    per_chunk = max(1, round(args.throughput * PACING_INTERVAL_S))
    latencies_ms: list[float] = []
    futures = []
    begin = time.perf_counter()
    sent = 0
    chunk_index = 0
    while sent < args.num_records:
        due = begin + chunk_index * PACING_INTERVAL_S
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)  # pacing the load, not waiting for a result
        count = min(per_chunk, args.num_records - sent)
        started = time.perf_counter()
        future = producer.send_bulk(topic, [payload] * count)
        future.add_done_callback(functools.partial(_record_latency, latencies_ms, started))
        futures.append(future)
        sent += count
        chunk_index += 1
    for future in futures:
        future.result()
    return latencies_ms


def _cmd_perf_produce(args: argparse.Namespace, out: TextIO) -> int:
    config = _producer_config(args, args.producer_property)
    payload = random.Random(42).randbytes(args.record_size)
    latencies_ms: list[float] = []
    with Producer(config) as producer:
        producer.partitions_for(args.topic)  # metadata first, outside the timing
        if args.bulk and args.throughput:
            start = time.perf_counter()
            latencies_ms = _paced_bulk(producer, args.topic, payload, args)
            elapsed = time.perf_counter() - start
        elif args.bulk:
            values = [payload] * args.num_records
            start = time.perf_counter()
            result = producer.send_bulk(args.topic, values).result()
            elapsed = time.perf_counter() - start
            latencies_ms = [b.latency_ms for b in result.batches]
        else:
            tracker = _ErrorTracker()
            perf_counter = time.perf_counter
            record_latency = latencies_ms.append

            def on_done(future: Future[RecordMetadata], sent: float) -> None:
                record_latency((perf_counter() - sent) * 1000.0)
                tracker(future)

            start = perf_counter()
            send = producer.send
            topic = args.topic
            for _ in range(args.num_records):
                sent_at = perf_counter()
                send(topic, payload).add_done_callback(
                    lambda f, s=sent_at: on_done(f, s)  # type: ignore[misc]
                )
            producer.flush()
            elapsed = perf_counter() - start
            if tracker.first is not None:
                raise tracker.first
    latencies_ms.sort()
    records = args.num_records
    result_json: dict[str, object] = {
        "mode": "bulk" if args.bulk else "per-record",
        "records": records,
        "record_size": args.record_size,
        "elapsed_s": round(elapsed, 4),
        "records_per_sec": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_sec": round(records * args.record_size / elapsed / (1024 * 1024), 3)
        if elapsed > 0
        else 0.0,
        "latency_ms_avg": round(sum(latencies_ms) / len(latencies_ms), 3) if latencies_ms else 0.0,
        "latency_ms_p50": round(_percentile(latencies_ms, 0.50), 3),
        "latency_ms_p95": round(_percentile(latencies_ms, 0.95), 3),
        "latency_ms_p99": round(_percentile(latencies_ms, 0.99), 3),
        "latency_ms_max": round(latencies_ms[-1], 3) if latencies_ms else 0.0,
        "latency_samples": (
            "chunk" if args.bulk and args.throughput else "request" if args.bulk else "record"
        ),
        "target_records_per_sec": args.throughput,
        "acks": args.acks,
    }
    if args.json:
        print(json.dumps(result_json), file=out)
    else:
        print(
            f"{records} records sent, {result_json['records_per_sec']} records/sec "
            f"({result_json['mb_per_sec']} MB/sec), {result_json['latency_ms_avg']} ms avg "
            f"latency, {result_json['latency_ms_max']} ms max latency, "
            f"{result_json['latency_ms_p50']} ms 50th, {result_json['latency_ms_p95']} ms 95th, "
            f"{result_json['latency_ms_p99']} ms 99th ({result_json['latency_samples']} latency).",
            file=out,
        )
    return 0


def _cmd_perf_consume(args: argparse.Namespace, out: TextIO) -> int:
    config = _consumer_config(args, args.consumer_property)
    config.setdefault("auto.offset.reset", "earliest")
    records = 0
    total_bytes = 0
    with Consumer(config) as consumer:
        partitions = [
            TopicPartition(args.topic, p) for p in consumer.partitions_for_topic(args.topic)
        ]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        for tp in partitions:
            consumer.position(tp)  # offsets first, outside the timing
        start = time.perf_counter()
        last_record = start
        end = start
        while records < args.messages:
            batch = consumer.poll(500)
            now = time.perf_counter()
            if batch:
                last_record = end = now
                records += len(batch)
                total_bytes += sum(len(r.value) for r in batch if r.value is not None)
            elif (now - last_record) * 1000.0 >= args.timeout_ms:
                break
    elapsed = end - start
    result_json: dict[str, object] = {
        "records": records,
        "bytes": total_bytes,
        "elapsed_s": round(elapsed, 4),
        "records_per_sec": round(records / elapsed, 1) if elapsed > 0 else 0.0,
        "mb_per_sec": round(total_bytes / elapsed / (1024 * 1024), 3) if elapsed > 0 else 0.0,
    }
    if args.json:
        print(json.dumps(result_json), file=out)
    else:
        print(
            f"{records} records consumed in {result_json['elapsed_s']} s, "
            f"{result_json['records_per_sec']} records/sec ({result_json['mb_per_sec']} MB/sec)",
            file=out,
        )
    if records < args.messages:
        print(
            f"lograft: only {records} of {args.messages} records arrived within "
            f"--timeout-ms {args.timeout_ms}",
            file=sys.stderr,
        )
        return 1
    return 0


def _run_node(node_args: list[str]) -> int:
    # Imported lazily (and by name, so that client-only installs and type checks of the
    # client do not pull in the broker).
    node_main: Callable[[list[str]], int] = importlib.import_module("cluster.node").main
    return node_main(node_args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lograft``; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    node_split = _split_node_command(arguments)
    if node_split is not None:
        return _run_node(node_split[1])
    parser = build_parser()
    args = parser.parse_args(arguments)
    if args.bootstrap is None:
        args.bootstrap = default_bootstrap()
    logging.basicConfig(
        level=str(args.log_level).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    handlers: dict[str, Callable[[], int]] = {
        "topics": lambda: _cmd_topics(args, sys.stdout),
        "cluster": lambda: run_cluster_command(args, sys.stdout, sys.stderr),
        "produce": lambda: _cmd_produce(args, sys.stdin.buffer, sys.stderr),
        "consume": lambda: _cmd_consume(args, sys.stdout.buffer, sys.stderr),
        "perf": lambda: (
            _cmd_perf_produce(args, sys.stdout)
            if args.perf_command == "produce"
            else _cmd_perf_consume(args, sys.stdout)
        ),
    }
    try:
        return handlers[args.command]()
    except LograftError as exc:
        print(f"lograft: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`lograft consume ... | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
