"""A local multi-process cluster: the engine behind ``lograft cluster up|down|status|...``.

``lograft cluster up`` starts N nodes (three by default, combined ``broker,controller``
roles) as detached local processes with their data under one directory, waits until the
cluster is healthy and prints the bootstrap address::

    lograft cluster up [--nodes 3] [--data-dir ./data/cluster] [--base-port 9092]
                       [--config NAME=VALUE ...] [--timeout-s 60]
    lograft cluster status [--json]
    lograft cluster logs NODE [--lines 50]
    lograft cluster kill NODE [--signal KILL|TERM|STOP|CONT]
    lograft cluster restart NODE
    lograft cluster down

Node ``i`` (1..N) listens on ``127.0.0.1:<base port + i - 1>``, keeps its data in
``DIR/node-i`` and writes its output to ``DIR/node-i/node.log``. ``DIR/cluster.json``
describes the cluster (node ids, pids, ports, data paths, the controller quorum) so that
tools and tests can find the nodes; it is rewritten atomically, and commands that change it
hold ``DIR/.cluster.lock``.

The launcher only ever signals processes it started: a pid from ``cluster.json`` is
signalled only while ``/proc/<pid>/cmdline`` shows ``cluster.node`` with that node's data
directory, and through a pidfd, so that a pid reused by another process is left alone.

Library use (tests, chaos tools)::

    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, base_port=port))
    cluster.up()                       # returns once healthy
    cluster.kill(2, signal.SIGKILL)
    cluster.restart(2)
    print(cluster.status().to_json())
    cluster.down()
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import errno
import fcntl
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc
from tqdm import tqdm

from cluster.errors import LograftError
from cluster.status import broker_registrations, describe_cluster, render_status
from cluster.wire import broker_pb2, broker_pb2_grpc

__all__ = [
    "CLUSTER_FILE",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_NODES",
    "BrokerView",
    "ClusterSpec",
    "ClusterStatus",
    "LauncherError",
    "LocalCluster",
    "MetadataView",
    "NodeRecord",
    "NodeStatus",
    "add_cluster_commands",
    "build_parser",
    "build_voters",
    "is_alive",
    "is_our_node",
    "is_port_free",
    "main",
    "node_port",
    "probe_metadata",
    "run_cluster_command",
    "signal_node",
    "tail_lines",
]

# Named explicitly: run as `python -m cluster.launcher`, __name__ would be "__main__".
log = logging.getLogger("cluster.launcher")

CLUSTER_FILE = "cluster.json"
CLUSTER_FILE_VERSION = 1
LOCK_FILE = ".cluster.lock"
NODE_LOG = "node.log"
NODE_MODULE = "cluster.node"

DEFAULT_NODES = 3
DEFAULT_DATA_DIR = Path("data/cluster")
DEFAULT_BASE_PORT = 9092
DEFAULT_HOST = "127.0.0.1"
DEFAULT_ROLES: tuple[str, ...] = ("broker", "controller")
DEFAULT_HEALTH_TIMEOUT_S = 60.0
DEFAULT_STOP_TIMEOUT_S = 15.0
DEFAULT_LOG_LINES = 50
HEALTH_POLL_INTERVAL_S = 0.2
PROBE_TIMEOUT_S = 2.0
KILL_WAIT_S = 5.0
LOCK_TIMEOUT_S = 120.0
MAX_METADATA_BYTES = 256 * 1024 * 1024

# /proc/<pid>/stat state letters as status shows them: the point is to tell paused
# (SIGSTOP) nodes from running ones.
_PROCESS_STATES = {
    "R": "running",
    "S": "running",
    "D": "running",
    "I": "running",
    "T": "paused",
    "t": "paused",
    "Z": "exited",
    "X": "exited",
}

# Node processes started by this process, by pid, so that they can be reaped (a child that
# exits stays a zombie, and looks alive to kill(pid, 0), until its parent waits for it).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
# Exit codes of reaped children, by pid, for error messages.
_EXIT_CODES: dict[int, int] = {}


class LauncherError(LograftError):
    """The local cluster could not be started, found, changed or stopped as asked."""

    error_name = "CLUSTER_LAUNCHER_ERROR"


# ---- layout --------------------------------------------------------------------------------


def node_port(base_port: int, node_id: int) -> int:
    """The port of node ``node_id`` (1-based): ``base_port + node_id - 1``."""
    if node_id < 1:
        raise ValueError(f"node ids start at 1, got {node_id}")
    return base_port + node_id - 1


def build_voters(host: str, ports: Mapping[int, int]) -> str:
    """``controller.quorum.voters`` for voters ``{node_id: port}``: ``1@host:p1,2@host:p2``."""
    return ",".join(f"{node_id}@{host}:{ports[node_id]}" for node_id in sorted(ports))


@dataclass(frozen=True)
class ClusterSpec:
    """What ``up`` should start: N combined nodes on consecutive ports, data under one dir."""

    data_dir: Path = DEFAULT_DATA_DIR
    nodes: int = DEFAULT_NODES
    base_port: int = DEFAULT_BASE_PORT
    host: str = DEFAULT_HOST
    configs: Mapping[str, str] = field(default_factory=dict)
    roles: tuple[str, ...] = DEFAULT_ROLES

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise LauncherError(f"a cluster needs at least one node, got {self.nodes}")
        if self.base_port < 1 or node_port(self.base_port, self.nodes) > 65535:
            raise LauncherError(
                f"ports {self.base_port}..{self.base_port + self.nodes - 1} are not all valid"
            )
        if not self.roles or set(self.roles) - set(DEFAULT_ROLES):
            raise LauncherError(f"roles must be among {DEFAULT_ROLES}, got {self.roles}")
        # Absolute, so that the /proc check and cluster.json do not depend on the cwd.
        object.__setattr__(self, "data_dir", Path(os.path.abspath(self.data_dir)))
        object.__setattr__(self, "configs", dict(self.configs))

    @property
    def node_ids(self) -> range:
        """Node ids 1..N."""
        return range(1, self.nodes + 1)

    def node_records(self) -> list[NodeRecord]:
        """One not-yet-started :class:`NodeRecord` per node."""
        records = []
        for node_id in self.node_ids:
            port = node_port(self.base_port, node_id)
            node_dir = self.data_dir / f"node-{node_id}"
            records.append(
                NodeRecord(
                    node_id=node_id,
                    pid=None,
                    host=self.host,
                    client_port=port,
                    controller_port=port,
                    data_dir=node_dir,
                    log_path=node_dir / NODE_LOG,
                    roles=self.roles,
                )
            )
        return records

    def controller_quorum_voters(self) -> str:
        """The voters string every node gets: every node is a controller in combined mode."""
        return _voters_of(self.node_records())


@dataclass
class NodeRecord:
    """One node as ``cluster.json`` records it; ``pid`` is ``None`` when it was stopped."""

    node_id: int
    pid: int | None
    host: str
    client_port: int
    controller_port: int
    data_dir: Path
    log_path: Path
    roles: tuple[str, ...]

    @property
    def address(self) -> str:
        """``host:client_port``, what clients dial."""
        return f"{self.host}:{self.client_port}"

    def command(self, voters: str, configs: Mapping[str, str]) -> list[str]:
        """The argv that starts this node."""
        argv = [
            sys.executable,
            "-m",
            NODE_MODULE,
            "--node-id",
            str(self.node_id),
            "--data-dir",
            str(self.data_dir),
            "--listen",
            self.address,
            "--process-roles",
            ",".join(self.roles),
            "--controller-quorum-voters",
            voters,
        ]
        for name, value in configs.items():
            argv += ["--config", f"{name}={value}"]
        return argv

    def to_json(self) -> dict[str, Any]:
        """The node's entry in ``cluster.json``."""
        return {
            "node_id": self.node_id,
            "pid": self.pid,
            "host": self.host,
            "client_port": self.client_port,
            "controller_port": self.controller_port,
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "roles": list(self.roles),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> NodeRecord:
        """Parse one ``nodes`` entry of ``cluster.json`` (``KeyError``/``TypeError`` if bad)."""
        pid = doc["pid"]
        return cls(
            node_id=int(doc["node_id"]),
            pid=None if pid is None else int(pid),
            host=str(doc.get("host", DEFAULT_HOST)),
            client_port=int(doc["client_port"]),
            controller_port=int(doc["controller_port"]),
            data_dir=Path(doc["data_dir"]),
            log_path=Path(doc["log_path"]),
            roles=tuple(str(role) for role in doc["roles"]),
        )

    def layout(self) -> tuple[object, ...]:
        """Everything but the pid: two records with equal layouts start the same node."""
        return (
            self.node_id,
            self.host,
            self.client_port,
            self.controller_port,
            self.data_dir,
            self.log_path,
            self.roles,
        )


def _voters_of(nodes: Sequence[NodeRecord]) -> str:
    voters = [n for n in nodes if "controller" in n.roles]
    if not voters:
        return ""
    hosts = {n.host for n in voters}
    if len(hosts) == 1:
        return build_voters(hosts.pop(), {n.node_id: n.controller_port for n in voters})
    return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in voters)


