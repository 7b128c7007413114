"""The node process: ``lograft node`` / ``python -m cluster.node``.

A node has the broker role, the controller role or both (Kafka's ``process.roles``; with
``--controller-quorum-voters`` both by default, without it a standalone broker). It can be
killed at any moment (``kill -9``) and restarted from its data directory: logs recover by
CRC, and every acknowledged write was fsync'ed before its acknowledgement (under the
default flush policy). SIGTERM and SIGINT shut down cleanly: stop accepting
requests, finish in-flight ones, flush, and leave clean-shutdown markers.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import resource
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc

from cluster import halt
from cluster.durable import write_file_atomically
from cluster.errors import (
    InconsistentClusterIdError,
    InvalidConfigError,
    KafkaStorageError,
    LograftError,
)
from cluster.kraft_broker import ControllerClient, KRaftBroker
from cluster.node_config import NodeConfig
from cluster.wire import broker_pb2_grpc as pb_grpc
from cluster.wire import controller_pb2_grpc
from cluster.wire import raft_pb2_grpc as raft_pb_grpc
from controller.logic.decision import ControllerConfig
from controller.quorum.controller import QuorumController
from controller.quorum.driver import RaftDriver, RaftTransport
from controller.quorum.metadata_machine import MetadataStateMachine
from controller.raft import RaftConfig
from controller.storage.disk_storage import DiskStorage
from replica.broker_service import BrokerEndpoint, BrokerService
from replica.log.partition_log import delete_files
from replica.log_cleaner_loop import LogCleaner
from replica.log_manager import LogManager
from replica.topic_config import FlushPolicy
from replica.topic_partition import TopicPartition

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
    data_dir.mkdir(parents=True, exist_ok=True)
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
    """One lograft process: a gRPC server, its log manager and its background tasks."""

    def __init__(self, config: NodeConfig, *, halt_on_invariant: bool = False) -> None:
        """``halt_on_invariant``: a broken invariant ends the process (the node's own
        process sets it; an in-process test leaves it off to see the error instead)."""
        self.config = config
        self._halt_on_invariant = halt_on_invariant
        self.cluster_id = load_or_create_identity(
            config.data_dir, config.node_id, quorum_cluster_id(config)
        )
        self.logs = LogManager(config.data_dir, config.log_defaults, wall_clock_ms)
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._starters: list[Callable[[], Awaitable[None]]] = []
        self._stoppables: list[Callable[[], Awaitable[None]]] = []
        self._storage: DiskStorage | None = None
        self._cleaner: LogCleaner | None = None
        self.bound_port = config.port

    async def start(self) -> None:
        """Recover the logs (and the metadata log in a quorum), then start serving."""
        loop = asyncio.get_running_loop()
        if self._halt_on_invariant:
            halt.install(loop)
        open_files = raise_open_file_limit()
        # In a quorum the metadata image says which partitions exist; standalone, topics.json.
        await loop.run_in_executor(None, self.logs.open, not self.config.in_quorum)
        limit = self.config.socket_request_max_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=[halt.HaltOnInvariantInterceptor()] if self._halt_on_invariant else None,
        )
        endpoint = BrokerEndpoint(
            self.config.node_id, self.config.advertised_host, self.config.port, self.config.rack
        )
        frontend = await self._start_quorum(server, endpoint) if self.config.in_quorum else None
        if "broker" in self.config.process_roles:
            service = BrokerService(
                self.logs,
                endpoint,
                self.cluster_id,
                wall_clock_ms,
                frontend,
                groups=frontend.groups if frontend is not None else None,
            )
            pb_grpc.add_BrokerServicer_to_server(service, server)
        self.bound_port = server.add_insecure_port(f"{self.config.host}:{self.config.port}")
        if self.bound_port == 0:
            raise InvalidConfigError(f"cannot listen on {self.config.host}:{self.config.port}")
        await server.start()
        self._server = server
        for starter in self._starters:
            await starter()
        self._tasks = [
            asyncio.create_task(self._housekeeping(), name="housekeeping"),
            asyncio.create_task(self._interval_flusher(), name="interval-flusher"),
            asyncio.create_task(self._high_watermark_checkpointer(), name="hw-checkpoint"),
        ]
        if "broker" in self.config.process_roles and self.config.log_cleaner_enable:
            self._cleaner = LogCleaner(
                self.logs, wall_clock_ms, backoff_ms=self.config.log_cleaner_backoff_ms
            )
            self._cleaner.start()
        log.info(
            "node ready node_id=%d listen=%s:%d cluster_id=%s roles=%s open_file_limit=%d",
            self.config.node_id,
            self.config.host,
            self.bound_port,
            self.cluster_id,
            ",".join(sorted(self.config.process_roles)),
            open_files,
        )

    async def _start_quorum(
        self, server: grpc.aio.Server, endpoint: BrokerEndpoint
    ) -> KRaftBroker | None:
        """Wire the Raft driver, the controller and the broker's metadata follower."""
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
        driver = RaftDriver(
            RaftConfig(
                node_id=config.node_id,
                cluster_id=self.cluster_id,
                voters=frozenset(config.quorum_voters),
                election_timeout_ticks=max(2, config.election_timeout_ms // tick_ms),
            ),
            storage,
            RaftTransport(config.node_id, config.quorum_voters),
            machine,
            random.Random(),
            tick_ms=tick_ms,
        )
        raft_pb_grpc.add_RaftServicer_to_server(driver, server)
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
            controller_pb2_grpc.add_ControllerServicer_to_server(controller, server)
            self._starters.append(controller.start)
            self._stoppables.insert(0, controller.stop)
        if "broker" not in config.process_roles:
            return None
        broker = KRaftBroker(
            endpoint,
            self.cluster_id,
            self.logs,
            machine,
            driver,
            ControllerClient(config.quorum_voters, driver),
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            offsets_topic_partitions=config.offsets_topic_num_partitions,
            offsets_topic_replication_factor=config.offsets_topic_replication_factor,
            node_config=config,
        )
        self._starters.append(broker.start)
        self._stoppables.insert(0, broker.stop)
        return broker

    async def stop(self) -> None:
        """Stop accepting requests, let in-flight ones finish, flush and close the logs."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._cleaner is not None:
            await self._cleaner.stop()  # before the logs close: its thread reads them
        for stop in self._stoppables:
            await stop()
        if self._server is not None:
            await self._server.stop(SHUTDOWN_GRACE_S)
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
            await asyncio.sleep(max(min(intervals, default=1000), MIN_FLUSH_TICK_MS) / 1000)
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
        description="Run a lograft node (broker, controller or both) serving gRPC.",
    )
    parser.add_argument("--node-id", type=int, required=True, help="this node's node.id")
    parser.add_argument("--data-dir", type=Path, required=True, help="log directory")
    parser.add_argument(
        "--listen", default="127.0.0.1:9092", help="host:port to serve on (default %(default)s)"
    )
    parser.add_argument("--advertised-host", default="", help="host clients should dial")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="broker setting by Kafka name, e.g. log.segment.bytes=1048576 (repeatable)",
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
    """Entry point of ``lograft node``; returns the process exit code."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    overrides: dict[str, str] = {}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep:
            log.error("invalid --config %r: expected NAME=VALUE", item)
            return 2
        overrides[name.strip()] = value.strip()
    # Kafka's server.properties names work as --config too; the flags win.
    process_roles = args.process_roles or overrides.pop("process.roles", "")
    voters = args.controller_quorum_voters or overrides.pop("controller.quorum.voters", "")
    rack = args.rack or overrides.pop("broker.rack", "")
    overrides.pop("process.roles", None)
    overrides.pop("controller.quorum.voters", None)
    overrides.pop("broker.rack", None)
    try:
        config = NodeConfig.build(
            args.node_id,
            args.data_dir,
            args.listen,
            args.advertised_host,
            overrides,
            process_roles,
            voters,
            args.cluster_id,
            rack,
        )
        asyncio.run(_serve(config))
    except LograftError as exc:
        log.error("node failed to start: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
