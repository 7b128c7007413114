"""The faults a chaos schedule injects, and how each is healed.

A :class:`Fault` picks its nodes (:meth:`Fault.select`), then ``inject`` and, after the
step's hold, ``heal``: :class:`Kill` (restart), :class:`Pause` (resume), :class:`Isolate`,
:class:`Split`, :class:`Bridge` and :class:`OneWay` (network; heal), :class:`TornTail`
(kill, damage segment tails; restart), :class:`SlowDisk` (fsyncs slow; normal),
:class:`ClockJump` (wall clock moved; reset), :class:`LastInSync` (the ISR of a partition
shrunk to its leader, which is killed, maybe emptied or torn; restart). :data:`FAULTS`
names each fault a schedule step (:class:`chaos.scenarios.FaultStep`) may ask for; a fault
aimed at the watched partition gets it through :meth:`Fault.for_partition`. Faults act on a
:class:`chaos.targets.Target`; :class:`chaos.nemesis.Nemesis` schedules and records them.

A new kind of fault is a :class:`Fault` subclass and a :data:`FAULTS` entry (and a scenario
in :mod:`chaos.scenarios` that uses it).
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from chaos.checker import HEALING_FAULTS
from chaos.scenarios import DISK_FAULTS, NETWORK_FAULTS, FaultStep
from chaos.targets import PartitionState, Target, TargetError, cut_network
from chaos.torn_tails import empty_partition, tear_tail, tear_tails

__all__ = [
    "FAULTS",
    "Bridge",
    "ClockJump",
    "Fault",
    "Isolate",
    "Kill",
    "LastInSync",
    "OneWay",
    "Pause",
    "PowerLoss",
    "SlowDisk",
    "Split",
    "TornTail",
    "last_in_sync",
]

# Named as before the split from chaos/nemesis.py: the chaos logs read as they did.
log = logging.getLogger("chaos.nemesis")

FSYNC_HOLD_MS = 30000.0
"""How long a last-replica fault holds up a follower's fsyncs (LazyFS's longest delay); the
fault lets them go once the leader is dead, well within it."""
FSYNC_PRIME_MS = 100.0
PRIME_APPENDS = 3
PRIME_TIMEOUT_S = 10.0
"""Before any hold, both followers' fsyncs of the partition take ``FSYNC_PRIME_MS`` longer
until each follower's log of it has grown ``PRIME_APPENDS`` times (a follower appends again
only once the previous append is flushed), at most ``PRIME_TIMEOUT_S``. A partition whose
flushes averaged under 1 ms runs its next one on the node's event loop
(``replica.partition.INLINE_FLUSH_MAX_S``), so a first held fsync would stall the whole node
for the hold (seen: 30 s and 6 s, the node fenced); after a slower one its flushes go to the
node's fsync thread, and a held one stops only what waits for that thread."""
PRIME_POLL_S = 0.05
LAG_OUT_TIMEOUT_S = 20.0
"""How long a last-replica fault waits for a held-up follower to leave the ISR
(``replica.lag.time.max.ms``, 4 s in chaos runs, then the controller's commit)."""
ELECTION_TIMEOUT_S = 30.0
"""How long it waits, after killing the leader, for the controller to act on it
(``broker.session.timeout.ms``, then the partition offline or led by a follower)."""
PARTITION_POLL_S = 0.25
MAX_PARTITION_POLLS = 400
"""Bounds of each wait on a partition's metadata, beside its timeout."""
LAST_REPLICA_ENDS = ("dead", "empty", "torn")
"""What the leader of a last-replica fault comes back with (:attr:`LastInSync.then`)."""


Selector = Callable[[Target, FaultStep, tuple[str, int]], list[int]]
"""Picks a fault's nodes: ``(target, step, (topic, partition)) -> node ids``."""


