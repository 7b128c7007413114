"""What a chaos run's history shows: anomalies, each with the operations that show it.

Pure and deterministic: :func:`check` reads the ops of a :mod:`chaos.history` and the final
state collected after healing (:class:`FinalState`: the drain of every partition from its
earliest offset, optionally each replica's records below the high watermark) and reports
every anomaly of these kinds (:data:`KINDS`), as Jepsen's Kafka checker does:

- ``lost-write``: a send acknowledged (``ok``) whose value the drain lacks;
- ``duplicate``: a value at two offsets of the drain;
- ``offset-mismatch``: an acknowledged send whose value the drain has elsewhere than the
  partition and offset of its acknowledgement;
- ``offset-conflict``: one offset of a partition seen with two values (acks, polls, drain);
- ``failed-write-read``: a value whose send definitely failed (``fail``), read anyway;
- ``dirty-read``: a value a consumer polled that the drain lacks (it was read, then lost);
- ``producer-order``: an idempotent producer's acknowledged values in one partition whose
  drain offsets are not in the order they were sent;
- ``non-monotonic-poll``: a consumer's polls of one partition went back (or repeated an
  offset) with no ``rebalance`` or ``seek`` of that consumer in between;
- ``commit-regression``: a group's acknowledged commits of one partition went backwards;
- ``replica-divergence``: two replicas hold different values at one offset below the high
  watermark after healing;
- ``under-replicated-after-heal``: a partition whose ISR stayed short after healing.

A send that ended ``info`` (unknown outcome) may or may not be in the drain: neither is an
anomaly. Recovery time: for each healing fault, from its completion to the completion of the
first acknowledged ``acks=all`` send invoked after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from chaos.history import Op

__all__ = [
    "HEALING_FAULTS",
    "KINDS",
    "Anomaly",
    "CheckResult",
    "FinalState",
    "Position",
    "check",
]

KINDS = (
    "lost-write",
    "duplicate",
    "offset-mismatch",
    "offset-conflict",
    "failed-write-read",
    "dirty-read",
    "producer-order",
    "non-monotonic-poll",
    "commit-regression",
    "replica-divergence",
    "under-replicated-after-heal",
)
"""Every anomaly kind the checker reports, in report order."""

HEALING_FAULTS = frozenset({"heal", "restart", "resume", "restart-all", "recover"})
"""``fault`` names that end a fault; recovery time is measured from each."""

Position = tuple[str, int]
"""A partition: (topic, partition)."""


@dataclass(frozen=True, slots=True)
class FinalState:
    """What was collected after the faults healed.

    ``drained``: each partition's records from its earliest offset to its end, as
    ``(offset, value)`` in offset order; when empty, the history's ``drain`` ops are used.
    ``replica_logs``: per partition, per node id, the ``(offset, value)`` records below the
    high watermark. ``under_replicated_after_heal``: partitions (``"topic-partition"``) whose
    ISR was still short once the cluster had had time to recover.
    """

    drained: Mapping[Position, Sequence[tuple[int, str | None]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    replica_logs: Mapping[Position, Mapping[int, Sequence[tuple[int, str | None]]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    under_replicated_after_heal: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly: its kind, one line saying what, and the ops (by index) that show it."""

    kind: str
    message: str
    op_indexes: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The anomaly as a JSON object."""
        return {"kind": self.kind, "message": self.message, "ops": list(self.op_indexes)}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The anomalies found, counted by kind, with the run's statistics."""

    anomalies: tuple[Anomaly, ...]
    stats: Mapping[str, int]
    recovery_ms: tuple[tuple[int, float | None], ...]
    """``(healing fault op index, ms to the first acknowledged acks=all send, or None)``."""

    @property
    def counts(self) -> dict[str, int]:
        """Anomalies per kind; every kind present, 0 when none."""
        counts = dict.fromkeys(KINDS, 0)
        for anomaly in self.anomalies:
            counts[anomaly.kind] = counts.get(anomaly.kind, 0) + 1
        return counts

    @property
    def valid(self) -> bool:
        """True when no anomaly was found."""
        return not self.anomalies

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object."""
        return {
            "valid": self.valid,
            "counts": self.counts,
            "stats": dict(self.stats),
            "recovery_ms": [{"fault_op": index, "ms": ms} for index, ms in self.recovery_ms],
            "anomalies": [a.to_json() for a in self.anomalies],
        }


@dataclass(frozen=True, slots=True)
class _Call:
    """An invocation and its completion (``None`` when the run ended first)."""

    invoke: Op
    completion: Op | None

    @property
    def outcome(self) -> str:
        return self.completion.type if self.completion is not None else "info"

    @property
    def indexes(self) -> tuple[int, ...]:
        if self.completion is None:
            return (self.invoke.index,)
        return (self.invoke.index, self.completion.index)


def _pair(ops: Sequence[Op]) -> list[_Call]:
    """Each invocation with its completion: the one whose ``ref`` names it, else (a history
    without refs) its process's next completion."""
    open_calls: dict[str, Op] = {}
    calls: list[_Call] = []
    pending: dict[int, int] = {}
    for op in ops:
        if op.type == "invoke":
            open_calls[op.process] = op
            pending[op.index] = len(calls)
            calls.append(_Call(op, None))
            continue
        invoked_index = op.ref
        if invoked_index is None:
            invoked = open_calls.get(op.process)
            invoked_index = invoked.index if invoked is not None else None
        if invoked_index is None or invoked_index not in pending:
            continue  # a completion of nothing recorded: ignored
        slot = pending.pop(invoked_index)
        calls[slot] = _Call(calls[slot].invoke, op)
        if open_calls.get(op.process) is calls[slot].invoke:
            del open_calls[op.process]
    return calls


