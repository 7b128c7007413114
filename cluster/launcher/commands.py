"""``lograft cluster up|down|status|logs|kill|restart``: the launcher's command line.

:func:`add_cluster_commands` adds the ``cluster`` command to the ``lograft`` parser and
:func:`run_cluster_command` runs what it parsed; :func:`build_parser` and :func:`main` are
the same actions as ``python -m cluster.launcher ACTION ...``. The handlers print for
people; the work is :class:`~cluster.launcher.local_cluster.LocalCluster`'s.
"""

# Over 600 lines: the six cluster subcommands' parsers beside their handlers.
from __future__ import annotations

import argparse
import enum
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO, TypeAlias

import grpc
from tqdm import tqdm

from cluster.client import DEFAULT_BOOTSTRAP_SERVERS
from cluster.launcher.health import ClusterStatus, NodeStatus, probe_metadata
from cluster.launcher.local_cluster import (
    DEFAULT_HEALTH_TIMEOUT_S,
    HEALTH_POLL_INTERVAL_S,
    LocalCluster,
)
from cluster.launcher.processes import DEFAULT_STOP_TIMEOUT_S, tail_lines
from cluster.launcher.spec import (
    CLUSTER_FILE,
    DEFAULT_BASE_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_NODES,
    ClusterSpec,
    LauncherError,
)
from cluster.node_health import check_health
from cluster.status import describe_cluster, readiness_problems, render_status
from lograft.protocol.errors import LograftError

__all__ = [
    "CLUSTER_DESCRIPTION",
    "CLUSTER_EPILOG",
    "DEFAULT_LOG_LINES",
    "add_cluster_commands",
    "build_parser",
    "cmd_down",
    "cmd_kill",
    "cmd_logs",
    "cmd_restart",
    "cmd_status",
    "cmd_up",
    "main",
    "run_cluster_command",
]

DEFAULT_LOG_LINES = 50
"""Lines of a node's log ``lograft cluster logs`` prints without ``--lines``."""


def _config_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


class _Signal(enum.Enum):
    KILL = signal.SIGKILL
    TERM = signal.SIGTERM
    STOP = signal.SIGSTOP
    CONT = signal.SIGCONT


def _signal_name(text: str) -> str:
    name = text.strip().upper().removeprefix("SIG")
    if name not in _Signal.__members__:
        raise argparse.ArgumentTypeError(f"signal must be one of {', '.join(_Signal.__members__)}")
    return name


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help=f"the cluster's directory, holding {CLUSTER_FILE} (default ./%(default)s)",
    )


_RAW = argparse.RawDescriptionHelpFormatter
_Actions: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

CLUSTER_DESCRIPTION = """\
A local cluster of lograft node processes (combined broker and controller roles) with
their data, logs and a cluster.json under one directory (--data-dir, default
./data/cluster). Node i listens on 127.0.0.1:BASE_PORT+i-1. Every action takes --data-dir;
the nodes keep running after the command returns, until `lograft cluster down`."""
"""The help text of ``lograft cluster``: what a local cluster is and where it lives."""

CLUSTER_EPILOG = """\
examples:
  lograft cluster up --nodes 3 --base-port 9092
  lograft cluster status --json | jq .quorum
  lograft cluster kill 2 && lograft cluster restart 2"""
"""The examples closing the help of ``lograft cluster``."""


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    _add_up(actions)
    _add_down(actions)
    _add_status(actions)
    _add_logs(actions)
    _add_kill(actions)
    _add_restart(actions)


