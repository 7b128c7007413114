"""Where a chaos run's cluster runs, as the faults and the runner see it.

:class:`Target` is a cluster's nodes, ``kill`` / ``stop`` / ``start`` / ``pause`` /
``resume`` of nodes, which node leads a partition and which is the active controller, and
(when it can cut links) a :class:`Network` and (when it can lose power) a :class:`Disk`.
:class:`LocalTarget` runs node processes through :class:`~cluster.launcher.LocalCluster`
(``kill -9``, ``SIGSTOP``/``SIGCONT``; with ``netns=True`` each node in a network namespace
of its own, :class:`chaos.network.NetnsNetwork`); with ``lazyfs=True`` the nodes keep their
data on a LazyFS mount (:mod:`chaos.lazyfs`), the :class:`Disk` a power loss crashes; with
``clocks=True`` they run on wall clocks of their own (:mod:`chaos.clock`).
:class:`chaos.compose_target.ComposeTarget` runs the repository's ``docker-compose.yml``.

A new place to run the cluster is a class with the :class:`Target` methods;
:func:`read_replica_logs` reads what each stopped node holds, for the checker.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from chaos.clock import NodeClocks
from chaos.lazyfs import LazyFS
from chaos.network import NetnsNetwork, free_subnet
from cluster.client import AdminClient
from cluster.launcher import ClusterSpec, LocalCluster
from cluster.launcher.processes import free_base_port
from lograft.protocol.errors import LograftError
from lograft.protocol.record_codec import iter_records
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from replica.log.partition_log import PartitionLog
from replica.log.replication_offset_checkpoint import read_high_watermarks

__all__ = [
    "ADMIN_TIMEOUT_MS",
    "AdminLookups",
    "Disk",
    "LocalTarget",
    "Network",
    "PartitionState",
    "ReplicaLogs",
    "Target",
    "TargetError",
    "cut_network",
    "read_replica_logs",
    "under_replicated",
]

# Named as before the split from chaos/nemesis.py: the chaos logs read as they did.
log = logging.getLogger("chaos.nemesis")

ADMIN_TIMEOUT_MS = 5000
"""Bound of each leader / controller lookup: a fault must not wait long for its node."""

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


def cut_network(target: Target) -> Network:
    """``target``'s network, to cut; :class:`TargetError` when it cannot cut links."""
    if target.network is None:
        raise TargetError(
            f"the {target.name} target cannot cut the network (local: run with network namespaces)"
        )
    return target.network


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


class AdminLookups:
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


class LocalTarget(AdminLookups):
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
