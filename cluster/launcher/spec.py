"""What a local cluster is made of, and ``cluster.json``, the file that records it.

:class:`ClusterSpec` is what ``up`` is asked for (node count, ports, host, data directory,
node settings); :class:`NodeRecord` is one node as ``cluster.json`` records it (ports, data
and log paths, roles, and the pid while it runs). This module also reads and writes
``DIR/cluster.json`` (atomically) and holds ``DIR/.cluster.lock`` for commands that change it.

A node may listen on an address of its own and run in a network namespace of its own
(``ClusterSpec.hosts`` and ``ClusterSpec.netns``; started behind ``ip netns exec NAME``): the
chaos suite's network partitions (:mod:`chaos.network`) use that.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lograft.durable import create_directories
from lograft.protocol.errors import LograftError

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_FILE_VERSION",
    "DEFAULT_BASE_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_HOST",
    "DEFAULT_NODES",
    "DEFAULT_ROLES",
    "LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "NETNS_EXEC",
    "NODE_LOG",
    "NODE_MODULE",
    "ClusterSpec",
    "LauncherError",
    "NodeRecord",
    "build_voters",
    "cluster_document",
    "cluster_lock",
    "node_port",
    "parse_cluster_document",
    "read_cluster_file",
    "voters_of",
    "write_cluster_file",
]

CLUSTER_FILE = "cluster.json"
"""The file in the cluster's directory that records it: nodes, ports, paths and pids."""
CLUSTER_FILE_VERSION = 1
"""The ``version`` of ``cluster.json`` written, and the only one read."""
LOCK_FILE = ".cluster.lock"
"""Locked (``flock``) by a launcher command that changes the cluster: one at a time."""
NODE_LOG = "node.log"
"""A node's output (stdout and stderr), in the node's own directory."""
NODE_MODULE = "cluster.node"
"""What a node runs (``python -m``); the /proc guard takes a pid for a node only if its
command line holds this."""
NETNS_EXEC: tuple[str, ...] = ("ip", "netns", "exec")
"""The command prefix that runs a node in a named network namespace (it execs the node, so
the pid is the node's and the /proc guard sees the node's own command line)."""

DEFAULT_NODES = 3
"""Nodes ``up`` starts without ``--nodes`` (or an existing ``cluster.json``)."""
DEFAULT_DATA_DIR = Path("data/cluster")
"""The cluster's directory without ``--data-dir``, relative to the working directory."""
DEFAULT_BASE_PORT = 9092
"""Node 1's port without ``--base-port``; node i listens on it + i - 1, so three nodes take
the ports of the clients' default bootstrap list (9092 to 9094)."""
DEFAULT_HOST = "127.0.0.1"
"""Where every node listens unless ``ClusterSpec.hosts`` names another address: loopback."""
DEFAULT_ROLES: tuple[str, ...] = ("broker", "controller")
"""Every node's roles: combined broker and controller; a spec may keep only some of them."""
LOCK_TIMEOUT_S = 120.0
"""How long (s) a command waits while another holds :data:`LOCK_FILE` before it gives up."""


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
    """What ``up`` should start: N combined nodes on consecutive ports, data under one dir.

    ``hosts`` gives a node (by id) another listen address than ``host``; ``netns`` starts a
    node (by id) inside that network namespace (``ip netns exec``, needs root); ``env`` adds
    variables to a node's (by id) environment (the chaos suite's clock jumps preload
    libfaketime this way). All default to none: every node on ``host``, in the launcher's
    namespace and environment.
    """

    data_dir: Path = DEFAULT_DATA_DIR
    nodes: int = DEFAULT_NODES
    base_port: int = DEFAULT_BASE_PORT
    host: str = DEFAULT_HOST
    configs: Mapping[str, str] = field(default_factory=dict)
    roles: tuple[str, ...] = DEFAULT_ROLES
    hosts: Mapping[int, str] = field(default_factory=dict)
    netns: Mapping[int, str] = field(default_factory=dict)
    env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

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
        for name in ("hosts", "netns", "env"):
            per_node = dict(getattr(self, name))
            if set(per_node) - set(self.node_ids):
                raise LauncherError(f"{name} names nodes {sorted(per_node)}, not all among 1..N")
            object.__setattr__(self, name, per_node)

    @property
    def node_ids(self) -> range:
        """Node ids 1..N."""
        return range(1, self.nodes + 1)

    def host_of(self, node_id: int) -> str:
        """The address node ``node_id`` listens on: ``hosts[node_id]``, else ``host``."""
        return self.hosts.get(node_id, self.host)

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
                    host=self.host_of(node_id),
                    client_port=port,
                    controller_port=port,
                    data_dir=node_dir,
                    log_path=node_dir / NODE_LOG,
                    roles=self.roles,
                    netns=self.netns.get(node_id),
                    env=dict(self.env.get(node_id, {})),
                )
            )
        return records

    def controller_quorum_voters(self) -> str:
        """The voters string every node gets: every node is a controller in combined mode."""
        return voters_of(self.node_records())