def _add_up(actions: _Actions) -> None:
    up = actions.add_parser(
        "up",
        help="start a local cluster and wait until it is healthy",
        description="Start N nodes (combined broker and controller roles) as background\n"
        "processes with data under --data-dir, wait until every node answers and an active\n"
        "controller is known, print the bootstrap address. Running it again starts only\n"
        "nodes that are not running. While waiting, a progress bar counts the ready nodes\n"
        "on stderr when that is a terminal.",
        epilog="examples:\n"
        "  lograft cluster up\n"
        "  lograft cluster up --nodes 5 --base-port 19092 --data-dir /tmp/lograft\n"
        "  lograft cluster up --config log.segment.bytes=1048576 --timeout-s 120",
        formatter_class=_RAW,
    )
    _add_data_dir(up)
    up.add_argument(
        "--nodes",
        type=_positive_int,
        default=None,
        help=f"number of nodes (default {DEFAULT_NODES}, or as in an existing {CLUSTER_FILE})",
    )
    up.add_argument(
        "--base-port",
        type=_port,
        default=None,
        help=f"node i listens on BASE_PORT+i-1 (default {DEFAULT_BASE_PORT})",
    )
    up.add_argument(
        "--config",
        type=_config_pair,
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="node setting by Kafka name for every node, e.g. log.segment.bytes=1048576 "
        "(repeatable)",
    )
    up.add_argument(
        "--timeout-s",
        type=_positive_float,
        default=DEFAULT_HEALTH_TIMEOUT_S,
        help="how long to wait for a healthy cluster (default %(default)s)",
    )
    up.add_argument(
        "--no-wait", action="store_true", help="return once started, without the health wait"
    )


def _add_down(actions: _Actions) -> None:
    down = actions.add_parser(
        "down",
        help="stop every node (SIGTERM, then SIGKILL); data is kept",
        description="Stop every node of the cluster in --data-dir: SIGTERM, then SIGKILL after\n"
        "--timeout-s. Data and logs stay; `lograft cluster up` starts the same cluster again.",
        epilog="examples:\n  lograft cluster down\n  lograft cluster down --data-dir /tmp/lograft",
        formatter_class=_RAW,
    )
    _add_data_dir(down)
    down.add_argument(
        "--timeout-s",
        type=_positive_float,
        default=DEFAULT_STOP_TIMEOUT_S,
        help="grace period before SIGKILL (default %(default)s)",
    )


def _add_status(actions: _Actions) -> None:
    status = actions.add_parser(
        "status",
        help="processes, the controller quorum, brokers and partitions (--json: one object)",
        description="""\
Each node's process (pid, running or paused, its metadata view), then what the cluster
says: the controller quorum (leader, epoch, high watermark, each voter's lag, as the
active controller knows it), the brokers (epoch, fenced, in controlled shutdown) and every
partition (leader, leader epoch, replicas, ISR, high watermark as its leader reports it).
The first line says which cluster it shows: the local cluster of --data-dir (default
./data/cluster) when its cluster.json exists; otherwise the cluster that answers at
--bootstrap (given before `cluster`), else $LOGRAFT_BOOTSTRAP, else
127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 (e.g. the docker-compose cluster), without
a process table. A recorded node that is not running while its address answers is flagged
(another cluster on the same ports?).

--json prints one object: source (cluster.json or bootstrap), data_dir, bootstrap, healthy,
problems, controller_id, nodes (one per process; these five with a cluster.json only),
quorum {leader_id, epoch, high_watermark, voters [{node_id, log_end_offset, lag}],
observers}, metadata_offset, brokers [{node_id, broker_epoch, fenced,
in_controlled_shutdown, address}], offline_partitions, partitions [{topic, partition,
leader, leader_epoch, replicas, isr, high_watermark}]. A lag or high watermark of -1 is
unknown.""",
        epilog="examples:\n"
        "  lograft cluster status\n"
        "  lograft cluster status --json | jq '.partitions[] | select(.leader < 0)'\n"
        "  lograft --bootstrap 10.0.0.5:9092 cluster status   # no ./data/cluster/cluster.json",
        formatter_class=_RAW,
    )
    _add_data_dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.add_argument(
        "--wait",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="first wait up to SECONDS until the cluster is ready: the quorum has a leader "
        "and every node is registered as an unfenced broker (exit 1, saying what is "
        "missing, if it is not by then); e.g. right after `docker-compose up -d`",
    )


