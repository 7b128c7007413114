"""A seeded, deterministic simulation of one partition replicated on three brokers (issue 4).

One seed decides everything: ``min.insync.replicas``, timeouts, link quality, the fault
schedule and the produce load. Time is an integer ``now_ms``; work is a heap of
``(due_ms, seq, event)``. Nothing sleeps. The pure cores under test are
:class:`~replica.replication.LeaderState`, :class:`~replica.replication.FollowerState` and
:class:`~replica.replication.LeaderEpochCache`; everything else is a model:

* **Logs** are lists of ``(epoch, record_id)`` (the offset is the index) with an fsynced
  prefix; a crash loses the rest. A follower fsyncs what it appended before its next fetch
  (its fetch offset acknowledges durable data); the leader counts its flushed offset.
* **Controller**: brokers heartbeat it; one silent for ``session_ms`` is fenced and removed
  from the ISR (never the last member); a fenced leader is replaced by the first live ISR
  member in replica order at leader epoch + 1, or the partition goes offline until an ISR
  member returns. AlterPartition is checked as Kafka does (leader epoch, leader, partition
  epoch, eligible members). Brokers learn the partition state by polling (delayed, lossy).
* **Network**: per-message drop, duplication and random delay (reordering) between every
  pair of nodes (the controller is node 0), partitions that also cut messages in flight.

Invariants are checked after every event; the first broken one raises
:class:`SimulationFailure` with the seed and the replay command. After the faulty phase the
faults heal and the run must converge: one leader, all three replicas in the ISR, identical
logs, HW at the log end; then every acknowledged ``acks=all`` record must be in every
in-sync replica's log exactly once, at the offset it was acknowledged with.
"""

# Over 600 lines on purpose: the model (logs, controller, network, faults) is one world.
from __future__ import annotations

import dataclasses
import functools
import heapq
import logging
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lograft.protocol.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidRequestError,
    InvalidUpdateVersionError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from replica.follower_fetch import NextFetch, handle_fetch_response
from replica.replication import (
    DivergingEpoch,
    FetchRequest,
    FetchResponse,
    FollowerState,
    IsrProposal,
    LeaderEpochCache,
    LeaderState,
    ReplicationInvariantError,
)

__all__ = [
    "ReplRunResult",
    "ReplicationSimulator",
    "ScriptedReplication",
    "SimulationFailure",
    "replay_command",
    "run_seed",
]

Entry = tuple[int, int]
"""``(leader epoch, record id)``; the offset is the index in the log."""
REPLICAS = (1, 2, 3)
CONTROLLER = 0
REPLICATION_LOG = logging.getLogger("replica.replication")
"""The logger the broker hands its replication cores; the simulation hands them the same."""

(
    _DELIVER,
    _FSYNC,
    _FETCH_AGAIN,
    _LEADER_TICK,
    _HEARTBEAT,
    _CONTROLLER_TICK,
    _PRODUCE,
    _NEMESIS,
    _RESTART,
) = range(9)
_KIND_NAMES = (
    "deliver",
    "fsync",
    "fetch",
    "leader_tick",
    "heartbeat",
    "controller_tick",
    "produce",
    "nemesis",
    "restart",
)


def replay_command(seed: int) -> str:
    """The exact command that replays ``seed`` alone."""
    return (
        f"LOGRAFT_REPL_SIM_SEED={seed} .venv/bin/pytest tests/sim/test_replication_sim.py -k replay"
    )


