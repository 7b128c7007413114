"""The chaos target that runs the repository's ``docker-compose.yml``.

:class:`ComposeTarget` is a :class:`~chaos.targets.Target` on the three compose services
under a project of its own: ``docker kill``, ``docker pause``, network disconnects
(:class:`_ComposeNetwork`), and with ``lazyfs=True`` the nodes' data bind-mounted from a
LazyFS mount of this host, the :class:`~chaos.targets.Disk` a power loss crashes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from chaos.lazyfs import LazyFS
from chaos.targets import (
    AdminLookups,
    Disk,
    Network,
    ReplicaLogs,
    TargetError,
    read_replica_logs,
)
from cluster.container import env_name
from cluster.launcher.processes import free_base_port

__all__ = ["COMPOSE_FILE", "ComposeTarget"]

# Named as before the split from chaos/nemesis.py: the chaos logs read as they did.
log = logging.getLogger("chaos.nemesis")

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "docker-compose.yml"
"""The repository's compose file: the target runs the cluster a user runs with it."""
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


class ComposeTarget(AdminLookups):
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
        base = free_base_port(4)
        self.ports = [base, base + 1, base + 2]
        """The host ports the nodes are published on (``LOGRAFT_PORT_1..3``)."""
        self.rest_proxy_port = base + 3
        """The host port of the compose file's REST proxy (``LOGRAFT_REST_PROXY_PORT``)."""
        self.env = {
            **os.environ,
            "LOGRAFT_IMAGE": image,
            **{f"LOGRAFT_PORT_{n}": str(p) for n, p in zip(self.node_ids, self.ports, strict=True)},
            "LOGRAFT_REST_PROXY_PORT": str(self.rest_proxy_port),
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
