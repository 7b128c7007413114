"""The replication simulation with an idempotent ``acks=all`` producer (issue 40).

:class:`ProducerReplication` runs :class:`~tests.sim.replication_sim.ReplicationSimulator`
(one partition on three brokers, the pure replication cores, seeded faults) with the
producer's own sequencing core (:class:`~cluster.client._sequencing.Sequencer`) on the
client and the broker's own :class:`~replica.producer_state.ProducerStateManager` on every
replica. Each log entry is one batch of one record. A replica's producer state follows its
log as the broker's ``Partition`` keeps it: the leader checks a produced batch before it
appends it (a retry of a batch among the producer's last five is answered with its first
offset), followers record what they fetch, a truncation drops the cut batches (and replays
the log when the core says the result is inexact), and a crash replays the log that
survived. The client's sender is modelled as ``cluster/client/_sender.py`` drives the core:
each batch goes in a request of its own to the broker the client believes leads; a lost
answer is a timeout; a retriable error sends the batch again after a back-off, until
``delivery.timeout.ms``.

Besides the replication invariants, a run checks the cores' own after every event: every
replica's producer state (``producer_state_invariants``,
:meth:`~replica.producer_state.ProducerStateManager.check_invariants`) and the client's
sequencer (``sequencer_invariants``,
:meth:`~cluster.client._sequencing.Sequencer.check_invariants`). Once the producer has
nothing left it checks that every acknowledged batch is in the converged log once, at the
offset it was acknowledged with; no batch is in the log twice; batches are in the log in the
order they were sent; and no batch failed with a sequencing error
(``OUT_OF_ORDER_SEQUENCE_NUMBER`` and the like): an idempotent producer sends such a batch
again, after its predecessor or re-sequenced under a new epoch (KIP-360); only
``delivery.timeout.ms`` ends it.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cluster.client._sequencing import SEQUENCE_MODULUS, Sequencer
from lograft.protocol.batch_header import BatchHeader
from lograft.protocol.errors import (
    InvariantError,
    LograftError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from lograft.protocol.topic_partition import TopicPartition
from replica.producer_state import Duplicate, ProducerStateManager
from replica.replication import LeaderState
from tests.sim.replication_sim import (
    _DELIVER,
    _RESTART,
    CONTROLLER,
    REPLICAS,
    Message,
    Replica,
    ReplicationSimulator,
    ReplRunResult,
)

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)

__all__ = [
    "CLIENT",
    "ProducerConfig",
    "ProducerReplication",
    "ScriptedProducerReplication",
    "SimBatch",
    "run_producer_seed",
]

CLIENT = 9
"""The producer's node id on the simulated network."""
TP = TopicPartition("t", 0)
PRODUCER_ID = 1000
EXPIRED = "DELIVERY_TIMEOUT"
SEQUENCING_ERRORS = frozenset(
    {"OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH", "UNKNOWN_PRODUCER_ID"}
)
"""Answers about the producer's sequence: an idempotent producer restarts its sequence
(KIP-360) or sends the batch again; none of them is why a batch fails."""


