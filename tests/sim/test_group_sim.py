"""Seeded deterministic simulation of consumer groups (issue 5): the pure coordinator
(:class:`replica.group.GroupCoordinator`) against the real member state machine of the
client (:class:`cluster.client._membership.GroupMembership`), over a lossy network.

One seed decides everything: how many consumers and groups, the topics and subscriptions,
the assignors, session and rebalance timeouts, link delay and loss, how long rebalance
callbacks take, and the fault schedule. Time is an integer ``now_ms``; work is a heap of
``(due_ms, seq, event)``; nothing sleeps. The model:

* **Consumers** poll: they advance the position of every partition they own, commit their
  positions now and then (async), heartbeat when :class:`GroupMembership` says so, and run
  its reconciliation steps one at a time: a revocation first commits the revoked
  positions, then the callback takes a while (sometimes longer than the rebalance
  timeout), then the step is done; newly assigned partitions fetch their committed offset
  (``auto.offset.reset=earliest`` when none) before they are consumed. A fenced member
  aborts what it was doing and loses everything.
* **Network**: each consumer talks to the coordinator over one FIFO link each way (as one
  gRPC channel does): random delay, loss, and isolation of a consumer for a while.
  Requests time out; a heartbeat that timed out is resent with every field.
* **Coordinator**: every call's records are encoded to bytes and appended to the log before
  the answer leaves; a failover closes it and, after a pause answered with
  ``COORDINATOR_NOT_AVAILABLE``, loads a new one from the log (compacted half the time).
* **Faults**: consumers crash, join, leave, change subscriptions, get isolated or slow;
  topics grow and appear; the coordinator fails over.

Invariants, checked after every event that can change them (every delivery, step, tick
and fault; names as in the summary):

* ``exclusive_ownership`` -- no partition held (assigned or pending revocation) by two
  members, and no two in-sync consumers own the same partition (a consumer is in sync
  while the coordinator knows it and it owns nothing the coordinator did not give it;
  consumers that are not are counted as zombies, and their commits must all be refused);
* ``epoch_monotonic`` -- a member's epoch never decreases while it stays in the group;
* ``session_bound`` -- a member silent for ``session.timeout.ms`` is gone one tick later
  (counted from the coordinator's load after a failover);
* ``replay_equal`` -- a coordinator replaying the persisted bytes is in the same state,
  and a failover's new coordinator starts exactly where the old one stopped;
* ``commit_by_owner`` -- every accepted commit comes from the member that owned the
  partition at that epoch, and ``committed_monotonic`` -- committed offsets never move
  backwards (these consumers never seek back);
* after the faults heal, ``converged`` -- every live consumer is a stable member owning
  exactly its target, every subscribed partition is owned by exactly one of them, and the
  assignment is balanced as its assignor promises.

``pytest tests/sim/test_group_sim.py`` runs seeds ``0..N-1`` (N from
``LOGRAFT_GROUP_SIM_SCHEDULES``, default 80). A failure names its seed and replays with::

    LOGRAFT_GROUP_SIM_SEED=<seed> .venv/bin/pytest tests/sim/test_group_sim.py -k replay
"""

# Over 600 lines: the simulator, its checker and the tests that break it, read together.
from __future__ import annotations

import heapq
import logging
import os
import random
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from cluster.client._membership import GroupMembership, MemberState, Reconciliation
from lograft.protocol.errors import CoordinatorNotAvailableError, LograftError
from lograft.protocol.topic_partition import TopicPartition
from replica.group import (
    GroupCoordinator,
    GroupCoordinatorConfig,
    GroupDescription,
    GroupLoggers,
    GroupRecord,
    OffsetAndMetadata,
    OffsetCommitKey,
    _reconciliation,
    _store,
    assign_range,
    decode,
    encode,
)
from replica.group import coordinator as coordinator_module

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)
GROUP_LOGGERS = GroupLoggers(CORE_LOG, CORE_LOG, CORE_LOG)

DEFAULT_SCHEDULES = 80
CHUNKS = 4
ENV_SCHEDULES = "LOGRAFT_GROUP_SIM_SCHEDULES"
ENV_SEED = "LOGRAFT_GROUP_SIM_SEED"

(
    _POLL,
    _TO_COORDINATOR,
    _TO_CLIENT,
    _HB_TIMEOUT,
    _FETCH_TIMEOUT,
    _STEP_DONE,
    _TICK,
    _NEMESIS,
    _COORDINATOR_UP,
    _ISOLATION_ENDS,
) = range(10)
_KIND_NAMES = (
    "poll",
    "to_coordinator",
    "to_client",
    "hb_timeout",
    "fetch_timeout",
    "step_done",
    "tick",
    "nemesis",
    "coordinator_up",
    "isolation_ends",
)
_NOT_AVAILABLE = CoordinatorNotAvailableError.code
_CHANGES_STATE = frozenset(
    {_TO_COORDINATOR, _TO_CLIENT, _STEP_DONE, _TICK, _NEMESIS, _COORDINATOR_UP}
)
"""Events after which the invariants are checked (deliveries only of heartbeats): the others
(polls, timeouts, the end of an isolation, offset commits and fetches) change no ownership,
epoch or membership; time-based bounds are checked at every tick. Commits are checked as
they are accepted."""


