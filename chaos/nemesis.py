"""Faults, their schedule from a seed, and the local cluster they are injected into.

A scenario (:data:`SCENARIOS`) is a kind of fault; :func:`schedule` turns it and a seed into
a list of :class:`FaultStep` (when, which fault, which node, how long it lasts), so one seed
replays the same schedule. :class:`LocalTarget` performs the faults on a
:class:`~cluster.launcher.LocalCluster` (node processes on 127.0.0.1): ``kill -9`` and
``SIGSTOP``/``SIGCONT``, and network partitions when the nodes run in network namespaces
(:class:`chaos.network.NetnsNetwork`: isolate the leader, split a minority from a majority;
clients keep reaching every node), choosing "the leader of partition 0" or "the active
controller" when the step is performed. Each fault and its healing are recorded in the
history as ``fault`` ops, so the checker can measure recovery.
"""

from __future__ import annotations

import logging
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass

from chaos.history import HistoryWriter
from chaos.network import NetnsNetwork
from cluster.client import AdminClient
from cluster.errors import LograftError
from cluster.launcher import LocalCluster

__all__ = ["NETWORK_SCENARIOS", "SCENARIOS", "FaultStep", "LocalTarget", "schedule"]

log = logging.getLogger(__name__)

SCENARIOS: dict[str, str] = {
    "kill-random": "kill -9 a random node, restart it after a while",
    "kill-leader": "kill -9 the leader of partition 0, restart it after a while",
    "kill-controller": "kill -9 the active controller, restart it after a while",
    "kill-minority": "kill -9 a minority (one node of three) at a time, a new one each round",
    "kill-all": "kill -9 every node at once, restart them all",
    "pause-random": "SIGSTOP a random node, SIGCONT it after a while",
    "pause-leader": "SIGSTOP the leader of partition 0, SIGCONT it after a while",
    "partition-leader": "cut the leader of partition 0 off the other nodes (network "
    "namespaces; clients still reach it), heal after a while",
    "partition-halves": "split the nodes into a random minority and majority, heal after a while",
    "mixed": "a random mix of the faults above",
}
"""Every scenario, with one line saying what it does."""

_SINGLE = ("kill-random", "kill-leader", "kill-controller", "pause-random", "pause-leader")
NETWORK_SCENARIOS = frozenset({"partition-leader", "partition-halves"})
"""Scenarios that need each node in a network namespace of its own (chaos.network)."""


@dataclass(frozen=True, slots=True)
class FaultStep:
    """One fault: start ``at_s`` seconds into the run, last ``hold_s``, then heal."""

    at_s: float
    fault: str
    node_choice: int
    """A number the target maps to a node (random nodes); 0 when the fault picks its own."""
    hold_s: float