def _add_logs(actions: _Actions) -> None:
    logs = actions.add_parser(
        "logs",
        help="print the end of one node's log",
        description="Print the last --lines lines of DIR/node-NODE/node.log.",
        epilog="examples:\n  lograft cluster logs 1\n  lograft cluster logs 2 -n 200",
        formatter_class=_RAW,
    )
    logs.add_argument("node", type=_positive_int, metavar="NODE", help="node id")
    _add_data_dir(logs)
    logs.add_argument(
        "--lines",
        "-n",
        type=_positive_int,
        default=DEFAULT_LOG_LINES,
        help="how many lines (default %(default)s)",
    )


def _add_kill(actions: _Actions) -> None:
    kill = actions.add_parser(
        "kill",
        help="signal one node (default SIGKILL, as kill -9)",
        description="Send a signal to one node of the cluster (only a process this launcher\n"
        "started, checked through /proc). STOP pauses it, CONT resumes it.",
        epilog="examples:\n"
        "  lograft cluster kill 2\n"
        "  lograft cluster kill 3 --signal STOP   # pause; --signal CONT resumes",
        formatter_class=_RAW,
    )
    kill.add_argument("node", type=_positive_int, metavar="NODE", help="node id")
    _add_data_dir(kill)
    kill.add_argument(
        "--signal",
        type=_signal_name,
        default="KILL",
        help="KILL, TERM, STOP (pause) or CONT (resume) (default %(default)s)",
    )


def _add_restart(actions: _Actions) -> None:
    restart = actions.add_parser(
        "restart",
        help="start one node again with its arguments (stopping it first if running)",
        description="Start one node again with the arguments it had, stopping it first if it\n"
        "runs, then wait until the cluster is healthy (unless --no-wait).",
        epilog="examples:\n  lograft cluster restart 2\n  lograft cluster restart 2 --no-wait",
        formatter_class=_RAW,
    )
    restart.add_argument("node", type=_positive_int, metavar="NODE", help="node id")
    _add_data_dir(restart)
    restart.add_argument(
        "--timeout-s",
        type=_positive_float,
        default=DEFAULT_HEALTH_TIMEOUT_S,
        help="how long to wait for a healthy cluster (default %(default)s)",
    )
    restart.add_argument(
        "--no-wait", action="store_true", help="return once started, without the health wait"
    )


def add_cluster_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster up|down|status|logs|kill|restart`` to a ``lograft``-style parser.

    The parsed namespace has ``command == "cluster"`` and ``cluster_command``; hand it to
    :func:`run_cluster_command`.
    """
    cluster = subparsers.add_parser(
        "cluster",
        help="run a local multi-process cluster: up, down, status, logs, kill, restart",
        description=CLUSTER_DESCRIPTION,
        epilog=CLUSTER_EPILOG,
        formatter_class=_RAW,
    )
    _add_subcommands(cluster)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m cluster.launcher`` (same actions as ``lograft cluster``)."""
    parser = argparse.ArgumentParser(
        prog="lograft cluster",
        description=CLUSTER_DESCRIPTION,
        epilog=CLUSTER_EPILOG,
        formatter_class=_RAW,
    )
    _add_subcommands(parser)
    return parser


def _spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    """The spec for ``up``: flags given win, then an existing cluster.json, then defaults."""
    data_dir = Path(os.path.abspath(args.data_dir))
    saved: LocalCluster | None = None
    if (data_dir / CLUSTER_FILE).exists():
        saved = LocalCluster.load(data_dir)
    configs = dict(args.config) if args.config is not None else None
    if saved is not None:
        return ClusterSpec(
            data_dir=data_dir,
            nodes=args.nodes if args.nodes is not None else saved.spec.nodes,
            base_port=args.base_port if args.base_port is not None else saved.spec.base_port,
            host=saved.spec.host,
            configs=configs if configs is not None else saved.configs,
            roles=saved.spec.roles,
        )
    return ClusterSpec(
        data_dir=data_dir,
        nodes=args.nodes if args.nodes is not None else DEFAULT_NODES,
        base_port=args.base_port if args.base_port is not None else DEFAULT_BASE_PORT,
        configs=configs or {},
    )