def replay_command(seed: int) -> str:
    """The exact command that replays ``seed`` alone."""
    return f"{ENV_SEED}={seed} .venv/bin/pytest tests/sim/test_group_sim.py -k replay"


class SimulationFailure(AssertionError):
    """An invariant broke (or the run did not converge); the message names the seed."""


@dataclass(frozen=True, slots=True)
class Swarm:
    """What a seed randomises."""

    consumers: int
    groups: int
    topics: tuple[tuple[str, int], ...]
    identical_subscriptions: bool
    assignors: tuple[str, ...]
    session_ms: int
    heartbeat_ms: int
    rebalance_ms: int
    tick_ms: int
    poll_ms: int
    delay_max_ms: int
    drop: float
    request_timeout_ms: int
    callback_max_ms: int
    slow_callback: float
    commit_interval_ms: int
    nemesis_interval_ms: int
    weights: tuple[int, ...]
    faulty_ms: int

    @classmethod
    def draw(cls, rng: random.Random, faulty_ms: int) -> Swarm:
        """Pick one configuration."""
        session_ms = rng.choice((150, 250, 400))
        delay_max_ms = rng.choice((1, 4, 12))
        topics = tuple((f"t{i}", rng.randint(1, 8)) for i in range(rng.randint(1, 3)))
        assignor = rng.choice(("range", "roundrobin", "uniform", "mixed"))
        return cls(
            consumers=rng.randint(2, 5),
            groups=rng.choice((1, 1, 2)),
            topics=topics,
            identical_subscriptions=rng.random() < 0.6,
            assignors=("range", "roundrobin", "uniform") if assignor == "mixed" else (assignor,),
            session_ms=session_ms,
            heartbeat_ms=max(5, session_ms // rng.choice((4, 6))),
            rebalance_ms=rng.choice((80, 200, 500)),
            tick_ms=rng.choice((5, 20)),
            poll_ms=rng.choice((5, 10)),
            delay_max_ms=delay_max_ms,
            drop=rng.choice((0.0, 0.02, 0.08)),
            request_timeout_ms=max(15, 4 * delay_max_ms + 10),
            callback_max_ms=rng.choice((0, 8, 30)),
            slow_callback=rng.choice((0.0, 0.03)),
            commit_interval_ms=rng.choice((15, 50)),
            nemesis_interval_ms=rng.choice((80, 200)),
            # crash, join, leave, isolate, failover, metadata, resubscribe, nothing
            weights=(*(rng.choice((0, 1, 2)) for _ in range(7)), 2),
            faulty_ms=faulty_ms,
        )


@dataclass(slots=True)
class Client:
    """One consumer: the real member state machine plus a model of its fetch positions."""

    cid: int
    group: str
    topics: tuple[str, ...]
    membership: GroupMembership
    alive: bool = True
    left: bool = False
    positions: dict[TopicPartition, int | None] = field(default_factory=dict)
    steps: deque[Reconciliation] = field(default_factory=deque)
    step_running: bool = False
    generation: int = 0
    hb_call: int | None = None
    fetch_call: int | None = None
    last_commit_ms: int = 0
    isolated: bool = False
    slow_next: bool = False


@dataclass(frozen=True, slots=True)
class Message:
    """A request to the coordinator or an answer to a consumer."""

    kind: str  # "hb", "commit", "fetch"
    cid: int
    call: int
    body: Any


@dataclass(frozen=True, slots=True)
class GroupRunResult:
    """What one schedule did, for the summary."""

    seed: int
    events: int
    checks: Counter[str]
    stats: Counter[str]


class GroupSimulator:
    """One schedule (see the module docstring)."""

    def __init__(self, seed: int, *, faulty_ms: int = 2_000, trace: bool = False) -> None:
        self.seed = seed
        root = random.Random(seed)
        self.cfg = Swarm.draw(root, faulty_ms)
        self.net = random.Random(root.getrandbits(64))
        self.faults = random.Random(root.getrandbits(64))
        self.work = random.Random(root.getrandbits(64))
        self.ids = random.Random(root.getrandbits(64))
        self.config = GroupCoordinatorConfig(
            session_timeout_ms=self.cfg.session_ms,
            min_session_timeout_ms=10,
            max_session_timeout_ms=600_000,
            heartbeat_interval_ms=self.cfg.heartbeat_ms,
            max_group_size=64,
        )
        self.topics: dict[str, int] = dict(self.cfg.topics)
        self.topic_pool = [*self.topics, "late"]
        self.now_ms = 0
        self.faulty = True
        self.events = 0
        self.checks: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.trace_on = trace
        self.trace: list[tuple[Any, ...]] = []
        self._queue: list[tuple[int, int, int, Any]] = []
        self._seq = 0
        self.clients: dict[int, Client] = {}
        self._next_cid = 0
        self._next_call = 0
        self.links: dict[tuple[int, str], int] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.shadow = self._new_coordinator()  # replays every persisted record, stays LOADING
        self._offset_batches = 0
        self.load_ms = 0
        self.crash_snapshot: tuple[GroupRecord, ...] = ()
        self.last_heartbeat: dict[tuple[str, str], int] = {}
        self.epochs: dict[tuple[str, str], int] = {}
        self.committed: dict[tuple[str, TopicPartition], int] = {}
        self.coordinator: GroupCoordinator | None = self._new_coordinator()
        self.coordinator.replay([])
        self._persist(self.coordinator.complete_load(self.topics, 0))
        self.groups = [f"g{i}" for i in range(self.cfg.groups)]
        self.common_topics = self._random_topics()
        for _ in range(self.cfg.consumers):
            self._start_client()
        self._push(0, _TICK, None)
        self._push(self.cfg.nemesis_interval_ms, _NEMESIS, None)

    # --- plumbing -----------------------------------------------------------------------------

    def _new_coordinator(self) -> GroupCoordinator:
        return GroupCoordinator(
            random.Random(self.ids.getrandbits(64)), self.config, partition=0, loggers=GROUP_LOGGERS
        )

    def _push(self, due: int, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (due, self._seq, kind, payload))

    def _random_topics(self) -> tuple[str, ...]:
        k = self.faults.randint(1, len(self.topic_pool))
        return tuple(sorted(self.faults.sample(self.topic_pool, k)))

    def _fail(self, detail: str) -> None:
        recent = "\n".join(f"    {e!r}" for e in self.trace[-25:]) or "    (run with trace)"
        groups = []
        if self.coordinator is not None:
            for listing in self.coordinator.list_groups():
                groups.append(f"  {self.coordinator.describe(listing.group_id)}")
        clients = "\n".join(
            f"  c{c.cid} {c.group} alive={c.alive} state={c.membership.state.value} "
            f"id={c.membership.member_id} epoch={c.membership.member_epoch} "
            f"owned={sorted(map(str, c.membership.owned))}"
            for c in self.clients.values()
        )
        raise SimulationFailure(
            f"seed={self.seed} t={self.now_ms}ms phase={'faulty' if self.faulty else 'healed'}: "
            f"{detail}\n  swarm: {self.cfg}\n" + "\n".join(groups) + f"\n{clients}\n"
            f"  replay: {replay_command(self.seed)}\n  last events:\n{recent}"
        )

    def _send(self, msg: Message, to_coordinator: bool) -> None:
        client = self.clients[msg.cid]
        if client.isolated or (self.faulty and self.net.random() < self.cfg.drop):
            self.stats["messages_dropped"] += 1
            return
        link = (msg.cid, "out" if to_coordinator else "in")
        due = max(self.now_ms + self.net.randint(1, self.cfg.delay_max_ms), self.links.get(link, 0))
        self.links[link] = due
        self._push(due, _TO_COORDINATOR if to_coordinator else _TO_CLIENT, msg)

    def _call_id(self) -> int:
        self._next_call += 1
        return self._next_call

    def _persist(self, records: tuple[GroupRecord, ...]) -> None:
        for record in records:
            key, value = encode(record)
            self.log.append((key, value))
            decoded = decode(key, value)
            if decoded != record:
                self._fail(f"codec changed a record: {record} -> {decoded}")
            self.shadow.replay([decoded])
        if records and self.coordinator is not None:
            offsets_only = all(isinstance(r.key, OffsetCommitKey) for r in records)
            self._offset_batches += offsets_only
            if not offsets_only or self._offset_batches % 8 == 0:
                self._check_replay()

    def _check_replay(self) -> None:
        """Every membership change, and every 8th batch of offset commits (each commit is
        also decoded and replayed at once; comparing whole states each time costs more than
        it finds), plus every failover and the end of the run."""
        assert self.coordinator is not None
        if self.shadow.snapshot() != self.coordinator.snapshot():
            self._fail("replaying the persisted records does not give the coordinator's state")
        self.checks["replay_equal"] += 1

    # --- consumers ----------------------------------------------------------------------------

    def _start_client(self) -> None:
        cid = self._next_cid
        self._next_cid += 1
        topics = self.common_topics if self.cfg.identical_subscriptions else self._random_topics()
        membership = GroupMembership(
            self.groups[cid % len(self.groups)],
            self.faults.choice(self.cfg.assignors),
            self.cfg.rebalance_ms,
        )
        membership.subscribe(topics)
        self.clients[cid] = Client(cid, membership.group_id, topics, membership)
        self.stats["consumers_started"] += 1
        self._push(self.now_ms + self.work.randint(0, self.cfg.poll_ms), _POLL, cid)

    def _poll(self, c: Client) -> None:
        if not c.alive:
            return
        m = c.membership
        for tp, pos in c.positions.items():
            if pos is not None:
                c.positions[tp] = pos + self.work.randint(0, 3)
        if (
            self.now_ms - c.last_commit_ms >= self.cfg.commit_interval_ms
            and m.member_epoch > 0
            and m.state in (MemberState.STABLE, MemberState.RECONCILING)
        ):
            self._commit(c, {tp: p for tp, p in c.positions.items() if p is not None})
            c.last_commit_ms = self.now_ms
        if c.fetch_call is None and any(p is None for p in c.positions.values()):
            self._fetch(c)
        if m.heartbeat_due(self.now_ms):
            fields = m.next_heartbeat(self.now_ms)
            c.hb_call = self._call_id()
            self._send(Message("hb", c.cid, c.hb_call, fields), True)
            self._push(self.now_ms + self.cfg.request_timeout_ms, _HB_TIMEOUT, (c.cid, c.hb_call))
        self._push(self.now_ms + self.cfg.poll_ms, _POLL, c.cid)

    def _commit(self, c: Client, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or not c.membership.member_id:
            return
        body = (c.membership.member_id, c.membership.member_epoch, offsets, c.membership.owned)
        self._send(Message("commit", c.cid, self._call_id(), body), True)

    def _fetch(self, c: Client) -> None:
        wanted = sorted(tp for tp, p in c.positions.items() if p is None)
        c.fetch_call = self._call_id()
        self._send(Message("fetch", c.cid, c.fetch_call, wanted), True)
        self._push(self.now_ms + self.cfg.request_timeout_ms, _FETCH_TIMEOUT, (c.cid, c.fetch_call))

    def _on_answer(self, msg: Message) -> None:
        c = self.clients[msg.cid]
        if not c.alive or c.isolated:
            return
        if msg.kind == "fetch":
            if msg.call == c.fetch_call:
                c.fetch_call = None
                if isinstance(msg.body, dict):
                    for tp, committed in msg.body.items():
                        if c.positions.get(tp, 0) is None:
                            c.positions[tp] = 0 if committed is None else committed.offset
            return
        if msg.kind == "commit":
            return
        if msg.call != c.hb_call:
            return  # the call timed out already; its answer is dropped
        c.hb_call = None
        code, message, member_id, epoch, interval, assignment = msg.body
        m = c.membership
        step = m.on_heartbeat_response(code, message, member_id, epoch, interval, assignment)
        if m.state is MemberState.FATAL:
            self._fail(f"consumer c{c.cid} went FATAL: {m.fatal_error}")
        if step.lost:
            self.stats["partitions_lost"] += len(step.lost)
            self._abort_steps(c)
            for tp in step.lost:
                c.positions.pop(tp, None)
            self._queue_step(c, m.done(step))
        else:
            self._queue_step(c, step)
        if c.membership.state is MemberState.UNSUBSCRIBED:
            c.alive, c.left = False, True
            self.stats["consumers_left"] += 1

    def _queue_step(self, c: Client, step: Reconciliation | None) -> None:
        """Run ``step`` after the one running (``GroupMembership`` hands out one at a time;
        ``done`` returns the next)."""
        if isinstance(step, Reconciliation) and not step.empty:
            c.steps.append(step)
        self._start_step(c)

    def _abort_steps(self, c: Client) -> None:
        """Kafka's consumer abandons a reconciliation when it is fenced or leaves."""
        c.generation += 1
        c.steps.clear()
        c.step_running = False

    def _start_step(self, c: Client) -> None:
        if c.step_running or not c.steps:
            return
        step = c.steps[0]
        c.step_running = True
        revoked = {tp: c.positions[tp] for tp in step.revoke if c.positions.get(tp) is not None}
        self._commit(c, {tp: p for tp, p in revoked.items() if p is not None})
        duration = self.work.randint(0, self.cfg.callback_max_ms)
        if c.slow_next:
            c.slow_next = False
            duration = self.cfg.rebalance_ms + self.work.randint(1, self.cfg.rebalance_ms)
            self.stats["slow_callbacks"] += 1
        self._push(self.now_ms + duration, _STEP_DONE, (c.cid, c.generation))

    def _step_done(self, c: Client, generation: int) -> None:
        if generation != c.generation or not c.alive:
            return  # aborted (fenced, left) or crashed
        c.step_running = False
        step = c.steps.popleft()
        for tp in step.revoke:
            c.positions.pop(tp, None)
        following = c.membership.done(step)
        for tp in step.assign:
            if tp not in c.positions and tp in c.membership.owned:
                c.positions[tp] = None
        if set(c.positions) != set(c.membership.owned):
            self._fail(f"c{c.cid}: positions {set(c.positions)} != owned {c.membership.owned}")
        self._queue_step(c, following)

    # --- the coordinator ----------------------------------------------------------------------

    def _serve(self, msg: Message) -> None:
        c = self.clients[msg.cid]
        if c.isolated:
            return
        coordinator = self.coordinator
        if coordinator is None:
            self.stats["answered_not_available"] += 1
            if msg.kind == "hb":
                answer = (_NOT_AVAILABLE, "failing over", "", 0, 0, None)
                self._send(Message("hb", msg.cid, msg.call, answer), False)
            return
        if msg.kind == "hb":
            f = msg.body
            try:
                result = coordinator.heartbeat(
                    c.group,
                    f.member_id,
                    f.member_epoch,
                    now_ms=self.now_ms,
                    rebalance_timeout_ms=f.rebalance_timeout_ms,
                    subscribed_topics=f.subscribed_topics,
                    assignor=f.assignor,
                    owned_partitions=f.owned,
                )
            except LograftError as e:
                self.stats[f"heartbeat_{e.error_name}"] += 1
                answer = (e.code, e.message, "", 0, 0, None)
            else:
                self._persist(result.records)
                if result.member_epoch >= 0:
                    self.last_heartbeat[(c.group, result.member_id)] = self.now_ms
                if f.member_epoch == 0:
                    self.stats["joins"] += 1
                answer = (
                    0,
                    "",
                    result.member_id,
                    result.member_epoch,
                    result.heartbeat_interval_ms,
                    result.assignment,
                )
            self._send(Message("hb", msg.cid, msg.call, answer), False)
        elif msg.kind == "commit":
            self._serve_commit(coordinator, c, msg)
        else:
            committed = coordinator.fetch_offsets(c.group, msg.body)
            self._send(Message("fetch", msg.cid, msg.call, committed), False)

    def _serve_commit(self, coordinator: GroupCoordinator, c: Client, msg: Message) -> None:
        member_id, epoch, offsets, sender_owned = msg.body
        before = {m.member_id: m for m in coordinator.describe(c.group).members}
        try:
            result = coordinator.commit_offsets(
                c.group,
                member_id,
                epoch,
                {tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
                self.now_ms,
            )
        except LograftError as e:
            self.stats[f"commit_{e.error_name}"] += 1
            return
        self._persist(result.records)
        member = before.get(member_id)
        for tp, error in result.errors.items():
            if error is not None:
                self.stats[f"commit_partition_{error.error_name}"] += 1
                continue
            self.stats["commits_accepted"] += 1
            owner_ok = (
                member is not None
                and member.member_epoch == epoch
                and tp in member.assignment | member.pending_revocation
            )
            if not owner_ok or tp not in sender_owned:
                self._fail(
                    f"commit of {tp}={offsets[tp]} by {member_id}@{epoch} accepted, but that "
                    f"member did not own it at that epoch (member: {member})"
                )
            key = (c.group, tp)
            if offsets[tp] < self.committed.get(key, 0):
                self._fail(
                    f"committed offset of {c.group}/{tp} moved back from "
                    f"{self.committed[key]} to {offsets[tp]} (commit by {member_id}@{epoch})"
                )
            self.committed[key] = offsets[tp]
            self.checks["commit_by_owner"] += 1
            self.checks["committed_monotonic"] += 1

    def _tick(self) -> None:
        if self.coordinator is not None:
            result = self.coordinator.tick(self.now_ms)
            for expired in result.expired:
                self.stats[f"expired_{expired.reason}"] += 1
            self._persist(result.records)
        self._push(self.now_ms + self.cfg.tick_ms, _TICK, None)

    def _failover(self) -> None:
        assert self.coordinator is not None
        self.crash_snapshot = self.coordinator.snapshot()
        self.coordinator.close()
        self.coordinator = None
        self.stats["failovers"] += 1
        self._push(
            self.now_ms + self.faults.randint(5, 2 * self.cfg.session_ms), _COORDINATOR_UP, None
        )

    def _coordinator_up(self) -> None:
        if self.faults.random() < 0.5:  # the log cleaner ran: keep the latest record per key
            latest = {k: i for i, (k, _) in enumerate(self.log)}
            drop_tombstones = self.faults.random() < 0.5
            self.log = [
                (k, v)
                for i, (k, v) in enumerate(self.log)
                if latest[k] == i and not (drop_tombstones and v is None)
            ]
            self.stats["compactions"] += 1
        successor = self._new_coordinator()
        successor.replay(decode(k, v) for k, v in self.log)
        if successor.snapshot() != self.crash_snapshot:
            self._fail("the new coordinator does not start where the old one stopped")
        self.checks["replay_equal"] += 1
        self.coordinator = successor
        self.load_ms = self.now_ms
        self._persist(successor.complete_load(self.topics, self.now_ms))

    # --- faults -------------------------------------------------------------------------------

    def _nemesis(self) -> None:
        if not self.faulty:
            return
        self._push(self.now_ms + self.cfg.nemesis_interval_ms, _NEMESIS, None)
        action = self.faults.choices(range(8), weights=self.cfg.weights)[0]
        live = [c for c in self.clients.values() if c.alive]
        victim = self.faults.choice(live) if live else None
        if action == 0 and victim is not None and len(live) > 1:
            victim.alive = False  # kill -9: no leave, no commit
            self.stats["consumers_crashed"] += 1
        elif action == 1 and len(live) < 8:
            self._start_client()
        elif action == 2 and victim is not None and len(live) > 1:
            if victim.membership.state not in (MemberState.LEAVING, MemberState.UNSUBSCRIBED):
                self._commit(victim, {tp: p for tp, p in victim.positions.items() if p is not None})
                self._abort_steps(victim)
                victim.membership.leave()
                victim.positions.clear()
        elif action == 3 and victim is not None and not victim.isolated:
            victim.isolated = True
            self.stats["isolations"] += 1
            until = self.now_ms + self.faults.randint(
                self.cfg.session_ms // 2, 2 * self.cfg.session_ms
            )
            self._push(until, _ISOLATION_ENDS, victim.cid)
        elif action == 4 and self.coordinator is not None:
            self._failover()
        elif action == 5:
            self._change_topics()
        elif action == 6 and victim is not None:
            victim.topics = self._random_topics()
            victim.membership.subscribe(victim.topics)
            self.stats["resubscriptions"] += 1
        if victim is not None and self.faults.random() < self.cfg.slow_callback:
            victim.slow_next = True

    def _change_topics(self) -> None:
        if "late" not in self.topics and self.faults.random() < 0.5:
            self.topics["late"] = self.faults.randint(1, 4)
        else:
            topic = self.faults.choice(sorted(self.topics))
            self.topics[topic] = min(12, self.topics[topic] + self.faults.randint(1, 3))
        self.stats["topic_changes"] += 1
        if self.coordinator is not None:
            self._persist(self.coordinator.on_topic_metadata(self.topics))

    def _heal(self) -> None:
        self.faulty = False
        for c in self.clients.values():
            c.isolated = False
            c.slow_next = False
        if self.coordinator is None:
            self._coordinator_up()

    # --- invariants ---------------------------------------------------------------------------

    def _check(self) -> None:
        coordinator = self.coordinator
        if coordinator is None:
            return
        try:
            coordinator.check_invariants()
        except LograftError as e:
            self._fail(f"coordinator invariant: {e}")
        members: dict[tuple[str, str], Any] = {}
        for listing in coordinator.list_groups():
            held: dict[TopicPartition, str] = {}
            for d in coordinator.describe(listing.group_id).members:
                members[(listing.group_id, d.member_id)] = d
                for tp in d.assignment | d.pending_revocation:
                    if tp in held:
                        self._fail(f"{tp} held by {held[tp]} and {d.member_id}")
                    held[tp] = d.member_id
        owners: dict[tuple[str, TopicPartition], int] = {}
        for c in self.clients.values():
            if not c.alive:
                continue
            d = members.get((c.group, c.membership.member_id))
            if d is None or not c.membership.owned <= d.assignment | d.pending_revocation:
                if c.membership.owned:
                    self.stats["zombie_observations"] += 1
                continue
            for tp in c.membership.owned:
                other = owners.setdefault((c.group, tp), c.cid)
                if other != c.cid:
                    self._fail(f"consumers c{other} and c{c.cid} both own {tp} in {c.group}")
        self.checks["exclusive_ownership"] += 1
        for key, d in members.items():
            previous = self.epochs.get(key)
            if previous is not None and d.member_epoch < previous:
                self._fail(f"member {key} epoch went back from {previous} to {d.member_epoch}")
            self.epochs[key] = d.member_epoch
            self.stats["max_member_epoch"] = max(self.stats["max_member_epoch"], d.member_epoch)
            since = max(self.last_heartbeat.get(key, self.load_ms), self.load_ms)
            if self.now_ms > since + self.cfg.session_ms + self.cfg.tick_ms:
                self._fail(
                    f"member {key} silent since {since}ms is still in the group "
                    f"(session {self.cfg.session_ms}ms, tick {self.cfg.tick_ms}ms)"
                )
        for key in [k for k in self.epochs if k not in members]:
            del self.epochs[key]
        self.checks["epoch_monotonic"] += 1
        self.checks["session_bound"] += 1

    def _check_converged(self) -> None:
        coordinator = self.coordinator
        assert coordinator is not None
        live = [c for c in self.clients.values() if c.alive]
        for group in self.groups:
            clients = [c for c in live if c.group == group]
            if not clients:
                continue
            d = coordinator.describe(group)
            by_id = {m.member_id: m for m in d.members}
            ids = {c.membership.member_id for c in clients}
            if ids != set(by_id):
                self._fail(f"{group}: members {sorted(by_id)} but live consumers {sorted(ids)}")
            for c in clients:
                m = by_id[c.membership.member_id]
                if (
                    c.membership.state is not MemberState.STABLE
                    or c.step_running
                    or m.member_epoch != d.assignment_epoch
                    or m.assignment != m.target_assignment
                    or c.membership.owned != m.assignment
                    or m.pending_revocation
                ):
                    self._fail(f"{group}: c{c.cid} did not converge: {m}")
            self._check_balanced(d)
            self.stats["max_group_epoch"] = max(self.stats["max_group_epoch"], d.group_epoch)
        self.checks["converged"] += 1

    def _check_balanced(self, d: GroupDescription) -> None:
        subs = {
            m.member_id: frozenset(t for t in m.subscribed_topics if t in self.topics)
            for m in d.members
        }
        got = {m.member_id: m.assignment for m in d.members}
        wanted = {
            TopicPartition(t, p) for s in subs.values() for t in s for p in range(self.topics[t])
        }
        given = [tp for parts in got.values() for tp in parts]
        if len(given) != len(set(given)) or set(given) != wanted:
            self._fail(f"{d.group_id}: not every subscribed partition owned exactly once: {got}")
        if d.assignor == "range":
            if got != assign_range(subs, self.topics):
                self._fail(f"{d.group_id}: not Kafka's range assignment: {got}")
            return
        sizes = {m: len(p) for m, p in got.items()}
        if len(set(subs.values())) == 1:
            if max(sizes.values()) - min(sizes.values()) > 1:
                self._fail(f"{d.group_id}: unbalanced {sizes}")
            return
        for a, parts in got.items():
            for tp in parts:
                for b, topics in subs.items():
                    if tp.topic in topics and sizes[b] <= sizes[a] - 2:
                        self._fail(f"{d.group_id}: {tp} could move from {a} to {b}: {sizes}")

    # --- running ------------------------------------------------------------------------------

    def run(self) -> GroupRunResult:
        """Faulty phase, heal, quiet phase, convergence; raises :class:`SimulationFailure`."""
        self._run_until(self.cfg.faulty_ms)
        self._heal()
        quiet = 4 * self.cfg.session_ms + 3 * self.cfg.rebalance_ms + 20 * self.cfg.heartbeat_ms
        self._run_until(self.cfg.faulty_ms + quiet + 2 * self.cfg.callback_max_ms + 200)
        self._check_converged()
        self._check_replay()
        return GroupRunResult(self.seed, self.events, self.checks, self.stats)

    def _run_until(self, end_ms: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            due, _, kind, payload = heapq.heappop(queue)
            self.now_ms = due
            self.events += 1
            if self.trace_on:
                self.trace.append((due, _KIND_NAMES[kind], _describe(payload)))
            try:
                self._dispatch(kind, payload)
            except SimulationFailure:
                raise
            except Exception as e:  # a crash of the core under test is a failure of the seed
                self._fail(f"{type(e).__name__}: {e}")
            if kind in _CHANGES_STATE and (
                not isinstance(payload, Message) or payload.kind == "hb"
            ):
                self._check()
        self.now_ms = end_ms

    def _dispatch(self, kind: int, payload: Any) -> None:
        if kind == _POLL:
            self._poll(self.clients[payload])
        elif kind == _TO_COORDINATOR:
            self._serve(payload)
        elif kind == _TO_CLIENT:
            self._on_answer(payload)
        elif kind == _HB_TIMEOUT:
            c = self.clients[payload[0]]
            if c.alive and c.hb_call == payload[1]:
                c.hb_call = None
                c.membership.on_heartbeat_failed()
                self.stats["heartbeat_timeouts"] += 1
        elif kind == _FETCH_TIMEOUT:
            c = self.clients[payload[0]]
            if c.fetch_call == payload[1]:
                c.fetch_call = None
        elif kind == _STEP_DONE:
            self._step_done(self.clients[payload[0]], payload[1])
        elif kind == _TICK:
            self._tick()
        elif kind == _NEMESIS:
            self._nemesis()
        elif kind == _COORDINATOR_UP:
            if self.coordinator is None:
                self._coordinator_up()
        elif kind == _ISOLATION_ENDS:
            self.clients[payload].isolated = False


def _describe(payload: Any) -> Any:
    if isinstance(payload, Message):
        return (payload.kind, f"c{payload.cid}", payload.call, payload.body)
    return payload


def run_seed(seed: int) -> GroupRunResult:
    """Run one schedule; raises :class:`SimulationFailure` with the replay command on a bug."""
    try:
        return GroupSimulator(seed).run()
    except SimulationFailure as first:
        # run again with the trace on, so the message lists the last events
        try:
            GroupSimulator(seed, trace=True).run()
        except SimulationFailure as traced:
            raise traced from None
        raise first


# --- the tests ------------------------------------------------------------------------------


class _Totals:
    def __init__(self) -> None:
        self.seeds: list[int] = []
        self.checks: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.events = 0
        self.seconds = 0.0

    def add(self, result: GroupRunResult, seconds: float) -> None:
        self.seeds.append(result.seed)
        self.checks.update(result.checks)
        for name, value in result.stats.items():
            if name.startswith("max_"):
                self.stats[name] = max(self.stats[name], value)
            else:
                self.stats[name] += value
        self.events += result.events
        self.seconds += seconds

    def lines(self) -> list[str]:
        seeds = sorted(set(self.seeds))
        out = [
            f"schedules: {len(seeds)}  seeds: {seeds[0]}..{seeds[-1]}  events: {self.events}  "
            f"runtime: {self.seconds:.1f}s",
            "happened: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items())),
            "invariant checks passed:",
        ]
        return out + [f"  {name}: {count}" for name, count in sorted(self.checks.items())]


TOTALS = _Totals()


def _run(seed: int, totals: _Totals = TOTALS) -> GroupRunResult:
    started = time.perf_counter()
    result = run_seed(seed)
    totals.add(result, time.perf_counter() - started)
    return result


@pytest.fixture(scope="module", autouse=True)
def _print_report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is None or not TOTALS.seeds:
        return
    with capture.global_and_fixture_disabled():
        print("\n--- lograft consumer group simulation ---")
        for line in TOTALS.lines():
            print(line)


def _schedules() -> int:
    return int(os.environ.get(ENV_SCHEDULES, DEFAULT_SCHEDULES))


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_simulated_schedules(chunk: int) -> None:
    """Every seed of this chunk keeps every invariant and converges after healing."""
    if ENV_SEED in os.environ:
        pytest.skip(f"{ENV_SEED} set: only the replay test runs")
    total = _schedules()
    per_chunk = -(-total // CHUNKS)
    for seed in range(chunk * per_chunk, min(total, (chunk + 1) * per_chunk)):
        _run(seed)


def test_replay_seed() -> None:
    """Replays ``LOGRAFT_GROUP_SIM_SEED`` (seed 0 when unset)."""
    _run(int(os.environ.get(ENV_SEED, 0)))


def test_same_seed_same_run() -> None:
    """Determinism: one seed gives the same schedule, event for event."""
    first, second = GroupSimulator(5, trace=True), GroupSimulator(5, trace=True)
    first.run()
    second.run()
    assert [repr(e) for e in first.trace] == [repr(e) for e in second.trace]
    assert first.committed == second.committed


def test_schedules_exercise_the_protocol() -> None:
    """The swarm really rebalances, fences, expires, fails over and commits (not a no-op)."""
    totals = _Totals()
    for seed in range(24):
        _run(seed, totals)
    happened = totals.stats
    for name in (
        "commits_accepted",
        "joins",
        "failovers",
        "compactions",
        "expired_session_timeout",
        "heartbeat_UNKNOWN_MEMBER_ID",
        "zombie_observations",
        "commit_STALE_MEMBER_EPOCH",
        "consumers_left",
        "topic_changes",
        "partitions_lost",
    ):
        assert happened[name] > 0, f"{name} never happened in 24 schedules: {happened}"
    assert happened["max_group_epoch"] > 10


# --- the simulator has teeth ------------------------------------------------------------------


def _first_failure(seeds: int = 40) -> str:
    for seed in range(seeds):
        try:
            GroupSimulator(seed).run()
        except SimulationFailure as failure:
            return str(failure)
    raise AssertionError(f"no failure in {seeds} seeds: the checker missed an injected bug")


def test_handing_a_partition_over_before_it_is_released_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the cooperative rule (and the core's own checks): ownership must fail."""
    cls = coordinator_module.GroupCoordinator
    monkeypatch.setattr(_reconciliation, "is_free", lambda group, tp, member_id: True)
    monkeypatch.setattr(
        _store.GroupStore, "_move_ownership", lambda self, group, member_id, old, new: None
    )
    monkeypatch.setattr(cls, "check_invariants", lambda self: None)
    message = _first_failure()
    assert "held by" in message or "both own" in message or "moved back" in message, message
    assert f"{ENV_SEED}=" in message


def test_never_expiring_members_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break session expiry: the session bound (or convergence) must fail."""
    cls = coordinator_module.GroupCoordinator
    original = cls.tick
    monkeypatch.setattr(cls, "tick", lambda self, now_ms: original(self, now_ms - 10_000_000))
    message = _first_failure()
    assert "still in the group" in message or "did not converge" in message, message


def test_accepting_commits_from_stale_epochs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break offset fencing: a commit by a non-owner must be caught."""
    cls = coordinator_module.GroupCoordinator
    original = cls.commit_offsets

    def lax(
        self: GroupCoordinator,
        group_id: str,
        member_id: str,
        member_epoch: int,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        now_ms: int,
    ) -> Any:
        group = self._store.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is not None:  # any epoch will do
            member_epoch = member.current.member_epoch
        return original(self, group_id, member_id, member_epoch, offsets, now_ms)

    monkeypatch.setattr(cls, "commit_offsets", lax)
    message = _first_failure()
    assert "did not own it at that epoch" in message or "moved back" in message, message
