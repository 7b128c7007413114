"""The node process: ``lograft node`` / ``python -m cluster.node``.

A node has the broker role, the controller role or both (Kafka's ``process.roles``; with
``--controller-quorum-voters`` both by default, without it a standalone broker). It serves
every gRPC service on each of its listeners (Kafka's ``listeners``), one server per
listener, so each answer gives broker addresses on the listener it was asked on.
``lograft node health`` asks a running node whether it is healthy (:mod:`cluster.node_health`).
Every setting can be given by its Kafka name as ``--config NAME=VALUE``
(:func:`lograft.protocol.node_config.node_setting_names`); the flags win over them. It can be
killed at any moment (``kill -9``) and restarted from its data directory: logs recover by
CRC, and every acknowledged write was fsync'ed before its acknowledgement (under the
default flush policy). SIGTERM and SIGINT shut down cleanly: stop accepting
requests, finish in-flight ones, flush, and leave clean-shutdown markers.
"""

# Over 600 lines: the node process: its arguments, settings and the Node that starts every service.
from __future__ import annotations

import argparse
import asyncio
import logging
import random
import resource
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cluster import halt
from cluster.allocator import keep_freed_memory
from cluster.kraft_broker import ControllerClient, KRaftBroker
from cluster.loop_monitor import LoopLagMonitor
from cluster.node_health import NodeHealthService, StandardHealthService, health_main
from controller.logic.decision import ControllerConfig
from controller.quorum.controller import ControllerOnListener, QuorumController
from controller.quorum.driver import RaftDriver, RaftTransport
from controller.quorum.metadata_machine import MetadataStateMachine
from controller.raft import RaftConfig
from controller.storage.disk_storage import DiskStorage
from lograft.durable import create_directories, write_file_atomically
from lograft.protocol.errors import (
    InconsistentClusterIdError,
    InvalidConfigError,
    KafkaStorageError,
    LograftError,
)
from lograft.protocol.framed.server import FramedListener, Handler
from lograft.protocol.node_config import NodeConfig, NodeListener
from lograft.protocol.topic_config import FlushPolicy
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc
from lograft.protocol.wire import controller_pb2, controller_pb2_grpc
from lograft.protocol.wire import node_pb2 as npb
from lograft.protocol.wire import node_pb2_grpc as npb_grpc
from lograft.protocol.wire import raft_pb2 as raft_pb
from lograft.protocol.wire import raft_pb2_grpc as raft_pb_grpc
from replica.broker_service import BrokerEndpoint, BrokerService
from replica.log.partition_log import delete_files
from replica.log_cleaner_loop import LogCleaner
from replica.log_manager import LogManager
from replica.producer_ids import LocalProducerIdBlocks, ProducerIdAllocator

__all__ = ["Node", "main"]

# Named explicitly: run as `python -m cluster.node`, __name__ would be "__main__".
log = logging.getLogger("cluster.node")

SHUTDOWN_GRACE_S = 5.0
RAFT_TICK_MS = 50
METADATA_LOG_DIR = "__cluster_metadata-0"
MIN_FLUSH_TICK_MS = 10