def _is_idempotent(call: _Call) -> bool:
    op = call.invoke
    if op.idempotent is not None:
        return op.idempotent
    return op.producer is not None and "idempotent" in op.producer and "no-" not in op.producer


def _is_acks_all(call: _Call) -> bool:
    acks = call.invoke.acks
    return acks is None or acks in ("all", "-1")


def _drained(
    ops: Sequence[Op], final: FinalState
) -> tuple[dict[Position, list[tuple[int, str | None]]], tuple[int, ...]]:
    """The drain per partition, and the indexes of the drain ops it came from."""
    if final.drained:
        return {tp: list(records) for tp, records in final.drained.items()}, ()
    drained: dict[Position, list[tuple[int, str | None]]] = defaultdict(list)
    indexes: list[int] = []
    for op in ops:
        if op.f == "drain" and op.type == "ok" and op.records is not None:
            indexes.append(op.index)
            for topic, partition, offset, value in op.records:
                drained[(topic, partition)].append((offset, value))
    return {tp: sorted(set(records)) for tp, records in drained.items()}, tuple(indexes)


def check(ops: Sequence[Op], final: FinalState) -> CheckResult:
    """Every anomaly the history and the final state show (see the module docstring)."""
    calls = _pair(ops)
    sends = [c for c in calls if c.invoke.f == "send"]
    polls = [c for c in calls if c.invoke.f == "poll" and c.outcome == "ok"]
    drained, drain_ops = _drained(ops, final)
    anomalies: list[Anomaly] = []

    # Where the drain has each value.
    drain_positions: dict[str, list[tuple[Position, int]]] = defaultdict(list)
    for tp, records in sorted(drained.items()):
        for offset, value in records:
            if value is not None:
                drain_positions[value].append((tp, offset))
    send_of: dict[str, _Call] = {}
    for call in sends:
        if call.invoke.value is not None:
            send_of[call.invoke.value] = call

    def send_ops(value: str) -> tuple[int, ...]:
        call = send_of.get(value)
        return call.indexes if call is not None else ()

    # Values each poll saw, and every observation of (partition, offset) -> value.
    polled: dict[str, list[int]] = defaultdict(list)
    seen_at: dict[tuple[str, int, int], dict[str | None, list[int]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for call in polls:
        assert call.completion is not None
        for topic, partition, offset, value in call.completion.records or ():
            seen_at[(topic, partition, offset)][value].append(call.completion.index)
            if value is not None:
                polled[value].append(call.completion.index)
    for tp, records in drained.items():
        for offset, value in records:
            seen_at[(tp[0], tp[1], offset)][value].extend(drain_ops)

    for call in sends:
        value = call.invoke.value
        if value is None:
            continue
        completion = call.completion
        where = drain_positions.get(value, [])
        if call.outcome == "ok":
            assert completion is not None
            topic = completion.topic or call.invoke.topic or ""
            if completion.partition is not None and completion.offset is not None:
                seen_at[(topic, completion.partition, completion.offset)][value].append(
                    completion.index
                )
            if not where:
                anomalies.append(
                    Anomaly(
                        "lost-write",
                        f"{value} was acknowledged at {topic}-{completion.partition}@"
                        f"{completion.offset} but the drain lacks it",
                        call.indexes,
                    )
                )
            elif completion.partition is not None and completion.offset is not None:
                acked = ((topic, completion.partition), completion.offset)
                if acked not in where:
                    anomalies.append(
                        Anomaly(
                            "offset-mismatch",
                            f"{value} was acknowledged at {topic}-{completion.partition}@"
                            f"{completion.offset}; the drain has it at "
                            + ", ".join(f"{t}-{p}@{o}" for (t, p), o in where),
                            call.indexes + drain_ops,
                        )
                    )
        elif call.outcome == "fail" and (where or value in polled):
            anomalies.append(
                Anomaly(
                    "failed-write-read",
                    f"{value}'s send failed ({call.completion.error if call.completion else ''})"
                    " but it was read",
                    call.indexes + tuple(polled.get(value, ())) + (drain_ops if where else ()),
                )
            )

    for value, where in sorted(drain_positions.items()):
        if len(where) > 1:
            sent = send_of.get(value)
            idempotent = sent is not None and _is_idempotent(sent)
            anomalies.append(
                Anomaly(
                    "duplicate",
                    f"{value} is in the drain {len(where)} times: "
                    + ", ".join(f"{t}-{p}@{o}" for (t, p), o in where)
                    + (" (idempotent producer)" if idempotent else ""),
                    send_ops(value) + drain_ops,
                )
            )

    for (topic, partition, offset), values in sorted(seen_at.items()):
        if len(values) > 1:
            shown = sorted(values, key=lambda v: (v is None, v or ""))
            indexes = sorted({i for v in shown for i in values[v]})
            anomalies.append(
                Anomaly(
                    "offset-conflict",
                    f"{topic}-{partition}@{offset} was seen as "
                    + " and ".join(repr(v) for v in shown),
                    tuple(indexes),
                )
            )

    drained_values = set(drain_positions)
    for value, indexes in sorted(polled.items()):
        if value not in drained_values:
            anomalies.append(
                Anomaly(
                    "dirty-read",
                    f"{value} was polled but the drain lacks it",
                    tuple(indexes) + send_ops(value),
                )
            )

    anomalies += _producer_order(sends, drain_positions)
    anomalies += _non_monotonic_polls(calls)
    anomalies += _commit_regressions(calls)
    anomalies += _replica_divergence(final)
    anomalies += [
        Anomaly("under-replicated-after-heal", f"{tp} stayed under-replicated after healing")
        for tp in final.under_replicated_after_heal
    ]

    order = {kind: n for n, kind in enumerate(KINDS)}
    anomalies.sort(key=lambda a: (order.get(a.kind, len(order)), a.op_indexes, a.message))
    return CheckResult(tuple(anomalies), _stats(calls, drained), _recovery(calls, sends))


def _producer_order(
    sends: Sequence[_Call], drain_positions: Mapping[str, Sequence[tuple[Position, int]]]
) -> list[Anomaly]:
    anomalies = []
    last: dict[tuple[str, Position], tuple[int, _Call]] = {}
    for call in sorted(sends, key=lambda c: c.invoke.index):
        value = call.invoke.value
        if call.outcome != "ok" or value is None or not _is_idempotent(call):
            continue
        where = drain_positions.get(value, [])
        if len(where) != 1:
            continue  # lost or duplicated: reported as such
        tp, offset = where[0]
        key = (call.invoke.process, tp)
        before = last.get(key)
        if before is not None and offset < before[0]:
            earlier = before[1]
            anomalies.append(
                Anomaly(
                    "producer-order",
                    f"{call.invoke.process} sent {earlier.invoke.value} before {value}, but "
                    f"{tp[0]}-{tp[1]} has them at offsets {before[0]} and {offset}",
                    earlier.indexes + call.indexes,
                )
            )
        if before is None or offset > before[0]:
            last[key] = (offset, call)
    return anomalies


def _non_monotonic_polls(calls: Sequence[_Call]) -> list[Anomaly]:
    anomalies = []
    last: dict[tuple[str, Position], tuple[int, int]] = {}
    for call in sorted(calls, key=lambda c: c.invoke.index):
        process = call.invoke.process
        if call.invoke.f in ("rebalance", "seek"):
            for key in [k for k in last if k[0] == process]:
                del last[key]
            continue
        if call.invoke.f != "poll" or call.outcome != "ok" or call.completion is None:
            continue
        for topic, partition, offset, _value in call.completion.records or ():
            key = (process, (topic, partition))
            before = last.get(key)
            if before is not None and offset <= before[0]:
                anomalies.append(
                    Anomaly(
                        "non-monotonic-poll",
                        f"{process} polled {topic}-{partition}@{offset} after @{before[0]}",
                        (before[1], call.completion.index),
                    )
                )
            last[key] = (offset, call.completion.index)
    return anomalies


def _commit_regressions(calls: Sequence[_Call]) -> list[Anomaly]:
    anomalies = []
    last: dict[tuple[str, str], tuple[int, int]] = {}
    ok_commits = [c for c in calls if c.invoke.f == "commit" and c.outcome == "ok" and c.completion]
    for call in sorted(ok_commits, key=lambda c: c.completion.index if c.completion else 0):
        assert call.completion is not None
        group = call.invoke.group or ""
        for tp, offset in sorted((call.invoke.offsets or {}).items()):
            key = (group, tp)
            before = last.get(key)
            if before is not None and offset < before[0]:
                anomalies.append(
                    Anomaly(
                        "commit-regression",
                        f"group {group} committed {tp} at {offset} after {before[0]}",
                        (before[1], call.completion.index),
                    )
                )
            if before is None or offset >= before[0]:
                last[key] = (offset, call.completion.index)
    return anomalies


def _replica_divergence(final: FinalState) -> list[Anomaly]:
    anomalies = []
    for (topic, partition), replicas in sorted(final.replica_logs.items()):
        by_offset: dict[int, dict[str | None, list[int]]] = defaultdict(lambda: defaultdict(list))
        for node, records in sorted(replicas.items()):
            for offset, value in records:
                by_offset[offset][value].append(node)
        for offset, values in sorted(by_offset.items()):
            if len(values) > 1:
                shown = "; ".join(
                    f"nodes {sorted(nodes)}: {value!r}"
                    for value, nodes in sorted(values.items(), key=lambda kv: min(kv[1]))
                )
                anomalies.append(
                    Anomaly(
                        "replica-divergence",
                        f"{topic}-{partition}@{offset} differs between replicas: {shown}",
                    )
                )
    return anomalies


def _stats(calls: Sequence[_Call], drained: Mapping[Position, Sequence[Any]]) -> dict[str, int]:
    stats: dict[str, int] = defaultdict(int)
    for call in calls:
        stats[f"{call.invoke.f}-invoked"] += 1
        stats[f"{call.invoke.f}-{call.outcome}"] += 1
        if call.invoke.f == "poll" and call.completion is not None:
            stats["records-polled"] += len(call.completion.records or ())
    stats["records-drained"] = sum(len(records) for records in drained.values())
    return dict(sorted(stats.items()))


def _recovery(
    calls: Sequence[_Call], sends: Sequence[_Call]
) -> tuple[tuple[int, float | None], ...]:
    acked = sorted(
        (c for c in sends if c.outcome == "ok" and c.completion is not None and _is_acks_all(c)),
        key=lambda c: c.invoke.time_ms,
    )
    recoveries = []
    for call in calls:
        if (
            call.invoke.f != "fault"
            or call.invoke.fault not in HEALING_FAULTS
            or call.completion is None
        ):
            continue
        healed_at = call.completion.time_ms
        first = next((c for c in acked if c.invoke.time_ms >= healed_at), None)
        recoveries.append(
            (
                call.invoke.index,
                None
                if first is None or first.completion is None
                else round(first.completion.time_ms - healed_at, 1),
            )
        )
    return tuple(recoveries)