# ---- processes -----------------------------------------------------------------------------


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        code = child.poll()
        if code is not None:
            del _CHILDREN[pid]
            _EXIT_CODES[pid] = code


def _process_state(pid: int) -> str | None:
    """The state letter from ``/proc/<pid>/stat`` (``None`` when there is no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # FileNotFoundError or ProcessLookupError: no such process
        return None
    # "pid (comm) S ...": comm may contain spaces and parentheses, the state follows the last ")".
    rest = stat[stat.rfind(")") + 1 :].split()
    return rest[0] if rest else None


def is_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it has exited)."""
    if pid <= 0:
        return False
    _reap(pid)
    state = _process_state(pid)
    return state is not None and state not in ("Z", "X")


def _read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_our_node(pid: int, node_data_dir: Path) -> bool:
    """Whether ``pid`` is alive and is a lograft node serving ``node_data_dir``.

    ``/proc/<pid>/cmdline`` must hold ``cluster.node`` and the data directory as whole
    arguments, so a reused pid (or a node of another cluster) never matches.
    """
    if not is_alive(pid):
        return False
    argv = _read_cmdline(pid)
    if not argv:
        return False
    wanted = os.path.normpath(os.path.abspath(node_data_dir))
    has_dir = any(os.path.normpath(arg) == wanted for arg in argv if arg.startswith("/"))
    return NODE_MODULE in argv and has_dir


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, ``None`` if there is no such process; raises if unsupported."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