@dataclass(eq=False)
class SimBatch:
    """One producer batch of one record, with the fields the sequencing core reads."""

    index: int
    deadline_ms: int
    tp: TopicPartition = TP
    record_count: int = 1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    stamped: bool = False
    in_flight: bool = False
    resolved: bool = False
    follows_acked: bool = False
    maybe_written: bool = False
    retry_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a request carries: the batch, and the identity and sequence it was sent with."""

    index: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


@dataclass(slots=True)
class ProducerConfig:
    """What a seed randomises for the producer."""

    batch_interval_ms: int
    request_timeout_ms: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    metadata_max_age_ms: int
    kill_all_weight: int
    slow_request: float

    @classmethod
    def draw(cls, rng: random.Random) -> ProducerConfig:
        return cls(
            batch_interval_ms=rng.choice((3, 10, 25)),
            request_timeout_ms=rng.choice((40, 100, 250)),
            retry_backoff_ms=rng.choice((5, 20)),
            delivery_timeout_ms=rng.choice((150, 400, 1500, 5000)),
            metadata_max_age_ms=rng.choice((50, 200)),
            kill_all_weight=rng.choice((0, 1, 3)),
            slow_request=rng.choice((0.0, 0.02, 0.1)),
        )


@dataclass
class Waiter:
    """A produce the leader answers once the high watermark passes ``required``."""

    request_id: int
    leader_epoch: int
    required: int
    offset: int


@dataclass
class ProducerReport:
    """What the producer saw, for the checks and the summary."""

    sent: int = 0
    acked: dict[int, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    bumps: int = 0


def batch_header(base_offset: int, leader_epoch: int, stamp: Stamp | None) -> BatchHeader:
    """The header of the one-record batch at ``base_offset`` (no producer: ``stamp`` None)."""
    producer_id, epoch, sequence = (
        (-1, -1, -1)
        if stamp is None
        else (stamp.producer_id, stamp.producer_epoch, stamp.base_sequence % SEQUENCE_MODULUS)
    )
    return BatchHeader(
        0, base_offset, 59, leader_epoch, 2, 0, 0, 0, 0, 0, producer_id, epoch, sequence, 1
    )


class ProducerReplication(ReplicationSimulator):
    """One seeded schedule of the replicated partition with an idempotent producer."""

    def __init__(self, seed: int, *, faulty_ms: int = 1500, trace: bool = False) -> None:
        super().__init__(seed, faulty_ms=faulty_ms, trace=trace)
        root = random.Random(f"producer/{seed}")
        self.pcfg = ProducerConfig.draw(random.Random(root.getrandbits(64)))
        self.rng_kill_all = random.Random(root.getrandbits(64))
        self.states = {r: ProducerStateManager() for r in REPLICAS}
        self.stamps: dict[int, Stamp] = {}
        """Record id -> the producer batch it is (records of other writers have none)."""
        self.waiters: dict[int, list[Waiter]] = {r: [] for r in REPLICAS}
        self.sequencer = Sequencer(logger=CORE_LOG)
        self.sequencer.set_producer_id(PRODUCER_ID, 0)
        self.batches: list[SimBatch] = []
        self.queue: deque[SimBatch] = deque()
        self.outstanding: dict[int, SimBatch] = {}
        self.request_seq = 0
        self.client_leader: int | None = None
        self.metadata_wanted = True
        self.report = ProducerReport()
        self.schedule(0, _DELIVER, CLIENT, Message("refresh", CLIENT, CLIENT, None))

    def replay_command(self) -> str:
        return (
            f"LOGRAFT_PRODUCER_SIM_SEED={self.seed} .venv/bin/pytest "
            "tests/sim/test_replication_sim.py -k producer_replay"
        )

    # --- the broker's producer state ------------------------------------------------------

    def header_at(self, replica: Replica, offset: int) -> BatchHeader:
        epoch, record_id = replica.log[offset]
        return batch_header(offset, epoch, self.stamps.get(record_id))

    def replay(self, replica: Replica) -> ProducerStateManager:
        """The state a broker rebuilds from its log (no snapshot: every batch replayed)."""
        state = ProducerStateManager()
        state.rebuild_from_batches(self.header_at(replica, o) for o in range(len(replica.log)))
        return state

    def on_replica_appended(self, replica: Replica, start: int) -> None:
        state = self.states[replica.replica_id]
        for offset in range(start, len(replica.log)):
            state.on_appended(self.header_at(replica, offset))

    def on_replica_truncated(self, replica: Replica) -> None:
        # As Partition.truncate_to: the core drops the cut batches; a replay if inexact.
        state = self.states[replica.replica_id]
        if state.truncate_to(len(replica.log)):
            self.states[replica.replica_id] = self.replay(replica)

    def _crash(self, replica: Replica) -> None:
        super()._crash(replica)
        self.waiters[replica.replica_id] = []  # its connections broke: the client times out
        self.states[replica.replica_id] = self.replay(replica)

    def _leader_append_batch(self, replica: Replica, role: LeaderState, stamp: Stamp) -> int:
        self._next_record_id += 1
        self.stamps[self._next_record_id] = stamp
        self._leader_append(replica, role, self._next_record_id)
        offset = len(replica.log) - 1
        self.states[replica.replica_id].on_appended(self.header_at(replica, offset))
        return offset

    def _on_produce(self, replica: Replica, request_id: int, stamp: Stamp) -> None:
        """The leader's produce path (Partition.append_as_leader with acks=all)."""
        role = replica.role
        rid = replica.replica_id
        if not isinstance(role, LeaderState):
            error = NotLeaderOrFollowerError(f"replica {rid} does not lead")
            self._answer(rid, request_id, error, -1)
            return
        refused = role.check_produce_acks_all()
        if refused is not None:
            self._answer(rid, request_id, refused, -1)
            return
        header = batch_header(len(replica.log), role.leader_epoch, stamp)
        try:
            (plan,) = self.states[rid].check_batches([header])
        except LograftError as exc:
            self.checks[f"leader_answered_{exc.error_name}"] += 1
            self._answer(rid, request_id, exc, -1)
            return
        if isinstance(plan, Duplicate):
            self.checks["duplicate_answered"] += 1
            offset, required = plan.first_offset, plan.last_offset + 1
        else:
            offset = self._leader_append_batch(replica, role, stamp)
            required = offset + 1
        self.waiters[rid].append(Waiter(request_id, role.leader_epoch, required, offset))
        self._complete_acks(replica)

    def _complete_acks(self, replica: Replica) -> None:
        super()._complete_acks(replica)
        role = replica.role
        assert isinstance(role, LeaderState)
        still = []
        for waiter in self.waiters[replica.replica_id]:
            status = role.completed_acks_all(waiter.required)
            if not status.done:
                still.append(waiter)
                continue
            if status.error is None and replica.log[waiter.offset][1] not in self.stamps:
                self.fail(f"leader {replica.replica_id} acks offset {waiter.offset}: no batch")
            self._answer(replica.replica_id, waiter.request_id, status.error, waiter.offset)
        self.waiters[replica.replica_id] = still

    def _drop_pending_acks(self, replica: Replica) -> None:
        super()._drop_pending_acks(replica)
        waiters, self.waiters[replica.replica_id] = self.waiters[replica.replica_id], []
        for waiter in waiters:
            error = NotLeaderOrFollowerError("leadership moved before the acks")
            self._answer(replica.replica_id, waiter.request_id, error, -1)

    def _answer(self, rid: int, request_id: int, error: LograftError | None, offset: int) -> None:
        self._send_client(Message("produce_response", rid, CLIENT, (request_id, error, offset)))

    # --- the network ----------------------------------------------------------------------

    def _send_client(self, message: Message) -> None:
        """A client connection: messages may be lost or delayed, never duplicated."""
        rng = self.rng_net
        if self.faulty and rng.random() < self.cfg.drop:
            return
        self.schedule(rng.randint(0, self.cfg.delay_max_ms), _DELIVER, message.dst, message)

    def _dispatch(self, kind: int, node: int, payload: Any) -> None:
        if kind == _DELIVER and node == CLIENT:
            self._client_receive(payload)
            return
        super()._dispatch(kind, node, payload)

    def _controller_receive(self, message: Message) -> None:
        if message.kind == "client_metadata":
            meta = self.controller.meta
            self._send_client(Message("client_metadata", CONTROLLER, CLIENT, meta.leader))
            return
        super()._controller_receive(message)

    def _replica_receive(self, replica: Replica, message: Message) -> None:
        if message.kind == "produce":
            request_id, stamp = message.body
            self._on_produce(replica, request_id, stamp)
            return
        super()._replica_receive(replica, message)

    # --- faults ---------------------------------------------------------------------------

    def _nemesis(self) -> None:
        weight = self.pcfg.kill_all_weight
        if weight and self.rng_kill_all.random() < weight / 10:
            for r in REPLICAS:  # kill -9 every node, restart them all
                replica = self.replicas[r]
                if replica.alive:
                    replica.synced = len(replica.log)  # SIGKILL: the page cache survives
                    self._crash(replica)
                self.schedule(self.rng_kill_all.randint(10, 300), _RESTART, r, None)
            return
        super()._nemesis()

    # --- the producer ---------------------------------------------------------------------

    def _produce(self) -> None:
        """A new batch (the simulation's load): the client queues it and drains."""
        batch = SimBatch(len(self.batches), self.now_ms + self.pcfg.delivery_timeout_ms)
        self.batches.append(batch)
        self.queue.append(batch)
        self.report.sent += 1
        self._drain()

    def _wake_client_at(self, due_ms: int) -> None:
        message = Message("wake", CLIENT, CLIENT, None)
        self.schedule(max(0, due_ms - self.now_ms), _DELIVER, CLIENT, message)

    def _client_receive(self, message: Message) -> None:
        if message.kind == "produce_response":
            request_id, error, offset = message.body
            self._on_answer(request_id, error, offset)
        elif message.kind == "timeout":
            if message.body in self.outstanding:
                error = RequestTimedOutError(f"request {message.body} not answered")
                self._on_answer(message.body, error, -1)
        elif message.kind == "client_metadata":
            self.client_leader = message.body
        elif message.kind == "refresh":
            self.metadata_wanted = True  # metadata.max.age.ms
            refresh = Message("refresh", CLIENT, CLIENT, None)
            self.schedule(self.pcfg.metadata_max_age_ms, _DELIVER, CLIENT, refresh)
        self._drain()

    def _on_answer(self, request_id: int, error: LograftError | None, offset: int) -> None:
        batch = self.outstanding.pop(request_id, None)
        if batch is None:
            return  # answered after it timed out: nobody reads it
        if error is None:
            self.sequencer.resolve(batch, acked=True)
            self.report.acked[batch.index] = offset
            return
        self.report.errors[error.error_name] += 1
        if isinstance(error, NotLeaderOrFollowerError | RequestTimedOutError):
            self.metadata_wanted = True
        retriable = self.sequencer.on_error(batch, error)
        if retriable and self.now_ms + self.pcfg.retry_backoff_ms < batch.deadline_ms:
            batch.in_flight = False
            batch.retry_at_ms = self.now_ms + self.pcfg.retry_backoff_ms
            self.queue.append(batch)
            self.queue = deque(sorted(self.queue, key=lambda b: b.index))
            self._wake_client_at(batch.retry_at_ms)
            return
        # As the sender fails it: with its last answer, or what the core says it gave up on.
        self._fail(
            batch, (Sequencer.error_giving_up(batch, error) if retriable else error).error_name
        )

    def _fail(self, batch: SimBatch, reason: str) -> None:
        self.report.failed[batch.index] = reason
        if batch.base_sequence >= 0:
            self.sequencer.resolve(batch, acked=False)
        batch.in_flight = False

    def _drain(self) -> None:
        """One turn of the sender: expire, restart the sequence if due, send what may go."""
        if self.metadata_wanted:
            self.metadata_wanted = False
            self._send_client(Message("client_metadata", CLIENT, CONTROLLER, None))
        while self.queue and self.queue[0].deadline_ms <= self.now_ms:
            self._fail(self.queue.popleft(), EXPIRED)
        sequencer = self.sequencer
        sequences = sequencer.partition(TP)
        if sequencer.restart(TP, sequences) is not None:
            self.report.bumps += 1
        if sequencer.producer_id < 0:  # the epoch was exhausted: InitProducerId
            sequencer.set_producer_id(PRODUCER_ID + self.report.bumps, 0)
            sequencer.restart(TP, sequences)
        leader = self.client_leader
        if leader is None:
            return
        in_flight_before = sequences.in_flight()
        taken = 0
        while self.queue:
            batch = self.queue[0]
            if batch.retry_at_ms > self.now_ms:
                break
            if not sequencer.may_send(
                sequences, batch, taken, in_flight_before, joins_request=False
            ):
                break
            self.queue.popleft()
            resend = batch.base_sequence >= 0
            sequencer.assign(sequences, batch)
            self._send_produce(leader, batch)
            taken += 1
            if resend:
                break

    def _send_produce(self, leader: int, batch: SimBatch) -> None:
        self.request_seq += 1
        request_id = self.request_seq
        self.outstanding[request_id] = batch
        stamp = Stamp(batch.index, batch.producer_id, batch.producer_epoch, batch.base_sequence)
        message = Message("produce", CLIENT, leader, (request_id, stamp))
        if self.faulty and self.rng_kill_all.random() < self.pcfg.slow_request:
            # A broker busy recovering reads the request long after the client gave up.
            delay = self.rng_kill_all.randint(0, 3 * self.pcfg.request_timeout_ms)
            self.schedule(delay, _DELIVER, leader, message)
        else:
            self._send_client(message)
        self.schedule(
            self.pcfg.request_timeout_ms,
            _DELIVER,
            CLIENT,
            Message("timeout", CLIENT, CLIENT, request_id),
        )

    # --- running and checking -------------------------------------------------------------

    def _check(self) -> None:
        """The replication invariants, then the producer state of every replica (alive or
        not: a crashed one holds what it replayed) and the client's sequencer."""
        super()._check()
        for rid, state in self.states.items():
            self._check_own(f"replica {rid} producer state", state.check_invariants)
            self.checks["producer_state_invariants"] += 1
        self._check_own("sequencer", self.sequencer.check_invariants)
        self.checks["sequencer_invariants"] += 1

    def _check_own(self, what: str, check: Callable[[], None]) -> None:
        try:
            check()
        except InvariantError as exc:
            self.fail(f"{what} invariant: {exc}")

    def producer_idle(self) -> bool:
        return not self.queue and not self.outstanding

    def run(self) -> ReplRunResult:
        """Faulty phase, heal, the producer finishes, convergence; then the producer checks."""
        self._run_until(self.cfg.faulty_ms)
        self._heal()
        give_up = self.now_ms + 20_000
        while not self.producer_idle():
            if self.now_ms > give_up:
                self.fail("the producer did not finish within 20 s after healing")
            self._run_until(self.now_ms + 50)
        self._converge()
        self.check_producer()
        return ReplRunResult(
            seed=self.seed,
            min_insync_replicas=self.cfg.min_insync_replicas,
            events=self.events,
            checks=self.checks,
            max_leader_epoch=self.controller.leader_epoch,
            acked=len(self.report.acked),
            refused=self.refused,
            crashes=sum(r.crashes for r in self.replicas.values()),
            truncations=self.truncations,
        )

    def check_producer(self) -> None:
        """Acknowledged batches once at their offsets, nothing twice, in order, and no batch
        failed but by ``delivery.timeout.ms``."""
        log = self.replicas[REPLICAS[0]].log
        written = [self.stamps[r].index for _, r in log if r in self.stamps]
        counts = Counter(written)
        twice = sorted(i for i, n in counts.items() if n > 1)
        if twice:
            self.fail(f"batches written twice: {twice}")
        if written != sorted(written):
            self.fail(f"batches written out of order: {written}")
        for index, offset in self.report.acked.items():
            record_id = log[offset][1] if offset < len(log) else None
            if record_id not in self.stamps or self.stamps[record_id].index != index:
                self.fail(f"batch {index} acknowledged at {offset} is not there")
        self.checks["producer_acked_batches_present"] += len(self.report.acked)
        wrong = {i: why for i, why in self.report.failed.items() if why in SEQUENCING_ERRORS}
        if wrong:
            self.fail(f"batches failed with a sequencing error: {wrong}")
        self.checks["producer_no_sequencing_failure"] += 1


