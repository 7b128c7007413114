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
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from cluster.client import DEFAULT_BOOTSTRAP_SERVERS
from cluster.errors import LograftError
from cluster.launcher import add_cluster_commands, run_cluster_command

from . import consume, perf, produce, topics
from ._args import BOOTSTRAP_ENV, Streams, default_bootstrap, positive

__all__ = ["BOOTSTRAP_ENV", "build_parser", "default_bootstrap", "main"]

_GLOBAL_OPTIONS_WITH_VALUE = (
    "--bootstrap",
    "--bootstrap-server",
    "--log-level",
    "--api-timeout-ms",
)


def _run_cluster(args: argparse.Namespace, streams: Streams) -> int:
    return run_cluster_command(args, streams.stdout, streams.stderr)


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
        type=positive,
        default=60000,
        help="how long a command may wait for the cluster (default %(default)s)",
    )
    parser.add_argument(
        "--log-level", default="ERROR", help="client log level on stderr (default ERROR)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (topics, produce, consume, perf):
        module.register(commands)
    add_cluster_commands(commands)
    commands.choices["cluster"].set_defaults(handler=_run_cluster)
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
    streams = Streams(sys.stdin.buffer, sys.stdout, sys.stdout.buffer, sys.stderr)
    handler: Callable[[argparse.Namespace, Streams], int] = args.handler
    try:
        return handler(args, streams)
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
