"""``lograft perf``: throughput and latency tests (``kafka-*-perf-test``, ``EndToEndLatency``).

* ``perf produce``: producer throughput and acknowledgement latency
  (``kafka-producer-perf-test``).
* ``perf consume``: consumer throughput from the start of a topic
  (``kafka-consumer-perf-test``).
* ``perf e2e``: end-to-end latency, from before ``send`` to the record coming out of
  ``poll`` (Kafka's ``EndToEndLatency`` tool).

With ``--json`` each prints one JSON object on stdout; progress bars go to stderr, and only
when it is a terminal.

This module holds the command line (:func:`register`) and picks the test (:func:`run`); each
test is its own module (:mod:`cluster.cli._perf_produce`, :mod:`cluster.cli._perf_consume`,
:mod:`cluster.cli._perf_e2e`), and the numbers they report come from
:mod:`cluster.cli._perf_stats`.
"""

from __future__ import annotations

import argparse
import logging
from typing import TypeAlias

from ._args import Streams, acks, config_pair, non_negative, positive
from ._perf_consume import run_consume
from ._perf_e2e import run_e2e
from ._perf_produce import PACING_INTERVAL_S, PROGRESS_EVERY, run_produce
from ._perf_stats import e2e_summary, percentile

__all__ = [
    "PACING_INTERVAL_S",
    "PROGRESS_EVERY",
    "e2e_summary",
    "percentile",
    "register",
    "run",
]

log = logging.getLogger(__name__)

DESCRIPTION = """\
Throughput and latency tests, as Kafka's kafka-producer-perf-test, kafka-consumer-perf-test
and EndToEndLatency tools. Each prints one summary line, or one JSON object with --json.
A progress bar goes to stderr when it is a terminal."""

EPILOG = """\
examples:
  lograft perf produce --topic perf --num-records 100000 --record-size 100 --json
  lograft perf consume --topic perf --messages 100000 --json
  lograft perf e2e --topic latency --num-records 1000 --acks all --json"""

PRODUCE_DESCRIPTION = """\
Send --num-records records of --record-size random bytes to --topic and report the
throughput and the latency from send() to acknowledgement: p50, p95, p99 and max.

Per-record mode (default) calls Producer.send for each record (latency per record);
--bulk hands all records to Producer.send_bulk at once (latency per request), and with
--throughput paces them in 10 ms chunks (latency per chunk). JSON fields: mode, records,
record_size, elapsed_s, records_per_sec, mb_per_sec, latency_ms_avg, latency_ms_p50,
latency_ms_p95, latency_ms_p99, latency_ms_max, latency_samples, target_records_per_sec,
acks."""

PRODUCE_EPILOG = """\
examples:
  lograft perf produce --topic perf --num-records 100000 --record-size 100
  lograft perf produce --topic perf --num-records 1000000 --record-size 100 --bulk --json
  lograft perf produce --topic perf --num-records 50000 --record-size 1000 --acks 1 \\
      --linger-ms 10 --compression-type lz4"""

CONSUME_DESCRIPTION = """\
Read --messages records from the start of every partition of --topic (no group) and report
the throughput. Exits 1 if fewer arrive before --timeout-ms passes without a record.
JSON fields: records, bytes, elapsed_s, records_per_sec, mb_per_sec."""

CONSUME_EPILOG = """\
examples:
  lograft perf consume --topic perf --messages 100000
  lograft perf consume --topic perf --messages 100000 --json \\
      --consumer-property max.poll.records=2000"""

E2E_DESCRIPTION = """\
End-to-end latency, as Kafka's EndToEndLatency tool: send --num-records records of
--record-size bytes to one partition, each with --acks, and consume them with a consumer
reading that partition; a record's latency is the time it comes out of poll() minus the
time just before its send(). By default records go one at a time: the next is sent once
the previous was consumed. With --throughput R they are sent at R records/s from another
thread while the consumer reads. The producer's linger.ms is 0 unless set.

The topic is created with one partition if it does not exist. JSON fields: test, mode,
records, record_size, acks, partition, elapsed_s, records_per_sec, latency_ms_avg,
latency_ms_p50, latency_ms_p95, latency_ms_p99, latency_ms_p999, latency_ms_max,
target_records_per_sec."""

E2E_EPILOG = """\
examples:
  lograft perf e2e --topic latency --num-records 1000 --json
  lograft perf e2e --topic latency --num-records 10000 --acks 1 --record-size 1000
  lograft perf e2e --topic latency --num-records 20000 --throughput 2000 --json"""


