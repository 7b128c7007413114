"""A broker inside a controller quorum: registration, heartbeats, and the image it serves.

The broker follows the metadata log as a Raft observer (or as a voter, on a combined node)
and acts only as its image says: it opens a log for every partition that lists it as a
replica, leads the ones whose leader it is, applies topic config changes to the logs it
hosts as they arrive, answers Metadata, DescribeCluster and DescribeConfigs from the image,
and forwards CreateTopics, DeleteTopics, CreatePartitions and IncrementalAlterConfigs to
the active controller (those answers are :class:`~cluster.broker_frontend.BrokerFrontend`'s;
the calls go through :class:`~cluster.controller_client.ControllerClient`). It registers
with the controller once per process start (a new incarnation) and heartbeats; the
controller unfences it once its metadata has caught up with its own registration.

Until this process has registered and its image holds that registration (Kafka's initial
catch-up), it does not act on partitions: the image it restored at start may be stale (after
a whole-cluster restart it names this broker leader of partitions under a registration of
the previous incarnation), so it opens their logs but neither leads nor follows them, and
clients get NOT_LEADER_OR_FOLLOWER, retriable. Every call that carries the broker epoch
(AlterPartition, AllocateProducerIds) waits for a registration of this incarnation instead
of sending epoch -1, and an AlterPartition refused with STALE_BROKER_EPOCH (the broker is
re-registering) is sent again under the new epoch, as Kafka's AlterPartitionManager does;
producers never see that error.

It registers every listener it has (Kafka's ``advertised.listeners``); replication fetches
from other brokers at their addresses on the inter-broker listener, which is the listener of
the endpoint it is built with.
"""

# Over 600 lines: one class: registration, heartbeats and image sync share its epoch and lease.
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from cluster.broker_frontend import BrokerFrontend
from cluster.broker_lease import BrokerLease
from cluster.controller_client import ControllerClient
from cluster.txn_peers import BrokerTxnPeers
from controller.quorum.driver import RaftDriver
from controller.quorum.metadata_machine import MetadataStateMachine
from lograft.metadata import MetadataImage
from lograft.protocol.errors import (
    BrokerIdNotRegisteredError,
    CoordinatorLoadInProgressError,
    InvalidConfigError,
    InvariantError,
    LograftError,
    StaleBrokerEpochError,
    error_for_code,
)
from lograft.protocol.node_config import NodeConfig
from lograft.protocol.topic_config import LogConfig
from lograft.protocol.topic_partition import TopicPartition
from lograft.protocol.wire import controller_pb2 as cpb
from replica.broker_rpcs import BrokerEndpoint
from replica.clocks import interval_clock_ms, wall_clock_ms
from replica.fetcher import FollowedPartition, ReplicaFetcherManager
from replica.group_service import GroupService
from replica.log_manager import LogManager, remove_directories
from replica.partition import Partition
from replica.partition_roles import (
    Follow,
    Lead,
    PartitionRole,
    local_partition_roles,
    partitions_to_stop,
)
from replica.producer_ids import ProducerIdAllocator
from replica.replication import IsrProposal
from replica.txn_service import TransactionService, TxnServiceConfig

__all__ = ["ControllerClient", "KRaftBroker"]

log = logging.getLogger(__name__)

_PARALLEL_OPENS = 8
"""Partitions a broker opens at once when the metadata gives it new ones."""

CONTROLLED_SHUTDOWN_TIMEOUT_S = 2.5
"""Enough when a quorum answers (~0.1 s); bounded because the last node of a stopping
cluster has none to answer."""
HEARTBEAT_CALL_TIMEOUT_S = 2.0
ALTER_PARTITION_TIMEOUT_S = 5.0
ALTER_PARTITION_RETRY_BACKOFF_S = 0.1
"""Pause before an AlterPartition refused for a stale broker epoch goes again (if the
broker has not re-registered meanwhile)."""
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 10_000


