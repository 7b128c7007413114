"""Faults, the targets they are injected into, and their record in the history.

* :class:`Target` is where the cluster runs, as faults see it: its nodes, ``kill`` /
  ``stop`` / ``start`` / ``pause`` / ``resume`` of nodes, which node leads a partition and
  which is the active controller, and (when it can cut links) a :class:`Network`.
  :class:`LocalTarget` runs node processes through :class:`~cluster.launcher.LocalCluster`
  (``kill -9``, ``SIGSTOP``/``SIGCONT``; with ``netns=True`` each node in a network
  namespace of its own, :class:`chaos.network.NetnsNetwork`); :class:`ComposeTarget` runs the
  repository's ``docker-compose.yml`` (``docker kill``, ``docker pause``, network
  disconnects). With ``lazyfs=True`` the local nodes keep their data on a LazyFS mount
  (:mod:`chaos.lazyfs`), the :class:`Disk` a power loss crashes; with ``clocks=True`` they
  run on wall clocks of their own (:mod:`chaos.clock`).
* A :class:`Fault` picks its nodes (:meth:`Fault.select`), then ``inject`` and, after the
  step's hold, ``heal``: :class:`Kill` (restart), :class:`Pause` (resume), :class:`Isolate`,
  :class:`Split`, :class:`Bridge` and :class:`OneWay` (network; heal), :class:`TornTail`
  (kill, damage segment tails; restart), :class:`SlowDisk` (fsyncs slow; normal),
  :class:`ClockJump` (wall clock moved; reset), :class:`LastInSync` (the ISR of a partition
  shrunk to its leader, which is killed, maybe emptied or torn; restart). :data:`FAULTS`
  names each fault a schedule step (:class:`chaos.scenarios.FaultStep`) may ask for; a fault
  aimed at the watched partition gets it through :meth:`Fault.for_partition`.
* :class:`Nemesis` performs the steps on a target and records each injection and healing in
  the history as a ``fault`` op (invoke, then ok or fail), so the checker can measure
  recovery from each heal. A fault that cannot be done is recorded as ``fail``, not raised.

A new kind of fault is a :class:`Fault` subclass and a :data:`FAULTS` entry (and a scenario
in :mod:`chaos.scenarios` that uses it); a new place to run the cluster is a class with the
:class:`Target` methods.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Protocol

from chaos.checker import HEALING_FAULTS
from chaos.clock import NodeClocks
from chaos.history import HistoryWriter
from chaos.lazyfs import LazyFS
from chaos.network import NetnsNetwork, free_subnet
from chaos.scenarios import DISK_FAULTS, NETWORK_FAULTS, SCENARIOS, FaultStep, schedule
from chaos.torn_tails import empty_partition, tear_tail, tear_tails
from cluster.client import AdminClient
from cluster.container import env_name
from cluster.errors import LograftError
from cluster.launcher import ClusterSpec, LocalCluster
from cluster.launcher.processes import free_base_port
from replica.log.partition_log import PartitionLog
from replica.log.replication_offset_checkpoint import read_high_watermarks
from replica.record_codec import iter_records
from replica.topic_config import LogConfig
from replica.topic_partition import TopicPartition

__all__ = [
    "END_OF_FAULTS",
    "FAULTS",
    "SCENARIOS",
    "Bridge",
    "ClockJump",
    "ComposeTarget",
    "Disk",
    "Fault",
    "FaultStep",
    "Injected",
    "Isolate",
    "Kill",
    "LastInSync",
    "LocalTarget",
    "Nemesis",
    "Network",
    "OneWay",
    "PartitionState",
    "Pause",
    "PowerLoss",
    "SlowDisk",
    "Split",
    "Target",
    "TargetError",
    "TornTail",
    "schedule",
]

log = logging.getLogger(__name__)

END_OF_FAULTS = "end of faults"
"""The ``detail`` of the heal that ends a run's faults (:meth:`Nemesis.heal_everything`)."""
ADMIN_TIMEOUT_MS = 5000
"""Bound of each leader / controller lookup: a fault must not wait long for its node."""
IN_SYNC_TIMEOUT_S = 60.0
"""How long a fault that needs whole ISRs waits for them before it goes ahead anyway."""
FSYNC_HOLD_MS = 30000.0
"""How long a last-replica fault holds up a follower's fsyncs (LazyFS's longest delay); the
fault lets them go once the leader is dead, well within it."""
FSYNC_PRIME_MS = 100.0
PRIME_APPENDS = 3
PRIME_TIMEOUT_S = 10.0
"""Before any hold, both followers' fsyncs of the partition take ``FSYNC_PRIME_MS`` longer
until each follower's log of it has grown ``PRIME_APPENDS`` times (a follower appends again
only once the previous append is flushed), at most ``PRIME_TIMEOUT_S``. A partition whose
flushes averaged under 1 ms runs its next one on the node's event loop
(``replica.partition.INLINE_FLUSH_MAX_S``), so a first held fsync would stall the whole node
for the hold (seen: 30 s and 6 s, the node fenced); after a slower one its flushes go to the
node's fsync thread, and a held one stops only what waits for that thread."""
PRIME_POLL_S = 0.05
LAG_OUT_TIMEOUT_S = 20.0
"""How long a last-replica fault waits for a held-up follower to leave the ISR
(``replica.lag.time.max.ms``, 4 s in chaos runs, then the controller's commit)."""
ELECTION_TIMEOUT_S = 30.0
"""How long it waits, after killing the leader, for the controller to act on it
(``broker.session.timeout.ms``, then the partition offline or led by a follower)."""
PARTITION_POLL_S = 0.25
MAX_PARTITION_POLLS = 400
"""Bounds of each wait on a partition's metadata, beside its timeout."""
LAST_REPLICA_ENDS = ("dead", "empty", "torn")
"""What the leader of a last-replica fault comes back with (:attr:`LastInSync.then`)."""

ReplicaLogs = dict[tuple[str, int], dict[int, list[tuple[int, str | None]]]]
"""Per partition, per node: the ``(offset, value)`` records below that node's high watermark."""


class TargetError(Exception):
    """A target could not do what a fault or the runner asked (the message says what)."""


