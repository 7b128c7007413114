"""Named chaos scenarios and their schedules, generated from a seed.

A :class:`Scenario` names the faults it draws from (keys of :data:`chaos.faults.FAULTS`);
:func:`schedule` turns a scenario, a seed and a run duration into a list of
:class:`FaultStep`: when each fault starts, how long it holds before it heals, and which
nodes it picks when it picks at random. Everything random comes from one
``random.Random`` seeded with the scenario's name and the seed, so one seed replays the same
schedule. Faults that aim at a role (the leader of a partition, the active controller) find
their node when they are injected; the step's nodes are then the fallback when the role has
no holder.

Faults start after a quiet first 10 % of the run and heal before its last 20 %, so every run
sees the cluster before, during and after faults; one fault holds at a time. A scenario's
faults hold seconds, except ``long-faults``'s, which hold minutes (a run of it needs about
four minutes for the first fault, :attr:`Scenario.min_duration_s`). A fault that
stages a sequence (the last-replica faults: 10-20 s of waiting on the ISR before the hold)
takes longer than its hold; its scenario's gap leaves room for that.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "CLOCK_FAULTS",
    "DISK_FAULTS",
    "LAST_REPLICA_FAULTS",
    "LOCAL_ONLY_FAULTS",
    "NETWORK_FAULTS",
    "PROCESS_FAULTS",
    "SCENARIOS",
    "FaultStep",
    "Scenario",
    "scenario",
    "schedule",
]

PROCESS_FAULTS = (
    "kill-random",
    "kill-leader",
    "kill-controller",
    "kill-minority",
    "kill-all",
    "pause-random",
    "pause-leader",
)
"""Faults on node processes (``kill -9``, ``SIGSTOP``/``SIGCONT``): every target has them."""

NETWORK_FAULTS = (
    "partition-leader",
    "partition-halves",
    "partition-bridge",
    "partition-one-way",
)
"""Faults on the network between nodes: the local target with namespaces, compose."""

LAST_REPLICA_FAULTS = ("last-replica", "last-replica-empty", "last-replica-torn")
"""The ISR of partition 0 shrinks to its leader (the followers' fsyncs held up on LazyFS),
then the leader dies: stays dead a while, or comes back with the partition's directory
emptied or its tail torn (chaos.faults.LastInSync)."""

DISK_FAULTS = ("power-loss", "slow-disk", *LAST_REPLICA_FAULTS)
"""Faults on the nodes' storage: the local target with data on LazyFS (chaos.lazyfs)."""

CLOCK_FAULTS = ("clock-forward", "clock-back")
"""Wall-clock jumps of a node: the local target with libfaketime (chaos.clock)."""

LOCAL_ONLY_FAULTS = (
    "partition-bridge",
    "partition-one-way",
    "torn-tail",
    *(fault for fault in DISK_FAULTS if fault != "power-loss"),
    *CLOCK_FAULTS,
)
"""Faults the compose target cannot inject (it disconnects whole container networks, does
not reach into the nodes' files, preloads nothing). A power loss it can: its nodes' data
then lives on a LazyFS mount of the host, bind-mounted into the containers."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named kind of chaos: the faults its schedule draws from."""

    name: str
    description: str
    faults: tuple[str, ...]
    hold_s: tuple[float, float] = (2.0, 5.0)
    """How long each fault holds before it heals, drawn uniformly from this range."""
    gap_s: tuple[float, float] = (2.0, 5.0)
    """Quiet time between a heal and the next fault, drawn uniformly from this range."""

    @property
    def min_duration_s(self) -> float:
        """The shortest run with room for a fault of the longest hold (faults start after
        the first 10 % of the run and heal before its last 20 %)."""
        return self.hold_s[1] / 0.7

    @property
    def needs_network(self) -> bool:
        """Whether a fault of this scenario cuts the network (needs namespaces locally)."""
        return any(fault in NETWORK_FAULTS for fault in self.faults)

    @property
    def needs_disk(self) -> bool:
        """Whether a fault of this scenario loses unsynced writes (needs LazyFS)."""
        return any(fault in DISK_FAULTS for fault in self.faults)

    @property
    def needs_clocks(self) -> bool:
        """Whether a fault of this scenario moves a node's wall clock (needs libfaketime)."""
        return any(fault in CLOCK_FAULTS for fault in self.faults)

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets that can run this scenario."""
        if any(fault in LOCAL_ONLY_FAULTS for fault in self.faults):
            return ("local",)
        return ("local", "compose")


@dataclass(frozen=True, slots=True)
class FaultStep:
    """One fault of a schedule: start ``at_s`` into the run, hold ``hold_s``, then heal.

    ``nodes``: the nodes the seed picked: the targets of a fault on random nodes, the
    minority of a split, the fallback of a fault aimed at a role.
    """

    at_s: float
    fault: str
    nodes: tuple[int, ...]
    hold_s: float


_SCENARIOS = (
    Scenario("kill-random", "kill -9 a random node, restart it after a while", ("kill-random",)),
    Scenario(
        "kill-leader",
        "kill -9 the leader of partition 0, restart it after a while",
        ("kill-leader",),
    ),
    Scenario(
        "kill-controller",
        "kill -9 the active controller, restart it after a while",
        ("kill-controller",),
    ),
    Scenario(
        "kill-minority",
        "kill -9 a random minority of the nodes at once, restart them after a while",
        ("kill-minority",),
    ),
    Scenario("kill-all", "kill -9 every node at once, restart them all", ("kill-all",)),
    Scenario(
        "torn-tail",
        "once every ISR is whole, kill -9 a random node, damage the tail of every "
        "partition's active segment on it (cut, garbage or zeros), restart it",
        ("torn-tail",),
    ),
    Scenario("pause-random", "SIGSTOP a random node, SIGCONT it after a while", ("pause-random",)),
    Scenario(
        "pause-leader",
        "SIGSTOP the leader of partition 0, SIGCONT it after a while",
        ("pause-leader",),
    ),
    Scenario(
        "partition-leader",
        "cut the leader of partition 0 off the other nodes (clients still reach it), "
        "heal after a while",
        ("partition-leader",),
    ),
    Scenario(
        "partition-halves",
        "split the nodes into a random minority and majority, heal after a while",
        ("partition-halves",),
    ),
    Scenario(
        "partition-bridge",
        "a random node keeps both others, which lose each other (a bridge), heal after a while",
        ("partition-bridge",),
    ),
    Scenario(
        "partition-one-way",
        "packets from the leader of partition 0 to the other nodes are dropped, the reverse "
        "passes, heal after a while",
        ("partition-one-way",),
        hold_s=(4.0, 8.0),
    ),
    Scenario(
        "power-loss",
        "every node loses power at once: kill -9 all, drop every write not fsynced "
        "(data on LazyFS), restart them all",
        ("power-loss",),
    ),
    Scenario(
        "slow-disk",
        "every fsync of a random node takes 400 ms longer (data on LazyFS), normal after a while",
        ("slow-disk",),
        hold_s=(4.0, 8.0),
    ),
    Scenario(
        "clock-jump",
        "the wall clock of a random node jumps a day ahead or back (the monotonic clock "
        "does not), set right after a while",
        CLOCK_FAULTS,
        hold_s=(4.0, 8.0),
    ),
    Scenario("mixed", "a random mix of the process faults above (kill, pause)", PROCESS_FAULTS),
    Scenario(
        "mixed-network",
        "a random mix of the process faults and the partitions every target can cut "
        "(isolate a leader, split)",
        (*PROCESS_FAULTS, "partition-leader", "partition-halves"),
    ),
    Scenario(
        "mixed-all",
        "a random mix of every fault above but power loss: process, network, torn tails, "
        "slow disk, clock jumps",
        (*PROCESS_FAULTS, *NETWORK_FAULTS, "torn-tail", "slow-disk", *CLOCK_FAULTS),
    ),
    Scenario(
        "last-replica",
        "the ISR of partition 0 shrinks to its leader (each follower's fsyncs of it held up "
        "until it leaves the ISR; data on LazyFS), then the leader is killed while both "
        "followers live on, lagging; it restarts after a while",
        ("last-replica",),
        hold_s=(6.0, 8.0),
        gap_s=(25.0, 30.0),
    ),
    Scenario(
        "last-replica-empty",
        "as last-replica, and the dead leader's directory of partition 0 is emptied before "
        "it restarts (it comes back without the records it alone had in sync)",
        ("last-replica-empty",),
        hold_s=(6.0, 8.0),
        gap_s=(40.0, 45.0),
    ),
    Scenario(
        "last-replica-torn",
        "as last-replica, and the tail of the dead leader's active segment of partition 0 is "
        "torn (cut, garbage or zeros) before it restarts",
        ("last-replica-torn",),
        hold_s=(6.0, 8.0),
        gap_s=(40.0, 45.0),
    ),
    Scenario(
        "long-faults",
        "faults that last minutes: a leader, a random node or every node killed, the leader "
        "paused or cut off, the nodes split, for 60-150 s each",
        (
            "kill-leader",
            "kill-random",
            "kill-all",
            "pause-leader",
            "partition-leader",
            "partition-halves",
        ),
        hold_s=(60.0, 150.0),
        gap_s=(10.0, 20.0),
    ),
)

SCENARIOS: dict[str, str] = {s.name: s.description for s in _SCENARIOS}
"""Every scenario's name, with one line saying what it does (``python -m chaos list``)."""

_BY_NAME = {s.name: s for s in _SCENARIOS}


def scenario(name: str) -> Scenario:
    """The scenario called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def _pick(rng: random.Random, fault: str, nodes: int) -> tuple[int, ...]:
    if fault in ("kill-all", "power-loss", *LAST_REPLICA_FAULTS):
        return tuple(range(1, nodes + 1))
    if fault in ("kill-minority", "partition-halves"):
        size = rng.randint(1, max(1, (nodes - 1) // 2))
        return tuple(sorted(rng.sample(range(1, nodes + 1), size)))
    return (rng.randrange(1, nodes + 1),)


def schedule(name: str, seed: int, duration_s: float, nodes: int = 3) -> list[FaultStep]:
    """The faults of scenario ``name`` for a run of ``duration_s`` seconds on ``nodes``
    nodes (ids 1..nodes); the same list for the same arguments."""
    chosen = scenario(name)
    rng = random.Random(f"{name}/{seed}")
    steps: list[FaultStep] = []
    at = duration_s * 0.1
    end = duration_s * 0.8
    while True:
        hold = rng.uniform(*chosen.hold_s)
        if at + hold > end:
            return steps
        fault = rng.choice(chosen.faults)
        steps.append(FaultStep(round(at, 2), fault, _pick(rng, fault, nodes), round(hold, 2)))
        at += hold + rng.uniform(*chosen.gap_s)