class KRaftBroker(BrokerFrontend):
    """The broker role of a node in a quorum; also the broker service's ``ClusterFrontend``."""

    # Over 70 lines: every field of the broker set once, in the order its services need them.
    def __init__(
        self,
        endpoint: BrokerEndpoint,
        cluster_id: str,
        logs: LogManager,
        machine: MetadataStateMachine,
        driver: RaftDriver,
        controllers: ControllerClient,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        offsets_topic_partitions: int = 50,
        offsets_topic_replication_factor: int = 3,
        node_config: NodeConfig | None = None,
        listeners: Sequence[BrokerEndpoint] = (),
    ) -> None:
        """``endpoint`` is this broker on the inter-broker listener; ``listeners`` every
        listener it registers (default: ``endpoint``'s alone)."""
        super().__init__(
            endpoint,
            cluster_id,
            logs,
            machine,
            driver,
            controllers,
            node_config,
            offsets_topic_partitions,
            offsets_topic_replication_factor,
        )
        self._replica_lag_time_max_ms = replica_lag_time_max_ms
        config = node_config or NodeConfig(node_id=endpoint.node_id, data_dir=logs.data_dir)
        self._heartbeat_interval_s = config.broker_heartbeat_interval_ms / 1000
        self._listeners = tuple(listeners) or (endpoint,)
        if endpoint not in self._listeners:
            raise InvalidConfigError(f"the inter-broker listener {endpoint.listener} is not listed")
        self._isr_calls: dict[TopicPartition, asyncio.Task[None]] = {}
        self._isr_task: asyncio.Task[None] | None = None
        self._producer_ids = ProducerIdAllocator(self._allocate_producer_ids)
        self._incarnation = uuid.uuid4()
        self.broker_epoch = -1
        self.is_fenced = True
        self._lease = BrokerLease()
        """Until when no leadership of this broker's can have moved without it being told:
        its coordinators answer only meanwhile (:mod:`cluster.broker_lease`)."""
        self._lease_held = False
        self._registered = asyncio.Event()
        """Set while this incarnation is registered and the applied image holds that
        registration (:meth:`_update_registered`)."""
        self._caught_up = False
        """Whether the broker has acted on an image since it started: once registered and
        caught up, it follows every later image (even while re-registering)."""
        self._task: asyncio.Task[None] | None = None
        self._latest_image = machine.image
        self._sync_wanted = asyncio.Event()
        self._sync_task: asyncio.Task[None] | None = None
        # A follower's held fetch refreshes its caught-up time only when it returns: waiting
        # longer than half the lag limit would take idle followers out of the ISR.
        fetch_wait_ms = min(config.replica_fetch_wait_max_ms, replica_lag_time_max_ms // 2)
        self._fetchers = ReplicaFetcherManager(
            endpoint.node_id, logs, wall_clock_ms, fetch_max_wait_ms=fetch_wait_ms
        )
        self.groups = GroupService(
            logs, lambda: self._topic_counts, image_leader_epoch=self._leader_epoch_in_image
        )
        """Group coordinators for the ``__consumer_offsets`` partitions led here."""
        txn_config = (
            TxnServiceConfig(
                max_timeout_ms=node_config.transaction_max_timeout_ms,
                two_phase_enabled=node_config.transaction_two_phase_commit_enable,
                id_expiration_ms=node_config.transactional_id_expiration_ms,
            )
            if node_config is not None
            else None
        )
        self._txn_peers = BrokerTxnPeers(
            lambda: self._machine.image, endpoint.listener, self.next_producer_id
        )
        self.transactions = TransactionService(
            logs,
            lambda: self._topic_counts,
            self._txn_peers,
            txn_config,
            image_leader_epoch=self._leader_epoch_in_image,
        )
        """Transaction coordinators for the ``__transaction_state`` partitions led here."""
        self._topic_counts: dict[str, int] = {}
        machine.add_listener(self._on_image)

    async def start(self) -> None:
        """Start registering, heartbeating and following the image."""
        self._latest_image = self._machine.image
        self._sync_wanted.set()
        self._sync_task = asyncio.create_task(self._sync_loop(), name="broker-image-sync")
        self._task = asyncio.create_task(self._lifecycle(), name="broker-lifecycle")
        self._isr_task = asyncio.create_task(self._isr_expiration(), name="isr-expiration")
        self.groups.start()
        self.transactions.start()

    async def stop(self) -> None:
        """Controlled shutdown, then stop heartbeating.

        The broker asks the controller to move leadership of its partitions elsewhere and
        waits (bounded) until the controller says it may go, so clients switch leaders
        before the process exits instead of waiting for the session to expire.
        """
        for task in (self._task, self._sync_task, self._isr_task, *self._isr_calls.values()):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._fetchers.stop()
        await self.groups.stop()
        await self.transactions.stop()
        await self._txn_peers.close()
        if self.broker_epoch >= 0:
            try:
                async with asyncio.timeout(CONTROLLED_SHUTDOWN_TIMEOUT_S):
                    await self._controlled_shutdown()
            except (TimeoutError, LograftError) as exc:
                log.warning("controlled shutdown incomplete node_id=%d error=%r", self.node_id, exc)
        await self._controllers.close()

    async def _controlled_shutdown(self) -> None:
        while True:
            response = await self._controllers.call(
                "BrokerHeartbeat",
                cpb.BrokerHeartbeatRequest(
                    broker_id=self.node_id,
                    broker_epoch=self.broker_epoch,
                    current_metadata_offset=self._machine.applied_end_offset,
                    want_shut_down=True,
                ),
                timeout_s=CONTROLLED_SHUTDOWN_TIMEOUT_S,
            )
            if response.error_code:
                raise error_for_code(response.error_code, response.error_message)
            if response.should_shut_down:
                log.info("controlled shutdown complete node_id=%d", self.node_id)
                return
            await asyncio.sleep(self._heartbeat_interval_s / 4)

    # ---- registration and heartbeats ----------------------------------------------------

    async def _lifecycle(self) -> None:
        while True:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                await self._heartbeat()
            except (StaleBrokerEpochError, BrokerIdNotRegisteredError) as exc:
                log.warning("broker must register again node_id=%d reason=%s", self.node_id, exc)
                self._lease.revoke()
                self.broker_epoch = -1
                self._update_registered()
                continue
            except LograftError as exc:
                log.info("controller call failed node_id=%d error=%s", self.node_id, exc)
            self._log_lease_change()
            await asyncio.sleep(self._heartbeat_interval_s)

    def _log_lease_change(self) -> None:
        held = self._lease.holds(interval_clock_ms())
        if held != self._lease_held:
            self._lease_held = held
            log.info("broker lease %s node_id=%d", "held" if held else "lapsed", self.node_id)

    async def _register(self) -> None:
        response = await self._controllers.call(
            "RegisterBroker",
            timeout_s=HEARTBEAT_CALL_TIMEOUT_S,
            request=cpb.RegisterBrokerRequest(
                cluster_id=self._cluster_id,
                broker_id=self.node_id,
                incarnation_id=str(self._incarnation),
                host=self._endpoint.host,
                port=self._endpoint.port,
                rack=self._endpoint.rack,
                listeners=[
                    cpb.BrokerListener(name=x.listener, host=x.host, port=x.port)
                    for x in self._listeners
                ],
            ),
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
        self.broker_epoch = response.broker_epoch
        log.info("broker registered node_id=%d broker_epoch=%d", self.node_id, self.broker_epoch)
        self._update_registered()
        # The image may have applied the registration before this answer came back.
        self._sync_wanted.set()

    async def _heartbeat(self) -> None:
        sent_at_ms = interval_clock_ms()
        response = await self._controllers.call(
            "BrokerHeartbeat",
            cpb.BrokerHeartbeatRequest(
                broker_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self._machine.applied_end_offset,
            ),
            timeout_s=HEARTBEAT_CALL_TIMEOUT_S,
            movable=True,  # a repeated heartbeat only renews the session again
        )
        if response.error_code:
            raise error_for_code(response.error_code, response.error_message)
        if response.is_fenced != self.is_fenced:
            log.info(
                "broker %s node_id=%d", "fenced" if response.is_fenced else "unfenced", self.node_id
            )
        self.is_fenced = response.is_fenced
        if response.session_timeout_ms > 0:
            self._lease.renew(sent_at_ms, response.session_timeout_ms)
        elif response.is_fenced:
            self._lease.revoke()

    def fenced_in_image(self) -> bool:
        """Whether this process is fenced in the image applied here: not registered yet,
        registered by an earlier incarnation, or fenced."""
        if self.broker_epoch < 0:
            return True
        broker = self._machine.image.broker(self.node_id)
        return broker is None or broker.broker_epoch != self.broker_epoch or broker.fenced

    def _registered_in(self, image: MetadataImage) -> bool:
        """Whether ``image`` holds this incarnation's registration (at its broker epoch)."""
        if self.broker_epoch < 0:
            return False
        broker = image.broker(self.node_id)
        return broker is not None and broker.broker_epoch == self.broker_epoch

    def _update_registered(self) -> None:
        """Set or clear :attr:`_registered` after the epoch or the applied image changed."""
        if self._registered_in(self._machine.image):
            if not self._registered.is_set():
                log.info(
                    "broker registration applied node_id=%d broker_epoch=%d",
                    self.node_id,
                    self.broker_epoch,
                )
            self._registered.set()
        else:
            self._registered.clear()

    async def _current_broker_epoch(self) -> int:
        """This incarnation's broker epoch, once it is registered and the image holds it."""
        await self._registered.wait()
        return self.broker_epoch

    # ---- the image decides what this broker hosts and leads -----------------------------

    def _leader_epoch_in_image(self, tp: TopicPartition) -> int | None:
        """The leader epoch at which the applied image has this broker lead ``tp`` (None:
        another broker or nobody). The coordinators check it on every request: the image
        is ahead of the partitions' roles until :meth:`_sync` acts on it. None too once the
        broker's lease has run out: the controller may have fenced it and moved ``tp``
        without this node's image knowing yet."""
        if not self._lease.holds(interval_clock_ms()):
            return None
        topic = self._machine.image.topic(tp.topic)
        state = topic.partitions.get(tp.partition) if topic is not None else None
        if state is None or state.leader != self.node_id:
            return None
        return state.leader_epoch

    def _on_image(self, previous: MetadataImage, image: MetadataImage) -> None:
        self._latest_image = image
        self._update_registered()
        self._sync_wanted.set()
        self._image_arrived()

    async def _sync_loop(self) -> None:
        """Bring the hosted partitions in line with the newest image, one change at a time.

        Opening thousands of logs is disk work: it runs on a worker thread, so Raft ticks and
        heartbeats on the event loop go on meanwhile. Image changes that arrive during a
        sync are coalesced into the next one.
        """
        while True:
            await self._sync_wanted.wait()
            self._sync_wanted.clear()
            try:
                await self._sync(self._latest_image)
            except LograftError as exc:
                log.error("syncing partitions with the metadata image failed error=%s", exc)

    # Over 70 lines: one image sync in order: wait for registration, roles, fetchers, stale logs.
    async def _sync(self, image: MetadataImage) -> None:
        loop = asyncio.get_running_loop()
        wanted = local_partition_roles(image, self.node_id)
        missing = [
            (tp, local.topic_id, local.configs)
            for tp, local in wanted.items()
            if tp not in self._logs.partitions
        ]
        if missing:
            opened = await loop.run_in_executor(None, self._open_all, missing)
            for new_partition in opened:
                self._logs.adopt_partition(new_partition)
            log.info("partitions opened count=%d", len(opened))
        if not self._caught_up:
            # The logs are open (disk work done early), but until the image holds this
            # incarnation's registration it may be a previous life's: no leading, no
            # following, no fetching, no coordinators, no deletions.
            if not self._registered_in(image):
                log.info(
                    "partition roles wait for the broker registration node_id=%d "
                    "broker_epoch=%d partitions=%d",
                    self.node_id,
                    self.broker_epoch,
                    len(wanted),
                )
                return
            self._caught_up = True
            log.info(
                "broker caught up with its registration, acting on the metadata image "
                "node_id=%d broker_epoch=%d metadata_offset=%d",
                self.node_id,
                self.broker_epoch,
                image.offset,
            )
        now_ms = interval_clock_ms()  # starts the followers' lag clocks of a new leadership
        log_configs: dict[str, LogConfig | None] = {}
        reconfigured: dict[str, int] = {}
        followed: dict[TopicPartition, FollowedPartition] = {}
        for tp, local in wanted.items():
            partition = self._logs.partitions.get(tp)
            if partition is None:
                continue
            if tp.topic not in log_configs:
                log_configs[tp.topic] = self._log_config(tp.topic, local.configs)
            config = log_configs[tp.topic]
            if config is not None and partition.log.config != config:
                # An altered topic config takes effect at once (IncrementalAlterConfigs).
                self._logs.update_config(partition, config)
                reconfigured[tp.topic] = reconfigured.get(tp.topic, 0) + 1
            self._apply_role(partition, local.role, now_ms)
            if isinstance(local.role, Follow):
                followed[tp] = FollowedPartition(local.role.leader_id, local.role.leader_epoch)
        for name, count in reconfigured.items():
            log.info("topic config applied topic=%s partitions=%d", name, count)
        inter_broker = self._endpoint.listener
        addresses = {
            b.broker_id: f"{address.host}:{address.port}"
            for b in image.unfenced_brokers()
            if (address := b.listener(inter_broker)) is not None
        }
        await self._fetchers.update(followed, addresses)
        # Partition counts are kept per image, not recomputed for every group request.
        counts = {t.name: len(t.partitions) for t in image.topics_by_name.values()}
        changed = counts != self._topic_counts
        self._topic_counts = counts
        self.groups.sync()
        self.transactions.sync()
        if changed:
            self.groups.on_topics_changed()
        stale = partitions_to_stop(list(self._logs.partitions), wanted)
        doomed = [d for tp in stale if (d := self._logs.unhost_partition(tp)) is not None]
        if doomed:
            log.info("partitions removed count=%d", len(doomed))
            await loop.run_in_executor(None, remove_directories, doomed)

    def _log_config(self, topic: str, configs: Mapping[str, str]) -> LogConfig | None:
        """The effective log config of ``topic``; None (logged) if this node rejects it."""
        try:
            return self._logs.log_config_for(configs)
        except InvalidConfigError as exc:
            # The controller validated it; a node of another version may still disagree.
            log.error("topic config not applicable topic=%s error=%s", topic, exc)
            return None

    def _apply_role(self, partition: Partition, role: PartitionRole, now_ms: int) -> None:
        """Lead or follow ``partition`` as the image's registration says."""
        if isinstance(role, Lead):
            partition.become_leader(
                replica_id=self.node_id,
                replicas=role.replicas,
                isr=role.isr,
                leader_epoch=role.leader_epoch,
                partition_epoch=role.partition_epoch,
                now_ms=now_ms,
                propose_isr=self._propose_isr,
            )
        elif isinstance(role, Follow):
            partition.become_follower(
                role.leader_epoch,
                replica_id=self.node_id,
                leader_id=role.leader_id,
                unclean_leader_election=role.unclean_leader_election,
            )
        elif partition.is_leader or partition.leader_epoch != role.leader_epoch:
            partition.become_follower(role.leader_epoch)

    # ---- ISR changes (AlterPartition) ---------------------------------------------------

    def _propose_isr(self, partition: Partition, proposal: IsrProposal) -> None:
        """Send a leader's ISR proposal to the controller; one call per partition at a time."""
        tp = partition.topic_partition
        running = self._isr_calls.get(tp)
        if running is not None and not running.done():
            return
        self._isr_calls[tp] = asyncio.create_task(
            self._alter_partition(partition, proposal), name=f"alter-partition-{tp}"
        )

    async def _alter_partition(self, partition: Partition, proposal: IsrProposal) -> None:
        """Send ``proposal`` under this incarnation's broker epoch; hand its answer over.

        The call waits for the broker's registration (never epoch -1). A STALE_BROKER_EPOCH
        or BROKER_ID_NOT_REGISTERED answer says the broker is re-registering: the proposal is
        sent again under the new epoch while this broker still leads at its leader epoch and
        it is still the one pending (Kafka's AlterPartitionManager retries it likewise); it
        is never handed to the partition as a failure.
        """
        tp = partition.topic_partition
        try:
            while True:
                broker_epoch = await self._current_broker_epoch()
                if partition.pending_isr_proposal() != proposal:
                    return  # committed, forgotten or superseded meanwhile
                request = cpb.AlterPartitionRequest(
                    broker_id=self.node_id,
                    broker_epoch=broker_epoch,
                    topic=tp.topic,
                    partition=tp.partition,
                    leader_epoch=proposal.leader_epoch,
                    partition_epoch=proposal.partition_epoch,
                    new_isr=list(proposal.new_isr),
                )
                try:
                    response = await self._controllers.call(
                        "AlterPartition", request, timeout_s=ALTER_PARTITION_TIMEOUT_S
                    )
                except LograftError as exc:
                    log.info("alter partition failed partition=%s error=%s", tp, exc.error_name)
                    partition.on_isr_change_failed(proposal.leader_epoch, exc)
                    return
                if not response.error_code:
                    break
                error = error_for_code(response.error_code, response.error_message)
                if isinstance(error, StaleBrokerEpochError | BrokerIdNotRegisteredError):
                    log.info(
                        "alter partition sent again once re-registered partition=%s "
                        "broker_epoch=%d error=%s",
                        tp,
                        broker_epoch,
                        error.error_name,
                    )
                    await asyncio.sleep(ALTER_PARTITION_RETRY_BACKOFF_S)
                    continue
                log.info("alter partition refused partition=%s error=%s", tp, error.error_name)
                partition.on_isr_change_failed(proposal.leader_epoch, error)
                return
        finally:
            self._isr_calls.pop(tp, None)
        if response.leader_epoch == proposal.leader_epoch:
            partition.on_isr_committed(
                response.leader_epoch, tuple(response.isr), response.partition_epoch
            )

    async def _isr_expiration(self) -> None:
        """Kafka's isr-expiration task: drop lagging followers every lag.time.max / 2."""
        interval_s = max(self._replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval_s)
            now_ms = interval_clock_ms()
            for partition in list(self._logs.partitions.values()):
                if not partition.is_leader:
                    continue
                try:
                    partition.maybe_shrink_isr(now_ms, self._replica_lag_time_max_ms)
                    if partition.topic_partition not in self._isr_calls:
                        partition.resend_pending_proposal()
                except InvariantError:
                    raise  # the node halts (cluster.halt)
                except Exception:
                    # One partition's failure must not stop ISR expiration for the others.
                    log.exception("isr expiration failed partition=%s", partition.topic_partition)

    # ---- producer ids -------------------------------------------------------------------

    async def _allocate_producer_ids(self) -> tuple[int, int]:
        # Until this process has (re-)registered and its image holds the registration, the
        # controller knows no epoch of ours (or an older incarnation's): a block cannot be had
        # yet. That is a transient state of this broker, so the producer is told to retry
        # (Kafka's producer id manager answers COORDINATOR_LOAD_IN_PROGRESS while it has no
        # block), never STALE_BROKER_EPOCH, and no request goes out with epoch -1.
        if not self._registered.is_set():
            raise CoordinatorLoadInProgressError(
                f"broker {self.node_id} is not registered with the controller yet"
            )
        broker_epoch = self.broker_epoch
        response = await self._controllers.call(
            "AllocateProducerIds",
            cpb.AllocateProducerIdsRequest(broker_id=self.node_id, broker_epoch=broker_epoch),
            timeout_s=ALTER_PARTITION_TIMEOUT_S,
        )
        if response.error_code:
            error = error_for_code(response.error_code, response.error_message)
            if isinstance(error, StaleBrokerEpochError | BrokerIdNotRegisteredError):
                raise CoordinatorLoadInProgressError(
                    f"broker {self.node_id} is re-registering with the controller: {error.message}"
                )
            raise error
        return response.producer_id_start, response.producer_id_len

    async def next_producer_id(self) -> int:
        """A producer id from this broker's current block (a new block when it runs out)."""
        return await self._producer_ids.next_producer_id()

    def _open_all(
        self, missing: list[tuple[TopicPartition, str, Mapping[str, str]]]
    ) -> list[Partition]:
        """Open the partitions; those that cannot be opened are logged and left out.

        Several at once: each new log fsyncs its files and directory, and under write load
        one such fsync waits for the journal commit that carries the load's data; concurrent
        fsyncs share commits. One after another, the 50 partitions of ``__consumer_offsets``
        took a node of a chaos run 18 s; with 8 at once they open in about half the time
        (0.5 s against 0.8-0.9 s under a 60 k/s ``acks=all`` load).
        """

        def open_one(item: tuple[TopicPartition, str, Mapping[str, str]]) -> Partition | None:
            tp, topic_id, configs = item
            try:
                return self._logs.open_partition(tp, topic_id, configs)
            except LograftError as exc:
                log.error("cannot host partition partition=%s error=%s", tp, exc)
                return None

        workers = min(_PARALLEL_OPENS, len(missing))
        with ThreadPoolExecutor(workers, thread_name_prefix="open-partition") as pool:
            results = list(pool.map(open_one, missing))
        return [partition for partition in results if partition is not None]