class Network(Protocol):
    """Cuts between nodes (``chaos.network.NetnsNetwork`` has these, with more)."""

    def isolate(self, node: int, cut_clients: bool = True) -> object:
        """Cut ``node`` off every other node (and the clients with ``cut_clients``)."""
        ...

    def partition(self, groups: Sequence[Iterable[int]], cut_clients: bool = False) -> object:
        """Let nodes talk only within their groups (groups that overlap make a bridge)."""
        ...

    def one_way(self, src: int, dst: int | Iterable[int]) -> object:
        """Drop packets from ``src`` to ``dst``, not the reverse."""
        ...

    def heal(self) -> object:
        """Undo every cut."""
        ...


class Disk(Protocol):
    """The nodes' storage as a power loss sees it (``chaos.lazyfs.LazyFS`` has this)."""

    def crash(self) -> object:
        """Drop every write and directory change not made durable by an fsync."""
        ...


class Target(Protocol):
    """Where the cluster runs, as the nemesis and the runner see it.

    Node ids are 1..N. Methods that change a node return once the change is done (a started
    node serves again, a paused one is stopped); they raise on failure.
    """

    name: str

    @property
    def bootstrap(self) -> str:
        """``host:port,...`` for clients (valid after :meth:`up`)."""
        ...

    @property
    def node_ids(self) -> list[int]:
        """Every node."""
        ...

    @property
    def network(self) -> Network | None:
        """The network cuts, or ``None`` when this target cannot cut links."""
        ...

    @property
    def disk(self) -> Disk | None:
        """The storage that can lose power, or ``None`` when this target has none."""
        ...

    def up(self) -> None:
        """Start the cluster and return once it is healthy."""
        ...

    def close(self) -> None:
        """Stop the cluster and remove what :meth:`up` set up (keeps the data)."""
        ...

    def kill(self, node: int) -> None:
        """``kill -9`` the node."""
        ...

    def stop(self, node: int) -> None:
        """Stop the node gracefully (SIGTERM: controlled shutdown)."""
        ...

    def start(self, nodes: Sequence[int]) -> None:
        """Start those of ``nodes`` that are not running; return once each serves again
        (registered as an unfenced broker, the cluster healthy)."""
        ...

    def pause(self, node: int) -> None:
        """``SIGSTOP`` the node (``docker pause``)."""
        ...

    def resume(self, node: int) -> None:
        """``SIGCONT`` the node (``docker unpause``)."""
        ...

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The node leading ``topic-partition`` now (``None``: none or unknown)."""
        ...

    def controller(self) -> int | None:
        """The active controller now (``None``: none or unknown)."""
        ...

    def wait_in_sync(self, topic: str, timeout_s: float) -> list[str]:
        """Wait (at most ``timeout_s``) until every partition of ``topic`` has its whole ISR
        and a leader; returns the partitions still short."""
        ...

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """Leader, replicas and ISR of ``topic-partition`` as some node's metadata has them
        now (``None``: the lookup failed)."""
        ...

    def node_data_dir(self, node: int) -> Path | None:
        """The data directory of ``node`` as this process can write it while the node is
        stopped, or ``None`` when this target cannot reach it."""
        ...

    def node_log(self, node: int) -> Path | None:
        """The file ``node`` logs to (every incarnation appends), or ``None`` when this
        target cannot read it."""
        ...

    def slow_disk(self, node: int, milliseconds: float, under: str = "") -> None:
        """Make every fsync of ``node`` take ``milliseconds`` longer (0: normal again); with
        ``under`` (a path in its data directory: ``chaos-0``) only the fsyncs of files under
        it; :class:`TargetError` when this target cannot."""
        ...

    def set_clock(self, node: int, offset_s: int) -> None:
        """Set ``node``'s wall clock ``offset_s`` seconds from the real time (0: right
        again); :class:`TargetError` when this target cannot."""
        ...

    def replica_logs(self, topic: str, partitions: int) -> ReplicaLogs | None:
        """After :meth:`close`: each node's records of each partition below its high
        watermark, read from its data directory; ``None`` when this target cannot."""
        ...


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition as the metadata describes it: its leader (``None``: none), its replicas
    in replica order, its ISR."""

    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def __str__(self) -> str:
        leader = "none" if self.leader is None else self.leader
        return f"leader {leader} isr {list(self.isr)}"


def under_replicated(admin: AdminClient, topic: str) -> list[str]:
    """The partitions of ``topic`` whose ISR is short of their replicas or that have no
    leader (``topic-*`` with the error when the lookup fails)."""
    try:
        (description,) = admin.describe_topics([topic])
    except LograftError as exc:
        return [f"{topic}-* ({exc.error_name})"]
    return [
        f"{topic}-{p.partition}"
        for p in description.partitions
        if len(p.isr) < len(p.replicas) or p.leader < 0
    ]


class _AdminLookups:
    """``leader_of``, ``controller`` and ``wait_in_sync`` through an admin client."""

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    def _admin(self) -> AdminClient:
        return AdminClient(
            {"bootstrap.servers": self.bootstrap, "default.api.timeout.ms": ADMIN_TIMEOUT_MS}
        )

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The leader of ``topic-partition`` as some node's metadata has it."""
        try:
            with self._admin() as admin:
                (description,) = admin.describe_topics([topic])
        except LograftError as exc:
            log.info("leader lookup failed topic=%s error=%s", topic, exc)
            return None
        for info in description.partitions:
            if info.partition == partition and info.leader >= 0:
                return info.leader
        return None

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """Leader, replicas and ISR of ``topic-partition`` as some node's metadata has them."""
        try:
            with self._admin() as admin:
                (description,) = admin.describe_topics([topic])
        except LograftError as exc:
            log.info("partition lookup failed topic=%s error=%s", topic, exc)
            return None
        for info in description.partitions:
            if info.partition == partition:
                leader = info.leader if info.leader >= 0 else None
                return PartitionState(leader, tuple(info.replicas), tuple(info.isr))
        return None

    def wait_in_sync(self, topic: str, timeout_s: float) -> list[str]:
        """Wait (at most ``timeout_s``) until every partition of ``topic`` has its whole ISR
        and a leader; returns the partitions still short."""
        deadline = time.monotonic() + timeout_s
        with self._admin() as admin:
            while True:
                short = under_replicated(admin, topic)
                if not short or time.monotonic() > deadline:
                    return short
                time.sleep(0.25)

    def controller(self) -> int | None:
        """The active controller as some node's metadata has it."""
        try:
            with self._admin() as admin:
                found = admin.describe_cluster().controller
        except LograftError as exc:
            log.info("controller lookup failed error=%s", exc)
            return None
        return None if found is None or found.id < 0 else found.id