@dataclass
class NodeRecord:
    """One node as ``cluster.json`` records it; ``pid`` is ``None`` when it was stopped.

    ``netns``: the network namespace the node runs in (``None``: the launcher's); ``env``:
    variables added to the node's environment.
    """

    node_id: int
    pid: int | None
    host: str
    client_port: int
    controller_port: int
    data_dir: Path
    log_path: Path
    roles: tuple[str, ...]
    netns: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """``host:client_port``, what clients dial."""
        return f"{self.host}:{self.client_port}"

    def command(self, voters: str, configs: Mapping[str, str]) -> list[str]:
        """The argv that starts this node (behind ``ip netns exec NAME`` with a ``netns``)."""
        prefix = [*NETNS_EXEC, self.netns] if self.netns is not None else []
        argv = [
            *prefix,
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
        """The node's entry in ``cluster.json`` (``netns`` and ``env`` only when it has
        them)."""
        doc: dict[str, Any] = {
            "node_id": self.node_id,
            "pid": self.pid,
            "host": self.host,
            "client_port": self.client_port,
            "controller_port": self.controller_port,
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "roles": list(self.roles),
        }
        if self.netns is not None:
            doc["netns"] = self.netns
        if self.env:
            doc["env"] = dict(self.env)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> NodeRecord:
        """Parse one ``nodes`` entry of ``cluster.json`` (``KeyError``/``TypeError`` if bad)."""
        pid = doc["pid"]
        netns = doc.get("netns")
        return cls(
            node_id=int(doc["node_id"]),
            pid=None if pid is None else int(pid),
            host=str(doc.get("host", DEFAULT_HOST)),
            client_port=int(doc["client_port"]),
            controller_port=int(doc["controller_port"]),
            data_dir=Path(doc["data_dir"]),
            log_path=Path(doc["log_path"]),
            roles=tuple(str(role) for role in doc["roles"]),
            netns=None if netns is None else str(netns),
            env={str(k): str(v) for k, v in dict(doc.get("env", {})).items()},
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
            self.netns,
            tuple(sorted(self.env.items())),
        )


def voters_of(nodes: Sequence[NodeRecord]) -> str:
    """``controller.quorum.voters`` for the nodes among ``nodes`` with the controller role."""
    voters = [n for n in nodes if "controller" in n.roles]
    if not voters:
        return ""
    hosts = {n.host for n in voters}
    if len(hosts) == 1:
        return build_voters(hosts.pop(), {n.node_id: n.controller_port for n in voters})
    return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in voters)


# ---- cluster.json --------------------------------------------------------------------------


def cluster_document(
    nodes: Sequence[NodeRecord], voters: str, configs: Mapping[str, str]
) -> dict[str, Any]:
    """The ``cluster.json`` document for ``nodes``, their voters string and node settings."""
    return {
        "version": CLUSTER_FILE_VERSION,
        "bootstrap": ",".join(n.address for n in nodes),
        "nodes": [n.to_json() for n in nodes],
        "controller_quorum_voters": voters,
        "configs": dict(configs),
    }


def parse_cluster_document(
    data_dir: Path, doc: Mapping[str, Any]
) -> tuple[ClusterSpec, list[NodeRecord], str]:
    """The spec, node records (by id) and voters string of a ``cluster.json`` document
    found in ``data_dir``; ``LauncherError`` if it has another version or is malformed."""
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
        hosts={n.node_id: n.host for n in nodes if n.host != nodes[0].host},
        netns={n.node_id: n.netns for n in nodes if n.netns is not None},
        env={n.node_id: n.env for n in nodes if n.env},
    )
    return spec, nodes, voters


def read_cluster_file(data_dir: Path) -> dict[str, Any]:
    """The JSON object in ``data_dir/cluster.json``; ``LauncherError`` if none or unreadable."""
    path = data_dir / CLUSTER_FILE
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
    return doc


def write_cluster_file(data_dir: Path, doc: Mapping[str, Any]) -> None:
    """Write ``data_dir/cluster.json`` atomically (temporary file, fsync, rename, fsync dir)."""
    create_directories(data_dir)
    body = (json.dumps(doc, indent=2) + "\n").encode()
    temporary = data_dir / f".{CLUSTER_FILE}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        file.write(body)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, data_dir / CLUSTER_FILE)
    directory = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextlib.contextmanager
def cluster_lock(data_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold ``data_dir/.cluster.lock`` (one launcher command changes the cluster at a time)."""
    create_directories(data_dir)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LauncherError(
                        f"another launcher command holds {data_dir / LOCK_FILE}"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock
