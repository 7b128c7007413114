"""The ``lograft`` command line: topics, console produce and consume, perf tools, the node.

Flags follow Kafka's tools (``kafka-topics``, ``kafka-console-producer``,
``kafka-console-consumer``, ``kafka-consumer-groups``, ``kafka-producer-perf-test``,
``kafka-consumer-perf-test``, ``EndToEndLatency``)::

    lograft topics create NAME --partitions N --replication-factor R [--config k=v ...]
    lograft topics list | describe [NAME] | delete NAME
    lograft produce TOPIC [--format raw|kv|json] [--acks all|1|0] [--key-separator SEP]
    lograft consume TOPIC [--format raw|kv|json] [--group G] [--from-beginning]
                          [--partition P] [--offset O] [--max-messages N] [--timeout-ms T]
                          [--isolation-level read_committed|read_uncommitted]
    lograft groups list [--state] | describe GROUP [--members|--state|--json] | delete GROUP
    lograft groups delete-offsets --group G --topic T[:P,...]
    lograft groups reset-offsets --group G (--topic T[:P,...] | --all-topics)
                   (--to-earliest | --to-latest | --to-offset N | --shift-by N | ...) [--execute]
    lograft transactions list [--state S] | describe --transactional-id ID
    lograft transactions force-terminate --transactional-id ID
    lograft perf produce --topic T --num-records N --record-size B [--bulk] [--json]
    lograft perf consume --topic T --messages N [--json]
    lograft perf e2e --topic T --num-records N [--acks all|1|0] [--json]
    lograft rest-proxy [--listen HOST:PORT] [--max-body-bytes N]
    lograft cluster up | down | status [--json] | logs N | kill N | restart N
    lograft node --node-id 1 --data-dir DIR --listen 127.0.0.1:9092

Global options come before the command: ``--bootstrap`` names the cluster, ``--config FILE``
(alias ``--command-config``) a file of client configs; see :mod:`cluster.cli._args` for the
order in which flags, ``--*-property``, the file, ``LOGRAFT_BOOTSTRAP`` and the defaults
apply. A typed error is printed as one line, ``lograft: ERROR_NAME: message``, on stderr,
with exit code 1; usage errors exit with 2. When no bootstrap server answers, that line names
every address tried and why, and where the addresses came from.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

from cluster.client import DEFAULT_BOOTSTRAP_SERVERS, NoBrokersAvailableError
from cluster.launcher import add_cluster_commands, run_cluster_command
from lograft.protocol.errors import LograftError

from . import configs, consume, groups, perf, produce, rest_proxy, topics, transactions
from ._args import (
    BOOTSTRAP_ENV,
    CONFIG_ENV,
    Streams,
    bootstrap_origin,
    default_bootstrap,
    positive,
    resolve_bootstrap,
)

__all__ = ["BOOTSTRAP_ENV", "CONFIG_ENV", "build_parser", "default_bootstrap", "main"]

_GLOBAL_OPTIONS_WITH_VALUE = (
    "--bootstrap",
    "--bootstrap-server",
    "--config",
    "--command-config",
    "--log-level",
    "--api-timeout-ms",
)

_COMMANDS_WITHOUT_CLIENT_CONFIG = frozenset({"cluster", "node"})
"""Commands that run or inspect local node processes: no client config file is read, so a
bad $LOGRAFT_CONFIG cannot stop `lograft cluster down`."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

DESCRIPTION = """\
lograft: a replicated, partitioned commit log built the way Apache Kafka works in KRaft
mode. These commands mirror Kafka's tools: kafka-topics, kafka-console-producer,
kafka-console-consumer, the perf tests, plus a local cluster launcher.

Where the cluster is: --bootstrap HOST:PORT[,...], else bootstrap.servers in the config
file, else $LOGRAFT_BOOTSTRAP, else the nodes of the local cluster in ./data/cluster (its
cluster.json, written by `lograft cluster up`), else 127.0.0.1:9092,127.0.0.1:9093,
127.0.0.1:9094 (where the docker-compose cluster publishes its nodes). Any address that
answers will do; when none does, a command fails within a few seconds
(socket.connection.setup.timeout.ms) with one line naming each address and why.
Client configs (Kafka's names, e.g. request.timeout.ms, max.poll.records, acks) come from,
strongest first: the command's flags, its --producer-property/--consumer-property, the
config file (--config FILE, else $LOGRAFT_CONFIG), then the defaults. The file holds
name=value lines (Java properties: # and ! start comments)."""