class LocalTarget(_AdminLookups):
    """Node processes on this machine (:class:`~cluster.launcher.LocalCluster`).

    ``data_dir`` holds every node's data. With ``netns`` each node runs in a network
    namespace of its own behind a bridge (needs root, ``ip`` and ``nft``), so that
    :attr:`network` can cut links; otherwise nodes listen on 127.0.0.1 and there is no
    network to cut. With ``lazyfs`` ``data_dir`` is a LazyFS mount (``/dev/fuse``; its
    durable store in ``data_dir`` + ``.durable``), so that :attr:`disk` can lose power.
    With ``clocks`` each node runs with libfaketime preloaded and an offset file of its own
    (:class:`chaos.clock.NodeClocks`, in ``data_dir`` + ``.clocks``), so that
    :meth:`set_clock` can move its wall clock.
    """

    name = "local"

    def __init__(
        self,
        data_dir: Path,
        nodes: int = 3,
        configs: Mapping[str, str] | None = None,
        netns: bool = False,
        lazyfs: bool = False,
        clocks: bool = False,
    ) -> None:
        self._data_dir = data_dir
        self._nodes = nodes
        self._clocks = (
            NodeClocks(data_dir.with_name(data_dir.name + ".clocks"), self.node_ids)
            if clocks
            else None
        )
        self._configs = dict(configs or {})
        self._netns = netns
        self._network: NetnsNetwork | None = None
        self._lazyfs = (
            LazyFS(data_dir.with_name(data_dir.name + ".durable"), data_dir) if lazyfs else None
        )
        self._mounted = False
        self._cluster: LocalCluster | None = None

    @property
    def cluster(self) -> LocalCluster:
        """The launcher's cluster (after :meth:`up`)."""
        if self._cluster is None:
            raise TargetError("the local cluster is not up")
        return self._cluster

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self._nodes + 1))

    @property
    def network(self) -> Network | None:
        return self._network

    @property
    def disk(self) -> Disk | None:
        return self._lazyfs

    def up(self) -> None:
        if self._lazyfs is not None:
            self._lazyfs.mount()
            self._mounted = True
        clocks = self._clocks
        env = {n: clocks.env(n) for n in self.node_ids} if clocks is not None else {}
        if self._netns:
            network = NetnsNetwork(f"lgc{os.getpid() % 100000}", self._nodes, free_subnet())
            network.setup()
            self._network = network
            spec = network.cluster_spec(self._data_dir, configs=self._configs, env=env)
        else:
            spec = ClusterSpec(
                data_dir=self._data_dir,
                nodes=self._nodes,
                base_port=free_base_port(self._nodes),
                configs=self._configs,
                env=env,
            )
        self._cluster = LocalCluster(spec)
        try:
            self._cluster.up(wait=True)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            if self._cluster is not None:
                self._resume_all()
                self._cluster.down()
        finally:
            try:
                if self._network is not None:
                    self._network.teardown()
            finally:
                if self._lazyfs is not None and self._mounted:
                    self._lazyfs.unmount(sync=True)  # the durable store then has it all
                    self._mounted = False

    def _resume_all(self) -> None:
        for node in self.node_ids:
            record = self.cluster.node(node)
            if self.cluster.running(record):
                self.cluster.kill(node, signal.SIGCONT)

    def kill(self, node: int) -> None:
        self.cluster.kill(node, signal.SIGKILL)

    def stop(self, node: int) -> None:
        self.cluster.kill(node, signal.SIGTERM, wait_s=60.0)

    def start(self, nodes: Sequence[int]) -> None:
        cluster = self.cluster
        stopped = [n for n in nodes if not cluster.running(cluster.node(n))]
        if not stopped:
            return
        if len(stopped) * 2 > self._nodes:
            # Without a majority the cluster cannot register anyone: start them all, then wait.
            cluster.up(wait=True)
            return
        epochs = {n: cluster.broker_epoch(n) for n in stopped}
        for node in stopped:
            cluster.restart(node, wait=False)
        for node in stopped:
            cluster.wait_reregistered(node, epochs[node])

    def pause(self, node: int) -> None:
        self.cluster.kill(node, signal.SIGSTOP)

    def resume(self, node: int) -> None:
        self.cluster.kill(node, signal.SIGCONT)

    def node_data_dir(self, node: int) -> Path | None:
        return self.cluster.node(node).data_dir

    def node_log(self, node: int) -> Path | None:
        return self.cluster.node(node).log_path

    def set_clock(self, node: int, offset_s: int) -> None:
        if self._clocks is None:
            raise TargetError(
                "clock jumps need the nodes on libfaketime (LocalTarget(clocks=True))"
            )
        self._clocks.set_offset(node, offset_s)

    def slow_disk(self, node: int, milliseconds: float, under: str = "") -> None:
        if self._lazyfs is None:
            raise TargetError("a slow disk needs the data on LazyFS (LocalTarget(lazyfs=True))")
        data_dir = self.cluster.node(node).data_dir.resolve()
        relative = data_dir.relative_to(self._lazyfs.mountpoint.resolve())
        if under:
            relative = relative / under
        self._lazyfs.slow(f"/{relative}", milliseconds)

    def replica_logs(self, topic: str, partitions: int) -> ReplicaLogs | None:
        root = self._lazyfs.backing if self._lazyfs is not None else self._data_dir
        return read_replica_logs({n: root / f"node-{n}" for n in self.node_ids}, topic, partitions)


def read_replica_logs(node_dirs: Mapping[int, Path], topic: str, partitions: int) -> ReplicaLogs:
    """Each node's records of ``topic``'s partitions below its checkpointed high watermark,
    read from its data directory (the node must be stopped)."""
    logs: ReplicaLogs = {(topic, p): {} for p in range(partitions)}
    for node, node_dir in sorted(node_dirs.items()):
        high_watermarks = read_high_watermarks(node_dir)
        for partition in range(partitions):
            directory = node_dir / f"{topic}-{partition}"
            high_watermark = high_watermarks.get(TopicPartition(topic, partition))
            if not directory.is_dir() or high_watermark is None:
                continue
            records = _read_log(directory, high_watermark)
            logs[(topic, partition)][node] = records
    return logs


