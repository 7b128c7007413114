""":class:`LocalCluster`: bring a cluster of local node processes up and down, restart, signal
and watch its nodes, with ``DIR/cluster.json`` as the record of what runs.

Library use (tests, chaos tools)::

    cluster = LocalCluster(ClusterSpec(data_dir=tmp_path, base_port=port))
    cluster.up()                       # returns once healthy
    cluster.kill(2, signal.SIGKILL)
    cluster.restart(2)
    print(cluster.status().to_json())
    cluster.down()
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.launcher.health import (
    PROBE_TIMEOUT_S,
    ClusterStatus,
    health_problems,
    node_status,
)
from cluster.launcher.processes import (
    DEFAULT_STOP_TIMEOUT_S,
    KILL_WAIT_S,
    describe_dead,
    is_alive,
    is_our_node,
    is_port_free,
    signal_node,
    start_node,
    stop_nodes,
    wait_for_exit,
    wait_for_pause_state,
)
from cluster.launcher.spec import (
    CLUSTER_FILE,
    ClusterSpec,
    LauncherError,
    NodeRecord,
    cluster_document,
    cluster_lock,
    parse_cluster_document,
    read_cluster_file,
    voters_of,
    write_cluster_file,
)
from cluster.status import broker_registrations

__all__ = ["DEFAULT_HEALTH_TIMEOUT_S", "HEALTH_POLL_INTERVAL_S", "LocalCluster"]

DEFAULT_HEALTH_TIMEOUT_S = 60.0
"""How long (s) ``up`` and ``restart`` wait for a healthy cluster without ``--timeout-s``."""
HEALTH_POLL_INTERVAL_S = 0.2
"""Pause (s) between two polls while waiting for a healthy cluster or a re-registration."""


class LocalCluster:
    """A cluster of local node processes described by ``DIR/cluster.json``.

    ``cluster.json`` is the source of truth for pids: every operation reads it first, and
    operations that start or stop nodes hold ``DIR/.cluster.lock`` and write it back.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.nodes: list[NodeRecord] = spec.node_records()
        self.controller_quorum_voters: str = voters_of(self.nodes)
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
        return cluster_document(self.nodes, self.controller_quorum_voters, self.configs)

    @classmethod
    def from_json(cls, data_dir: Path, doc: Mapping[str, Any]) -> LocalCluster:
        """Rebuild a cluster from a ``cluster.json`` document found in ``data_dir``."""
        spec, nodes, voters = parse_cluster_document(data_dir, doc)
        cluster = cls(spec)
        cluster.nodes = nodes
        cluster.controller_quorum_voters = voters
        return cluster

    @classmethod
    def load(cls, data_dir: Path | str) -> LocalCluster:
        """The cluster described by ``data_dir/cluster.json``; ``LauncherError`` if none."""
        directory = Path(os.path.abspath(data_dir))
        return cls.from_json(directory, read_cluster_file(directory))

    def save(self) -> None:
        """Write ``cluster.json`` atomically (temporary file, fsync, rename, fsync dir)."""
        write_cluster_file(self.data_dir, self.to_json())

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

    # -- processes -----------------------------------------------------------------------

    def running(self, node: NodeRecord) -> bool:
        """Whether ``node``'s recorded pid is alive and really that node."""
        return node.pid is not None and is_our_node(node.pid, node.data_dir)

    # -- operations ----------------------------------------------------------------------

    def up(self, wait: bool = True, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S) -> list[int]:
        """Start every node that is not running; with ``wait``, return once healthy.

        Returns the ids of the nodes started (empty when all were already running). Nodes
        of an existing ``cluster.json`` restart from their data; a ``cluster.json`` of a
        different layout is refused.
        """
        with cluster_lock(self.data_dir):
            self._refresh()
            to_start = [node for node in self.nodes if not self.running(node)]
            busy = [
                n for n in to_start if n.netns is None and not is_port_free(n.host, n.client_port)
            ]
            if busy:
                ports = ", ".join(f"{n.client_port} (node {n.node_id})" for n in busy)
                raise LauncherError(
                    f"ports in use by other processes: {ports}; stop them or pick another "
                    "--base-port"
                )
            started: list[int] = []
            try:
                for node in to_start:
                    start_node(node, self.controller_quorum_voters, self.configs)
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
        with cluster_lock(self.data_dir):
            self._refresh()
            outcome = stop_nodes(self.nodes, timeout_s)
            self.save()
        failed = [f"node {i}: {what}" for i, what in outcome.items() if what.startswith("still")]
        if failed:
            raise LauncherError("could not stop " + "; ".join(failed))
        return outcome

    def kill(self, node_id: int, sig: int = signal.SIGKILL, wait_s: float = KILL_WAIT_S) -> None:
        """Send ``sig`` to one node (after the /proc check).

        After SIGKILL or SIGTERM, waits up to ``wait_s`` for the process to exit, so that a
        ``status`` right after sees it gone; after SIGSTOP or SIGCONT, until it shows as
        paused or running. ``cluster.json`` keeps the pid (status shows it dead; ``restart``
        replaces it).
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
        if sig in (signal.SIGSTOP, signal.SIGCONT) and not wait_for_pause_state(
            node.pid, sig == signal.SIGSTOP, wait_s
        ):
            raise LauncherError(
                f"node {node_id} (pid {node.pid}) is not "
                f"{'paused' if sig == signal.SIGSTOP else 'running'} {wait_s:g} s after "
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
        with cluster_lock(self.data_dir):
            self._refresh()
            node = self.node(node_id)
            if node.pid is not None:
                outcome = stop_nodes([node], stop_timeout_s)
                if node.pid is not None:
                    self.save()
                    raise LauncherError(f"node {node_id}: {outcome[node_id]}")
            try:
                start_node(node, self.controller_quorum_voters, self.configs)
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
                raise LauncherError(describe_dead([node]))
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
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            nodes = list(pool.map(lambda node: node_status(node, probe_timeout_s), self.nodes))
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
                raise LauncherError(describe_dead(dead))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LauncherError(
                    f"cluster not healthy within {timeout_s:g} s: "
                    + "; ".join(current.problems)
                    + f" (logs: `lograft cluster logs NODE --data-dir {self.data_dir}`)"
                )
            time.sleep(min(HEALTH_POLL_INTERVAL_S, remaining))