def picked(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The nodes the seed picked for the step."""
    return list(step.nodes)


def leader(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The leader of the workload's first partition (the seed's node when it has none)."""
    found = target.leader_of(*tp)
    return [found if found is not None else step.nodes[0]]


def controller(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The active controller (the seed's node when none is known)."""
    found = target.controller()
    return [found if found is not None else step.nodes[0]]


def every(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """Every node."""
    return list(target.node_ids)


@dataclass(frozen=True, slots=True)
class Fault(ABC):
    """A kind of fault: which nodes it hits (``select``), how to inject it and to heal it.

    ``name`` and ``heal_name`` are the ``fault`` field of the history's ``fault`` ops.
    """

    name: ClassVar[str]
    heal_name: ClassVar[str]
    needs_in_sync: ClassVar[bool] = False
    """Inject only once every partition of the workload's topic has its whole ISR (bounded
    by :data:`chaos.nemesis.IN_SYNC_TIMEOUT_S`): a fault that takes away one replica's data
    must hit one replica, not the last one left in sync."""
    select: Selector

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        """The ``detail`` of the fault's history op."""
        return step.fault

    def for_partition(self, tp: tuple[str, int]) -> Fault:
        """This fault aimed at ``tp``, the partition the nemesis watches (a fault that does
        not aim at a partition is itself)."""
        return self

    @abstractmethod
    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        """Inject the fault into ``nodes``; returns what it did beyond its name, if anything
        (the ``detail`` of its completion in the history)."""

    @abstractmethod
    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        """Undo :meth:`inject`."""


@dataclass(frozen=True, slots=True)
class Kill(Fault):
    """``kill -9`` the nodes at once; healed by starting them again."""

    name: ClassVar[str] = "kill"
    heal_name: ClassVar[str] = "restart"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        errors = []
        for node in nodes:  # kill every one even when one fails
            try:
                target.kill(node)
            except Exception as exc:
                errors.append(f"node {node}: {exc}")
        if errors:
            raise TargetError("; ".join(errors))
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class Pause(Fault):
    """``SIGSTOP`` the nodes; healed by ``SIGCONT``."""

    name: ClassVar[str] = "pause"
    heal_name: ClassVar[str] = "resume"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.pause(node)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.resume(node)


@dataclass(frozen=True, slots=True)
class PowerLoss(Fault):
    """Every one of the nodes loses power at once: ``kill -9``, then every write and
    directory change not made durable by an fsync is dropped; healed by starting them."""

    name: ClassVar[str] = "power-loss"
    heal_name: ClassVar[str] = "restart"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        if target.disk is None:
            raise TargetError(f"the {target.name} target cannot lose power (no data on LazyFS)")
        try:
            Kill(self.select).inject(target, nodes)
        finally:
            dropped = target.disk.crash()  # whatever was killed loses what it had not synced
        return f"dropped {dropped}"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class TornTail(Fault):
    """``kill -9`` the nodes, then damage the tail of the active segment of every partition
    in their data directories (:func:`chaos.torn_tails.tear_tails`); healed by starting
    them, which must recover the logs and fetch again what was lost."""

    name: ClassVar[str] = "torn-tail"
    heal_name: ClassVar[str] = "restart"
    needs_in_sync: ClassVar[bool] = True

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        directories = {node: target.node_data_dir(node) for node in nodes}
        if any(directory is None for directory in directories.values()):
            raise TargetError(f"the {target.name} target cannot reach its nodes' data")
        Kill(self.select).inject(target, nodes)
        damaged = []
        for node, directory in sorted(directories.items()):
            assert directory is not None
            # Seeded by the node and the files' sizes: the same state tears the same way.
            sizes = sorted((p.name, p.stat().st_size) for p in directory.rglob("*.log"))
            rng = random.Random(f"{node}/{sizes}")
            damaged += [f"node {node}: {line}" for line in tear_tails(directory, rng)]
        return "; ".join(damaged) or "nothing to damage"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        target.start(nodes)


@dataclass(frozen=True, slots=True)
class SlowDisk(Fault):
    """Every fsync of the nodes takes ``delay_ms`` longer; healed by a normal disk again."""

    name: ClassVar[str] = "slow-disk"
    heal_name: ClassVar[str] = "fast-disk"
    delay_ms: float = 400.0

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.slow_disk(node, self.delay_ms)
        return f"fsync +{self.delay_ms:g} ms"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.slow_disk(node, 0.0)


@dataclass(frozen=True, slots=True)
class ClockJump(Fault):
    """The nodes' wall clocks jump ``offset_s`` seconds (their monotonic clocks do not);
    healed by setting them right again, a jump the other way."""

    name: ClassVar[str] = "clock-jump"
    heal_name: ClassVar[str] = "clock-reset"
    offset_s: int = 86400

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        for node in nodes:
            target.set_clock(node, self.offset_s)
        return f"wall clock {self.offset_s:+d} s"

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        for node in nodes:
            target.set_clock(node, 0)


def last_in_sync(target: Target, step: FaultStep, tp: tuple[str, int]) -> list[int]:
    """The leader of the workload's first partition, then its followers in replica order
    (the first is the one an unclean election picks when the leader is gone)."""
    state = target.partition_state(*tp)
    if state is None or state.leader is None:
        raise TargetError(f"{tp[0]}-{tp[1]} has no leader to aim at ({state})")
    return [state.leader, *(r for r in state.replicas if r != state.leader)]


def _wait_for_partition(
    target: Target,
    tp: tuple[str, int],
    what: str,
    done: Callable[[PartitionState], bool],
    timeout_s: float,
) -> tuple[PartitionState, float]:
    """Poll ``tp``'s metadata until ``done`` holds (at most ``timeout_s``, and at most
    :data:`MAX_PARTITION_POLLS` lookups); the state seen and the seconds it took.
    :class:`TargetError` naming ``what`` and the last state seen otherwise."""
    start = time.monotonic()
    last: PartitionState | None = None
    for _ in range(MAX_PARTITION_POLLS):
        state = target.partition_state(*tp)
        waited = time.monotonic() - start
        if state is not None:
            if done(state):
                return state, waited
            last = state
        if waited > timeout_s:
            break
        time.sleep(PARTITION_POLL_S)
    raise TargetError(f"{what}: not seen within {timeout_s:g} s (last seen: {last})")


def _partition_dir(target: Target, node: int, directory: str) -> Path | None:
    data_dir = target.node_data_dir(node)
    return None if data_dir is None else data_dir / directory


def _log_bytes(directory: Path) -> int:
    """The size of a partition directory's segments (0 when it cannot be read)."""
    try:
        return sum(path.stat().st_size for path in directory.glob("*.log"))
    except OSError:
        return 0


def _wait_appends(
    directories: Mapping[int, Path | None], appends: int, timeout_s: float
) -> list[int]:
    """Wait until each node's partition directory has grown ``appends`` times (at most
    ``timeout_s``); the nodes not seen to, or whose directory this process cannot reach."""
    unseen = sorted(node for node, directory in directories.items() if directory is None)
    watched = {node: d for node, d in directories.items() if d is not None}
    sizes = {node: _log_bytes(directory) for node, directory in watched.items()}
    grown = dict.fromkeys(watched, 0)
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / PRIME_POLL_S) + 1):
        if all(count >= appends for count in grown.values()) or time.monotonic() > deadline:
            break
        time.sleep(PRIME_POLL_S)
        for node, directory in watched.items():
            size = _log_bytes(directory)
            if size != sizes[node]:
                sizes[node] = size
                grown[node] += 1
    return sorted([*unseen, *(node for node, count in grown.items() if count < appends)])


@dataclass(frozen=True, slots=True)
class LastInSync(Fault):
    """Damage that reaches the last in-sync replica: the ISR of the watched partition
    shrinks to its leader, then the leader dies while both followers live on, lagging.

    The nodes are ``[leader, first, second]`` (:func:`last_in_sync`: the followers in replica
    order, so that ``first`` is the one an unclean election picks). Each step waits on the
    ISR the metadata shows, bounded:

    0. both followers' fsyncs of the partition are slowed a little until each has appended
       a few times (:data:`FSYNC_PRIME_MS`: then a held fsync stalls no event loop);
    1. ``first``'s fsyncs of the partition are held up (the data on LazyFS) until the leader
       drops it from the ISR (``replica.lag.time.max.ms``); for ``hold_s`` writes are
       acknowledged by the leader and ``second`` only;
    2. the same for ``second``, until the ISR is the leader alone; for ``hold_s`` writes are
       acknowledged by the leader alone if ``min.insync.replicas`` is 1, refused if 2;
    3. the leader is killed; with ``then="empty"`` its directory of the partition is emptied,
       with ``then="torn"`` the tail of its active segment there is torn back to the log
       end of ``first`` (:func:`chaos.torn_tails.tear_tail` with a reach), so that it comes
       back without the records acknowledged after ``first`` left (which ``second`` holds
       with ``min.insync.replicas=2``); the followers' fsyncs are let go (alive, lagging,
       nothing to fetch from);
    4. the fault waits until the controller has acted on the leader's death: the partition
       offline (no leader: unclean election off) or led by a follower (unclean election).

    Both followers stay registered, unfenced controller voters all along (a held fsync of
    one partition does not stop a node), so the controller quorum lives through it, which
    pausing or isolating them on three combined nodes would not allow. The held fsyncs
    share each node's one fsync thread, so every partition the followers hold lags with
    partition 0 meanwhile. Healed by letting every fsync go and starting the leader.
    """

    name: ClassVar[str] = "last-replica"
    heal_name: ClassVar[str] = "restart"
    needs_in_sync: ClassVar[bool] = True
    then: str = "dead"
    """What the leader comes back with: ``dead`` (its data), ``empty``, ``torn``."""
    hold_s: float = 2.0
    """How long the load runs with the ISR at two, then at one."""
    tp: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.then not in LAST_REPLICA_ENDS:
            raise ValueError(f"then must be one of {LAST_REPLICA_ENDS}, not {self.then!r}")

    def for_partition(self, tp: tuple[str, int]) -> Fault:
        return replace(self, tp=tp)

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        topic, partition = self._tp()
        return f"{step.fault} {topic}-{partition} nodes {list(nodes)}"

    def _tp(self) -> tuple[str, int]:
        if self.tp is None:
            raise TargetError("last-replica faults aim at a partition (Fault.for_partition)")
        return self.tp

    def _directory(self) -> str:
        topic, partition = self._tp()
        return f"{topic}-{partition}"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        tp = self._tp()
        if len(nodes) != 3:
            raise TargetError(f"needs a leader and two followers, got nodes {list(nodes)}")
        leader, first, second = nodes
        state = target.partition_state(*tp)
        if state is None or state.leader != leader or set(state.isr) != {leader, first, second}:
            raise TargetError(f"needs leader {leader} and a whole ISR, found {state}")
        data_dir: Path | None = None
        if self.then != "dead":
            data_dir = target.node_data_dir(leader)
            if data_dir is None:
                raise TargetError(f"the {target.name} target cannot reach its nodes' data")
        directory = self._directory()
        done: list[str] = []
        followers = (first, second)
        for follower in followers:
            target.slow_disk(follower, FSYNC_PRIME_MS, under=directory)
        unprimed = _wait_appends(
            {f: _partition_dir(target, f, directory) for f in followers},
            PRIME_APPENDS,
            PRIME_TIMEOUT_S,
        )
        if unprimed:  # the fault goes on: a held fsync may then stall that node's loop
            log.warning("last-replica followers not seen appending nodes=%s", unprimed)
            done.append(f"no appends seen on {unprimed} while primed")
        self._hold_fsyncs(target, first)
        _, waited = _wait_for_partition(
            target, tp, f"{first} out of the ISR", lambda s: first not in s.isr, LAG_OUT_TIMEOUT_S
        )
        log.info("last-replica follower out node=%d waited_s=%.1f", first, waited)
        done.append(f"{first} out of the ISR after {waited:.1f} s")
        time.sleep(self.hold_s)
        self._hold_fsyncs(target, second)
        _, waited = _wait_for_partition(
            target, tp, f"ISR [{leader}]", lambda s: s.isr == (leader,), LAG_OUT_TIMEOUT_S
        )
        log.info("last-replica follower out node=%d waited_s=%.1f", second, waited)
        done.append(f"{second} out after {waited:.1f} s")
        time.sleep(self.hold_s)
        Kill(self.select).inject(target, [leader])
        log.info("last-replica leader killed node=%d directory=%s", leader, directory)
        done.append(f"ISR [{leader}] for {self.hold_s:g} s, {leader} killed")
        if data_dir is not None:
            done.append(
                self._damage(leader, data_dir / directory, _partition_dir(target, first, directory))
            )
        for follower in followers:
            target.slow_disk(follower, 0.0, under=directory)
        log.info("last-replica fsyncs let go nodes=%s directory=%s", list(followers), directory)
        after, waited = _wait_for_partition(
            target, tp, f"{leader} replaced", lambda s: s.leader != leader, ELECTION_TIMEOUT_S
        )
        if after.leader is None:
            done.append(f"after {waited:.1f} s no leader: {directory} offline")
        else:
            done.append(f"after {waited:.1f} s {after}: unclean election")
        return "; ".join(done)

    def _hold_fsyncs(self, target: Target, node: int) -> None:
        directory = self._directory()
        target.slow_disk(node, FSYNC_HOLD_MS, under=directory)
        log.info("last-replica fsyncs held node=%d directory=%s", node, directory)

    def _damage(self, node: int, partition_dir: Path, follower_dir: Path | None) -> str:
        """Empty ``partition_dir`` or tear its tail back to the log end of the follower
        whose log is in ``follower_dir`` (the first to leave the ISR: every record
        acknowledged after it left is beyond its end), so that records the dead leader had
        acknowledged are gone from it, and only those."""
        if self.then == "empty":
            return f"node {node}: {empty_partition(partition_dir)}"
        reach = 0
        if follower_dir is not None:  # replicas hold the same batches, byte for byte
            reach = max(0, _log_bytes(partition_dir) - _log_bytes(follower_dir))
        # Seeded by the node and the files' sizes: the same state tears the same way.
        sizes = sorted((p.name, p.stat().st_size) for p in partition_dir.glob("*.log"))
        torn = tear_tail(partition_dir, random.Random(f"{node}/{sizes}"), reach)
        return (
            f"node {node}: {torn or 'nothing to tear'} (the follower's log ends {reach} B before)"
        )

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        errors = []
        for follower in nodes[1:]:  # every fsync goes again, even when one of them fails
            try:
                target.slow_disk(follower, 0.0, under=self._directory())
            except Exception as exc:
                errors.append(f"node {follower}: {exc}")
        target.start(nodes)
        if errors:
            raise TargetError("; ".join(errors))


@dataclass(frozen=True, slots=True)
class Isolate(Fault):
    """Cut each node off every other node; clients still reach it (where the target can)."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        network = cut_network(target)
        if len(nodes) == 1:
            network.isolate(nodes[0], cut_clients=False)
        else:
            network.partition([[n] for n in target.node_ids], cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        cut_network(target).heal()


@dataclass(frozen=True, slots=True)
class Split(Fault):
    """Split ``nodes`` (a minority) from the other nodes; clients still reach both sides."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {self._groups(target, nodes)}"

    @staticmethod
    def _groups(target: Target, nodes: Sequence[int]) -> list[list[int]]:
        return [sorted(nodes), [n for n in target.node_ids if n not in nodes]]

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        cut_network(target).partition(self._groups(target, nodes), cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        cut_network(target).heal()


@dataclass(frozen=True, slots=True)
class Bridge(Fault):
    """Each node is the bridge: it reaches every other node, which do not reach each other
    (Jepsen's bridge: two overlapping majorities); clients still reach every node."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {self._groups(target, nodes)}"

    @staticmethod
    def _groups(target: Target, nodes: Sequence[int]) -> list[list[int]]:
        others = [n for n in target.node_ids if n not in nodes]
        return [sorted({*nodes, other}) for other in others]

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        cut_network(target).partition(self._groups(target, nodes), cut_clients=False)
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        cut_network(target).heal()


@dataclass(frozen=True, slots=True)
class OneWay(Fault):
    """Packets from each node to every other node are dropped; the reverse direction and
    the clients pass (a node that hears its peers but cannot answer them)."""

    name: ClassVar[str] = "partition"
    heal_name: ClassVar[str] = "heal"

    def describe(self, step: FaultStep, nodes: Sequence[int], target: Target) -> str:
        return f"{step.fault} {sorted(nodes)} -/-> others"

    def inject(self, target: Target, nodes: Sequence[int]) -> str | None:
        network = cut_network(target)
        (node,) = nodes
        network.one_way(node, [n for n in target.node_ids if n != node])
        return None

    def heal(self, target: Target, nodes: Sequence[int]) -> None:
        cut_network(target).heal()


FAULTS: dict[str, Fault] = {
    "kill-random": Kill(picked),
    "kill-leader": Kill(leader),
    "kill-controller": Kill(controller),
    "kill-minority": Kill(picked),
    "kill-all": Kill(every),
    "pause-random": Pause(picked),
    "pause-leader": Pause(leader),
    "partition-leader": Isolate(leader),
    "partition-halves": Split(picked),
    "partition-bridge": Bridge(picked),
    "partition-one-way": OneWay(leader),
    "power-loss": PowerLoss(every),
    "torn-tail": TornTail(picked),
    "slow-disk": SlowDisk(picked),
    "clock-forward": ClockJump(picked, offset_s=86400),
    "clock-back": ClockJump(picked, offset_s=-86400),
    "last-replica": LastInSync(last_in_sync),
    "last-replica-empty": LastInSync(last_in_sync, then="empty"),
    "last-replica-torn": LastInSync(last_in_sync, then="torn"),
}
"""Every fault a schedule step may name (:attr:`chaos.scenarios.FaultStep.fault`)."""

assert set(NETWORK_FAULTS) | set(DISK_FAULTS) <= set(FAULTS)
assert {fault.heal_name for fault in FAULTS.values()} <= HEALING_FAULTS, "recovery is measured"