def run_producer_seed(seed: int, *, faulty_ms: int = 1500) -> ReplRunResult:
    """Run one schedule; raises ``SimulationFailure`` with the seed on a bug."""
    return ProducerReplication(seed, faulty_ms=faulty_ms).run()


class ScriptedProducerReplication(ProducerReplication):
    """The producer simulation with its swarm switched off: a test scripts the faults.

    No drops, duplicates, produce load or nemesis; message delays still come from the
    seed. The controller still fences brokers whose session expires (``session_ms``) and
    elects from the live in-sync replicas; followers rejoin the ISR through the leader's
    own core. The producer's settings are the test's.
    """

    def __init__(
        self,
        seed: int,
        *,
        min_insync_replicas: int,
        session_ms: int,
        producer: ProducerConfig,
    ) -> None:
        super().__init__(seed, faulty_ms=0)
        self.faulty = False
        self.pcfg = producer
        self.cfg = dataclasses.replace(
            self.cfg,
            min_insync_replicas=min_insync_replicas,
            session_ms=session_ms,
            replica_lag_time_max_ms=10**9,
            max_fetch_entries=32,
        )

    def send_batch(self) -> SimBatch:
        """The application sends one record: a batch of its own, sent when it may go."""
        self._produce()
        return self.batches[-1]

    def cut_replication(self, leader: int) -> None:
        """Followers can no longer fetch from ``leader`` (heartbeats and clients pass)."""
        self.blocked |= {(leader, r) for r in REPLICAS if r != leader}
        self.blocked |= {(r, leader) for r in REPLICAS if r != leader}

    def kill_all(self) -> None:
        """``kill -9`` every node: each keeps what it wrote (the page cache survives)."""
        for replica in self.replicas.values():
            if replica.alive:
                replica.synced = len(replica.log)
                self._crash(replica)

    def restart_at(self, replica_id: int, delay_ms: int) -> None:
        self.schedule(delay_ms, _RESTART, replica_id, None)

    def run_for(self, ms: int) -> None:
        self._run_until(self.now_ms + ms)
