"""A seeded, deterministic simulator for the Raft core (VOPR / Kafka RaftEventSimulationTest).

One seed decides everything: the cluster (3 or 5 voters, 0-2 observers), its timeouts, the
quality of every network link, the disk latency, the fault schedule and the client's
proposals ("swarm" testing: each seed also picks which faults are likely). The simulator
owns the only ``random.Random(seed)``; every subsystem gets its own generator derived from
it, so adding a draw in one place does not reshuffle the others.

Time is an integer ``now_ms``; work is a heap of ``(due_ms, seq, event)``. Nothing sleeps.

* :class:`SimNetwork`: per-link drop, duplication and delay (random per message, so messages
  reorder) and partitions that also cut messages in flight.
* :class:`SimDisk`: what a node wrote and what it fsynced; a crash loses the difference (or,
  when the seed says so, keeps a random prefix of it -- a disk may flush some of it).
* :class:`SimNode`: the shell around a :class:`RaftNode`: it obeys the Ready contract
  (write, fsync, then send, then apply, then advance) and crashes and restarts from disk.
* :class:`InvariantChecker` (in ``raft_checker``): runs after *every* event, with each
  core's ``check_invariants`` after every step, and raises :class:`SimulationFailure` with
  the seed and the exact replay command.

``sim_parts`` holds the values and standalone parts (swarm, result, disk, partitions).

A run has a faulty phase (safety only), then every fault heals and a liveness phase demands a
leader and a new entry committed and applied on every replica within a time bound.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import logging
import random
from collections import deque
from typing import Any

from controller.raft import (
    EntryKind,
    InvalidSnapshotError,
    NotLeaderError,
    RaftConfig,
    RaftMessage,
    RaftNode,
    Ready,
    Role,
    Snapshot,
)
from controller.raft._fetcher import fetch_due
from controller.raft._leader import held_fetch_due
from tests.sim.raft_checker import InvariantChecker
from tests.sim.sim_parts import RunResult, SimDisk, SwarmConfig, cut_between

__all__ = [
    "InvariantChecker",
    "RunResult",
    "SimDisk",
    "SimNetwork",
    "SimNode",
    "SimulationFailure",
    "Simulator",
    "SwarmConfig",
    "cut_between",
    "replay_command",
    "run_seed",
]

CLUSTER_ID = "sim-cluster"

# Event kinds (small ints keep the heap cheap).
_TICK, _DELIVER, _FSYNC, _NEMESIS, _PROPOSE, _RESTART = range(6)
_KIND_NAMES = ("tick", "deliver", "fsync", "nemesis", "propose", "restart")


def replay_command(seed: int) -> str:
    """The exact command that replays ``seed`` alone."""
    return f"LOGRAFT_SIM_SEED={seed} .venv/bin/pytest tests/sim -k replay"


class SimulationFailure(AssertionError):
    """An invariant broke (or liveness failed); the message says how to replay the seed."""


class SimNetwork:
    """Links with loss, duplication and random delay; partitions cut links both ways."""

    def __init__(self, sim: Simulator, rng: random.Random, node_ids: list[int]) -> None:
        self._sim = sim
        self._rng = rng
        cfg = sim.cfg
        # Each link gets its own quality around the seed's (swarm: links differ).
        self.link_drop: dict[tuple[int, int], float] = {}
        self.link_delay_ms: dict[tuple[int, int], int] = {}
        for a in node_ids:
            for b in node_ids:
                if a != b:
                    self.link_drop[a, b] = cfg.drop * rng.random() * 2
                    self.link_delay_ms[a, b] = rng.randint(1, cfg.delay_max_ms)
        self.duplicate = cfg.duplicate
        self.blocked: set[tuple[int, int]] = set()
        self.sent = 0
        self.dropped = 0

    def send(self, message: RaftMessage) -> None:
        """Queue ``message`` for delivery (or lose it)."""
        self.sent += 1
        link = (message.src, message.dst)
        rng = self._rng
        if link in self.blocked or rng.random() < self.link_drop[link]:
            self.dropped += 1
            return
        copies = 2 if rng.random() < self.duplicate else 1
        for _ in range(copies):
            self._sim.schedule(
                rng.randint(0, self.link_delay_ms[link]), _DELIVER, message.dst, message
            )

    def deliverable(self, message: RaftMessage) -> bool:
        """A partition also drops messages that were in flight when it started."""
        return (message.src, message.dst) not in self.blocked

    def heal(self, max_delay_ms: int) -> None:
        """Remove every partition and lossy link; cap delays so elections can settle."""
        self.blocked = set()
        for link in self.link_drop:
            self.link_drop[link] = 0.0
            self.link_delay_ms[link] = min(self.link_delay_ms[link], max_delay_ms)
        self.duplicate = 0.0


class SimNode:
    """The application around one RaftNode: disk, state machine, crash and restart."""

    def __init__(self, sim: Simulator, node_id: int, voters: frozenset[int]) -> None:
        self.sim = sim
        self.node_id = node_id
        self.is_voter = node_id in voters
        cfg = sim.cfg
        self.config = RaftConfig(
            node_id=node_id,
            cluster_id=CLUSTER_ID,
            voters=voters,
            election_timeout_ticks=cfg.election_timeout_ticks,
            max_fetch_entries=cfg.max_fetch_entries,
            fetch_max_wait_ticks=cfg.fetch_max_wait_ticks,
        )
        self.rng = random.Random(sim.derive_seed())
        self.disk = SimDisk(random.Random(sim.derive_seed()), cfg.partial_disk_loss)
        self.raft: RaftNode | None = None
        self.generation = 0
        self.busy: Ready | None = None
        # The state machine: a running digest of every applied entry.
        self.applied_end = 0
        self.digest = b""
        self.crashes = 0
        self.start()

    @property
    def alive(self) -> bool:
        """Whether the node is running."""
        return self.raft is not None

    def start(self) -> None:
        """Boot from disk: restore the state machine from the snapshot, build the core."""
        storage = self.disk.written
        snapshot = storage.snapshot()
        if snapshot is None:
            self.applied_end, self.digest = 0, b""
        else:
            self.restore(snapshot)
        rng = random.Random(self.rng.getrandbits(64))
        self.raft = RaftNode(self.config, storage, rng, logging.getLogger("controller.raft"))
        self.busy = None
        self.sim.checker.on_start(self)
        phase = self.rng.randrange(self.sim.cfg.tick_ms)
        self.sim.schedule(phase, _TICK, self.node_id, self.generation)

    def crash(self) -> None:
        """Stop now: in-flight disk writes and timers die with the process."""
        self.raft = None
        self.busy = None
        self.generation += 1
        self.crashes += 1
        self.disk.crash()

    # --- the Ready loop ------------------------------------------------------------------

    def pump(self) -> None:
        """Take the next Ready, write it, and fsync (now or after the disk's latency)."""
        raft = self.raft
        if raft is None or self.busy is not None or not raft.has_ready():
            return
        ready = raft.ready()
        self.disk.write(ready)
        self.busy = ready
        delay = self.sim.disk_delay() if ready.must_sync else 0
        if delay == 0:
            self.finish(ready)
        else:
            self.sim.schedule(delay, _FSYNC, self.node_id, self.generation)

    def finish(self, ready: Ready) -> None:
        """The fsync completed: send, apply, advance -- in that order."""
        raft = self.raft
        if raft is None:
            raise SimulationFailure("finish on a crashed node")
        self.disk.fsync()
        self.sim.checker.on_persisted(self, ready)
        for message in ready.messages:
            self.sim.network.send(message)
        if ready.apply_snapshot and ready.snapshot is not None:
            self.restore(ready.snapshot)
            self.sim.checker.on_restore(self)
        for entry in ready.committed_entries:
            if entry.offset < self.applied_end:
                continue
            if entry.offset != self.applied_end:
                raise SimulationFailure(
                    f"node {self.node_id} applies offset {entry.offset} after {self.applied_end}"
                )
            self.sim.checker.on_apply(self, entry.offset, entry.epoch, entry.kind, entry.data)
            self.digest = _chain(self.digest, entry.offset, entry.epoch, entry.kind, entry.data)
            self.applied_end = entry.offset + 1
        if ready.committed_entries:
            self.sim.checker.on_applied_state(self)
        raft.advance(ready)
        self.busy = None
        # Check before compacting: the checker reads newly committed entries from the log.
        self.sim.checker.check_node(self)
        if (
            self.sim.cfg.snapshot_probability
            and raft.applied_offset > raft.log_start_offset
            and self.sim.rng_app.random() < self.sim.cfg.snapshot_probability
        ):
            # The previous snapshot may not be persisted yet: then take one next time.
            with contextlib.suppress(InvalidSnapshotError):
                raft.create_snapshot(raft.applied_offset, self.image())

    def image(self) -> bytes:
        """The state machine image at :attr:`applied_end`."""
        return f"{self.applied_end}:{self.digest.hex()}".encode()

    def restore(self, snapshot: Snapshot) -> None:
        """Reset the state machine to a snapshot's image."""
        end_text, digest_hex = snapshot.image.decode().split(":")
        if int(end_text) != snapshot.end_offset:
            raise SimulationFailure(f"snapshot image at {end_text} named {snapshot.end_offset}")
        self.applied_end = snapshot.end_offset
        self.digest = bytes.fromhex(digest_hex)


def _chain(digest: bytes, offset: int, epoch: int, kind: EntryKind, data: bytes) -> bytes:
    hasher = hashlib.blake2b(digest, digest_size=8)
    hasher.update(f"{offset}/{epoch}/{int(kind)}/".encode())
    hasher.update(data)
    return hasher.digest()


class Simulator:
    """One seeded schedule: cluster, network, disks, faults, client and checker."""

    def __init__(self, seed: int, *, faulty_ms: int = 2000, trace: bool = False) -> None:
        self.seed = seed
        root = random.Random(seed)
        self._root = root
        self.cfg = SwarmConfig.draw(random.Random(root.getrandbits(64)), faulty_ms)
        self.rng_nemesis = random.Random(root.getrandbits(64))
        self.rng_client = random.Random(root.getrandbits(64))
        self.rng_app = random.Random(root.getrandbits(64))
        self.rng_disk = random.Random(root.getrandbits(64))
        rng_net = random.Random(root.getrandbits(64))
        self.now_ms = 0
        self._queue: list[tuple[int, int, tuple[int, int, Any]]] = []
        self._seq = 0
        self.events = 0
        self.partitions = 0
        self.faulty = True
        self.trace: deque[tuple[int, int, int, Any]] = deque(maxlen=60 if not trace else 100_000)
        self.checker = InvariantChecker(self)
        voters = frozenset(range(1, self.cfg.voters + 1))
        ids = list(range(1, self.cfg.voters + self.cfg.observers + 1))
        self.network = SimNetwork(self, rng_net, ids)
        self.nodes: dict[int, SimNode] = {}
        for nid in ids:
            self.nodes[nid] = SimNode(self, nid, voters)
        self._proposals = 0
        self.schedule(self.cfg.nemesis_interval_ms, _NEMESIS, 0, None)
        self.schedule(self.cfg.propose_interval_ms, _PROPOSE, 0, None)

    # --- plumbing -------------------------------------------------------------------------

    def derive_seed(self) -> int:
        """A fresh seed for a subsystem, derived from the root seed."""
        return self._root.getrandbits(64)

    def disk_delay(self) -> int:
        """How long the next fsync takes."""
        return self.rng_disk.randint(0, self.cfg.disk_delay_max_ms)

    def schedule(self, delay_ms: int, kind: int, node_id: int, payload: Any) -> None:
        """Run an event ``delay_ms`` from now (ties run in scheduling order)."""
        self._seq += 1
        heapq.heappush(self._queue, (self.now_ms + delay_ms, self._seq, (kind, node_id, payload)))

    def fail(self, detail: str) -> None:
        """Raise :class:`SimulationFailure` with the seed, the swarm and the recent events."""
        recent = "\n".join(
            f"  t={t}ms {_KIND_NAMES[k]} node={n} {p!r}"[:300]
            for t, k, n, p in list(self.trace)[-60:]
        )
        raise SimulationFailure(
            f"seed={self.seed} t={self.now_ms}ms phase={'faulty' if self.faulty else 'liveness'}: "
            f"{detail}\n  swarm: {self.cfg}\n  replay: {replay_command(self.seed)}\n"
            f"  last events:\n{recent}"
        )

    # --- running --------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Faulty phase, heal, liveness phase; raises :class:`SimulationFailure` on a bug."""
        self._run_until(self.cfg.faulty_ms)
        self.heal()
        self._liveness()
        return RunResult(
            seed=self.seed,
            voters=self.cfg.voters,
            observers=self.cfg.observers,
            events=self.events,
            checks=self.checker.checks,
            max_epoch=max(self.checker.leader_of_epoch, default=0),
            committed=len(self.checker.committed),
            crashes=sum(node.crashes for node in self.nodes.values()),
            partitions=self.partitions,
        )

    def _run_until(self, end_ms: int) -> None:
        queue = self._queue
        while queue and queue[0][0] <= end_ms:
            due, _, event = heapq.heappop(queue)
            self.now_ms = due
            self._dispatch(event)
        self.now_ms = end_ms

    def _dispatch(self, event: tuple[int, int, Any]) -> None:
        kind, nid, payload = event
        self.events += 1
        self.trace.append((self.now_ms, kind, nid, payload))
        node = self.nodes.get(nid)
        if kind == _TICK:
            assert node is not None
            if node.raft is None or payload != node.generation:
                return  # a timer of a process that has died since
            self._tick_checking_quiet(node.raft)
            self.checker.check_core(node.raft)
            self.schedule(self.cfg.tick_ms, _TICK, nid, node.generation)
        elif kind == _DELIVER:
            assert node is not None
            if node.raft is None or not self.network.deliverable(payload):
                return
            node.raft.step(payload)
            self.checker.check_core(node.raft)
        elif kind == _FSYNC:
            assert node is not None
            if node.raft is None or payload != node.generation or node.busy is None:
                return
            node.finish(node.busy)
        elif kind == _NEMESIS:
            if self.faulty:
                self._nemesis()
                self.schedule(self.cfg.nemesis_interval_ms, _NEMESIS, 0, None)
            return
        elif kind == _PROPOSE:
            self._propose()
            if self.faulty:
                self.schedule(self.cfg.propose_interval_ms, _PROPOSE, 0, None)
            return
        elif kind == _RESTART:
            assert node is not None
            if node.raft is None:
                node.start()
        else:
            raise AssertionError(f"unknown event kind {kind}")
        if node is not None:
            node.pump()
            self.checker.check_node(node)

    def _tick_checking_quiet(self, raft: RaftNode) -> None:
        """Tick, and fail if a tick the core called quiet (``ticks_until_due``) acted.

        The node shell sleeps through quiet ticks and makes them late, all at once: that is
        only the same run if they really change nothing anyone can see.
        """
        quiet = raft.ticks_until_due() > 1
        before = _observable(raft) if quiet else None
        raft.tick()
        if before is not None and _observable(raft) != before:
            self.fail(
                f"a tick called quiet acted on node {raft.node_id}: "
                f"{before!r} became {_observable(raft)!r}"
            )
        self.checker.checks["quiet_ticks"] += quiet

    def _propose(self) -> None:
        leaders = [n for nid, n in self.nodes.items() if self._is_leader(nid)]
        if not leaders:
            return
        node = self.rng_client.choice(leaders)
        assert node.raft is not None
        self._proposals += 1
        try:
            node.raft.propose(f"{self.seed}:{self._proposals}".encode())
        except NotLeaderError:
            return
        node.pump()
        self.checker.check_node(node)

    # --- faults ---------------------------------------------------------------------------

    def _nemesis(self) -> None:
        cfg, rng = self.cfg, self.rng_nemesis
        weights = (
            cfg.crash_weight,
            cfg.crash_weight,
            cfg.partition_weight,
            cfg.partition_weight,
            cfg.link_weight,
        )
        if not any(weights):
            return
        action = rng.choices(("crash", "restart", "partition", "heal", "link"), weights)[0]
        ids = sorted(self.nodes)
        if action == "crash":
            live = [nid for nid in ids if self.nodes[nid].alive]
            if live:
                victim = rng.choice(live)
                self.nodes[victim].crash()
                self.schedule(rng.randint(1, 20) * cfg.tick_ms, _RESTART, victim, None)
        elif action == "restart":
            dead = [nid for nid in ids if not self.nodes[nid].alive]
            for nid in dead:
                self.schedule(rng.randint(0, 3) * cfg.tick_ms, _RESTART, nid, None)
        elif action == "partition":
            self.partitions += 1
            self.network.blocked = self._partition(rng, ids)
        elif action == "heal":
            self.network.blocked = set()
        else:
            a, b = rng.sample(ids, 2)
            self.network.link_drop[a, b] = rng.choice((0.0, 0.5, 1.0))
            self.network.link_delay_ms[a, b] = rng.randint(1, 4 * cfg.delay_max_ms)

    def _partition(self, rng: random.Random, ids: list[int]) -> set[tuple[int, int]]:
        """Pick a partition kind and return the links it blocks."""
        voters = [nid for nid in ids if self.nodes[nid].is_voter]
        observers = [nid for nid in ids if not self.nodes[nid].is_voter]
        kind = rng.choice(("minority", "majority_ring", "isolated_leader", "bridge", "one_way"))
        shuffled = rng.sample(voters, len(voters))
        groups: list[set[int]]
        if kind == "majority_ring":
            # Everyone sees a majority (its ring neighbours), no two see the same one.
            n = len(shuffled)
            return {
                (a, b)
                for i, a in enumerate(shuffled)
                for j, b in enumerate(shuffled)
                if min((i - j) % n, (j - i) % n) > 1
            }
        if kind == "one_way":
            a, b = rng.sample(ids, 2)
            return {(a, b)}
        if kind == "isolated_leader":
            leaders = [nid for nid in voters if self._is_leader(nid)]
            lonely = rng.choice(leaders) if leaders else shuffled[0]
            groups = [{lonely}, {nid for nid in voters if nid != lonely}]
        elif kind == "minority":
            size = rng.randint(1, (len(voters) - 1) // 2)
            groups = [set(shuffled[:size]), set(shuffled[size:])]
        else:
            # Bridge: two halves that only one node (in no group) connects.
            half = len(shuffled) // 2
            groups = [set(shuffled[:half]), set(shuffled[half + 1 :])]
        for nid in observers:
            rng.choice(groups).add(nid)
        return cut_between(groups)

    def _is_leader(self, nid: int) -> bool:
        raft = self.nodes[nid].raft
        return raft is not None and raft.role is Role.LEADER

    def heal(self) -> None:
        """End of the faulty phase: no more faults; crashed nodes come back."""
        self.faulty = False
        cfg = self.cfg
        self.network.heal(max(1, cfg.election_timeout_ticks * cfg.tick_ms // 5))
        for nid in sorted(self.nodes):
            if not self.nodes[nid].alive:
                self.schedule(0, _RESTART, nid, None)

    def _liveness(self) -> None:
        """A leader commits a new entry that every replica applies.

        Catching up a long backlog takes time proportional to it, so the bound is on
        *stalling*: the slowest replica must apply something new within ``liveness_ms``
        (and everything must be done within ten times that).
        """
        give_up = self.now_ms + 10 * self.cfg.liveness_ms
        deadline = self.now_ms + self.cfg.liveness_ms
        slowest = -1
        probe: tuple[int, int, int] | None = None  # (leader, epoch, offset)
        while self.now_ms < min(deadline, give_up):
            self._run_until(self.now_ms + self.cfg.tick_ms)
            now_slowest = min(node.applied_end for node in self.nodes.values())
            if now_slowest > slowest:
                slowest = now_slowest
                deadline = self.now_ms + self.cfg.liveness_ms
            leaders = [n for nid, n in self.nodes.items() if self._is_leader(nid)]
            if not leaders:
                continue
            leader = max(leaders, key=lambda n: n.raft.epoch if n.raft is not None else -1)
            raft = leader.raft
            assert raft is not None
            if probe is None or probe[1] != raft.epoch:
                probe = (leader.node_id, raft.epoch, raft.propose(f"probe:{self.seed}".encode()))
                leader.pump()
                self.checker.check_node(leader)
                continue
            offset = probe[2]
            if all(node.applied_end > offset for node in self.nodes.values()):
                applied = self.checker.applied.get(offset)
                if applied is None or applied[0] != probe[1]:
                    probe = None  # replaced by a later leader's entry: propose again
                    continue
                self.checker.checks["liveness"] += 1
                return
        states = {
            nid: (n.raft.role.value, n.raft.epoch, n.raft.high_watermark, n.applied_end)
            if n.raft is not None
            else "down"
            for nid, n in self.nodes.items()
        }
        self.fail(f"liveness: no entry committed on every replica after healing; {states}")


def _observable(raft: RaftNode) -> tuple[Any, ...]:
    """What a tick may change that the shell would act on: role, epoch, leader, vote, and
    anything for ``ready()`` (read from the core's fields: ``has_ready`` is False while a
    Ready is outstanding, which hides what a tick did)."""
    return (
        raft.role,
        raft.epoch,
        raft.leader_id,
        raft.voted_for,
        len(raft._core.out.messages),
        fetch_due(raft._core),
        held_fetch_due(raft._core),
        raft.has_ready(),
    )


def run_seed(seed: int, *, faulty_ms: int = 2000) -> RunResult:
    """Run one schedule; raises :class:`SimulationFailure` with the replay command on a bug."""
    return Simulator(seed, faulty_ms=faulty_ms).run()