def _read_log(directory: Path, high_watermark: int) -> list[tuple[int, str | None]]:
    partition_log = PartitionLog.open(directory, LogConfig(), int(time.time() * 1000))
    records: list[tuple[int, str | None]] = []
    try:
        offset = partition_log.log_start_offset
        while offset < high_watermark:
            data = partition_log.read(offset, 1 << 20, max_offset=high_watermark)
            if not data:
                break
            for record in iter_records(data, offset):
                if record.offset >= high_watermark:
                    break
                value = None if record.value is None else record.value.decode()
                records.append((record.offset, value))
                offset = record.offset + 1
            else:
                continue
            break
    finally:
        partition_log.close()
    return records


COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
DOCKER_TIMEOUT_S = 120.0
DATA_VOLUME_PATH = "/var/lib/lograft"
"""The node's data directory in the image (docker/Dockerfile's ``VOLUME``)."""
IMAGE_UID = 10001
"""The uid and gid the image's node runs as (docker/Dockerfile's ``lograft`` user)."""


class _ComposeNetwork:
    """Network cuts by disconnecting containers from the compose network (clients too: they
    reach a container through it)."""

    def __init__(self, target: ComposeTarget) -> None:
        self._target = target
        self._cut: set[int] = set()

    def isolate(self, node: int, cut_clients: bool = True) -> object:
        self._disconnect([node])
        return None

    def partition(self, groups: Sequence[Iterable[int]], cut_clients: bool = False) -> object:
        # One bridge network: only the largest group keeps it, every other node is cut alone.
        sides = sorted((sorted(g) for g in groups), key=len, reverse=True)
        cut = [n for side in sides[1:] for n in side]
        if set(cut) & set(sides[0]):
            raise TargetError("the compose target cannot make a bridge (groups that overlap)")
        self._disconnect(cut)
        return None

    def one_way(self, src: int, dst: int | Iterable[int]) -> object:
        raise TargetError("the compose target cannot drop packets one way (local: namespaces)")

    def heal(self) -> object:
        for node in sorted(self._cut):
            service = self._target.service(node)
            self._target.docker(
                "network",
                "connect",
                "--alias",
                service,
                self._target.network_name,
                self._target.container(node),
            )
        self._cut.clear()
        return None

    def _disconnect(self, nodes: Sequence[int]) -> None:
        for node in nodes:
            if node in self._cut:
                continue
            self._target.docker(
                "network", "disconnect", self._target.network_name, self._target.container(node)
            )
            self._cut.add(node)