def signal_node(pid: int, node_data_dir: Path, sig: int) -> bool:
    """Send ``sig`` to ``pid`` if (and only if) it is our node for ``node_data_dir``.

    The check and the signal go through one pidfd: if the pid is reused after the check, the
    signal cannot reach the new process. Returns whether the signal was sent.
    """
    if pid <= 0:
        return False
    try:
        pidfd = _open_pidfd(pid)
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            raise
        pidfd = -1  # no pidfd support: check, then plain kill
    if pidfd is None:
        return False
    try:
        if not is_our_node(pid, node_data_dir):
            log.info("not signalling pid=%d: not a live node of %s", pid, node_data_dir)
            return False
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return False
        log.info(
            "signalled pid=%d signal=%s data_dir=%s", pid, signal.Signals(sig).name, node_data_dir
        )
        return True
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``pid`` to exit; returns whether it did."""
    child = _CHILDREN.get(pid)
    if child is not None:
        try:
            child.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return False
        _reap(pid)
        return True
    try:
        pidfd = _open_pidfd(pid)
    except OSError:
        pidfd = -1
    if pidfd is None:
        return True
    if pidfd < 0:  # no pidfd support: poll
        deadline = time.monotonic() + timeout_s
        while is_alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        # A pidfd becomes readable when the process exits (zombie or reaped).
        return bool(poller.poll(max(0, int(timeout_s * 1000)))) or not is_alive(pid)
    finally:
        os.close(pidfd)


def is_port_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (a bind with SO_REUSEADDR succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path`` (reads backwards, so huge logs are cheap)."""
    if lines <= 0:
        return []
    block = 64 * 1024
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        end = file.tell()
        data = b""
        position = end
        while position > 0 and data.count(b"\n") <= lines:
            step = min(block, position)
            position -= step
            file.seek(position)
            data = file.read(step) + data
    text = data.decode(errors="replace")
    parts = text.splitlines()
    return parts[-lines:]


# ---- metadata probes -----------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerView:
    """One broker as a Metadata answer lists it."""

    node_id: int
    host: str
    port: int
    rack: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form (``rack`` only when set)."""
        doc: dict[str, Any] = {"node_id": self.node_id, "host": self.host, "port": self.port}
        if self.rack:
            doc["rack"] = self.rack
        return doc


@dataclass(frozen=True)
class MetadataView:
    """What one node's Metadata answer says about the cluster."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerView, ...]
    topic_count: int

    @property
    def broker_ids(self) -> list[int]:
        """Sorted ids of the brokers listed."""
        return sorted(b.node_id for b in self.brokers)