class SimulationFailure(AssertionError):
    """An invariant broke (or the run did not converge); the message names the seed."""


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    """What a seed randomises."""

    min_insync_replicas: int
    replica_lag_time_max_ms: int
    session_ms: int
    heartbeat_ms: int
    fetch_wait_ms: int
    fetch_timeout_ms: int
    max_fetch_entries: int
    drop: float
    duplicate: float
    delay_max_ms: int
    disk_delay_max_ms: int
    nemesis_interval_ms: int
    crash_weight: int
    partition_weight: int
    produce_interval_ms: int
    acks_all_fraction: float
    faulty_ms: int

    @classmethod
    def draw(cls, rng: random.Random, faulty_ms: int) -> SwarmConfig:
        """Pick one configuration."""
        return cls(
            min_insync_replicas=rng.choice((1, 2, 2, 2, 3)),
            replica_lag_time_max_ms=rng.choice((40, 100, 300)),
            session_ms=rng.choice((60, 150, 400)),
            heartbeat_ms=20,
            fetch_wait_ms=rng.choice((2, 10)),
            fetch_timeout_ms=rng.choice((50, 150)),
            max_fetch_entries=rng.choice((1, 4, 32)),
            drop=rng.choice((0.0, 0.02, 0.1, 0.3)),
            duplicate=rng.choice((0.0, 0.05)),
            delay_max_ms=rng.choice((1, 5, 20)),
            disk_delay_max_ms=rng.choice((0, 2, 10)),
            nemesis_interval_ms=rng.choice((50, 150, 400)),
            crash_weight=rng.choice((0, 1, 3)),
            partition_weight=rng.choice((0, 1, 3)),
            produce_interval_ms=rng.choice((5, 15, 40)),
            acks_all_fraction=rng.choice((0.5, 1.0)),
            faulty_ms=faulty_ms,
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One message on the simulated network."""

    kind: str
    src: int
    dst: int
    body: Any
    seq: int = 0


@dataclass(frozen=True, slots=True)
class PartitionMeta:
    """The partition as the controller committed it (what the metadata log says)."""

    leader: int | None
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplRunResult:
    """What one schedule did, for the summary."""

    seed: int
    min_insync_replicas: int
    events: int
    checks: Counter[str]
    max_leader_epoch: int
    acked: int
    refused: int
    crashes: int
    truncations: int


class Controller:
    """The controller's view of the one partition and of broker liveness."""

    def __init__(self, sim: ReplicationSimulator) -> None:
        self.sim = sim
        self.leader: int | None = 1
        self.leader_epoch = 0
        self.partition_epoch = 0
        self.isr: tuple[int, ...] = REPLICAS
        self.fenced: set[int] = set()
        self.last_heartbeat_ms = dict.fromkeys(REPLICAS, 0)
        self.elections: list[tuple[int, int | None]] = [(0, 1)]
        self.incarnation = dict.fromkeys(REPLICAS, 0)

    @property
    def meta(self) -> PartitionMeta:
        """The committed partition state."""
        return PartitionMeta(self.leader, self.leader_epoch, self.partition_epoch, self.isr)

    def _elect(self) -> None:
        live = [r for r in self.isr if r not in self.fenced]
        self.leader = live[0] if live else None
        new_epoch = self.leader_epoch + 1
        if self.elections and new_epoch <= self.elections[-1][0]:
            self.sim.fail(f"leader epochs strictly increase: {new_epoch} after {self.elections}")
        self.sim.checks["leader_epoch_increases"] += 1
        self.leader_epoch = new_epoch
        self.elections.append((new_epoch, self.leader))

    def tick(self) -> None:
        """Fence brokers whose session expired."""
        for b in REPLICAS:
            if (
                b not in self.fenced
                and self.sim.now_ms - self.last_heartbeat_ms[b] > self.sim.cfg.session_ms
            ):
                self._fence(b)

    def _fence(self, b: int) -> None:
        """Fence ``b``: out of the ISR (unless last), and a new leader if it led."""
        self.fenced.add(b)
        changed = False
        if b in self.isr and len(self.isr) > 1:
            self.isr = tuple(r for r in self.isr if r != b)
            changed = True
        if self.leader == b:
            self._elect()
            changed = True
        if changed:
            self.partition_epoch += 1

    def on_heartbeat(self, b: int, incarnation: int) -> PartitionMeta:
        """Record liveness, unfence, bring an offline partition back; answer the state.

        A new incarnation (the broker restarted, perhaps losing unflushed records) first
        fences the old one, as KRaft does on re-registration after an unclean shutdown: a
        restarted leader must not resume its old epoch with a different log.
        """
        if self.incarnation[b] != incarnation:
            if b not in self.fenced:
                self._fence(b)
            self.incarnation[b] = incarnation
        self.last_heartbeat_ms[b] = self.sim.now_ms
        if b in self.fenced:
            self.fenced.discard(b)
            if self.leader is None and b in self.isr:
                self._elect()
                self.partition_epoch += 1
        return self.meta

    def on_alter_partition(self, b: int, proposal: IsrProposal) -> LograftError | None:
        """Kafka's AlterPartition checks, in Kafka's order; commit on success."""
        if proposal.leader_epoch < self.leader_epoch:
            return FencedLeaderEpochError(f"{proposal.leader_epoch} < {self.leader_epoch}")
        if b != self.leader or proposal.leader_epoch != self.leader_epoch:
            return InvalidRequestError(f"broker {b} is not the leader {self.leader}")
        if proposal.partition_epoch != self.partition_epoch:
            return InvalidUpdateVersionError(
                f"{proposal.partition_epoch} != {self.partition_epoch}"
            )
        if any(r in self.fenced for r in proposal.new_isr) or b not in proposal.new_isr:
            return IneligibleReplicaError(f"{proposal.new_isr} fenced={self.fenced}")
        self.isr = tuple(r for r in REPLICAS if r in proposal.new_isr)
        self.partition_epoch += 1
        self.sim.checks["alter_partition_committed"] += 1
        return None


@dataclass
class Replica:
    """One broker's copy of the partition and the shell around the pure cores."""

    replica_id: int
    alive: bool = True
    generation: int = 0
    log: list[Entry] = field(default_factory=list)
    synced: int = 0
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    role: LeaderState | FollowerState | None = None
    leader_epoch: int = -1
    partition_epoch: int = -1
    high_watermark: int = 0
    fetch_seq: int = 0
    fsync_pending: bool = False
    pending_acks: list[tuple[int, int]] = field(default_factory=list)
    crashes: int = 0
    last_leader_hw: int = 0
    checkpointed_hw: int = 0
    alter_seq: int = 0
    alter_in_flight: int | None = None
    alter_deadline_ms: int = 0


class _SimLog:
    """A simulated replica's log as the broker's fetch step sees a partition."""

    def __init__(self, sim: ReplicationSimulator, replica: Replica) -> None:
        self._sim = sim
        self._replica = replica

    @property
    def log_end_offset(self) -> int:
        return len(self._replica.log)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._replica.cache

    def append_fetched(self, fetch_offset: int, records: list[Entry]) -> None:
        replica = self._replica
        if fetch_offset != len(replica.log):
            self._sim.fail(f"replica {replica.replica_id} appends at {fetch_offset}, not its end")
        for epoch, record_id in records:
            replica.cache.assign(epoch, len(replica.log))  # the log assigns as it appends
            replica.log.append((epoch, record_id))
        self._sim.on_replica_appended(replica, fetch_offset)

    def truncate_diverged(self, offset: int) -> None:
        replica = self._replica
        # As PartitionLog.truncate_to: nothing at or beyond the log end.
        if offset >= len(replica.log):
            return
        self._sim.truncations += 1
        self._sim.checks["truncations"] += 1
        self._sim.truncated_to.append((replica.replica_id, offset))
        del replica.log[offset:]
        replica.synced = min(replica.synced, offset)
        replica.cache.truncate_from_end(offset)
        replica.high_watermark = min(replica.high_watermark, offset)
        self._sim.on_replica_truncated(replica)


class ReplicationSimulator:
    """One seeded schedule of the replicated partition."""

    def __init__(self, seed: int, *, faulty_ms: int = 1500, trace: bool = False) -> None:
        self.seed = seed
        root = random.Random(seed)
        self.cfg = SwarmConfig.draw(random.Random(root.getrandbits(64)), faulty_ms)
        self.rng_net = random.Random(root.getrandbits(64))
        self.rng_nemesis = random.Random(root.getrandbits(64))
        self.rng_client = random.Random(root.getrandbits(64))
        self.rng_disk = random.Random(root.getrandbits(64))
        self.now_ms = 0
        self._queue: list[tuple[int, int, tuple[int, int, Any]]] = []
        self._seq = 0
        self.events = 0
        self.faulty = True
        self.trace: deque[tuple[int, int, int, Any]] = deque(maxlen=100_000 if trace else 80)
        self.checks: Counter[str] = Counter()
        self.blocked: set[tuple[int, int]] = set()
        self.controller = Controller(self)
        self.replicas = {r: Replica(r) for r in REPLICAS}
        self.committed: list[Entry] = []
        self.leader_of_epoch: dict[int, int] = {}
        self.acked: dict[int, tuple[int, Entry]] = {}
        self.refused = 0
        self.truncations = 0
        self.truncated_to: list[tuple[int, int]] = []
        self.replica_order: tuple[int, ...] = REPLICAS
        self._next_record_id = 0
        for r in REPLICAS:
            self.schedule(0, _HEARTBEAT, r, (0,))
        self.schedule(10, _CONTROLLER_TICK, 0, None)
        self.schedule(self.cfg.nemesis_interval_ms, _NEMESIS, 0, None)
        self.schedule(self.cfg.produce_interval_ms, _PRODUCE, 0, None)

    # --- plumbing -------------------------------------------------------------------------

    def schedule(self, delay_ms: int, kind: int, node: int, payload: Any) -> None:
        """Run an event ``delay_ms`` from now (ties in scheduling order)."""
        self._seq += 1
        heapq.heappush(self._queue, (self.now_ms + delay_ms, self._seq, (kind, node, payload)))

    def send(self, message: Message) -> None:
        """Queue ``message`` (or lose it)."""
        rng = self.rng_net
        link = (message.src, message.dst)
        if link in self.blocked or (self.faulty and rng.random() < self.cfg.drop):
            return
        copies = 2 if self.faulty and rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            self.schedule(rng.randint(0, self.cfg.delay_max_ms), _DELIVER, message.dst, message)

    def fail(self, detail: str) -> None:
        """Raise :class:`SimulationFailure` with the seed, the swarm and recent events."""
        recent = "\n".join(
            f"  t={t}ms {_KIND_NAMES[k]} node={n} {p!r}"[:260]
            for t, k, n, p in list(self.trace)[-80:]
        )
        states = "\n".join(
            f"  replica {r.replica_id}: alive={r.alive} role={r.role!r} log_end={len(r.log)} "
            f"synced={r.synced} cache={r.cache!r}"
            for r in self.replicas.values()
        )
        raise SimulationFailure(
            f"seed={self.seed} t={self.now_ms}ms phase={'faulty' if self.faulty else 'healed'}: "
            f"{detail}\n  swarm: {self.cfg}\n  controller: {self.controller.meta} "
            f"fenced={self.controller.fenced}\n{states}\n  replay: {self.replay_command()}\n"
            f"  last events:\n{recent}"
        )

    def replay_command(self) -> str:
        """The command that replays this schedule alone."""
        return replay_command(self.seed)

    # --- what a subclass keeps beside the log (the broker's producer state) -------------

    def on_replica_appended(self, replica: Replica, start: int) -> None:
        """A follower appended fetched entries from offset ``start`` to its log end."""

    def on_replica_truncated(self, replica: Replica) -> None:
        """A follower truncated its diverged tail; its log now ends at ``len(log)``."""

    # --- running --------------------------------------------------------------------------

    def run(self) -> ReplRunResult:
        """Faulty phase, heal, convergence; raises :class:`SimulationFailure` on a bug."""
        self._run_until(self.cfg.faulty_ms)
        self._heal()
        self._converge()
        return ReplRunResult(
            seed=self.seed,
            min_insync_replicas=self.cfg.min_insync_replicas,
            events=self.events,
            checks=self.checks,
            max_leader_epoch=self.controller.leader_epoch,
            acked=len(self.acked),
            refused=self.refused,
            crashes=sum(r.crashes for r in self.replicas.values()),
            truncations=self.truncations,
        )

    def _run_until(self, end_ms: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            due, _, event = heapq.heappop(queue)
            self.now_ms = due
            self.events += 1
            self.trace.append((due, *event))
            self._dispatch(*event)
            self._check()
        self.now_ms = end_ms

    def _dispatch(self, kind: int, node: int, payload: Any) -> None:
        if kind == _CONTROLLER_TICK:
            self.controller.tick()
            self.schedule(10, _CONTROLLER_TICK, 0, None)
            return
        if kind == _NEMESIS:
            if self.faulty:
                self._nemesis()
                self.schedule(self.cfg.nemesis_interval_ms, _NEMESIS, 0, None)
            return
        if kind == _PRODUCE:
            if self.faulty:
                self._produce()
                self.schedule(self.cfg.produce_interval_ms, _PRODUCE, 0, None)
            return
        if kind == _DELIVER:
            message: Message = payload
            if (message.src, message.dst) in self.blocked:
                return  # a partition also cuts what was in flight
            if node == CONTROLLER:
                self._controller_receive(message)
            elif self.replicas[node].alive:
                self._replica_receive(self.replicas[node], message)
            return
        replica = self.replicas[node]
        if kind == _RESTART:
            if not replica.alive:
                self._restart(replica)
            return
        if not replica.alive or payload[0] != replica.generation:
            return  # a timer of a process that has died since
        if kind == _HEARTBEAT:
            # The broker's periodic replication-offset-checkpoint rides on this timer.
            role = replica.role
            replica.checkpointed_hw = (
                role.high_watermark if isinstance(role, LeaderState) else replica.high_watermark
            )
            self.send(Message("heartbeat", node, CONTROLLER, replica.generation))
            self.schedule(self.cfg.heartbeat_ms, _HEARTBEAT, node, (replica.generation,))
        elif kind == _FSYNC:
            self._fsync(replica)
        elif kind == _FETCH_AGAIN:
            if payload[1] == replica.fetch_seq:
                self._send_fetch(replica)
        elif kind == _LEADER_TICK:
            self._leader_tick(replica, payload[1])
        else:
            raise AssertionError(f"unknown event kind {kind}")

    # --- controller -----------------------------------------------------------------------

    def _controller_receive(self, message: Message) -> None:
        if message.kind == "heartbeat":
            meta = self.controller.on_heartbeat(message.src, message.body)
            self.send(Message("metadata", CONTROLLER, message.src, (message.body, meta)))
        elif message.kind == "alter":
            error = self.controller.on_alter_partition(message.src, message.body)
            self.send(
                Message(
                    "alter_response", CONTROLLER, message.src, (message.body, error), message.seq
                )
            )
            if error is None:
                incarnation = self.controller.incarnation[message.src]
                meta = self.controller.meta
                self.send(Message("metadata", CONTROLLER, message.src, (incarnation, meta)))

    # --- replicas -------------------------------------------------------------------------

    def _replica_receive(self, replica: Replica, message: Message) -> None:
        if message.kind == "metadata":
            incarnation, meta = message.body
            if incarnation == replica.generation:  # a restarted broker ignores the old one's
                self._on_metadata(replica, meta)
        elif message.kind == "fetch":
            self._on_fetch(replica, message)
        elif message.kind == "fetch_response":
            self._on_fetch_response(replica, message)
        elif message.kind == "alter_response":
            if message.seq != replica.alter_in_flight:
                return  # the broker's call for it ended (timed out): nobody reads the answer
            replica.alter_in_flight = None
            proposal, error = message.body
            role = replica.role
            if (
                error is not None
                and isinstance(role, LeaderState)
                and role.pending_proposal == proposal
            ):
                role.on_alter_partition_failed(error)

    def _on_metadata(self, replica: Replica, meta: PartitionMeta) -> None:
        if meta.leader_epoch < replica.leader_epoch:
            return
        if meta.leader_epoch == replica.leader_epoch:
            if meta.partition_epoch > replica.partition_epoch:
                replica.partition_epoch = meta.partition_epoch
                if isinstance(replica.role, LeaderState):
                    update = replica.role.on_isr_committed(meta.isr, meta.partition_epoch)
                    if update.recheck_acks:
                        self._complete_acks(replica)
            return
        rid = replica.replica_id
        self._drop_pending_acks(replica)
        replica.leader_epoch = meta.leader_epoch
        replica.partition_epoch = meta.partition_epoch
        replica.fetch_seq += 1
        if meta.leader == rid:
            self._check_new_leader(replica, meta)
            replica.role = LeaderState(
                replica_id=rid,
                replicas=self.replica_order,
                isr=meta.isr,
                leader_epoch=meta.leader_epoch,
                partition_epoch=meta.partition_epoch,
                min_insync_replicas=self.cfg.min_insync_replicas,
                # A copy, as the broker's log hands out: the log's own cache learns the
                # epoch from the first record written in it.
                epoch_cache=replica.cache.copy(),
                log_end_offset=len(replica.log),
                durable_end_offset=replica.synced,
                high_watermark=replica.high_watermark,
                now_ms=self.now_ms,
                logger=REPLICATION_LOG,
            )
            replica.last_leader_hw = replica.role.high_watermark
            self.schedule(10, _LEADER_TICK, rid, (replica.generation, meta.leader_epoch))
        elif meta.leader is None:
            replica.role = None
        else:
            replica.role = FollowerState(
                replica_id=rid,
                leader_id=meta.leader,
                leader_epoch=meta.leader_epoch,
                high_watermark=min(replica.high_watermark, len(replica.log)),
                logger=REPLICATION_LOG,
            )
            self._send_fetch(replica)

    def _check_new_leader(self, replica: Replica, meta: PartitionMeta) -> None:
        previous = self.leader_of_epoch.setdefault(meta.leader_epoch, replica.replica_id)
        if previous != replica.replica_id:
            self.fail(
                f"two leaders in epoch {meta.leader_epoch}: {previous} and {replica.replica_id}"
            )
        self.checks["one_leader_per_epoch"] += 1
        n = len(self.committed)
        if replica.log[:n] != self.committed:
            self.fail(
                f"new leader {replica.replica_id} at epoch {meta.leader_epoch} lacks committed "
                f"offsets below {n}: log {replica.log[:n]} committed {self.committed}"
            )
        self.checks["new_leader_has_committed"] += 1

    def _leader_tick(self, replica: Replica, leader_epoch: int) -> None:
        role = replica.role
        if not isinstance(role, LeaderState) or role.leader_epoch != leader_epoch:
            return
        if replica.alter_in_flight is not None and self.now_ms >= replica.alter_deadline_ms:
            # The call timed out; the broker tells the core, which keeps the proposal.
            replica.alter_in_flight = None
            proposal = role.pending_proposal
            if proposal is not None:
                role.on_alter_partition_failed(RequestTimedOutError("AlterPartition timed out"))
        proposal = role.maybe_shrink_isr(self.now_ms, self.cfg.replica_lag_time_max_ms).isr_proposal
        if proposal is None:
            proposal = role.pending_proposal  # resend: the answer may have been lost
        if proposal is not None:
            self._send_alter(replica, proposal)
        self._complete_acks(replica)
        self.schedule(10, _LEADER_TICK, replica.replica_id, (replica.generation, leader_epoch))

    def _produce(self) -> None:
        leaders = [r for r in self.replicas.values() if r.alive and isinstance(r.role, LeaderState)]
        if not leaders:
            return
        rng = self.rng_client
        replica = rng.choice(leaders)
        role = replica.role
        assert isinstance(role, LeaderState)
        self._next_record_id += 1
        record_id = self._next_record_id
        acks_all = rng.random() < self.cfg.acks_all_fraction
        if acks_all and role.check_produce_acks_all() is not None:
            self.refused += 1
            return
        self._leader_append(replica, role, record_id)
        if acks_all:
            replica.pending_acks.append((len(replica.log), record_id))

    def _leader_append(self, replica: Replica, role: LeaderState, record_id: int) -> None:
        """The leader's produce path: append (the log learns the epoch), then group commit."""
        replica.cache.assign(role.leader_epoch, len(replica.log))
        replica.log.append((role.leader_epoch, record_id))
        if role.on_local_append(len(replica.log), durable_end_offset=replica.synced).recheck_acks:
            self._complete_acks(replica)
        self._schedule_fsync(replica)

    def _schedule_fsync(self, replica: Replica) -> None:
        if not replica.fsync_pending:
            replica.fsync_pending = True
            delay = self.rng_disk.randint(0, self.cfg.disk_delay_max_ms)
            self.schedule(delay, _FSYNC, replica.replica_id, (replica.generation,))

    def _fsync(self, replica: Replica) -> None:
        replica.fsync_pending = False
        replica.synced = len(replica.log)
        role = replica.role
        if isinstance(role, LeaderState):
            if role.on_local_flush(replica.synced).recheck_acks:
                self._complete_acks(replica)
        elif isinstance(role, FollowerState):
            replica.high_watermark = role.high_watermark  # published once flushed
            self._send_fetch(replica)  # the fetch offset acknowledges durable data only

    def _complete_acks(self, replica: Replica) -> None:
        role = replica.role
        assert isinstance(role, LeaderState)
        still: list[tuple[int, int]] = []
        for required, record_id in replica.pending_acks:
            status = role.completed_acks_all(required)
            if not status.done:
                still.append((required, record_id))
            elif status.error is None:
                offset = required - 1
                entry = replica.log[offset]
                if entry[1] != record_id or offset >= role.high_watermark:
                    self.fail(f"acked record {record_id} is not at {offset} below the HW")
                self.acked[record_id] = (offset, entry)
        replica.pending_acks = still

    def _drop_pending_acks(self, replica: Replica) -> None:
        replica.pending_acks = []  # answered NOT_LEADER_OR_FOLLOWER: not acknowledged

    def _send_fetch(self, replica: Replica) -> None:
        role = replica.role
        if not isinstance(role, FollowerState) or replica.fsync_pending:
            return
        replica.fetch_seq += 1
        request = role.fetch_request(len(replica.log), replica.cache)
        self.send(Message("fetch", replica.replica_id, role.leader_id, request, replica.fetch_seq))
        # Lost request or answer: try again after the timeout.
        self.schedule(
            self.cfg.fetch_timeout_ms,
            _FETCH_AGAIN,
            replica.replica_id,
            (replica.generation, replica.fetch_seq),
        )

    def _on_fetch(self, leader: Replica, message: Message) -> None:
        request: FetchRequest = message.body
        role = leader.role
        reply = Message("fetch_response", leader.replica_id, message.src, None, message.seq)
        if not isinstance(role, LeaderState):
            error = NotLeaderOrFollowerError(f"replica {leader.replica_id} is not the leader")
            response: FetchResponse[list[Entry]] = FetchResponse(
                leader.leader_epoch, request.fetch_offset, 0, [], 0, None, error
            )
            self.send(Message(reply.kind, reply.src, reply.dst, response, reply.seq))
            return
        try:
            outcome = role.on_follower_fetch(
                request.replica_id,
                request.fetch_offset,
                request.last_fetched_epoch,
                self.now_ms,
                request.current_leader_epoch,
            )
        except LograftError as exc:
            response = FetchResponse(
                role.leader_epoch, request.fetch_offset, role.high_watermark, [], 0, None, exc
            )
            self.send(Message(reply.kind, reply.src, reply.dst, response, reply.seq))
            return
        decision = outcome.decision
        if isinstance(decision, DivergingEpoch):
            self.checks["diverging_epoch_answers"] += 1
            response = FetchResponse(
                role.leader_epoch,
                request.fetch_offset,
                decision.high_watermark,
                [],
                request.fetch_offset,
                decision.diverging,
            )
        else:
            start = decision.fetch_offset
            records = leader.log[start : start + self.cfg.max_fetch_entries]
            response = FetchResponse(
                role.leader_epoch, start, decision.high_watermark, records, start + len(records)
            )
        self.send(Message(reply.kind, reply.src, reply.dst, response, reply.seq))
        # What the broker's Partition does with the update: propose, then settle the acks.
        update = outcome.update
        if update.isr_proposal is not None:
            self._send_alter(leader, update.isr_proposal)
        if update.recheck_acks:
            self._complete_acks(leader)

    def _send_alter(self, replica: Replica, proposal: IsrProposal) -> None:
        """One AlterPartition call at a time per partition, as the broker makes them.

        A call ends with its answer or at its deadline; a gRPC request is delivered at most
        once, so the network may drop or delay it but not duplicate it.
        """
        if replica.alter_in_flight is not None:
            return
        replica.alter_seq += 1
        replica.alter_in_flight = replica.alter_seq
        replica.alter_deadline_ms = self.now_ms + self.cfg.fetch_timeout_ms
        message = Message("alter", replica.replica_id, CONTROLLER, proposal, replica.alter_seq)
        rng = self.rng_net
        if (message.src, message.dst) in self.blocked or (
            self.faulty and rng.random() < self.cfg.drop
        ):
            return
        self.schedule(rng.randint(0, self.cfg.delay_max_ms), _DELIVER, message.dst, message)

    def _on_fetch_response(self, replica: Replica, message: Message) -> None:
        role = replica.role
        if not isinstance(role, FollowerState) or message.seq != replica.fetch_seq:
            return
        replica.fetch_seq += 1  # answered: the timeout of this fetch no longer applies
        # The broker's own fetch step (replica.follower_fetch): the core decides, the step
        # performs it on the log; only the timing below is the simulation's.
        step = handle_fetch_response(role, _SimLog(self, replica), message.body)
        rid = replica.replica_id
        if step is NextFetch.AFTER_FLUSH:
            self._schedule_fsync(replica)  # then publish the HW and fetch again
        elif step is NextFetch.CAUGHT_UP:
            replica.high_watermark = role.high_watermark
            self.schedule(
                self.cfg.fetch_wait_ms, _FETCH_AGAIN, rid, (replica.generation, replica.fetch_seq)
            )
        elif step is NextFetch.NOW:
            self._send_fetch(replica)
        else:
            self.schedule(
                self.cfg.fetch_timeout_ms,
                _FETCH_AGAIN,
                rid,
                (replica.generation, replica.fetch_seq),
            )

    # --- faults ---------------------------------------------------------------------------

    def _crash(self, replica: Replica) -> None:
        replica.alive = False
        replica.crashes += 1
        replica.generation += 1
        del replica.log[replica.synced :]
        # The checkpoint is written on every change; recovery trims it to the log end.
        replica.cache = LeaderEpochCache.decode(replica.cache.encode())
        replica.cache.truncate_from_end(len(replica.log))
        replica.role = None
        replica.leader_epoch = replica.partition_epoch = -1
        # The partition reopens at its checkpointed high watermark, never above the log end.
        replica.high_watermark = min(replica.checkpointed_hw, len(replica.log))
        replica.fsync_pending = False
        replica.pending_acks = []
        replica.alter_in_flight = None

    def _restart(self, replica: Replica) -> None:
        replica.alive = True
        replica.generation += 1
        self.schedule(0, _HEARTBEAT, replica.replica_id, (replica.generation,))

    def _nemesis(self) -> None:
        cfg, rng = self.cfg, self.rng_nemesis
        weights = (cfg.crash_weight, cfg.crash_weight, cfg.partition_weight, cfg.partition_weight)
        if not any(weights):
            return
        action = rng.choices(("crash", "restart", "partition", "heal"), weights)[0]
        if action == "crash":
            live = [r for r in REPLICAS if self.replicas[r].alive]
            if live:
                victim = rng.choice(live)
                self._crash(self.replicas[victim])
                self.schedule(rng.randint(10, 400), _RESTART, victim, None)
        elif action == "restart":
            for r in REPLICAS:
                if not self.replicas[r].alive:
                    self.schedule(rng.randint(0, 30), _RESTART, r, None)
        elif action == "partition":
            self.blocked = self._partition(rng)
        else:
            self.blocked = set()

    def _partition(self, rng: random.Random) -> set[tuple[int, int]]:
        nodes = (CONTROLLER, *REPLICAS)
        kind = rng.choice(("isolate", "isolate_from_controller", "isolate_from_peers", "one_way"))
        lonely = rng.choice(REPLICAS)
        if kind == "one_way":
            a, b = rng.sample(nodes, 2)
            return {(a, b)}
        if kind == "isolate_from_controller":
            others: tuple[int, ...] = (CONTROLLER,)
        elif kind == "isolate_from_peers":
            others = tuple(r for r in REPLICAS if r != lonely)
        else:
            others = tuple(n for n in nodes if n != lonely)
        return {(lonely, o) for o in others} | {(o, lonely) for o in others}

    def _heal(self) -> None:
        self.faulty = False
        self.blocked = set()
        for r in REPLICAS:
            if not self.replicas[r].alive:
                self.schedule(0, _RESTART, r, None)

    def _converge(self) -> None:
        """After healing: one leader, full ISR, identical logs, HW at the end, acks intact."""
        give_up = self.now_ms + 20_000
        while self.now_ms < give_up:
            self._run_until(self.now_ms + 50)
            meta = self.controller.meta
            if meta.leader is None or meta.isr != REPLICAS:
                continue
            leader = self.replicas[meta.leader]
            role = leader.role
            if not isinstance(role, LeaderState) or role.leader_epoch != meta.leader_epoch:
                continue
            if role.high_watermark != len(leader.log) or any(
                r.log != leader.log for r in self.replicas.values()
            ):
                continue
            self.checks["converged"] += 1
            self._check_acked(meta.isr)
            return
        self.fail("no convergence within 20 s after healing")

    def _check_acked(self, isr: tuple[int, ...]) -> None:
        for r in isr:
            log = self.replicas[r].log
            counts = Counter(record_id for _, record_id in log)
            for record_id, (offset, entry) in self.acked.items():
                if counts[record_id] != 1 or offset >= len(log) or log[offset] != entry:
                    self.fail(
                        f"acks=all record {record_id} acknowledged at {offset} as {entry}: "
                        f"replica {r} holds it {counts[record_id]} times"
                    )
                self.checks["acked_record_present_once"] += 1

    # --- invariants -----------------------------------------------------------------------

    def _check(self) -> None:
        replicas = self.replicas
        for replica in replicas.values():
            role = replica.role
            if not replica.alive or role is None:
                continue
            if isinstance(role, LeaderState):
                self._check_core(role.check_invariants)
                self.checks["leader_core_invariants"] += 1
                hw = role.high_watermark
                if role.leader_epoch == replica.leader_epoch and hw < replica.last_leader_hw:
                    self.fail(
                        f"leader {replica.replica_id} HW went back {replica.last_leader_hw} -> {hw}"
                    )
                replica.last_leader_hw = hw
                self.checks["hw_monotonic_in_epoch"] += 1
                prefix = replica.log[:hw]
                for m in role.isr:
                    other = replicas[m].log
                    if len(other) < hw:
                        self.fail(
                            f"leader {replica.replica_id} HW {hw} > log end {len(other)} of ISR "
                            f"member {m}"
                        )
                    if m != replica.replica_id and other[:hw] != prefix:
                        self.fail(
                            f"ISR member {m} disagrees with leader {replica.replica_id} "
                            f"below HW {hw}"
                        )
                self.checks["hw_le_min_isr_leo"] += 1
                self.checks["isr_agree_below_hw"] += 1
                self._extend_committed(replica.replica_id, prefix)
            else:
                self._check_core(functools.partial(role.check_invariants, len(replica.log)))
                self.checks["follower_core_invariants"] += 1
                hw = role.high_watermark
                if hw > len(replica.log):
                    self.fail(f"follower {replica.replica_id} HW {hw} beyond its log end")
                if replica.log[: min(hw, len(self.committed))] != self.committed[:hw]:
                    self.fail(
                        f"follower {replica.replica_id} log below its HW {hw} is not committed"
                    )
                self.checks["follower_hw_committed"] += 1

    def _check_core(self, check: Callable[[], None]) -> None:
        """A core's own ``check_invariants``; a broken one fails the run with its seed."""
        try:
            check()
        except ReplicationInvariantError as exc:
            self.fail(f"core invariant: {exc}")

    def _extend_committed(self, rid: int, prefix: list[Entry]) -> None:
        n = len(self.committed)
        if prefix[:n] != self.committed[: len(prefix)]:
            self.fail(f"leader {rid} committed prefix differs from what was committed before")
        if len(prefix) > n:
            self.committed.extend(prefix[n:])
        self.checks["committed_never_changes"] += 1


def run_seed(seed: int, *, faulty_ms: int = 1500) -> ReplRunResult:
    """Run one schedule; raises :class:`SimulationFailure` with the replay command on a bug."""
    return ReplicationSimulator(seed, faulty_ms=faulty_ms).run()


class ScriptedReplication(ReplicationSimulator):
    """The simulation with its swarm switched off: a test scripts elections and writes.

    No drops, duplicates, crashes, produce load or session expiry; message delays still
    come from the seed. Every event still runs the invariant checks, and followers still
    handle answers through the broker's fetch step.
    """

    def __init__(self, seed: int, replica_order: tuple[int, ...]) -> None:
        super().__init__(seed, faulty_ms=0)
        self.faulty = False
        self.replica_order = replica_order
        self.cfg = dataclasses.replace(
            self.cfg,
            min_insync_replicas=1,
            session_ms=10**9,
            replica_lag_time_max_ms=10**9,
            max_fetch_entries=32,
        )

    def elect(self, leader: int, isr: tuple[int, ...]) -> None:
        """The controller names ``leader`` at the next leader epoch with ``isr``."""
        controller = self.controller
        controller.leader = leader
        controller.leader_epoch += 1
        controller.partition_epoch += 1
        controller.isr = isr
        controller.elections.append((controller.leader_epoch, leader))
        for r in REPLICAS:
            incarnation = controller.incarnation[r]
            self.send(Message("metadata", CONTROLLER, r, (incarnation, controller.meta)))

    def write(self, leader: int, count: int) -> None:
        """``count`` records appended by ``leader``, as its produce path would (acks=1)."""
        replica = self.replicas[leader]
        role = replica.role
        if not isinstance(role, LeaderState) or role.leader_epoch != self.controller.leader_epoch:
            self.fail(f"replica {leader} does not lead epoch {self.controller.leader_epoch}")
        assert isinstance(role, LeaderState)
        for _ in range(count):
            self._next_record_id += 1
            self._leader_append(replica, role, self._next_record_id)

    def isolate(self, node: int, *, keep_controller: bool = False) -> None:
        """Cut ``node`` off from the other replicas (and the controller, unless kept)."""
        others = [n for n in (CONTROLLER, *REPLICAS) if n != node]
        if keep_controller:
            others.remove(CONTROLLER)
        self.blocked |= {(node, o) for o in others} | {(o, node) for o in others}

    def run_for(self, ms: int) -> None:
        """Run the event queue for ``ms`` of simulated time."""
        self._run_until(self.now_ms + ms)