def _add_property(parser: argparse.ArgumentParser, flag: str, what: str) -> None:
    parser.add_argument(
        flag,
        type=config_pair,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"any {what} config (repeatable)",
    )


_RAW = argparse.RawDescriptionHelpFormatter
_Tests: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``perf produce|consume|e2e`` to the ``lograft`` parser."""
    perf = commands.add_parser(
        "perf",
        help="throughput and latency tests: produce, consume, e2e (JSON with --json)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_RAW,
    )
    perf.set_defaults(handler=run)
    perf_commands = perf.add_subparsers(dest="perf_command", required=True, metavar="TEST")
    _add_produce(perf_commands)
    _add_consume(perf_commands)
    _add_e2e(perf_commands)


def _add_produce(perf_commands: _Tests) -> None:
    produce = perf_commands.add_parser(
        "produce",
        help="producer throughput and acknowledgement latency",
        description=PRODUCE_DESCRIPTION,
        epilog=PRODUCE_EPILOG,
        formatter_class=_RAW,
    )
    produce.add_argument("--topic", required=True, help="an existing topic")
    produce.add_argument("--num-records", type=positive, required=True, help="records to send")
    produce.add_argument(
        "--record-size", type=non_negative, required=True, help="bytes per record value"
    )
    produce.add_argument("--acks", type=acks, default=None, help="all (default), 1 or 0")
    produce.add_argument(
        "--bulk", action="store_true", help="use Producer.send_bulk (latency per request)"
    )
    produce.add_argument(
        "--throughput",
        type=positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="with --bulk: pace the records at this rate, in 10 ms chunks, and report each "
        "chunk's latency from send_bulk to acknowledgement",
    )
    produce.add_argument("--batch-size", type=non_negative, default=None, help="batch.size")
    produce.add_argument("--linger-ms", type=non_negative, default=None, help="linger.ms")
    produce.add_argument(
        "--compression-type", default=None, help="none (default), gzip, snappy, lz4 or zstd"
    )
    produce.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(produce, "--producer-property", "producer")


def _add_consume(perf_commands: _Tests) -> None:
    consume = perf_commands.add_parser(
        "consume",
        help="consumer throughput",
        description=CONSUME_DESCRIPTION,
        epilog=CONSUME_EPILOG,
        formatter_class=_RAW,
    )
    consume.add_argument("--topic", required=True, help="an existing topic")
    consume.add_argument("--messages", type=positive, required=True, help="records to read")
    consume.add_argument(
        "--timeout-ms",
        type=positive,
        default=10000,
        help="give up after this long without a record (default %(default)s)",
    )
    consume.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(consume, "--consumer-property", "consumer")


def _add_e2e(perf_commands: _Tests) -> None:
    e2e = perf_commands.add_parser(
        "e2e",
        help="end-to-end latency: send, then consume, each record (EndToEndLatency)",
        description=E2E_DESCRIPTION,
        epilog=E2E_EPILOG,
        formatter_class=_RAW,
    )
    e2e.add_argument("--topic", required=True, help="the topic (created if missing)")
    e2e.add_argument("--num-records", type=positive, required=True, help="records to send")
    e2e.add_argument(
        "--record-size",
        type=non_negative,
        default=100,
        help="bytes per record value (default %(default)s)",
    )
    e2e.add_argument("--acks", type=acks, default=None, help="all (default), 1 or 0")
    e2e.add_argument(
        "--partition", type=non_negative, default=0, help="the partition (default %(default)s)"
    )
    e2e.add_argument(
        "--throughput",
        type=positive,
        default=None,
        metavar="RECORDS_PER_S",
        help="send at this rate instead of one record at a time",
    )
    e2e.add_argument(
        "--replication-factor",
        type=positive,
        default=1,
        help="for a topic created by the test (default %(default)s)",
    )
    e2e.add_argument(
        "--timeout-ms",
        type=positive,
        default=10000,
        help="fail when no record arrives for this long (default %(default)s)",
    )
    e2e.add_argument("--json", action="store_true", help="print one JSON object")
    _add_property(e2e, "--producer-property", "producer")
    _add_property(e2e, "--consumer-property", "consumer")


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Run one perf test."""
    if args.perf_command == "produce":
        return run_produce(args, streams.stdout, streams.stderr)
    if args.perf_command == "e2e":
        return run_e2e(args, streams.stdout, streams.stderr)
    return run_consume(args, streams.stdout, streams.stderr)