def probe_metadata(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> MetadataView:
    """Ask the node at ``address`` for cluster metadata; raises ``grpc.RpcError``."""
    options = [("grpc.max_receive_message_length", MAX_METADATA_BYTES)]
    with grpc.insecure_channel(address, options=options) as channel:
        response = broker_pb2_grpc.BrokerStub(channel).Metadata(
            broker_pb2.MetadataRequest(), timeout=timeout_s
        )
    return MetadataView(
        cluster_id=str(response.cluster_id),
        controller_id=int(response.controller_id),
        brokers=tuple(
            BrokerView(int(b.node_id), str(b.host), int(b.port), str(b.rack))
            for b in response.brokers
        ),
        topic_count=len(response.topics),
    )


def _rpc_error_text(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code is not None else 'RPC_ERROR'}: {details}"


# ---- status --------------------------------------------------------------------------------


@dataclass
class NodeStatus:
    """One node's process state and, when it answered, its view of the cluster."""

    node: NodeRecord
    alive: bool
    state: str
    metadata: MetadataView | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form: the ``cluster.json`` entry plus liveness and the node's metadata view."""
        doc = self.node.to_json()
        doc.update(
            {
                "alive": self.alive,
                "state": self.state,
                "address": self.node.address,
                "reachable": self.metadata is not None,
                "error": self.error,
                "controller_id": self.metadata.controller_id if self.metadata else None,
                "brokers": self.metadata.broker_ids if self.metadata else None,
                "topics": self.metadata.topic_count if self.metadata else None,
            }
        )
        return doc


@dataclass
class ClusterStatus:
    """The cluster as ``lograft cluster status`` reports it."""

    data_dir: Path
    bootstrap: str
    nodes: list[NodeStatus]
    healthy: bool
    problems: list[str]

    @property
    def view(self) -> NodeStatus | None:
        """The first reachable node: the top-level fields come from its Metadata answer."""
        return next((n for n in self.nodes if n.metadata is not None), None)

    @property
    def controller_id(self) -> int | None:
        """The active controller as the first reachable node knows it (``-1``: none)."""
        view = self.view
        return view.metadata.controller_id if view and view.metadata else None

    @property
    def ready_count(self) -> int:
        """Nodes that run, answer Metadata listing every node, and know a controller."""
        expected = {n.node.node_id for n in self.nodes}
        return sum(
            1
            for n in self.nodes
            if n.alive
            and n.metadata is not None
            and expected <= set(n.metadata.broker_ids)
            and n.metadata.controller_id >= 0
        )

    def to_json(self) -> dict[str, Any]:
        """One JSON document: cluster-wide fields, then ``nodes``."""
        view = self.view
        metadata = view.metadata if view else None
        return {
            "data_dir": str(self.data_dir),
            "bootstrap": self.bootstrap,
            "healthy": self.healthy,
            "problems": self.problems,
            "metadata_from": view.node.node_id if view else None,
            "cluster_id": metadata.cluster_id if metadata else None,
            "controller_id": metadata.controller_id if metadata else None,
            "brokers": [b.to_json() for b in metadata.brokers] if metadata else [],
            "nodes": [n.to_json() for n in self.nodes],
        }


def health_problems(expected_ids: Sequence[int], nodes: Sequence[NodeStatus]) -> list[str]:
    """Why the cluster is not healthy (empty when it is).

    Healthy: every node runs and answers Metadata, every answer lists every expected broker
    id, and every answer names an active controller (``controller_id >= 0``).
    """
    problems = []
    expected = set(expected_ids)
    for status in nodes:
        node_id = status.node.node_id
        if not status.alive:
            problems.append(f"node {node_id} is not running")
        elif status.metadata is None:
            problems.append(f"node {node_id} does not answer Metadata ({status.error})")
        else:
            missing = sorted(expected - set(status.metadata.broker_ids))
            if missing:
                problems.append(
                    f"node {node_id} lists brokers {status.metadata.broker_ids}, missing {missing}"
                )
            if status.metadata.controller_id < 0:
                problems.append(f"node {node_id} knows no active controller")
    return problems


# ---- the cluster ---------------------------------------------------------------------------


class LocalCluster:
    """A cluster of local node processes described by ``DIR/cluster.json``.

    ``cluster.json`` is the source of truth for pids: every operation reads it first, and
    operations that start or stop nodes hold ``DIR/.cluster.lock`` and write it back.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.nodes: list[NodeRecord] = spec.node_records()
        self.controller_quorum_voters: str = _voters_of(self.nodes)
        self.configs: dict[str, str] = dict(spec.configs)

    # -- file ----------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The cluster's directory."""
        return self.spec.data_dir

    @property
    def cluster_file(self) -> Path:
        """``DIR/cluster.json``."""
        return self.data_dir / CLUSTER_FILE

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of every node, for ``bootstrap.servers``."""
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> NodeRecord:
        """The record of ``node_id``; ``LauncherError`` when there is no such node."""
        for record in self.nodes:
            if record.node_id == node_id:
                return record
        ids = ", ".join(str(n.node_id) for n in self.nodes)
        raise LauncherError(f"no node {node_id} in {self.cluster_file} (nodes: {ids})")

    def to_json(self) -> dict[str, Any]:
        """The ``cluster.json`` document."""
        return {
            "version": CLUSTER_FILE_VERSION,
            "bootstrap": self.bootstrap,
            "nodes": [n.to_json() for n in self.nodes],
            "controller_quorum_voters": self.controller_quorum_voters,
            "configs": dict(self.configs),
        }

    @classmethod
    def from_json(cls, data_dir: Path, doc: Mapping[str, Any]) -> LocalCluster:
        """Rebuild a cluster from a ``cluster.json`` document found in ``data_dir``."""
        if doc.get("version") != CLUSTER_FILE_VERSION:
            raise LauncherError(
                f"{Path(data_dir) / CLUSTER_FILE} has version {doc.get('version')!r}, "
                f"this launcher reads version {CLUSTER_FILE_VERSION}"
            )
        try:
            nodes = sorted(
                (NodeRecord.from_json(entry) for entry in doc["nodes"]), key=lambda n: n.node_id
            )
            configs = {str(k): str(v) for k, v in dict(doc.get("configs", {})).items()}
            voters = str(doc["controller_quorum_voters"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LauncherError(f"{Path(data_dir) / CLUSTER_FILE} is malformed: {exc!r}") from exc
        if not nodes:
            raise LauncherError(f"{Path(data_dir) / CLUSTER_FILE} lists no nodes")
        spec = ClusterSpec(
            data_dir=Path(data_dir),
            nodes=len(nodes),
            base_port=nodes[0].client_port,
            host=nodes[0].host,
            configs=configs,
            roles=nodes[0].roles,
        )
        cluster = cls(spec)
        cluster.nodes = nodes
        cluster.controller_quorum_voters = voters
        return cluster

    @classmethod
    def load(cls, data_dir: Path | str) -> LocalCluster:
        """The cluster described by ``data_dir/cluster.json``; ``LauncherError`` if none."""
        path = Path(os.path.abspath(data_dir)) / CLUSTER_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise LauncherError(
                f"no cluster in {path.parent} ({CLUSTER_FILE} not found); start one with "
                f"`lograft cluster up --data-dir {path.parent}`"
            ) from None
        except (OSError, ValueError) as exc:
            raise LauncherError(f"cannot read {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise LauncherError(f"{path} is malformed: not a JSON object")
        return cls.from_json(path.parent, doc)

    def save(self) -> None:
        """Write ``cluster.json`` atomically (temporary file, fsync, rename, fsync dir)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        body = (json.dumps(self.to_json(), indent=2) + "\n").encode()
        temporary = self.data_dir / f".{CLUSTER_FILE}.{os.getpid()}.tmp"
        with open(temporary, "wb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.cluster_file)
        directory = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _refresh(self) -> bool:
        """Adopt the pids in ``cluster.json``, if it exists and describes this layout."""
        if not self.cluster_file.exists():
            return False
        saved = LocalCluster.load(self.data_dir)
        if self._layout() != saved._layout():
            raise LauncherError(
                f"{self.cluster_file} describes another cluster ({len(saved.nodes)} nodes, "
                f"bootstrap {saved.bootstrap}, configs {saved.configs}) than asked "
                f"({len(self.nodes)} nodes, bootstrap {self.bootstrap}, configs "
                f"{self.configs}); use another --data-dir, or drop the conflicting flags"
            )
        self.nodes = saved.nodes
        return True

    def _layout(self) -> tuple[object, ...]:
        return (
            tuple(n.layout() for n in self.nodes),
            self.controller_quorum_voters,
            tuple(sorted(self.configs.items())),
        )

    @contextlib.contextmanager
    def _locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold ``DIR/.cluster.lock`` (one launcher command changes the cluster at a time)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LauncherError(
                            f"another launcher command holds {self.data_dir / LOCK_FILE}"
                        ) from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)  # releases the lock

    # -- processes -----------------------------------------------------------------------

    def running(self, node: NodeRecord) -> bool:
        """Whether ``node``'s recorded pid is alive and really that node."""
        return node.pid is not None and is_our_node(node.pid, node.data_dir)

    def _spawn(self, node: NodeRecord) -> None:
        if not is_port_free(node.host, node.client_port):
            raise LauncherError(
                f"port {node.client_port} of node {node.node_id} is in use by another "
                "process; stop it or pick another --base-port"
            )
        node.data_dir.mkdir(parents=True, exist_ok=True)
        argv = node.command(self.controller_quorum_voters, self.configs)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(node.log_path, "ab") as log_file:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            log_file.write(f"---- {stamp} lograft cluster: {' '.join(argv)}\n".encode())
            log_file.flush()
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                close_fds=True,
                start_new_session=True,  # outlives the launcher, not in its process group
                env=env,
            )
        _CHILDREN[process.pid] = process
        _EXIT_CODES.pop(process.pid, None)
        node.pid = process.pid
        log.info("started node_id=%d pid=%d listen=%s", node.node_id, node.pid, node.address)

    def _stop(self, nodes: Sequence[NodeRecord], timeout_s: float) -> dict[int, str]:
        """SIGTERM (then SIGKILL after ``timeout_s``) each node; sets pids to ``None``."""
        outcome: dict[int, str] = {}
        signalled: list[NodeRecord] = []
        for node in nodes:
            if node.pid is None:
                outcome[node.node_id] = "not running"
            elif not is_alive(node.pid):
                outcome[node.node_id] = "not running (had exited)"
                node.pid = None
            elif not signal_node(node.pid, node.data_dir, signal.SIGTERM):
                outcome[node.node_id] = (
                    f"not running (pid {node.pid} is another process, left alone)"
                )
                node.pid = None
            else:
                # A paused (SIGSTOP) node acts on SIGTERM only once continued.
                signal_node(node.pid, node.data_dir, signal.SIGCONT)
                signalled.append(node)
        deadline = time.monotonic() + timeout_s
        stragglers: list[NodeRecord] = []
        for node in signalled:
            assert node.pid is not None
            if wait_for_exit(node.pid, deadline - time.monotonic()):
                outcome[node.node_id] = "stopped"
                node.pid = None
            else:
                stragglers.append(node)
        for node in stragglers:
            assert node.pid is not None
            log.warning("node_id=%d pid=%d ignored SIGTERM; SIGKILL", node.node_id, node.pid)
            signal_node(node.pid, node.data_dir, signal.SIGKILL)
            if wait_for_exit(node.pid, KILL_WAIT_S):
                outcome[node.node_id] = f"killed (no exit within {timeout_s:g} s of SIGTERM)"
                node.pid = None
            else:
                outcome[node.node_id] = f"still running after SIGKILL (pid {node.pid})"
        return outcome

    # -- operations ----------------------------------------------------------------------

    def up(self, wait: bool = True, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S) -> list[int]:
        """Start every node that is not running; with ``wait``, return once healthy.

        Returns the ids of the nodes started (empty when all were already running). Nodes
        of an existing ``cluster.json`` restart from their data; a ``cluster.json`` of a
        different layout is refused.
        """
        with self._locked():
            self._refresh()
            to_start = [node for node in self.nodes if not self.running(node)]
            busy = [n for n in to_start if not is_port_free(n.host, n.client_port)]
            if busy:
                ports = ", ".join(f"{n.client_port} (node {n.node_id})" for n in busy)
                raise LauncherError(
                    f"ports in use by other processes: {ports}; stop them or pick another "
                    "--base-port"
                )
            started: list[int] = []
            try:
                for node in to_start:
                    self._spawn(node)
                    started.append(node.node_id)
            finally:
                self.save()  # every pid started so far is recorded, even after a failure
        if wait:
            self.wait_healthy(timeout_s)
        return started

    def down(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> dict[int, str]:
        """Stop every node (SIGTERM, SIGKILL after ``timeout_s``), keep the data.

        Returns what happened to each node, by id; ``cluster.json`` then has null pids.
        """
        with self._locked():
            self._refresh()
            outcome = self._stop(self.nodes, timeout_s)
            self.save()
        failed = [f"node {i}: {what}" for i, what in outcome.items() if what.startswith("still")]
        if failed:
            raise LauncherError("could not stop " + "; ".join(failed))
        return outcome

    def kill(self, node_id: int, sig: int = signal.SIGKILL, wait_s: float = KILL_WAIT_S) -> None:
        """Send ``sig`` to one node (after the /proc check).

        After SIGKILL or SIGTERM, waits up to ``wait_s`` for the process to exit, so that a
        ``status`` right after sees it gone. ``cluster.json`` keeps the pid (status shows it
        dead; ``restart`` replaces it).
        """
        self._refresh()
        node = self.node(node_id)
        if node.pid is None or not signal_node(node.pid, node.data_dir, sig):
            raise LauncherError(f"node {node_id} is not running")
        if sig in (signal.SIGKILL, signal.SIGTERM) and not wait_for_exit(node.pid, wait_s):
            raise LauncherError(
                f"node {node_id} (pid {node.pid}) did not exit within {wait_s:g} s of "
                f"{signal.Signals(sig).name}"
            )

    def restart(
        self,
        node_id: int,
        wait: bool = True,
        timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> int:
        """Start ``node_id`` again with its recorded arguments (stopping it first if it runs).

        Returns the new pid; with ``wait``, returns once the cluster has registered the new
        process as a broker (unfenced) and is healthy (see :meth:`wait_reregistered`).
        """
        previous_epoch = self.broker_epoch(node_id) if wait else None
        with self._locked():
            self._refresh()
            node = self.node(node_id)
            if node.pid is not None:
                outcome = self._stop([node], stop_timeout_s)
                if node.pid is not None:
                    self.save()
                    raise LauncherError(f"node {node_id}: {outcome[node_id]}")
            try:
                self._spawn(node)
            finally:
                self.save()
            assert node.pid is not None
            pid = node.pid
        if wait:
            self.wait_reregistered(node_id, previous_epoch, timeout_s)
        return pid

    def broker_epoch(self, node_id: int) -> int | None:
        """The broker epoch the cluster has registered for ``node_id`` (``None``: unknown)."""
        found = broker_registrations(
            [n.address for n in self.nodes if n.node_id != node_id] + [self.node(node_id).address],
            timeout_s=PROBE_TIMEOUT_S,
        )
        if found is None or node_id not in found:
            return None
        return found[node_id][0]

    def wait_reregistered(
        self,
        node_id: int,
        previous_epoch: int | None,
        timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
        on_status: Callable[[ClusterStatus], object] | None = None,
    ) -> ClusterStatus:
        """After a restart: wait until ``node_id`` is registered with a broker epoch above
        ``previous_epoch`` and unfenced, then until the cluster is healthy.

        Health alone is not enough: until the old process's session expires, the cluster
        still lists the old registration, and fences the broker when the new one replaces it.
        """
        deadline = time.monotonic() + timeout_s
        node = self.node(node_id)
        while True:
            found = broker_registrations([n.address for n in self.nodes], timeout_s=PROBE_TIMEOUT_S)
            epoch, fenced = (found or {}).get(node_id, (-1, True))
            if epoch >= 0 and not fenced and (previous_epoch is None or epoch > previous_epoch):
                break
            if node.pid is None or not is_alive(node.pid):
                raise LauncherError(self._describe_dead([node]))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LauncherError(
                    f"node {node_id} not registered as an unfenced broker within {timeout_s:g} s "
                    f"(broker epoch {epoch}, before the restart {previous_epoch}; logs: "
                    f"`lograft cluster logs {node_id} --data-dir {self.data_dir}`)"
                )
            time.sleep(min(HEALTH_POLL_INTERVAL_S, remaining))
        return self.wait_healthy(max(deadline - time.monotonic(), 0.1), on_status)

    def status(self, probe_timeout_s: float = PROBE_TIMEOUT_S) -> ClusterStatus:
        """Each node's process state and Metadata view (probed in parallel)."""
        self._refresh()

        def one(node: NodeRecord) -> NodeStatus:
            if node.pid is None or not is_alive(node.pid):
                return NodeStatus(node, False, "not running")
            if not is_our_node(node.pid, node.data_dir):
                stale = f"pid {node.pid} is another process now (stale pid)"
                return NodeStatus(node, False, "not running", error=stale)
            state = _process_state(node.pid)
            try:
                metadata = probe_metadata(node.address, probe_timeout_s)
            except grpc.RpcError as exc:
                return NodeStatus(node, True, _state_word(state), error=_rpc_error_text(exc))
            return NodeStatus(node, True, _state_word(state), metadata=metadata)

        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            nodes = list(pool.map(one, self.nodes))
        problems = health_problems([n.node_id for n in self.nodes], nodes)
        return ClusterStatus(self.data_dir, self.bootstrap, nodes, not problems, problems)

    def wait_healthy(
        self,
        timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
        on_status: Callable[[ClusterStatus], object] | None = None,
    ) -> ClusterStatus:
        """Poll until :func:`health_problems` finds none, or raise ``LauncherError``.

        Fails at once when a node process has exited, with the tail of its log.
        ``on_status`` sees every status polled (progress displays).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            current = self.status(probe_timeout_s=max(0.1, min(PROBE_TIMEOUT_S, remaining)))
            if on_status is not None:
                on_status(current)
            if current.healthy:
                return current
            dead = [s.node for s in current.nodes if not s.alive]
            if dead:
                raise LauncherError(self._describe_dead(dead))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LauncherError(
                    f"cluster not healthy within {timeout_s:g} s: "
                    + "; ".join(current.problems)
                    + f" (logs: `lograft cluster logs NODE --data-dir {self.data_dir}`)"
                )
            time.sleep(min(HEALTH_POLL_INTERVAL_S, remaining))

    def _describe_dead(self, dead: Sequence[NodeRecord]) -> str:
        parts = []
        for node in dead:
            code = _EXIT_CODES.get(node.pid) if node.pid is not None else None
            exit_note = f" (exit code {code})" if code is not None else ""
            try:
                tail = "\n    ".join(tail_lines(node.log_path, 15))
            except OSError:
                tail = "(no log)"
            parts.append(
                f"node {node.node_id} is not running{exit_note}; last lines of "
                f"{node.log_path}:\n    {tail}"
            )
        return "\n".join(parts)


def _state_word(state: str | None) -> str:
    if state is None:
        return "not running"
    return _PROCESS_STATES.get(state, state)


# ---- command line --------------------------------------------------------------------------


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

CLUSTER_DESCRIPTION = """\
A local cluster of lograft node processes (combined broker and controller roles) with
their data, logs and a cluster.json under one directory (--data-dir, default
./data/cluster). Node i listens on 127.0.0.1:BASE_PORT+i-1. Every action takes --data-dir;
the nodes keep running after the command returns, until `lograft cluster down`."""

CLUSTER_EPILOG = """\
examples:
  lograft cluster up --nodes 3 --base-port 9092
  lograft cluster status --json | jq .quorum
  lograft cluster kill 2 && lograft cluster restart 2"""


def _add_subcommands(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")

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

    status = actions.add_parser(
        "status",
        help="processes, the controller quorum, brokers and partitions (--json: one object)",
        description="""\
Each node's process (pid, running or paused, its metadata view), then what the cluster
says: the controller quorum (leader, epoch, high watermark, each voter's lag, as the
active controller knows it), the brokers (epoch, fenced, in controlled shutdown) and every
partition (leader, leader epoch, replicas, ISR, high watermark as its leader reports it).
Without a cluster.json in --data-dir it describes the cluster at --bootstrap (given
before `cluster`).

--json prints one object: data_dir, bootstrap, healthy, problems, controller_id, nodes
(one per process), quorum {leader_id, epoch, high_watermark, voters [{node_id,
log_end_offset, lag}], observers}, metadata_offset, brokers [{node_id, broker_epoch,
fenced, in_controlled_shutdown, address}], offline_partitions, partitions [{topic,
partition, leader, leader_epoch, replicas, isr, high_watermark}]. A lag or high
watermark of -1 is unknown.""",
        epilog="examples:\n"
        "  lograft cluster status\n"
        "  lograft cluster status --json | jq '.partitions[] | select(.leader < 0)'\n"
        "  lograft --bootstrap 10.0.0.5:9092 cluster status --data-dir /nonexistent",
        formatter_class=_RAW,
    )
    _add_data_dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON document")

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


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``lograft cluster status [--json]``: the processes, then the quorum and brokers.

    Without a ``cluster.json`` in ``--data-dir`` it reports the cluster reachable at the
    bootstrap address (``--bootstrap``) alone.
    """
    try:
        current: ClusterStatus | None = LocalCluster.load(args.data_dir).status()
    except LauncherError:
        current = None
    bootstrap = (
        current.bootstrap if current is not None else getattr(args, "bootstrap", None) or ""
    ).split(",")
    try:
        quorum: dict[str, Any] | None = describe_cluster([b for b in bootstrap if b])
    except LograftError as exc:
        if current is None:
            raise LauncherError(f"no cluster in {args.data_dir} and {exc}") from None
        quorum = None
    if args.json:
        document = current.to_json() if current is not None else {}
        if quorum is not None:
            document.update(quorum)
        print(json.dumps(document, indent=2), file=out)
        return 0
    if current is not None:
        _print_processes(current, out)
    if quorum is not None:
        print(render_status(quorum), file=out)
    return 0


def _print_processes(current: ClusterStatus, out: TextIO) -> None:
    print(f"Cluster {current.data_dir}", file=out)
    print(f"Bootstrap: {current.bootstrap}", file=out)
    print(f"Healthy: {'yes' if current.healthy else 'no'}", file=out)
    print(f"Active controller: {_dash(current.controller_id)}", file=out)
    header = f"{'NODE':<5} {'PID':<8} {'STATE':<12} {'ADDRESS':<22} {'CONTROLLER':<11} "
    print(header + f"{'BROKERS':<12} TOPICS", file=out)
    for status in current.nodes:
        metadata = status.metadata
        brokers = ",".join(map(str, metadata.broker_ids)) if metadata else "-"
        print(
            f"{status.node.node_id:<5} {_dash(status.node.pid if status.alive else None):<8} "
            f"{status.state:<12} {status.node.address:<22} "
            f"{_dash(metadata.controller_id if metadata else None):<11} {brokers:<12} "
            f"{_dash(metadata.topic_count if metadata else None)}",
            file=out,
        )
    for problem in current.problems:
        print(f"  ! {problem}", file=out)


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


if __name__ == "__main__":
    raise SystemExit(main())
