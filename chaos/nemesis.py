"""The nemesis: performs a chaos schedule's steps on a target and records them.

:class:`Nemesis` injects each step's fault (:data:`chaos.faults.FAULTS`) into a
:class:`chaos.targets.Target` and, after the step's hold, heals it, recording each
injection and healing in the history as a ``fault`` op (invoke, then ok or fail), so the
checker can measure recovery from each heal. A fault that cannot be done is recorded as
``fail``, not raised. :meth:`Nemesis.heal_everything` ends a run's faults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chaos.faults import FAULTS, Fault
from chaos.history import HistoryWriter
from chaos.scenarios import FaultStep
from chaos.targets import Target

__all__ = ["END_OF_FAULTS", "IN_SYNC_TIMEOUT_S", "Injected", "Nemesis"]

log = logging.getLogger(__name__)

END_OF_FAULTS = "end of faults"
"""The ``detail`` of the heal that ends a run's faults (:meth:`Nemesis.heal_everything`)."""
IN_SYNC_TIMEOUT_S = 60.0
"""How long a fault that needs whole ISRs waits for them before it goes ahead anyway."""


@dataclass(frozen=True, slots=True)
class Injected:
    """A step as it was injected: its fault, the nodes it hit, whether injecting worked."""

    step: FaultStep
    fault: Fault
    nodes: tuple[int, ...]
    ok: bool


class Nemesis:
    """Performs schedule steps on ``target`` and records them in ``history``.

    ``tp`` is the partition whose leader the ``*-leader`` faults aim at.
    """

    process = "nemesis"

    def __init__(self, target: Target, history: HistoryWriter, tp: tuple[str, int]) -> None:
        self._target = target
        self._history = history
        self._tp = tp
        self.injected = 0
        """Faults injected successfully so far."""

    def inject(self, step: FaultStep) -> Injected:
        """Inject ``step``'s fault now (recorded; a failure is recorded, not raised)."""
        fault = FAULTS[step.fault].for_partition(self._tp)
        if fault.needs_in_sync:
            try:
                short = self._target.wait_in_sync(self._tp[0], IN_SYNC_TIMEOUT_S)
            except Exception as exc:  # the fault goes ahead; the history shows its detail
                short = [f"lookup failed: {exc}"]
            if short:
                log.warning(
                    "fault injected without whole ISRs fault=%s short=%s", step.fault, short
                )
        try:
            nodes = tuple(fault.select(self._target, step, self._tp))
        except Exception as exc:  # a lookup that broke: the seed's nodes stand in
            log.warning("fault target lookup failed fault=%s error=%s", step.fault, exc)
            nodes = step.nodes
        ok = self._record(
            fault.name,
            nodes,
            fault.describe(step, nodes, self._target),
            lambda: fault.inject(self._target, nodes),
        )
        self.injected += ok
        return Injected(step, fault, nodes, ok)

    def heal(self, injected: Injected) -> bool:
        """Heal what ``injected`` did (also after a failed or partial injection)."""
        fault = injected.fault
        return self._record(
            fault.heal_name,
            injected.nodes,
            injected.step.fault,
            lambda: fault.heal(self._target, injected.nodes),
        )

    def heal_everything(self) -> bool:
        """The end of the faults: heal the network, resume and start every node."""
        target = self._target

        def heal() -> str | None:
            if target.network is not None:
                target.network.heal()
            for node in target.node_ids:
                try:
                    target.resume(node)
                except Exception as exc:  # not running: started next
                    log.debug("resume skipped node=%d error=%s", node, exc)
            target.start(target.node_ids)
            return None

        return self._record("heal", tuple(target.node_ids), END_OF_FAULTS, heal)

    def _record(
        self,
        name: str,
        nodes: Sequence[int],
        detail: str,
        action: Callable[[], str | None],
    ) -> bool:
        invoked = self._history.invoke(
            self.process, "fault", fault=name, targets=list(nodes), detail=detail
        )
        try:
            done = action()
        except Exception as exc:  # a fault that could not be done is recorded, not raised
            log.warning("fault failed fault=%s nodes=%s error=%s", name, list(nodes), exc)
            self._history.complete(invoked, "fail", fault=name, error=str(exc)[:500])
            return False
        log.info("fault done fault=%s nodes=%s detail=%s %s", name, list(nodes), detail, done)
        self._history.complete(
            invoked,
            "ok",
            fault=name,
            targets=list(nodes),
            detail=detail if done is None else f"{detail}: {done}",
        )
        return True