def schedule(scenario: str, seed: int, duration_s: float, nodes: int = 3) -> list[FaultStep]:
    """The faults of ``scenario`` for a run of ``duration_s``; the same for the same seed.

    Faults start after a quiet first 10 % of the run and end before its last 20 %, so the
    run sees the cluster before, during and after faults.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    rng = random.Random(f"{scenario}/{seed}")
    steps: list[FaultStep] = []
    at = duration_s * 0.1
    end = duration_s * 0.8
    while True:
        hold = rng.uniform(2.0, 5.0)
        if at + hold > end:
            break
        fault = rng.choice((*_SINGLE, "kill-all")) if scenario == "mixed" else scenario
        if fault == "kill-minority":
            fault = "kill-random"
        steps.append(FaultStep(round(at, 2), fault, rng.randrange(1, nodes + 1), round(hold, 2)))
        at += hold + rng.uniform(2.0, 5.0)
    return steps


class LocalTarget:
    """Faults on a local cluster of node processes."""

    def __init__(
        self,
        cluster: LocalCluster,
        history: HistoryWriter,
        bootstrap: str,
        topic: str,
        network: NetnsNetwork | None = None,
    ) -> None:
        self.cluster = cluster
        self._network = network
        self._history = history
        self._bootstrap = bootstrap
        self._topic = topic

    @property
    def node_ids(self) -> list[int]:
        """Every node of the cluster."""
        return [n.node_id for n in self.cluster.nodes]

    def _leader(self, fallback: int) -> int:
        try:
            with AdminClient(
                {"bootstrap.servers": self._bootstrap, "default.api.timeout.ms": 5000}
            ) as admin:
                (description,) = admin.describe_topics([self._topic])
                leader = description.partitions[0].leader
                return leader if leader >= 0 else fallback
        except LograftError as exc:
            log.info("leader lookup failed error=%s; using node %d", exc, fallback)
            return fallback

    def _controller(self, fallback: int) -> int:
        controller = self.cluster.status().controller_id
        return controller if controller is not None and controller >= 0 else fallback

    def _node_for(self, step: FaultStep) -> int:
        if step.fault.endswith("-leader"):
            return self._leader(step.node_choice)
        if step.fault.endswith("-controller"):
            return self._controller(step.node_choice)
        return step.node_choice

    def inject(self, step: FaultStep) -> Callable[[], None]:
        """Perform ``step``'s fault now; returns the action that heals it."""
        if step.fault == "kill-all":
            targets = self.node_ids
            self._fault("kill", targets, step.fault, lambda: self._kill_all(targets))
            return lambda: self._fault(
                "restart", targets, step.fault, lambda: self.cluster.up(wait=True)
            )
        node = self._node_for(step)
        if step.fault.startswith("partition"):
            return self._partition(step, node)
        if step.fault.startswith("pause"):
            self._fault(
                "pause", [node], step.fault, lambda: self.cluster.kill(node, signal.SIGSTOP)
            )
            return lambda: self._fault(
                "resume", [node], step.fault, lambda: self.cluster.kill(node, signal.SIGCONT)
            )
        self._fault("kill", [node], step.fault, lambda: self.cluster.kill(node, signal.SIGKILL))
        return lambda: self._fault(
            "restart", [node], step.fault, lambda: self.cluster.restart(node, wait=True)
        )

    def _partition(self, step: FaultStep, node: int) -> Callable[[], None]:
        network = self._network
        if network is None:
            raise ValueError(f"{step.fault} needs the cluster in network namespaces")
        if step.fault == "partition-leader":
            self._fault("partition", [node], step.fault, lambda: network.isolate(node, False))
        else:
            others = [n for n in self.node_ids if n != node]
            groups = [[node], others]
            self._fault(
                "partition", [node], f"{step.fault} {groups}", lambda: network.partition(groups)
            )
        return lambda: self._fault("heal", [node], step.fault, network.heal)

    def _kill_all(self, targets: list[int]) -> None:
        for node in targets:
            self.cluster.kill(node, signal.SIGKILL)

    def _fault(
        self, name: str, targets: list[int], detail: str, action: Callable[[], object]
    ) -> None:
        invoked = self._history.invoke(
            "nemesis", "fault", fault=name, targets=targets, detail=detail
        )
        try:
            action()
        except Exception as exc:  # a fault that could not be done is recorded, not raised
            log.warning("fault failed fault=%s targets=%s error=%s", name, targets, exc)
            self._history.complete(invoked, "fail", error=str(exc))
            return
        self._history.complete(invoked, "ok", fault=name, targets=targets)

    def heal_everything(self) -> None:
        """Heal the network, SIGCONT every node and start the ones that are not running (the
        end of a run)."""
        if self._network is not None:
            self._network.heal()
        for node in self.node_ids:
            try:
                self.cluster.kill(node, signal.SIGCONT)
            except Exception as exc:  # not running: started below
                log.debug("sigcont skipped node=%d error=%s", node, exc)
        self._fault("heal", self.node_ids, "end of run", lambda: self.cluster.up(wait=True))