def raise_open_file_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit: every segment holds open files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise open file limit soft=%d hard=%d error=%s", soft, hard, exc)
    return soft


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the one clock the node shell reads."""
    return int(time.time() * 1000)


def quorum_cluster_id(config: NodeConfig) -> str:
    """The cluster id of a quorum: given, or derived from the voter set.

    Kafka formats every node with one cluster id; deriving it from
    ``controller.quorum.voters`` gives every node started with the same voters the same id
    without a formatting step, and keeps nodes of other quorums out.
    """
    if config.cluster_id or config.quorum_voters is None:
        return config.cluster_id
    voters = ",".join(f"{n}@{a}" for n, a in sorted(config.quorum_voters.items()))
    return uuid.uuid5(uuid.NAMESPACE_URL, f"lograft:{voters}").hex


def load_or_create_identity(data_dir: Path, node_id: int, expected_cluster_id: str = "") -> str:
    """Read ``meta.properties`` (creating it on first start) and return the cluster id.

    A data directory written by another node id, or for another cluster, is refused, as
    Kafka does.
    """
    path = data_dir / "meta.properties"
    create_directories(data_dir)
    if not path.exists():
        cluster_id = expected_cluster_id or uuid.uuid4().hex
        body = f"version=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
        write_file_atomically(path, body.encode())
        return cluster_id
    properties: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            properties[key.strip()] = value.strip()
    if properties.get("node.id") != str(node_id):
        raise InvalidConfigError(
            f"{path} belongs to node.id={properties.get('node.id')}, not {node_id}"
        )
    cluster_id = properties.get("cluster.id", "")
    if not cluster_id:
        raise KafkaStorageError(f"{path} has no cluster.id")
    if expected_cluster_id and cluster_id != expected_cluster_id:
        raise InconsistentClusterIdError(
            f"{path} belongs to cluster {cluster_id}, this node is configured for "
            f"{expected_cluster_id}"
        )
    return cluster_id


class Node:
    """One lograft process: a gRPC server per listener, its log manager and its tasks."""

    def __init__(self, config: NodeConfig, *, halt_on_invariant: bool = False) -> None:
        """``halt_on_invariant``: a broken invariant, or an I/O error that fails a
        partition's log, ends the process (the node's own process sets it; an in-process
        test leaves it off to see the error instead)."""
        self.config = config
        self._halt_on_invariant = halt_on_invariant
        self.cluster_id = load_or_create_identity(
            config.data_dir, config.node_id, quorum_cluster_id(config)
        )
        self.logs = LogManager(
            config.data_dir,
            config.log_defaults,
            wall_clock_ms,
            on_log_failure=halt.halt_on_log_failure if halt_on_invariant else None,
        )
        self._logs_changed = asyncio.Event()
        self.logs.add_listener(self._logs_changed.set)
        self._servers: list[grpc.aio.Server] = []
        self._framed: list[FramedListener] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._starters: list[Callable[[], Awaitable[None]]] = []
        self._stoppables: list[Callable[[], Awaitable[None]]] = []
        self._storage: DiskStorage | None = None
        self._cleaner: LogCleaner | None = None
        self._driver: RaftDriver | None = None
        self._machine: MetadataStateMachine | None = None
        self._controller: QuorumController | None = None
        self._broker: KRaftBroker | None = None
        self.bound_ports: dict[str, int] = {x.name: x.port for x in config.listeners}
        """Listener name → the port it is bound to (differs from its config for port 0)."""

    @property
    def bound_port(self) -> int:
        """The port of the first listener."""
        return self.bound_ports[self.config.listeners[0].name]

    def _new_server(self) -> grpc.aio.Server:
        limit = self.config.socket_request_max_bytes
        return grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=[halt.HaltOnInvariantInterceptor()] if self._halt_on_invariant else None,
        )

    def _bind_grpc(self, server: grpc.aio.Server, listener: NodeListener) -> int:
        """Bind the listener's gRPC server to a loopback port; its framed listener relays
        every gRPC connection there (:mod:`lograft.protocol.framed.server`)."""
        try:
            port = int(server.add_insecure_port("127.0.0.1:0"))
        except RuntimeError as exc:
            port = 0
            reason = str(exc)
        else:
            reason = "no loopback port"
        if port == 0:
            raise InvalidConfigError(
                f"listeners: cannot serve {listener.name} over gRPC on 127.0.0.1: {reason}"
            )
        return port

    async def _start_framed(self, framed: FramedListener, listener: NodeListener) -> int:
        where = f"{listener.name}://{listener.bind_address}"
        try:
            await framed.bind()
        except OSError as exc:
            raise InvalidConfigError(f"listeners: cannot listen on {where}: {exc}") from None
        return framed.port

    # Over 70 lines: the start-up steps in order: logs, listeners, services, then the tasks.
    async def start(self) -> None:
        """Recover the logs (and the metadata log in a quorum), then start serving."""
        config = self.config
        loop = asyncio.get_running_loop()
        if self._halt_on_invariant:
            halt.install(loop)
        open_files = raise_open_file_limit()
        # In a quorum the metadata image says which partitions exist; standalone, topics.json.
        await loop.run_in_executor(None, self.logs.open, not config.in_quorum)
        servers = {x.name: self._new_server() for x in config.listeners}
        grpc_ports = {x.name: self._bind_grpc(servers[x.name], x) for x in config.listeners}
        handlers: dict[str, dict[str, Handler]] = {x.name: {} for x in config.listeners}
        framed = {
            x.name: FramedListener(
                x.host or "0.0.0.0",
                x.port,
                grpc_port=grpc_ports[x.name],
                handlers=handlers[x.name],
                max_request_bytes=config.socket_request_max_bytes,
            )
            for x in config.listeners
        }
        for listener in config.listeners:
            self.bound_ports[listener.name] = await self._start_framed(
                framed[listener.name], listener
            )
            self._framed.append(framed[listener.name])
        endpoints = {
            x.name: BrokerEndpoint(
                config.node_id,
                x.advertised_host,
                x.advertised_port or self.bound_ports[x.name],
                config.rack,
                x.name,
            )
            for x in config.listeners
        }
        if config.in_quorum:
            await self._start_quorum(
                endpoints[config.inter_broker_listener_name], tuple(endpoints.values())
            )
        # A standalone node's producer-id blocks: one allocator for every listener.
        producer_ids = ProducerIdAllocator(LocalProducerIdBlocks(config.data_dir))
        for name, server in servers.items():
            services = [npb.DESCRIPTOR.services_by_name["Node"].full_name]
            if self._driver is not None:
                raft_pb_grpc.add_RaftServicer_to_server(self._driver, server)
                handlers[name]["Step"] = self._driver.Step
                services.append(raft_pb.DESCRIPTOR.services_by_name["Raft"].full_name)
            if self._controller is not None:
                on_listener = ControllerOnListener(self._controller, name)
                controller_pb2_grpc.add_ControllerServicer_to_server(on_listener, server)
                handlers[name]["BrokerHeartbeat"] = on_listener.BrokerHeartbeat
                services.append(controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name)
            if "broker" in config.process_roles:
                service = BrokerService(
                    self.logs,
                    endpoints[name],
                    self.cluster_id,
                    wall_clock_ms,
                    self._broker,
                    groups=self._broker.groups if self._broker is not None else None,
                    local_producer_ids=producer_ids,
                    transactions=(self._broker.transactions if self._broker is not None else None),
                )
                pb_grpc.add_BrokerServicer_to_server(service, server)
                # Every Broker method, by name: the framed protocol's Produce and Fetch, and
                # whichever the Kafka protocol's translations call (kafka/apis.py), so a
                # newly served Kafka API needs no list here.
                broker = pb.DESCRIPTOR.services_by_name["Broker"]
                handlers[name].update({m.name: getattr(service, m.name) for m in broker.methods})
                services.append(pb.DESCRIPTOR.services_by_name["Broker"].full_name)
            npb_grpc.add_NodeServicer_to_server(NodeHealthService(self.health, name), server)
            # What any gRPC tool needs without our protos: the standard health check, and
            # reflection naming every service this listener serves.
            health_pb2_grpc.add_HealthServicer_to_server(
                StandardHealthService(self.health, frozenset(services)), server
            )
            health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
            reflection.enable_server_reflection(
                (*services, health_name, reflection.SERVICE_NAME), server
            )
        for server in servers.values():
            await server.start()
            self._servers.append(server)
        for listener_framed in self._framed:
            await listener_framed.serve()
        for starter in self._starters:
            await starter()
        self._tasks = [
            asyncio.create_task(LoopLagMonitor(config.node_id).run(), name="loop-lag"),
            asyncio.create_task(self._housekeeping(), name="housekeeping"),
            asyncio.create_task(self._interval_flusher(), name="interval-flusher"),
            asyncio.create_task(self._high_watermark_checkpointer(), name="hw-checkpoint"),
        ]
        if "broker" in config.process_roles and config.log_cleaner_enable:
            self._cleaner = LogCleaner(
                self.logs, wall_clock_ms, backoff_ms=config.log_cleaner_backoff_ms
            )
            self._cleaner.start()
        log.info(
            "node ready node_id=%d listeners=%s advertised=%s inter_broker_listener=%s "
            "cluster_id=%s roles=%s open_file_limit=%d",
            config.node_id,
            ",".join(
                f"{x.name}://{x.host or '0.0.0.0'}:{self.bound_ports[x.name]}"
                for x in config.listeners
            ),
            ",".join(f"{e.listener}://{e.host}:{e.port}" for e in endpoints.values()),
            config.inter_broker_listener_name,
            self.cluster_id,
            ",".join(sorted(config.process_roles)),
            open_files,
        )

    def health(self) -> npb.NodeHealthResponse:
        """What this node knows of itself now: the answer of ``NodeHealth``."""
        config = self.config
        facts = npb.NodeHealthResponse(
            node_id=config.node_id,
            roles=sorted(config.process_roles),
            in_quorum=config.in_quorum,
            cluster_id=self.cluster_id,
            broker_epoch=-1,
            quorum_leader_id=-1,
        )
        if self._driver is not None and self._machine is not None:
            status = self._driver.status()
            facts.metadata_applied_offset = self._machine.applied_end_offset
            facts.metadata_high_watermark = status.high_watermark
            facts.quorum_leader_id = -1 if status.leader_id is None else status.leader_id
            facts.quorum_epoch = status.epoch
        if self._broker is not None:
            facts.broker_epoch = self._broker.broker_epoch
            facts.fenced = self._broker.fenced_in_image()
        return facts

    # Over 70 lines: wires the Raft driver, controller and broker, each needing the one before.
    async def _start_quorum(
        self, endpoint: BrokerEndpoint, listeners: tuple[BrokerEndpoint, ...]
    ) -> None:
        """Wire the Raft driver, the controller and the broker's metadata follower.

        ``endpoint`` is this broker on the inter-broker listener, ``listeners`` on each.
        """
        config = self.config
        assert config.quorum_voters is not None
        loop = asyncio.get_running_loop()
        storage = await loop.run_in_executor(
            None, DiskStorage.open, config.data_dir / METADATA_LOG_DIR
        )
        self._storage = storage
        machine = MetadataStateMachine(snapshot_every_bytes=config.metadata_snapshot_bytes)
        snapshot = storage.snapshot()
        if snapshot is not None:
            machine.restore(snapshot)
        tick_ms = RAFT_TICK_MS
        election_timeout_ticks = max(2, config.election_timeout_ms // tick_ms)
        driver = RaftDriver(
            RaftConfig(
                node_id=config.node_id,
                cluster_id=self.cluster_id,
                voters=frozenset(config.quorum_voters),
                election_timeout_ticks=election_timeout_ticks,
                # Long-poll the leader instead of fetching every tick: an idle quorum then
                # exchanges a fetch per follower every max wait, not every 50 ms. A follower
                # hears from its leader only through fetch answers, so the wait is half the
                # election timeout (500 ms by default, as Kafka's; Kafka's followers give up
                # on a leader after a 2 s fetch timeout, ours after the election timeout).
                fetch_max_wait_ticks=election_timeout_ticks // 2,
            ),
            storage,
            RaftTransport(config.node_id, config.quorum_voters),
            machine,
            random.Random(),
            tick_ms=tick_ms,
        )
        self._driver = driver
        self._machine = machine
        self._starters.append(driver.start)
        self._stoppables.append(driver.stop)
        if "controller" in config.process_roles:
            controller = QuorumController(
                driver,
                machine,
                random.Random(),
                config.broker_session_timeout_ms,
                config=ControllerConfig(
                    broker_session_timeout_ms=config.broker_session_timeout_ms,
                    num_partitions=config.num_partitions,
                    default_replication_factor=config.default_replication_factor,
                ),
            )
            self._controller = controller
            self._starters.append(controller.start)
            self._stoppables.insert(0, controller.stop)
        if "broker" not in config.process_roles:
            return
        broker = KRaftBroker(
            endpoint,
            self.cluster_id,
            self.logs,
            machine,
            driver,
            ControllerClient(
                config.quorum_voters,
                driver,
                local=(
                    {"BrokerHeartbeat": self._controller.BrokerHeartbeat}
                    if self._controller is not None
                    else None
                ),
            ),
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            offsets_topic_partitions=config.offsets_topic_num_partitions,
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
            node_config=config,
            listeners=listeners,
        )
        self._broker = broker
        self._starters.append(broker.start)
        self._stoppables.insert(0, broker.stop)

    async def stop(self) -> None:
        """Stop accepting requests, let in-flight ones finish, flush and close the logs."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._cleaner is not None:
            await self._cleaner.stop()  # before the logs close: its thread reads them
        for stop in self._stoppables:
            await stop()
        await asyncio.gather(
            *(framed.stop(SHUTDOWN_GRACE_S) for framed in self._framed),
            *(server.stop(SHUTDOWN_GRACE_S) for server in self._servers),
        )
        for framed in self._framed:
            framed.close_relays()
        await asyncio.get_running_loop().run_in_executor(None, self.logs.close)
        if self._storage is not None:
            self._storage.close()
        log.info("node stopped node_id=%d", self.config.node_id)

    async def _housekeeping(self) -> None:
        """Retention and time-based segment rolls, every log.retention.check.interval.ms.

        A partition whose log fails is logged and skipped: one bad disk must not stop
        retention for every other partition.
        """
        loop = asyncio.get_running_loop()
        interval_s = self.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = wall_clock_ms()
            doomed: list[Path] = []
            for partition in list(self.logs.partitions.values()):
                try:
                    partition.log.roll_if_due(now_ms)
                    doomed.extend(partition.log.enforce_retention(now_ms, partition.high_watermark))
                except LograftError as exc:
                    log.error(
                        "housekeeping failed partition=%s error=%s",
                        partition.topic_partition,
                        exc,
                    )
            if doomed:
                log.info("retention deleted segments files=%d", len(doomed))
                try:
                    await loop.run_in_executor(None, delete_files, doomed)
                except LograftError as exc:
                    log.error("deleting segment files failed error=%s", exc)

    async def _high_watermark_checkpointer(self) -> None:
        """Write replication-offset-checkpoint every replica.high.watermark.checkpoint
        .interval.ms (Kafka's highwatermark-checkpoint task); close writes the last one."""
        loop = asyncio.get_running_loop()
        interval_s = self.config.replica_high_watermark_checkpoint_interval_ms / 1000
        last: dict[TopicPartition, int] = {}
        while True:
            await asyncio.sleep(interval_s)
            high_watermarks = self.logs.high_watermarks()
            if high_watermarks == last:
                continue
            try:
                await loop.run_in_executor(
                    None, self.logs.write_high_watermark_checkpoint, high_watermarks
                )
                last = high_watermarks
            except LograftError as exc:
                log.error("high watermark checkpoint failed error=%s", exc)

    async def _interval_flusher(self) -> None:
        """fdatasync each log under flush.policy=interval once its own flush.ms has passed."""
        last_flush_ms: dict[TopicPartition, int] = {}
        while True:
            intervals = [
                p.log.config.flush_ms
                for p in self.logs.partitions.values()
                if p.log.config.flush_policy == FlushPolicy.INTERVAL
            ]
            if not intervals:
                # No log flushes on a timer until a partition is added or reconfigured: an
                # idle node must not wake every second to find that out.
                self._logs_changed.clear()
                await self._logs_changed.wait()
                continue
            await asyncio.sleep(max(min(intervals), MIN_FLUSH_TICK_MS) / 1000)
            now_ms = wall_clock_ms()
            for partition in list(self.logs.partitions.values()):
                config = partition.log.config
                tp = partition.topic_partition
                if (
                    config.flush_policy != FlushPolicy.INTERVAL
                    or now_ms - last_flush_ms.get(tp, 0) < config.flush_ms
                ):
                    continue
                last_flush_ms[tp] = now_ms
                if partition.log.flushed_offset < partition.log.log_end_offset:
                    try:
                        await partition.flush_now()
                    except LograftError as exc:
                        log.error("interval flush failed partition=%s error=%s", tp, exc)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lograft node",
        description="Run a lograft node (broker, controller or both) serving gRPC on each of "
        "its listeners. Every setting can be given by its Kafka name with --config; a flag "
        "wins over the --config of the same setting.",
        epilog="`lograft node health [--bootstrap HOST:PORT] [--timeout-s S] [--json]` asks a "
        "running node whether it is healthy (exit 0) or not (exit 1).",
    )
    parser.add_argument(
        "--node-id", type=int, default=None, help="this node's node.id (or --config node.id=N)"
    )
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="data directory (or --config log.dir=DIR)"
    )
    parser.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="one listener, PLAINTEXT, on HOST:PORT (default: --config listeners, else "
        "127.0.0.1:9092)",
    )
    parser.add_argument(
        "--advertised-host", default="", help="host clients should dial (with --listen)"
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting by Kafka name, e.g. log.segment.bytes=1048576 or "
        "listeners=INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092 (repeatable)",
    )
    parser.add_argument(
        "--process-roles",
        default="",
        help="broker, controller or broker,controller (default: both with a quorum, else broker)",
    )
    parser.add_argument(
        "--controller-quorum-voters",
        default="",
        metavar="ID@HOST:PORT,...",
        help="the controller quorum, e.g. 1@127.0.0.1:9092,2@127.0.0.1:9093,3@127.0.0.1:9094; "
        "without it the node is a standalone broker",
    )
    parser.add_argument(
        "--cluster-id", default="", help="cluster id (default: derived from the voters)"
    )
    parser.add_argument(
        "--rack", default="", help="broker.rack: replicas of a partition go to distinct racks"
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return parser.parse_args(argv)


_LISTENER_SETTINGS = ("listeners", "advertised.listeners", "inter.broker.listener.name")


def node_settings(args: argparse.Namespace) -> dict[str, str]:
    """The settings of ``lograft node``'s arguments, by Kafka name: every ``--config``, then
    the flags over them (a flag wins over the ``--config`` of its setting).

    ``--listen HOST:PORT`` (with ``--advertised-host``) stands for ``listeners`` (and
    ``advertised.listeners``) of one listener named ``PLAINTEXT``. Raises
    ``InvalidConfigError`` for a ``--config`` that is not ``NAME=VALUE``.
    """
    settings: dict[str, str] = {}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidConfigError(f"--config {item!r} is not NAME=VALUE")
        settings[name.strip()] = value.strip()
    flags = {
        "node.id": None if args.node_id is None else str(args.node_id),
        "process.roles": args.process_roles,
        "controller.quorum.voters": args.controller_quorum_voters,
        "cluster.id": args.cluster_id,
        "broker.rack": args.rack,
    }
    settings.update({name: value for name, value in flags.items() if value})
    if args.data_dir is not None:
        settings.pop("log.dirs", None)
        settings["log.dir"] = str(args.data_dir)
    if args.listen is not None or args.advertised_host:
        if args.listen is None and "listeners" in settings:
            raise InvalidConfigError(
                "--advertised-host goes with --listen; with listeners, set advertised.listeners"
            )
        listen = args.listen or "127.0.0.1:9092"
        host, _, port = listen.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidConfigError(f"--listen {listen!r} is not HOST:PORT")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 address
        overridden = [name for name in _LISTENER_SETTINGS if settings.pop(name, None)]
        if overridden:
            log.warning("--listen wins over %s", ", ".join(overridden))
        settings["listeners"] = f"PLAINTEXT://{host}:{port}"
        if args.advertised_host:
            advertised = args.advertised_host
            if ":" in advertised and not advertised.startswith("["):
                advertised = f"[{advertised}]"
            settings["advertised.listeners"] = f"PLAINTEXT://{advertised}:{port}"
        elif host.strip("[]") in ("", "0.0.0.0", "::"):
            raise InvalidConfigError(
                f"--listen {listen} binds every interface: give --advertised-host, the host "
                "clients dial"
            )
    return settings


async def _serve(config: NodeConfig) -> None:
    node = Node(config, halt_on_invariant=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await node.start()
    await stop.wait()
    log.info("shutdown requested node_id=%d", config.node_id)
    await node.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lograft node`` (and ``lograft node health``); returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["health"]:
        return health_main(arguments[1:])
    args = _parse_args(arguments)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    keep_freed_memory()
    try:
        config = NodeConfig.from_settings(node_settings(args), Path)
        asyncio.run(_serve(config))
    except LograftError as exc:
        log.error("node failed to start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