class ComposeTarget(_AdminLookups):
    """The three nodes of the repository's ``docker-compose.yml`` under a project of its own.

    Needs ``docker``, ``docker-compose`` and the image (``make image``). Host ports are free
    ones; ``configs`` become ``LOGRAFT_*`` environment variables of every node (through an
    override file written to ``work_dir``). Data lives in the project's volumes, removed by
    :meth:`close`, so :meth:`replica_logs` is ``None``; with ``lazyfs`` it lives instead on
    a LazyFS mount of this host (``work_dir``/``data``, durable store ``data.durable``), one
    directory per node bind-mounted over the container's data volume, so that :attr:`disk`
    can lose power and :meth:`replica_logs` can read what each node had synced.
    """

    name = "compose"

    def __init__(
        self,
        work_dir: Path,
        configs: Mapping[str, str] | None = None,
        image: str = "lograft:latest",
        compose_file: Path = COMPOSE_FILE,
        project: str | None = None,
        lazyfs: bool = False,
    ) -> None:
        self._work_dir = work_dir
        self._configs = dict(configs or {})
        self._lazyfs = (
            LazyFS(work_dir / "data.durable", work_dir / "data", allow_other=True)
            if lazyfs
            else None
        )
        self._mounted = False
        self._compose_file = compose_file
        self.project = project or f"lograft-chaos-{os.getpid()}"
        base = free_base_port(3)
        self.ports = [base, base + 1, base + 2]
        """The host ports the nodes are published on (``LOGRAFT_PORT_1..3``)."""
        self.env = {
            **os.environ,
            "LOGRAFT_IMAGE": image,
            **{f"LOGRAFT_PORT_{n}": str(p) for n, p in zip(self.node_ids, self.ports, strict=True)},
        }
        """The environment of every compose and docker command (image, host ports)."""
        self._containers: dict[int, str] = {}
        self._network = _ComposeNetwork(self)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    @property
    def network(self) -> Network | None:
        return self._network

    @property
    def disk(self) -> Disk | None:
        return self._lazyfs

    @property
    def network_name(self) -> str:
        """The compose network the containers share."""
        return f"{self.project}_default"

    def service(self, node: int) -> str:
        """The compose service (and host name) of ``node``."""
        return f"lograft-{node}"

    def container(self, node: int) -> str:
        """The container id of ``node``."""
        if node not in self._containers:
            found = self.compose("ps", "-q", self.service(node)).stdout.strip()
            if not found:
                raise TargetError(f"no container for {self.service(node)}")
            self._containers[node] = found
        return self._containers[node]

    def docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``docker ARGS``; raises :class:`TargetError` when it fails."""
        return self._run(["docker", *args])

    def compose(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``docker-compose ARGS`` on this project; raises :class:`TargetError` when it fails."""
        override = self._work_dir / "compose-override.yml"
        files = ["--file", str(self._compose_file)]
        if self._configs or self._lazyfs is not None:
            files += ["--file", str(override)]
        return self._run(["docker-compose", "--project-name", self.project, *files, *args])

    def _run(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                command,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=DOCKER_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TargetError(f"{' '.join(command)}: {exc}") from exc
        if done.returncode != 0:
            raise TargetError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-400:]}")
        return done

    def _write_override(self) -> None:
        env = "".join(
            f'      {env_name(name)}: "{value}"\n' for name, value in sorted(self._configs.items())
        )
        services = ""
        for node in self.node_ids:
            services += f"  {self.service(node)}:\n"
            if env:
                services += f"    environment:\n{env}"
            if self._lazyfs is not None:
                # Compose merges a service's volumes by their path in the container: this
                # bind mount replaces the named data volume.
                bound = self._lazyfs.mountpoint / f"node-{node}"
                services += f'    volumes:\n      - "{bound}:{DATA_VOLUME_PATH}"\n'
        self._work_dir.mkdir(parents=True, exist_ok=True)
        (self._work_dir / "compose-override.yml").write_text(
            f'version: "2.4"\nservices:\n{services}'
        )

    def _mount_data(self) -> None:
        """Mount the LazyFS and give each node a data directory the image's user owns."""
        assert self._lazyfs is not None
        self._lazyfs.mount()
        self._mounted = True
        for node in self.node_ids:
            directory = self._lazyfs.mountpoint / f"node-{node}"
            directory.mkdir(exist_ok=True)
            os.chown(directory, IMAGE_UID, IMAGE_UID)
        self._lazyfs.sync_all()

    def up(self) -> None:
        try:
            if self._lazyfs is not None:
                self._mount_data()
            if self._configs or self._lazyfs is not None:
                self._write_override()
            self.compose("up", "-d")
            self.wait_healthy(self.node_ids)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5")
        except TargetError as exc:
            log.warning("compose down failed project=%s error=%s", self.project, exc)
        finally:
            if self._lazyfs is not None and self._mounted:
                self._lazyfs.unmount(sync=True)  # the durable store then has it all
                self._mounted = False

    def health(self, node: int) -> str:
        """Docker's health status of ``node``'s container: starting, healthy or unhealthy."""
        done = self.docker("inspect", "--format", "{{.State.Health.Status}}", self.container(node))
        return done.stdout.strip()

    def wait_healthy(self, nodes: Sequence[int], timeout_s: float = 180.0) -> None:
        """Wait until Docker reports the containers of ``nodes`` healthy (the image's health
        check asks each node: registered, unfenced, caught up); ``TargetError`` if not."""
        deadline = time.monotonic() + timeout_s
        while not all(self.health(n) == "healthy" for n in nodes):
            if time.monotonic() > deadline:
                states = {n: self.health(n) for n in nodes}
                raise TargetError(
                    f"nodes {list(nodes)} not healthy within {timeout_s:g} s: {states}"
                )
            time.sleep(1.0)

    def kill(self, node: int) -> None:
        self.docker("kill", "--signal", "KILL", self.container(node))
        # Returns once the container has stopped: a power loss drops unsynced writes only
        # after no process can write any more.
        self.docker("wait", self.container(node))

    def stop(self, node: int) -> None:
        self.docker("stop", self.container(node))

    def start(self, nodes: Sequence[int]) -> None:
        for node in nodes:
            self.docker("start", self.container(node))
        self.wait_healthy(nodes)

    def pause(self, node: int) -> None:
        self.docker("pause", self.container(node))

    def resume(self, node: int) -> None:
        self.docker("unpause", self.container(node))

    def node_data_dir(self, node: int) -> Path | None:
        return None

    def node_log(self, node: int) -> Path | None:
        return None

    def slow_disk(self, node: int, milliseconds: float, under: str = "") -> None:
        raise TargetError("the compose target has no slow disk (local: data on LazyFS)")

    def set_clock(self, node: int, offset_s: int) -> None:
        raise TargetError("the compose target cannot move a node's clock (local: libfaketime)")

    def replica_logs(self, topic: str, partitions: int) -> ReplicaLogs | None:
        if self._lazyfs is None:
            return None
        root = self._lazyfs.backing
        return read_replica_logs({n: root / f"node-{n}" for n in self.node_ids}, topic, partitions)


# ---- faults ---------------------------------------------------------------------------------

Selector = Callable[[Target, FaultStep, tuple[str, int]], list[int]]
"""Picks a fault's nodes: ``(target, step, (topic, partition)) -> node ids``."""