def _dir_flag(data_dir: Path) -> str:
    default = Path(os.path.abspath(DEFAULT_DATA_DIR))
    return "" if Path(os.path.abspath(data_dir)) == default else f" --data-dir {data_dir}"


def _wait_with_progress(
    cluster: LocalCluster,
    timeout_s: float,
    err: TextIO,
    restarted: tuple[int, int | None] | None = None,
) -> ClusterStatus:
    """``wait_healthy`` (or ``wait_reregistered`` for a ``restarted`` (node id, previous
    broker epoch)) with a bar of ready nodes on ``err`` (drawn only on a terminal)."""
    try:
        interactive = err.isatty()
    except (AttributeError, ValueError):
        interactive = False
    with tqdm(
        total=len(cluster.nodes),
        desc="nodes ready",
        unit="node",
        file=err,
        disable=not interactive,
        leave=False,
    ) as bar:

        def show(current: ClusterStatus) -> None:
            bar.update(current.ready_count - bar.n)
            bar.refresh()  # polls are 0.2 s apart: draw each, not tqdm's rate-limited few

        if restarted is not None:
            return cluster.wait_reregistered(*restarted, timeout_s, on_status=show)
        return cluster.wait_healthy(timeout_s, on_status=show)


def cmd_up(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster up``."""
    cluster = LocalCluster(_spec_from_args(args))
    dir_flag = _dir_flag(args.data_dir)
    started = cluster.up(wait=False)
    if not started:
        print(
            f"Cluster in {cluster.data_dir} is already running "
            f"({len(cluster.nodes)} nodes); bootstrap {cluster.bootstrap}",
            file=out,
        )
        return 0
    for node in cluster.nodes:
        if node.node_id in started:
            print(
                f"Started node {node.node_id}: pid {node.pid}, {node.address}, log {node.log_path}",
                file=out,
            )
    print(f"Cluster file: {cluster.cluster_file}", file=out)
    if args.no_wait:
        print(f"Not waiting for health; check with `lograft cluster status{dir_flag}`", file=out)
        return 0
    print(f"Waiting up to {args.timeout_s:g} s for the cluster to become healthy ...", file=out)
    out.flush()
    try:
        health = _wait_with_progress(cluster, args.timeout_s, err)
    except LauncherError as exc:
        if not any(cluster.running(node) for node in cluster.nodes):
            raise
        raise LauncherError(
            f"{exc.message}\nNodes still running are left for inspection: "
            f"`lograft cluster status{dir_flag}`, `lograft cluster logs NODE{dir_flag}`, "
            f"`lograft cluster down{dir_flag}`"
        ) from exc
    print(
        f"\nCluster is up: {len(cluster.nodes)} nodes, active controller "
        f"{health.controller_id}.\nBootstrap: {cluster.bootstrap}\n\nNext steps:\n"
        f"  export LOGRAFT_BOOTSTRAP={cluster.bootstrap}\n"
        "  lograft topics create demo --partitions 3 --replication-factor "
        f"{min(3, len(cluster.nodes))}\n"
        "  echo hello | lograft produce demo\n"
        "  lograft consume demo --from-beginning --max-messages 1\n"
        f"  lograft cluster status{dir_flag}\n"
        f"  lograft cluster down{dir_flag}",
        file=out,
    )
    return 0


def cmd_down(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster down``."""
    cluster = LocalCluster.load(args.data_dir)
    outcome = cluster.down(timeout_s=args.timeout_s)
    for node_id, what in sorted(outcome.items()):
        print(f"node {node_id}: {what}", file=out)
    print(f"Cluster stopped; data kept in {cluster.data_dir}", file=out)
    return 0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _shown_dir(data_dir: Path) -> str:
    text = str(data_dir)
    return text if data_dir.is_absolute() or text.startswith(".") else f"./{text}"


def _load_local(data_dir: Path) -> LocalCluster | None:
    """The cluster recorded in ``data_dir/cluster.json``; ``None`` when there is no such file
    (an unreadable one is an error)."""
    if not (data_dir / CLUSTER_FILE).exists():
        return None
    return LocalCluster.load(data_dir)


def _answering_elsewhere(current: ClusterStatus) -> list[str]:
    """Problems for recorded nodes that do not run while their address answers: another
    process (another cluster, a docker-compose one) serves their port."""
    found = []
    for status in current.nodes:
        if status.alive:
            continue
        try:
            probe_metadata(status.node.address)
        except grpc.RpcError:
            continue
        found.append(
            f"node {status.node.node_id} does not run from {current.data_dir}, but "
            f"{status.node.address} answers: another cluster on the same port?"
        )
    return found


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster status [--json]``: which cluster, its processes, quorum and brokers.

    The local cluster of ``--data-dir`` when its ``cluster.json`` exists; otherwise the
    cluster reachable at the bootstrap address (``--bootstrap``, ``$LOGRAFT_BOOTSTRAP``, the
    default), without a process table, and an error naming each address and why when none
    answers. The first line says which of the two it shows.
    """
    data_dir = Path(args.data_dir)
    local = _load_local(data_dir)
    not_ready = _wait_ready(args, local) if args.wait is not None else []
    current: ClusterStatus | None = local.status() if local is not None else None
    if current is not None:
        bootstrap = current.bootstrap
        shows = f"Local cluster in {_shown_dir(data_dir)} ({CLUSTER_FILE})"
    else:
        bootstrap = getattr(args, "bootstrap", None) or DEFAULT_BOOTSTRAP_SERVERS
        shows = f"Cluster at {bootstrap} (no local {_shown_dir(data_dir / CLUSTER_FILE)})"
    if not_ready:
        print(shows, file=out)
        print(f"not ready after {args.wait:g} s: " + "; ".join(not_ready), file=err)
        return 1
    try:
        quorum: dict[str, Any] | None = describe_cluster(
            [b.strip() for b in bootstrap.split(",") if b.strip()]
        )
    except LograftError as exc:
        if current is None:
            raise LauncherError(
                f"no cluster in {_shown_dir(data_dir)} ({CLUSTER_FILE} not found) and {exc}"
            ) from None
        quorum = None
    elsewhere = _answering_elsewhere(current) if current is not None else []
    if args.json:
        document: dict[str, Any] = {
            "source": "cluster.json" if current is not None else "bootstrap",
            "bootstrap": bootstrap,
        }
        if current is not None:
            document.update(current.to_json())
            document["problems"] = [*current.problems, *elsewhere]
        if quorum is not None:
            document.update(quorum)
        print(json.dumps(document, indent=2), file=out)
        return 0
    print(shows, file=out)
    if current is not None:
        _print_processes(current, elsewhere, out)
        if quorum is not None and not any(n.alive for n in current.nodes):
            print(
                f"None of its nodes runs: what follows answered at {bootstrap} and is "
                "another cluster.",
                file=out,
            )
    if quorum is not None:
        print(render_status(quorum), file=out)
    return 0


def _wait_ready(args: argparse.Namespace, local: LocalCluster | None) -> list[str]:
    """Poll until the cluster is ready (``--wait``); what is still missing when time is up."""
    deadline = time.monotonic() + args.wait
    while True:
        local_status = local.status() if local is not None else None
        if local is not None and local_status is not None:
            bootstrap = local.bootstrap
            # A cluster.json whose nodes all stopped says nothing of whoever answers there now.
            running = any(node.alive for node in local_status.nodes)
            problems = list(local_status.problems) if running else []
        else:
            bootstrap = getattr(args, "bootstrap", None) or DEFAULT_BOOTSTRAP_SERVERS
            problems = []
        addresses = [b.strip() for b in bootstrap.split(",") if b.strip()]
        try:
            problems += readiness_problems(describe_cluster(addresses))
        except LograftError as exc:
            problems.append(str(exc))
        if not problems and local is None:
            # The metadata a node replays after a restart still shows the brokers of before
            # unfenced until they register again; each node's own verdict does not.
            problems += [
                verdict.reason
                for verdict in (check_health(address) for address in addresses)
                if not verdict.healthy
            ]
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(min(HEALTH_POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))


def _print_processes(current: ClusterStatus, elsewhere: Sequence[str], out: TextIO) -> None:
    print(f"Bootstrap: {current.bootstrap}", file=out)
    print(f"Healthy: {'yes' if current.healthy else 'no'}", file=out)
    print(f"Active controller: {_dash(current.controller_id)}", file=out)
    header = f"{'NODE':<5} {'PID':<8} {'STATE':<12} {'ADDRESS':<22} {'CONTROLLER':<11} "
    print(header + f"{'BROKERS':<12} TOPICS", file=out)
    for status in current.nodes:
        _print_node(status, out)
    for problem in [*current.problems, *elsewhere]:
        print(f"  ! {problem}", file=out)


def _print_node(status: NodeStatus, out: TextIO) -> None:
    metadata = status.metadata
    brokers = ",".join(map(str, metadata.broker_ids)) if metadata else "-"
    print(
        f"{status.node.node_id:<5} {_dash(status.node.pid if status.alive else None):<8} "
        f"{status.state:<12} {status.node.address:<22} "
        f"{_dash(metadata.controller_id if metadata else None):<11} {brokers:<12} "
        f"{_dash(metadata.topic_count if metadata else None)}",
        file=out,
    )


def cmd_logs(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster logs NODE``."""
    node = LocalCluster.load(args.data_dir).node(args.node)
    try:
        lines = tail_lines(node.log_path, args.lines)
    except FileNotFoundError:
        raise LauncherError(f"node {args.node} has no log yet ({node.log_path})") from None
    for line in lines:
        print(line, file=out)
    return 0


def cmd_kill(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster kill NODE [--signal ...]``."""
    cluster = LocalCluster.load(args.data_dir)
    sig = _Signal[args.signal].value
    pid = cluster.node(args.node).pid
    cluster.kill(args.node, sig)
    print(f"Sent SIG{args.signal} to node {args.node} (pid {pid})", file=out)
    return 0


def cmd_restart(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster restart NODE``."""
    cluster = LocalCluster.load(args.data_dir)
    previous_epoch = None if args.no_wait else cluster.broker_epoch(args.node)
    pid = cluster.restart(args.node, wait=False)
    print(f"Started node {args.node}: pid {pid}", file=out)
    if not args.no_wait:
        print(f"Waiting up to {args.timeout_s:g} s for the cluster to become healthy ...", file=out)
        out.flush()
        health = _wait_with_progress(
            cluster, args.timeout_s, err, restarted=(args.node, previous_epoch)
        )
        print(f"Cluster is healthy; active controller {health.controller_id}", file=out)
    return 0


_HANDLERS = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "logs": cmd_logs,
    "kill": cmd_kill,
    "restart": cmd_restart,
}


def run_cluster_command(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run a parsed ``cluster ...`` command; returns the exit code (1 on a launcher error)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    try:
        return _HANDLERS[args.cluster_command](args, out, err)
    except LauncherError as exc:
        print(f"lograft: {exc}", file=err)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m cluster.launcher ACTION ...``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    return run_cluster_command(args)