EPILOG = """\
examples:
  lograft cluster up                                   # three local nodes on :9092-9094
  export LOGRAFT_BOOTSTRAP=10.0.0.5:9092,10.0.0.6:9092   # another cluster than the default
  lograft topics create orders --partitions 3 --replication-factor 3
  seq 10 | lograft produce orders
  lograft consume orders --group billing --from-beginning --max-messages 10
  lograft --config client.properties perf e2e --topic latency --num-records 1000 --json

Run `lograft COMMAND --help` for a command's options and examples.
Errors print one line, `lograft: ERROR_NAME: message`, and exit 1; usage errors exit 2."""


class _HelpParser(argparse.ArgumentParser):
    """Keeps the line breaks of descriptions and epilogs (examples stay one per line)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)


def _run_cluster(args: argparse.Namespace, streams: Streams) -> int:
    return run_cluster_command(args, streams.stdout, streams.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``lograft`` (``node`` is dispatched before parsing)."""
    parser = _HelpParser(prog="lograft", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help="brokers to contact, any that answers (default: bootstrap.servers of the config "
        f"file, else ${BOOTSTRAP_ENV}, else the nodes of ./data/cluster/cluster.json, else "
        f"{DEFAULT_BOOTSTRAP_SERVERS})",
    )
    parser.add_argument(
        "--config",
        "--command-config",
        dest="command_config",
        default=None,
        metavar="FILE",
        help=f"client configs, name=value per line (default: ${CONFIG_ENV} if set)",
    )
    parser.add_argument(
        "--api-timeout-ms",
        type=positive,
        default=60000,
        help="how long a command may wait for the cluster (default %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="ERROR",
        help="client log level on stderr: " + ", ".join(LOG_LEVELS) + " (default ERROR)",
    )
    # Every command's parser (and theirs) is a _HelpParser, typed as the plain parser it is.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="command",
            required=True,
            metavar="COMMAND",
            parser_class=_HelpParser,
            title="commands",
            description="(`lograft COMMAND --help` for details)",
        ),
    )
    for module in (topics, configs, produce, consume, groups, transactions, perf, rest_proxy):
        module.register(commands)
    add_cluster_commands(commands)
    commands.choices["cluster"].set_defaults(handler=_run_cluster)
    commands.add_parser(
        "node",
        help="run a node: arguments go to `python -m cluster.node` (see `lograft node -h`)",
        add_help=False,
    )
    commands.add_parser(
        "chaos",
        help="fault-injection runs that check no acknowledged write is lost "
        "(`python -m chaos`; see `lograft chaos -h`)",
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
        if token in _PASS_THROUGH:
            return list(argv[: index + 1]), list(argv[index + 1 :])
        return None
    return None


_PASS_THROUGH = {"node": "cluster.node", "chaos": "chaos.__main__"}
"""Commands whose arguments go, unparsed, to the ``main`` of their module."""


def _run_node(node_args: list[str], command: str = "node") -> int:
    # Imported lazily (and by name, so that client-only installs and type checks of the
    # client do not pull in the broker or the chaos tools).
    module_main: Callable[[list[str]], int] = importlib.import_module(_PASS_THROUGH[command]).main
    return module_main(node_args)


def _bootstrap_hint(args: argparse.Namespace) -> str:
    """Where the addresses no broker answered at came from (nothing for --bootstrap)."""
    if args.command in _COMMANDS_WITHOUT_CLIENT_CONFIG:
        return ""
    origin = bootstrap_origin(args)
    if origin == "--bootstrap":
        return ""
    if origin == "the default":
        return (
            " (the default bootstrap: none set by --bootstrap, a config file, "
            f"${BOOTSTRAP_ENV} or ./data/cluster/cluster.json)"
        )
    return f" (bootstrap from {origin})"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``lograft``; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    node_split = _split_node_command(arguments)
    if node_split is not None:
        command = node_split[0][-1]
        if command == "node":
            return _run_node(node_split[1])
        return _run_node(node_split[1], command)
    parser = build_parser()
    args = parser.parse_args(arguments)
    logging.basicConfig(
        level=str(args.log_level).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    streams = Streams(sys.stdin.buffer, sys.stdout, sys.stdout.buffer, sys.stderr)
    handler: Callable[[argparse.Namespace, Streams], int] = args.handler
    try:
        # The flag as given, then the address every command uses (which may come from the
        # config file, read here so that a bad file fails before anything else happens).
        args.bootstrap_flag = args.bootstrap
        if args.command not in _COMMANDS_WITHOUT_CLIENT_CONFIG:
            args.bootstrap = resolve_bootstrap(args)
        else:
            # `cluster status` without a cluster.json describes the cluster at this address.
            args.bootstrap = (
                args.bootstrap
                or os.environ.get(BOOTSTRAP_ENV, "").strip()
                or DEFAULT_BOOTSTRAP_SERVERS
            )
        return handler(args, streams)
    except NoBrokersAvailableError as exc:
        print(f"lograft: {exc}{_bootstrap_hint(args)}", file=sys.stderr)
        return 1
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