def picked(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The nodes the seed picked for the step."""
    return list(step.nodes)


def leader(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The leader of the workload's first partition (the seed's node when it has none)."""
    found = target.leader_of(*tp)
    return [found if found is not None else step.nodes[0]]


def controller(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The active controller (the seed's node when none is known)."""
    found = target.controller()
    return [found if found is not None else step.nodes[0]]


def every(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """Every node."""
    return list(target.node_ids)


@dataclass(frozen=True, slots=True)
class Fault(ABC):
    """A kind of fault: which nodes it hits (``select``), how to inject it and to heal it.

    ``name`` and ``heal_name`` are the ``fault`` field of the history's ``fault`` ops.
    """

    name: ClassVar[str]
    heal_name: ClassVar[str]
    needs_in_sync: ClassVar[bool] = False
    """Inject only once every partition of the workload's topic has its whole ISR (bounded
    by :data:`IN_SYNC_TIMEOUT_S`): a fault that takes away one replica's data must hit one
    replica, not the last one left in sync."""
    select: Selector

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        """The ``detail`` of the fault's history op."""
        return step.fault

    def for_partition(self, tp: tuple[str, int]) -> Fault:
        """This fault aimed at ``tp``, the partition the nemesis watches (a fault that does
        not aim at a partition is itself)."""
        return self

    @abstractmethod
    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        """Inject the fault into ``nodes``; returns what it did beyond its name, if anything
        (the ``detail`` of its completion in the history)."""

    @abstractmethod
    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        """Undo :meth:`inject`."""


@dataclass(frozen=True, slots=True)
class Kill(Fault):
    """``kill -9`` the nodes at once; healed by starting them again."""

    name: ClassVar[str] = "kill"
    heal_name: ClassVar[str] = "restart"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        errors = []
        for node in nodes:  # kill every one even when one fails
            try:
                target.kill(node)
            except Exception as exc:
                errors.append(f"node {node}: {exc}")
        if errors:
            raise TargetError("; ".join(errors))
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class Pause(Fault):
    """``SIGSTOP`` the nodes; healed by ``SIGCONT``."""

    name: ClassVar[str] = "pause"
    heal_name: ClassVar[str] = "resume"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.pause(node)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.resume(node)


@dataclass(frozen=True, slots=True)
class PowerLoss(Fault):
    """Every one of the nodes loses power at once: ``kill -9``, then every write and
    directory change not made durable by an fsync is dropped; healed by starting them."""

    name: ClassVar[str] = "power-loss"
    heal_name: ClassVar[str] = "restart"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        if target.disk is None:
            raise TargetError(f"the {target.name} target cannot lose power (no data on LazyFS)")
        try:
            Kill(self.select).inject(target, nodes)
        finally:
            dropped = target.disk.crash()  # whatever was killed loses what it had not synced
        return f"dropped {dropped}"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class TornTail(Fault):
    """``kill -9`` the nodes, then damage the tail of the active segment of every partition
    in their data directories (:func:`chaos.torn_tails.tear_tails`); healed by starting
    them, which must recover the logs and fetch again what was lost."""

    name: ClassVar[str] = "torn-tail"
    heal_name: ClassVar[str] = "restart"
    needs_in_sync: ClassVar[bool] = True

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        directories = {node: target.node_data_dir(node) for node in nodes}
        if any(directory is None for directory in directories.values()):
            raise TargetError(f"the {target.name} target cannot reach its nodes' data")
        Kill(self.select).inject(target, nodes)
        damaged = []
        for node, directory in sorted(directories.items()):
            assert directory is not None
            # Seeded by the node and the files' sizes: the same state tears the same way.
            sizes = sorted((p.name, p.stat().st_size) for p in directory.rglob("*.log"))
            rng = random.Random(f"{node}/{sizes}")
            damaged += [f"node {node}: {line}" for line in tear_tails(directory, rng)]
        return "; ".join(damaged) or "nothing to damage"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class SlowDisk(Fault):
    """Every fsync of the nodes takes ``delay_ms`` longer; healed by a normal disk again."""

    name: ClassVar[str] = "slow-disk"
    heal_name: ClassVar[str] = "fast-disk"
    delay_ms: float = 400.0

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.slow_disk(node, self.delay_ms)
        return f"fsync +{self.delay_ms:g} ms"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.slow_disk(node, 0.0)


@dataclass(frozen=True, slots=True)
class ClockJump(Fault):
    """The nodes' wall clocks jump ``offset_s`` seconds (their monotonic clocks do not);
    healed by setting them right again, a jump the other way."""

    name: ClassVar[str] = "clock-jump"
    heal_name: ClassVar[str] = "clock-reset"
    offset_s: int = 86400

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.set_clock(node, self.offset_s)
        return f"wall clock {self.offset_s:+d} s"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.set_clock(node, 0)


def last_in_sync(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The leader of the workload's first partition, then its followers in replica order
    (the first is the one an unclean election picks when the leader is gone)."""
    state = target.partition_state(*tp)
    if state is None or state.leader is None:
        raise TargetError(f"{tp[0]}-{tp[1]} has no leader to aim at ({state})")
    return [state.leader, *(r for r in state.replicas if r != state.leader)]


def _wait_for_partition(
    target: Target,
    tp: tuple[str, int],
    what: str,
    done: Callable[[PartitionState], bool],
    timeout_s: float,
) -> tuple[PartitionState, float]:
    """Poll ``tp``'s metadata until ``done`` holds (at most ``timeout_s``, and at most
    :data:`MAX_PARTITION_POLLS` lookups); the state seen and the seconds it took.
    :class:`TargetError` naming ``what`` and the last state seen otherwise."""
    start = time.monotonic()
    last: PartitionState | None = None
    for _ in range(MAX_PARTITION_POLLS):
        state = target.partition_state(*tp)
        waited = time.monotonic() - start
        if state is not None:
            if done(state):
                return state, waited
            last = state
        if waited > timeout_s:
            break
        time.sleep(PARTITION_POLL_S)
    raise TargetError(f"{what}: not seen within {timeout_s:g} s (last seen: {last})")


def _partition_dir(target: Target, node: int, directory: str) -> Path | None:
    data_dir = target.node_data_dir(node)
    return None if data_dir is None else data_dir / directory


def _log_bytes(directory: Path) -> int:
    """The size of a partition directory's segments (0 when it cannot be read)."""
    try:
        return sum(path.stat().st_size for path in directory.glob("*.log"))
    except OSError:
        return 0


def _wait_appends(
    directories: Mapping[int, Path | None], appends: int, timeout_s: float
) -> list[int]:
    """Wait until each node's partition directory has grown ``appends`` times (at most
    ``timeout_s``); the nodes not seen to, or whose directory this process cannot reach."""
    unseen = sorted(node for node, directory in directories.items() if directory is None)
    watched = {node: d for node, d in directories.items() if d is not None}
    sizes = {node: _log_bytes(directory) for node, directory in watched.items()}
    grown = dict.fromkeys(watched, 0)
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / PRIME_POLL_S) + 1):
        if all(count >= appends for count in grown.values()) or time.monotonic() > deadline:
            break
        time.sleep(PRIME_POLL_S)
        for node, directory in watched.items():
            size = _log_bytes(directory)
            if size != sizes[node]:
                sizes[node] = size
                grown[node] += 1
    return sorted([*unseen, *(node for node, count in grown.items() if count < appends)])


@dataclass(frozen=True, slots=True)
class LastInSync(Fault):
    """Damage that reaches the last in-sync replica: the ISR of the watched partition
    shrinks to its leader, then the leader dies while both followers live on, lagging.

    The nodes are ``[leader, first, second]`` (:func:`last_in_sync`: the followers in replica
    order, so that ``first`` is the one an unclean election picks). Each step waits on the
    ISR the metadata shows, bounded:

    0. both followers' fsyncs of the partition are slowed a little until each has appended
       a few times (:data:`FSYNC_PRIME_MS`: then a held fsync stalls no event loop);
    1. ``first``'s fsyncs of the partition are held up (the data on LazyFS) until the leader
       drops it from the ISR (``replica.lag.time.max.ms``); for ``hold_s`` writes are
       acknowledged by the leader and ``second`` only;
    2. the same for ``second``, until the ISR is the leader alone; for ``hold_s`` writes are
       acknowledged by the leader alone if ``min.insync.replicas`` is 1, refused if 2;
    3. the leader is killed; with ``then="empty"`` its directory of the partition is emptied,
       with ``then="torn"`` the tail of its active segment there is torn back to the log
       end of ``first`` (:func:`chaos.torn_tails.tear_tail` with a reach), so that it comes
       back without the records acknowledged after ``first`` left (which ``second`` holds
       with ``min.insync.replicas=2``); the followers' fsyncs are let go (alive, lagging,
       nothing to fetch from);
    4. the fault waits until the controller has acted on the leader's death: the partition
       offline (no leader: unclean election off) or led by a follower (unclean election).

    Both followers stay registered, unfenced controller voters all along (a held fsync of
    one partition does not stop a node), so the controller quorum lives through it, which
    pausing or isolating them on three combined nodes would not allow. The held fsyncs
    share each node's one fsync thread, so every partition the followers hold lags with
    partition 0 meanwhile. Healed by letting every fsync go and starting the leader.
    """

    name: ClassVar[str] = "last-replica"
    heal_name: ClassVar[str] = "restart"
    needs_in_sync: ClassVar[bool] = True
    then: str = "dead"
    """What the leader comes back with: ``dead`` (its data), ``empty``, ``torn``."""
    hold_s: float = 2.0
    """How long the load runs with the ISR at two, then at one."""
    tp: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.then not in LAST_REPLICA_ENDS:
            raise ValueError(f"then must be one of {LAST_REPLICA_ENDS}, not {self.then!r}")

    def for_partition(self, tp: tuple[str, int]) -> Fault:
        return replace(self, tp=tp)

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        topic, partition = self._tp()
        return f"{step.fault} {topic}-{partition} nodes {list(nodes)}"

    def _tp(self) -> tuple[str, int]:
        if self.tp is None:
            raise TargetError("last-replica faults aim at a partition (Fault.for_partition)")
        return self.tp

    def _directory(self) -> str:
        topic, partition = self._tp()
        return f"{topic}-{partition}"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        tp = self._tp()
        if len(nodes) != 3:
            raise TargetError(f"needs a leader and two followers, got nodes {list(nodes)}")
        leader, first, second = nodes
        state = target.partition_state(*tp)
        if state is None or state.leader != leader or set(state.isr) != {leader, first, second}:
            raise TargetError(f"needs leader {leader} and a whole ISR, found {state}")
        data_dir: Path | None = None
        if self.then != "dead":
            data_dir = target.node_data_dir(leader)
            if data_dir is None:
                raise TargetError(f"the {target.name} target cannot reach its nodes' data")
        directory = self._directory()
        done: list[str] = []
        followers = (first, second)
        for follower in followers:
            target.slow_disk(follower, FSYNC_PRIME_MS, under=directory)
        unprimed = _wait_appends(
            {f: _partition_dir(target, f, directory) for f in followers},
            PRIME_APPENDS,
            PRIME_TIMEOUT_S,
        )
        if unprimed:  # the fault goes on: a held fsync may then stall that node's loop
            log.warning("last-replica followers not seen appending nodes=%s", unprimed)
            done.append(f"no appends seen on {unprimed} while primed")
        self._hold_fsyncs(target, first)
        _, waited = _wait_for_partition(
            target, tp, f"{first} out of the ISR", lambda s: first not in s.isr, LAG_OUT_TIMEOUT_S
        )
        log.info("last-replica follower out node=%d waited_s=%.1f", first, waited)
        done.append(f"{first} out of the ISR after {waited:.1f} s")
        time.sleep(self.hold_s)
        self._hold_fsyncs(target, second)
        _, waited = _wait_for_partition(
            target, tp, f"ISR [{leader}]", lambda s: s.isr == (leader,), LAG_OUT_TIMEOUT_S
        )
        log.info("last-replica follower out node=%d waited_s=%.1f", second, waited)
        done.append(f"{second} out after {waited:.1f} s")
        time.sleep(self.hold_s)
        Kill(self.select).inject(target, [leader])
        log.info("last-replica leader killed node=%d directory=%s", leader, directory)
        done.append(f"ISR [{leader}] for {self.hold_s:g} s, {leader} killed")
        if data_dir is not None:
            done.append(
                self._damage(leader, data_dir / directory, _partition_dir(target, first, directory))
            )
        for follower in followers:
            target.slow_disk(follower, 0.0, under=directory)
        log.info("last-replica fsyncs let go nodes=%s directory=%s", list(followers), directory)
        after, waited = _wait_for_partition(
            target, tp, f"{leader} replaced", lambda s: s.leader != leader, ELECTION_TIMEOUT_S
        )
        if after.leader is None:
            done.append(f"after {waited:.1f} s no leader: {directory} offline")
        else:
            done.append(f"after {waited:.1f} s {after}: unclean election")
        return "; ".join(done)

    def _hold_fsyncs(self, target: Target, node: int) -> None:
        directory = self._directory()
        target.slow_disk(node, FSYNC_HOLD_MS, under=directory)
        log.info("last-replica fsyncs held node=%d directory=%s", node, directory)

    def _damage(self, node: int, partition_dir: Path, follower_dir: Path | None) -> str:
        """Empty ``partition_dir`` or tear its tail back to the log end of the follower
        whose log is in ``follower_dir`` (the first to leave the ISR: every record
        acknowledged after it left is beyond its end), so that records the dead leader had
        acknowledged are gone from it, and only those."""
        if self.then == "empty":
            return f"node {node}: {empty_partition(partition_dir)}"
        reach = 0
        if follower_dir is not None:  # replicas hold the same batches, byte for byte
            reach = max(0, _log_bytes(partition_dir) - _log_bytes(follower_dir))
        # Seeded by the node and the files' sizes: the same state tears the same way.
        sizes = sorted((p.name, p.stat().st_size) for p in partition_dir.glob("*.log"))
        torn = tear_tail(partition_dir, random.Random(f"{node}/{sizes}"), reach)
        return (
            f"node {node}: {torn or 'nothing to tear'} (the follower's log ends {reach} B before)"
        )

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        errors = []
        for follower in nodes[1:]:  # every fsync goes again, even when one of them fails
            try:
                target.slow_disk(follower, 0.0, under=self._directory())
            except Exception as exc:
                errors.append(f"node {follower}: {exc}")
        target.start(nodes)
        if errors:
            raise TargetError("; ".join(errors))


def _network(target: Target) -> Network:
    if target.network is None:
        raise TargetError(
            f"the {target.name} target cannot cut the network (local: run with network namespaces)"
        )
    return target.network


@dataclass(frozen=True, slots=True)
class Isolate(Fault):
    """Cut each node off every other node; clients still reach it (where the target can)."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        network = _network(target)
        if len(nodes) == 1:
            network.isolate(nodes[0], cut_clients=False)
        else:
            network.partition([[n] for n in target.node_ids], cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        _network(target).heal()


@dataclass(frozen=True, slots=True)
class Split(Fault):
    """Split ``nodes`` (a minority) from the other nodes; clients still reach both sides."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {self._groups(target, nodes)}"

    @staticmethod
    def _groups(target: Target, nodes: Sequence[int]) -> list[list[int]]:
        return [sorted(nodes), [n for n in target.node_ids if n not in nodes]]

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        _network(target).partition(self._groups(target, nodes), cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        _network(target).heal()


@dataclass(frozen=True, slots=True)
class Bridge(Fault):
    """Each node is the bridge: it reaches every other node, which do not reach each other
    (Jepsen's bridge: two overlapping majorities); clients still reach every node."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {self._groups(target, nodes)}"

    @staticmethod
    def _groups(target: Target, nodes: Sequence[int]) -> list[list[int]]:
        others = [n for n in target.node_ids if n not in nodes]
        return [sorted({*nodes, other}) for other in others]

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        _network(target).partition(self._groups(target, nodes), cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        _network(target).heal()


@dataclass(frozen=True, slots=True)
class OneWay(Fault):
    """Packets from each node to every other node are dropped; the reverse direction and
    the clients pass (a node that hears its peers but cannot answer them)."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {sorted(nodes)} -/-> others"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        network = _network(target)
        (node,) = nodes
        network.one_way(node, [n for n in target.node_ids if n != node])
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        _network(target).heal()


FAULTS: dict[str, Fault] = {
    "kill-random": Kill(picked),
    "kill-leader": Kill(leader),
    "kill-controller": Kill(controller),
    "kill-minority": Kill(picked),
    "kill-all": Kill(every),
    "pause-random": Pause(picked),
    "pause-leader": Pause(leader),
    "partition-leader": Isolate(leader),
    "partition-halves": Split(picked),
    "partition-bridge": Bridge(picked),
    "partition-one-way": OneWay(leader),
    "power-loss": PowerLoss(every),
    "torn-tail": TornTail(picked),
    "slow-disk": SlowDisk(picked),
    "clock-forward": ClockJump(picked, offset_s=86400),
    "clock-back": ClockJump(picked, offset_s=-86400),
    "last-replica": LastInSync(last_in_sync),
    "last-replica-empty": LastInSync(last_in_sync, then="empty"),
    "last-replica-torn": LastInSync(last_in_sync, then="torn"),
}
"""Every fault a schedule step may name (:attr:`chaos.scenarios.FaultStep.fault`)."""

assert set(NETWORK_FAULTS) | set(DISK_FAULTS) <= set(FAULTS)
assert {fault.heal_name for fault in FAULTS.values()} <= HEALING_FAULTS, "recovery is measured"


@dataclass(frozen=True, slots=True)
class Injected:
    """A step as it was injected: its fault, the nodes it hit, whether injecting worked."""

    step: FaultStep
    fault: Fault
    nodes: tuple[int, ...]
    ok: bool


class Nemesis:
    """Performs schedule steps on ``target`` and records them in ``history``.

    ``tp`` is the partition whose leader the ``*-leader`` faults aim at.
    """

    process = "nemesis"

    def __init__(self, target: Target, history: HistoryWriter, tp: tuple[str, int]) -> None:
        self._target = target
        self._history = history
        self._tp = tp
        self.injected = 0
        """Faults injected successfully so far."""

    def inject(self, step: FaultStep) -> Injected:
        """Inject ``step``'s fault now (recorded; a failure is recorded, not raised)."""
        fault = FAULTS[step.fault].for_partition(self._tp)
        if fault.needs_in_sync:
            try:
                short = self._target.wait_in_sync(self._tp[0], IN_SYNC_TIMEOUT_S)
            except Exception as exc:  # the fault goes ahead; the history shows its detail
                short = [f"lookup failed: {exc}"]
            if short:
                log.warning(
                    "fault injected without whole ISRs fault=%s short=%s", step.fault, short
                )
        try:
            nodes = tuple(fault.select(self._target, step, self._tp))
        except Exception as exc:  # a lookup that broke: the seed's nodes stand in
            log.warning("fault target lookup failed fault=%s error=%s", step.fault, exc)
            nodes = step.nodes
        ok = self._record(
            fault.name,
            nodes,
            fault.describe(step, nodes, self._target),
            lambda: fault.inject(self._target, nodes),
        )
        self.injected += ok
        return Injected(step, fault, nodes, ok)

    def heal(self, injected: Injected) -> bool:
        """Heal what ``injected`` did (also after a failed or partial injection)."""
        fault = injected.fault
        return self._record(
            fault.heal_name,
            injected.nodes,
            injected.step.fault,
            lambda: fault.heal(self._target, injected.nodes),
        )

    def heal_everything(self) -> bool:
        """The end of the faults: heal the network, resume and start every node."""
        target = self._target

        def heal() -> str | None:
            if target.network is not None:
                target.network.heal()
            for node in target.node_ids:
                try:
                    target.resume(node)
                except Exception as exc:  # not running: started next
                    log.debug("resume skipped node=%d error=%s", node, exc)
            target.start(target.node_ids)
            return None

        return self._record("heal", tuple(target.node_ids), END_OF_FAULTS, heal)

    def _record(
        self,
        name: str,
        nodes: Sequence[int],
        detail: str,
        action: Callable[[], str | None],
    ) -> bool:
        invoked = self._history.invoke(
            self.process, "fault", fault=name, targets=list(nodes), detail=detail
        )
        try:
            done = action()
        except Exception as exc:  # a fault that could not be done is recorded, not raised
            log.warning("fault failed fault=%s nodes=%s error=%s", name, list(nodes), exc)
            self._history.complete(invoked, "fail", fault=name, error=str(exc)[:500])
            return False
        log.info("fault done fault=%s nodes=%s detail=%s %s", name, list(nodes), detail, done)
        self._history.complete(
            invoked,
            "ok",
            fault=name,
            targets=list(nodes),
            detail=detail if done is None else f"{detail}: {done}",
        )
        return True
