# Over 600 lines: one pure pass over one history, every anomaly kind beside the helpers it shares.
"""What a chaos run's history shows: anomalies, each with the operations that show it.

Pure and deterministic (no clock, no I/O): :func:`check` reads the ops of a
:mod:`chaos.history` and the state collected after the faults healed (:class:`FinalState`:
the drain of every partition from its earliest offset, optionally each replica's records
below the high watermark) and reports every anomaly of these kinds (:data:`KINDS`), in the
manner of Jepsen's Kafka checker (``jepsen.tests.kafka``):

- ``lost-write``: a send acknowledged (``ok``) whose value the drain lacks;
- ``duplicate``: a value at two or more offsets of the drain (reported whatever the
  producer; the message says whether it was idempotent, for which it is a broken promise);
- ``offset-mismatch``: a value the drain has, acknowledged at another partition or offset
  than where the drain has it, or polled at an offset the drain has no record at (polled
  where the drain has another value, it is an ``offset-conflict``);
- ``offset-conflict``: one offset of a partition seen with two values, by any reads (polls,
  the drain) or acknowledgements;
- ``failed-write-read``: a value whose send definitely failed (``fail``), read anyway (by a
  poll or the drain);
- ``dirty-read``: a value a poll returned that the drain lacks (it was visible, then lost);
- ``producer-order``: an idempotent producer (``idempotent`` true on the send, or an extra
  ``max_in_flight`` of 1) whose acknowledged values in one partition stand in the drain in
  another order than the one it invoked the sends in; one anomaly per value that lands
  before a value sent earlier;
- ``non-monotonic-poll``: a consumer's poll returned, for a partition, an offset at or below
  the previous one it returned for it, with no ``rebalance`` or ``seek`` of that consumer
  between (one anomaly per poll and partition);
- ``commit-regression``: a group's acknowledged commit of a partition below an offset whose
  commit had already been acknowledged before it was invoked (a transaction that committed,
  ``txn`` ``ok``, is an acknowledged commit of its ``offsets``);
- ``replica-divergence``: replicas holding different values at one offset below the high
  watermark after healing (one anomaly per partition);
- ``under-replicated-after-heal``: a partition whose ISR stayed short after healing;
- ``undrained``: a partition the drain could not read after healing (no leader, or its end
  not reached in time): what was sent to it is unknown, so its acknowledged sends are not
  counted as lost, nor its polled values as dirty reads;
- ``node-halted``: a node that halted on a broken invariant or a failed log directory
  (:mod:`cluster.halt`), as the runner read it from the nodes' logs (one anomaly per node).

The exactly-once checks of a transactional pipeline (the ``txn-pipeline`` workload; they run
when the history has an ``ok`` ``drain-committed`` op, the output as ``read_committed`` read
it once every transaction had ended). Its input is the drain of the op's ``source`` topic; the
group's *final* committed offsets are the last ``ok`` ``offset-fetch`` of its ``group``; each
output value is ``<input value>|<txn label>`` (:data:`chaos.history.OUTPUT_SEPARATOR`). In a
pipeline that is exactly once, an input record is in the committed output once if it is
below its partition's final committed offset, and not at all otherwise:

- ``lost-input``: an input record below the final committed offset that no record of the
  committed output carries (its offset was committed without its output);
- ``duplicate-output``: an input record carried by two or more records of the committed
  output (processed and committed twice);
- ``output-without-offset``: an input record at or above the final committed offset that
  the committed output carries (its output was committed without its offset);
- ``unprocessed-input``: per partition, input records at or above the final committed
  offset that no output carries: the pipeline had not got to them when the run ended (a
  liveness failure, not a safety one; also reported when no committed offsets were read);
- ``aborted-read``: what ``read_committed`` must not see, seen: a record of a transaction
  its worker aborted (``txn`` ``fail``) in the committed output or in a ``read_committed``
  poll, a record a ``read_committed`` poll returned that the committed output lacks (it was
  visible before its transaction aborted), or a committed offset read (``offset-fetch``) that
  only aborted transactions had committed (one anomaly per transaction, or per partition and
  offset);
- ``lost-commit``: a transaction acknowledged committed (``txn`` ``ok``) with outputs the
  committed output lacks;
- ``non-atomic-txn``: a transaction of unknown outcome (``info``) of which the committed
  output holds some outputs but not all;
- ``committed-offset-regression``: a stable read of a group's committed offsets
  (``offset-fetch`` with ``isolation`` ``read_committed``) below what a read completed before
  it was invoked returned, or below the offsets of a transaction acknowledged committed
  before it was invoked (or without an offset there at all);
- ``hanging-txn``: an output partition whose last stable offset stayed below its high
  watermark after every worker had stopped, past the transactions' timeout (a
  ``drain-committed`` op that ended ``info`` with ``open``: a transaction nobody ends holds
  ``read_committed`` readers there; the committed output cannot be read, so the checks above
  that need it are not made). The message names the transaction of the first record held.

A send that ended ``info`` (or never completed) is indeterminate: it may be in the drain or
not, and neither is an anomaly; it is still held to every other rule (a duplicate of it is
a duplicate; a poll of it that the drain lacks is a dirty read). Anomalies cite ops by
index; the drain op is never cited (it holds every record), the messages say where the
drain has a value instead.

Recovery time (:attr:`CheckResult.recovery_ms`): for each healing fault (:data:`HEALING_FAULTS`,
completed ``ok``), the ms from its completion to the completion of the first acknowledged
``acks=all`` send invoked after it (a send without ``acks`` counts as acks=all, the producer
default), or ``None`` when there was none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from chaos.history import OUTPUT_SEPARATOR, HistoryError, Op

__all__ = [
    "HEALING_FAULTS",
    "KINDS",
    "PIPELINE_KINDS",
    "Anomaly",
    "CheckResult",
    "FinalState",
    "Position",
    "check",
]

PIPELINE_KINDS = (
    "lost-input",
    "duplicate-output",
    "output-without-offset",
    "unprocessed-input",
    "aborted-read",
    "lost-commit",
    "non-atomic-txn",
    "committed-offset-regression",
    "hanging-txn",
)
"""The kinds of the exactly-once checks of a transactional pipeline."""

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
    "undrained",
    "node-halted",
    *PIPELINE_KINDS,
)
"""Every anomaly kind the checker reports, in report order."""

HEALING_FAULTS = frozenset(
    {"heal", "restart", "resume", "restart-all", "recover", "fast-disk", "clock-reset"}
)
"""``fault`` names that end a fault; recovery time is measured from each."""

Position = tuple[str, int]
"""A partition: (topic, partition)."""

_Slot = tuple[str, int, int]
"""One offset of one partition: (topic, partition, offset)."""

_MAX_LISTED = 4
"""Positions or ops a message names before it says how many more there are."""


@dataclass(frozen=True, slots=True)
class FinalState:
    """What was collected after the faults healed.

    ``drained``: each partition's records from its earliest offset to its end, as
    ``(offset, value)`` in offset order; when empty, the history's ``drain`` ops are read
    instead. ``replica_logs``: per partition, per node id, the ``(offset, value)`` records
    below the high watermark. ``under_replicated_after_heal``: partitions
    (``"topic-partition"``) whose ISR was still short once the cluster had had time to
    recover. ``heal_times_ms``: ``(fault op index, time_ms)`` of each heal, when the runner
    knows better than the history's ``fault`` ops when the faults ended (empty: the history's
    healing faults are used). ``undrained``: partitions the drain could not read.
    ``halted_nodes``: one line per node that halted (which node, how often, why).
    """

    drained: Mapping[Position, Sequence[tuple[int, str | None]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    replica_logs: Mapping[Position, Mapping[int, Sequence[tuple[int, str | None]]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    under_replicated_after_heal: Sequence[str] = ()
    heal_times_ms: Sequence[tuple[int, float]] = ()
    undrained: Sequence[Position] = ()
    halted_nodes: Sequence[str] = ()


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
    """The anomalies found (sorted by kind, then ops), with the run's statistics.

    ``stats``: ``send-invoked``, ``send-ok``, ``send-fail``, ``send-info`` (an invocation
    never completed counts as info), the same for ``poll``, ``commit`` and ``fault`` (and any
    other function the history has), ``records-polled`` and ``records-drained``.
    """

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


def check(ops: Sequence[Op], final: FinalState) -> CheckResult:
    """Every anomaly the history and the final state show (see the module docstring).

    Raises :class:`chaos.history.HistoryError` when two sends carry the same value (values
    must be unique in a run, or nothing can be concluded from reading one).
    """
    calls = _pair(ops)
    sends = [call for call in calls if call.f == "send"]
    send_of = _sends_by_value(sends)
    seen = _Seen.collect(calls, sends, _drained(ops, final))
    undrained = frozenset(final.undrained)
    anomalies = [
        *_lost_writes(sends, seen, undrained),
        *_duplicates(seen, send_of),
        *_offset_mismatches(seen, send_of),
        *_offset_conflicts(seen),
        *_failed_write_reads(sends, seen),
        *_dirty_reads(seen, send_of, undrained),
        *_producer_order(sends, seen),
        *_non_monotonic_polls(ops, calls),
        *_commit_regressions(ops, calls),
        *_replica_divergence(final),
        *(
            _anomaly("under-replicated-after-heal", f"{tp} stayed under-replicated after healing")
            for tp in final.under_replicated_after_heal
        ),
        *(
            _anomaly(
                "undrained",
                f"{topic}-{partition} could not be drained after healing: its acknowledged "
                "sends are not known to be lost or kept",
            )
            for topic, partition in sorted(undrained)
        ),
        *(_anomaly("node-halted", line) for line in final.halted_nodes),
        *_committed_offset_regressions(ops, calls),
        *_hanging_transactions(calls, seen.drained),
    ]
    stats = _stats(calls, seen)
    pipeline = _Pipeline.collect(calls, seen.drained)
    if pipeline is not None:
        anomalies += pipeline.anomalies(calls)
        stats["records-drained-committed"] = sum(len(r) for r in pipeline.committed.values())
    order = {kind: n for n, kind in enumerate(KINDS)}
    anomalies.sort(key=lambda a: (order[a.kind], a.op_indexes, a.message))
    return CheckResult(
        tuple(anomalies), dict(sorted(stats.items())), _recovery(calls, sends, final)
    )


# --- pairing and what was observed -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Call:
    """An invocation and its completion (``None`` when the run ended first)."""

    invoke: Op
    completion: Op | None

    @property
    def f(self) -> str:
        return self.invoke.f

    @property
    def process(self) -> str:
        return self.invoke.process

    @property
    def outcome(self) -> str:
        """ok, fail or info (an invocation never completed is info)."""
        return self.completion.type if self.completion is not None else "info"

    @property
    def indexes(self) -> tuple[int, ...]:
        if self.completion is None:
            return (self.invoke.index,)
        return (self.invoke.index, self.completion.index)

    def field(self, name: str) -> Any:
        """A field of the completion, else of the invocation."""
        if self.completion is not None:
            value = getattr(self.completion, name)
            if value is not None:
                return value
        return getattr(self.invoke, name)


def _extra(call: _Call, name: str) -> Any:
    """An extra field (:attr:`Op.extra`) of the completion, else of the invocation."""
    if call.completion is not None and name in call.completion.extra:
        return call.completion.extra[name]
    return call.invoke.extra.get(name)


def _pair(ops: Sequence[Op]) -> list[_Call]:
    """Each invocation with its completion, in invocation order: the completion whose
    ``ref`` names it, else (a history without refs) its process's open invocation of the
    same function. A completion of nothing recorded is ignored."""
    calls: list[_Call] = []
    slot_of: dict[int, int] = {}  # open invocation index -> position in calls
    open_by_process: dict[str, list[int]] = defaultdict(list)
    for op in ops:
        if op.type == "invoke":
            slot_of[op.index] = len(calls)
            open_by_process[op.process].append(op.index)
            calls.append(_Call(op, None))
            continue
        invoked_index = op.ref
        if invoked_index is None:
            candidates = [
                i for i in open_by_process[op.process] if calls[slot_of[i]].invoke.f == op.f
            ]
            invoked_index = candidates[-1] if candidates else None
        if invoked_index is None or invoked_index not in slot_of:
            continue
        slot = slot_of.pop(invoked_index)
        call = calls[slot]
        if call.invoke.process != op.process:
            slot_of[invoked_index] = slot
            continue
        open_by_process[op.process].remove(invoked_index)
        calls[slot] = _Call(call.invoke, op)
    return calls


def _sends_by_value(sends: Sequence[_Call]) -> dict[str, _Call]:
    send_of: dict[str, _Call] = {}
    for call in sends:
        value = call.invoke.value
        if value is None:
            continue
        if value in send_of:
            raise HistoryError(
                f"value {value!r} was sent twice (ops {send_of[value].invoke.index} and "
                f"{call.invoke.index}); values must be unique in a run"
            )
        send_of[value] = call
    return send_of


def _drained(ops: Sequence[Op], final: FinalState) -> dict[Position, list[tuple[int, str | None]]]:
    """The drain per partition, in offset order: the final state's, else the drain ops'."""
    if final.drained:
        return {tp: sorted(records, key=_by_offset) for tp, records in final.drained.items()}
    drained: dict[Position, list[tuple[int, str | None]]] = defaultdict(list)
    for op in ops:
        if op.f == "drain" and op.type == "ok":
            for topic, partition, offset, value in op.records or ():
                drained[(topic, partition)].append((offset, value))
    return {tp: sorted(set(records), key=_by_offset) for tp, records in drained.items()}


def _by_offset(record: tuple[int, str | None]) -> tuple[int, str]:
    return (record[0], record[1] or "")


def _ack_slot(call: _Call) -> _Slot | None:
    """Where an acknowledged send's ack put its value (None when the ack did not say)."""
    if call.outcome != "ok":
        return None
    topic, partition, offset = call.field("topic"), call.field("partition"), call.field("offset")
    if topic is None or partition is None or offset is None or offset < 0:
        return None
    return (topic, partition, offset)


@dataclass(slots=True)
class _Sources:
    """Who saw one value at one slot."""

    drained: bool = False
    acks: list[int] = field(default_factory=list)
    polls: list[int] = field(default_factory=list)

    def describe(self) -> str:
        parts = ["the drain"] if self.drained else []
        if self.acks:
            parts.append(f"ack op {_listed(self.acks)}")
        if self.polls:
            parts.append(f"poll op {_listed(self.polls)}")
        return ", ".join(parts)


@dataclass(slots=True)
class _Seen:
    """Every observation of the history: the drain, the polls and the acks."""

    drained: dict[Position, list[tuple[int, str | None]]]
    drain_slots: dict[str, list[_Slot]]
    """value -> where the drain has it, in (topic, partition, offset) order."""
    polled: dict[str, dict[_Slot, list[int]]]
    """value -> slot -> the poll completions that returned it there, in history order."""
    at: dict[_Slot, dict[str | None, _Sources]]
    """slot -> value -> who saw it there."""
    records_polled: int

    @classmethod
    def collect(
        cls,
        calls: Sequence[_Call],
        sends: Sequence[_Call],
        drained: dict[Position, list[tuple[int, str | None]]],
    ) -> _Seen:
        at: dict[_Slot, dict[str | None, _Sources]] = defaultdict(dict)
        drain_slots: dict[str, list[_Slot]] = defaultdict(list)
        for (topic, partition), records in sorted(drained.items()):
            for offset, value in records:
                slot = (topic, partition, offset)
                at[slot].setdefault(value, _Sources()).drained = True
                if value is not None:
                    drain_slots[value].append(slot)
        polled: dict[str, dict[_Slot, list[int]]] = defaultdict(lambda: defaultdict(list))
        records_polled = 0
        for call in calls:
            if call.f != "poll" or call.outcome != "ok" or call.completion is None:
                continue
            for topic, partition, offset, value in call.completion.records or ():
                records_polled += 1
                slot = (topic, partition, offset)
                sources = at[slot].setdefault(value, _Sources())
                if call.completion.index not in sources.polls:
                    sources.polls.append(call.completion.index)
                if value is not None:
                    indexes = polled[value][slot]
                    if call.completion.index not in indexes:
                        indexes.append(call.completion.index)
        for call in sends:
            acked = _ack_slot(call)
            if acked is not None and call.completion is not None:
                at[acked].setdefault(call.invoke.value, _Sources()).acks.append(
                    call.completion.index
                )
        return cls(drained, dict(drain_slots), dict(polled), dict(at), records_polled)

    def poll_ops(self, value: str) -> tuple[int, ...]:
        """Every poll completion that returned ``value``, in history order."""
        return tuple(sorted({i for ops in self.polled.get(value, {}).values() for i in ops}))


# --- the anomalies ----------------------------------------------------------------------


def _anomaly(kind: str, message: str, op_indexes: Iterable[int] = ()) -> Anomaly:
    indexes = tuple(dict.fromkeys(op_indexes))  # in order, without repeats
    return Anomaly(kind, " ".join(message.split()), indexes)


def _slot_text(slot: _Slot) -> str:
    topic, partition, offset = slot
    return f"{topic}-{partition}@{offset}"


def _listed(items: Sequence[object]) -> str:
    shown = ", ".join(str(item) for item in items[:_MAX_LISTED])
    if len(items) > _MAX_LISTED:
        shown += f" and {len(items) - _MAX_LISTED} more"
    return shown


def _producer_text(call: _Call | None) -> str:
    if call is None:
        return "never sent"
    idempotent = call.invoke.idempotent
    what = {True: "idempotent", False: "non-idempotent", None: "idempotence unknown"}[idempotent]
    acks = "" if call.invoke.acks is None else f", acks={call.invoke.acks}"
    return f"sent by {call.process}: {what}{acks}, send {call.outcome}"


def _lost_writes(
    sends: Sequence[_Call], seen: _Seen, undrained: frozenset[Position] = frozenset()
) -> Iterable[Anomaly]:
    for call in sends:
        value = call.invoke.value
        if call.outcome != "ok" or value is None or value in seen.drain_slots:
            continue
        slot = _ack_slot(call)
        sent_to = (
            (slot[0], slot[1]) if slot is not None else (call.invoke.topic, call.invoke.partition)
        )
        if sent_to in undrained:
            continue  # not read after healing: unknown
        where = f" at {_slot_text(slot)}" if slot is not None else ""
        acks = "" if call.invoke.acks is None else f" (acks={call.invoke.acks})"
        yield _anomaly(
            "lost-write",
            f"{value} sent by {call.process} was acknowledged{where}{acks} but the drain lacks it",
            call.indexes,
        )


def _duplicates(seen: _Seen, send_of: Mapping[str, _Call]) -> Iterable[Anomaly]:
    for value, slots in seen.drain_slots.items():
        if len(slots) < 2:
            continue
        sent = send_of.get(value)
        yield _anomaly(
            "duplicate",
            f"{value} is in the drain {len(slots)} times, at "
            f"{_listed([_slot_text(s) for s in slots])} ({_producer_text(sent)})",
            sent.indexes if sent is not None else (),
        )


def _offset_mismatches(seen: _Seen, send_of: Mapping[str, _Call]) -> Iterable[Anomaly]:
    for value, slots in seen.drain_slots.items():
        in_drain = set(slots)
        claims: list[str] = []
        indexes: list[int] = []
        sent = send_of.get(value)
        acked = _ack_slot(sent) if sent is not None else None
        if sent is not None and acked is not None and acked not in in_drain:
            claims.append(f"acknowledged at {_slot_text(acked)}")
            indexes += sent.indexes
        for slot, polls in seen.polled.get(value, {}).items():
            # Where the drain has another value, the poll shows an offset-conflict instead.
            if slot not in in_drain and not any(s.drained for s in seen.at[slot].values()):
                claims.append(f"polled at {_slot_text(slot)} (op {_listed(polls)})")
                indexes += polls
        if claims:
            yield _anomaly(
                "offset-mismatch",
                f"{value} was {' and '.join(claims)}; the drain has it at "
                f"{_listed([_slot_text(s) for s in slots])}",
                indexes,
            )


def _offset_conflicts(seen: _Seen) -> Iterable[Anomaly]:
    for slot, values in sorted(seen.at.items()):
        if len(values) < 2:
            continue
        shown = sorted(values.items(), key=lambda item: (item[0] is None, item[0] or ""))
        indexes = sorted({i for _, sources in shown for i in (*sources.acks, *sources.polls)})
        yield _anomaly(
            "offset-conflict",
            f"{_slot_text(slot)} was seen with {len(shown)} values: "
            + "; ".join(f"{value!r} by {sources.describe()}" for value, sources in shown),
            indexes,
        )


def _failed_write_reads(sends: Sequence[_Call], seen: _Seen) -> Iterable[Anomaly]:
    for call in sends:
        value = call.invoke.value
        if call.outcome != "fail" or value is None:
            continue
        polls = seen.poll_ops(value)
        drained = seen.drain_slots.get(value, [])
        if not polls and not drained:
            continue
        readers = []
        if drained:
            readers.append(f"the drain (at {_listed([_slot_text(s) for s in drained])})")
        if polls:
            readers.append(f"poll op {_listed(polls)}")
        error = call.field("error")
        yield _anomaly(
            "failed-write-read",
            f"{value}'s send by {call.process} failed"
            + (f" ({error})" if error else "")
            + f" but {' and '.join(readers)} read it",
            (*call.indexes, *polls),
        )


def _dirty_reads(
    seen: _Seen, send_of: Mapping[str, _Call], undrained: frozenset[Position] = frozenset()
) -> Iterable[Anomaly]:
    for value, slots in seen.polled.items():
        if value in seen.drain_slots or all((t, p) in undrained for t, p, _ in slots):
            continue
        polls = seen.poll_ops(value)
        sent = send_of.get(value)
        yield _anomaly(
            "dirty-read",
            f"{value} was polled at {_listed([_slot_text(s) for s in slots])} "
            f"(op {_listed(polls)}) but the drain lacks it ({_producer_text(sent)})",
            (*polls, *(sent.indexes if sent is not None else ())),
        )


def _keeps_order(call: _Call) -> bool:
    """Whether a send's producer promises per-partition order (idempotent, or one request
    in flight at a time)."""
    return call.invoke.idempotent is True or call.invoke.extra.get("max_in_flight") == 1


def _producer_order(sends: Sequence[_Call], seen: _Seen) -> Iterable[Anomaly]:
    highest: dict[tuple[str, Position], tuple[int, _Call]] = {}
    for call in sends:  # in invocation order
        value = call.invoke.value
        if call.outcome != "ok" or value is None or not _keeps_order(call):
            continue
        slots = seen.drain_slots.get(value, [])
        if len(slots) != 1:
            continue  # lost or duplicated: reported as such
        topic, partition, offset = slots[0]
        key = (call.process, (topic, partition))
        before = highest.get(key)
        if before is not None and offset < before[0]:
            earlier = before[1]
            yield _anomaly(
                "producer-order",
                f"{call.process} sent {earlier.invoke.value} before {value}, but the drain has "
                f"them at {topic}-{partition}@{before[0]} and @{offset}",
                (*earlier.indexes, *call.indexes),
            )
        if before is None or offset > before[0]:
            highest[key] = (offset, call)


def _non_monotonic_polls(ops: Sequence[Op], calls: Sequence[_Call]) -> Iterable[Anomaly]:
    """Per consumer and partition, each poll's offsets against the previous one returned."""
    resets = {
        call.invoke.index: call
        for call in calls
        if call.f in ("rebalance", "seek") and call.outcome != "fail"
    }
    ok_polls = {
        call.completion.index: call
        for call in calls
        if call.f == "poll" and call.outcome == "ok" and call.completion is not None
    }
    last: dict[str, dict[Position, tuple[int, int]]] = defaultdict(dict)  # -> (offset, op)
    for op in ops:
        reset = resets.get(op.index)
        if reset is not None:
            positions = last[op.process]
            if reset.f == "seek" and reset.invoke.partitions:
                for name in reset.invoke.partitions:
                    name_topic, _, name_partition = name.rpartition("/")
                    if name_partition.isdigit():
                        positions.pop((name_topic, int(name_partition)), None)
            else:
                positions.clear()
            continue
        if op.index not in ok_polls:
            continue
        positions = last[op.process]
        flagged: set[Position] = set()
        for topic, partition, offset, _value in op.records or ():
            tp = (topic, partition)
            before = positions.get(tp)
            if before is not None and offset <= before[0] and tp not in flagged:
                flagged.add(tp)
                yield _anomaly(
                    "non-monotonic-poll",
                    f"{op.process} polled {topic}-{partition}@{offset} after @{before[0]} "
                    f"(op {before[1]}) with no rebalance or seek between",
                    (before[1], op.index),
                )
            positions[tp] = (offset, op.index)


def _commit_regressions(ops: Sequence[Op], calls: Sequence[_Call]) -> Iterable[Anomaly]:
    """A commit acknowledged below what a commit acknowledged before its invocation set."""
    ok_commits = {
        call.invoke.index: call
        for call in calls
        if call.f in ("commit", "txn") and call.outcome == "ok" and call.completion is not None
    }
    by_completion = {call.completion.index: call for call in ok_commits.values() if call.completion}
    committed: dict[tuple[str, str], tuple[int, _Call]] = {}  # acknowledged so far
    floors: dict[int, dict[str, tuple[int, _Call]]] = {}  # per commit, at its invocation
    for op in ops:
        call = ok_commits.get(op.index)
        if call is not None:
            group = call.field("group") or ""
            floors[op.index] = {
                tp: committed[(group, tp)]
                for tp in _commit_offsets(call)
                if (group, tp) in committed
            }
            continue
        call = by_completion.get(op.index)
        if call is None:
            continue
        group = call.field("group") or ""
        floor = floors.get(call.invoke.index, {})
        for tp, offset in sorted(_commit_offsets(call).items()):
            before = floor.get(tp)
            if before is not None and offset < before[0]:
                yield _anomaly(
                    "commit-regression",
                    f"group {group or '(none)'} committed {tp} at {offset} after its commit at "
                    f"{before[0]} (op {before[1].invoke.index}) was acknowledged",
                    (*before[1].indexes, *call.indexes),
                )
            current = committed.get((group, tp))
            if current is None or offset >= current[0]:
                committed[(group, tp)] = (offset, call)


def _commit_offsets(call: _Call) -> Mapping[str, int]:
    offsets = call.invoke.offsets
    if offsets is None and call.completion is not None:
        offsets = call.completion.offsets
    return offsets or {}


# --- the transactional pipeline ---------------------------------------------------------


def _name_position(name: str) -> Position | None:
    """``"topic/partition"`` as a position; None when it is not one."""
    topic, _, partition = name.rpartition("/")
    return (topic, int(partition)) if topic and partition.isdigit() else None


def _position_text(tp: Position) -> str:
    return f"{tp[0]}-{tp[1]}"


def input_of(output: str) -> str | None:
    """The input value an output value of a pipeline carries (None: not an output value)."""
    value, sep, _label = output.rpartition(OUTPUT_SEPARATOR)
    return value if sep else None


def _txn_label(call: _Call) -> str:
    label = call.invoke.extra.get("txn")
    return label if isinstance(label, str) else f"op {call.invoke.index}"


def _txn_outputs(call: _Call) -> list[str]:
    outputs = call.invoke.extra.get("outputs")
    if not isinstance(outputs, list | tuple):
        return []
    return [value for value in outputs if isinstance(value, str)]


def _txn_text(call: _Call) -> str:
    what = {"ok": "committed", "fail": "aborted", "info": "outcome unknown"}[call.outcome]
    error = call.field("error")
    return f"txn {_txn_label(call)} of {call.process} ({what}{f': {error}' if error else ''})"


def _offset_observations(calls: Sequence[_Call]) -> list[_Call]:
    return [
        call
        for call in calls
        if call.f == "offset-fetch" and call.outcome == "ok" and call.completion is not None
    ]


@dataclass(slots=True)
class _Pipeline:
    """What the exactly-once checks read: the transactions, the committed output, the input
    and the group's final committed offsets."""

    source: str | None
    group: str | None
    txns: list[_Call]
    txn_of: dict[str, _Call]
    """output value -> the transaction that wrote it."""
    committed: dict[Position, list[tuple[int, str | None]]]
    """The output as ``read_committed`` read it at the end, per partition."""
    committed_at: dict[str, list[_Slot]]
    """output value -> where the committed output has it."""
    inputs: dict[Position, list[tuple[int, str | None]]]
    final_offsets: dict[Position, int] | None
    final_op: int | None

    @classmethod
    def collect(
        cls, calls: Sequence[_Call], drained: Mapping[Position, Sequence[tuple[int, str | None]]]
    ) -> _Pipeline | None:
        drains = [
            call
            for call in calls
            if call.f == "drain-committed" and call.outcome == "ok" and call.completion is not None
        ]
        if not drains:
            return None
        source_field = drains[-1].invoke.extra.get("source")
        source = source_field if isinstance(source_field, str) else None
        group = drains[-1].field("group")
        txns = [
            call
            for call in calls
            if call.f == "txn" and (group is None or call.field("group") == group)
        ]
        txn_of = {value: call for call in txns for value in _txn_outputs(call)}
        committed: dict[Position, set[tuple[int, str | None]]] = defaultdict(set)
        for call in drains:
            assert call.completion is not None
            for topic, partition, offset, value in call.completion.records or ():
                committed[(topic, partition)].add((offset, value))
        ordered = {tp: sorted(records, key=_by_offset) for tp, records in committed.items()}
        committed_at: dict[str, list[_Slot]] = defaultdict(list)
        for (topic, partition), records in sorted(ordered.items()):
            for offset, value in records:
                if value is not None:
                    committed_at[value].append((topic, partition, offset))
        sources = (
            {source}
            if source is not None
            else {
                tp[0]
                for call in txns
                for name in (call.invoke.offsets or {})
                if (tp := _name_position(name))
            }
        )
        inputs = {tp: list(records) for tp, records in drained.items() if tp[0] in sources}
        final_offsets: dict[Position, int] | None = None
        final_op = None
        observations = sorted(
            (c for c in _offset_observations(calls) if group is None or c.field("group") == group),
            key=lambda c: c.completion.index if c.completion is not None else -1,
        )
        for call in observations[-1:]:  # the last one completed
            assert call.completion is not None
            final_offsets = {
                tp: offset
                for name, offset in (call.completion.offsets or {}).items()
                if (tp := _name_position(name)) is not None
            }
            final_op = call.completion.index
        return cls(
            source,
            group,
            txns,
            txn_of,
            ordered,
            dict(committed_at),
            inputs,
            final_offsets,
            final_op,
        )

    def anomalies(self, calls: Sequence[_Call]) -> list[Anomaly]:
        return [
            *self._exactly_once(),
            *self._aborted_reads(calls),
            *self._lost_commits(),
        ]

    def _carriers(self) -> dict[_Slot, list[tuple[_Slot, str]]]:
        """input record (topic, partition, offset) -> (where, output value) of every
        committed output carrying it: the record its transaction read in its place (an
        output's position in ``outputs`` is its input's in ``records``), else (an output no
        transaction recorded) every input record with the value the output carries."""
        read_as: dict[str, _Slot] = {}
        for call in self.txns:
            records = call.invoke.records or ()
            for output, (topic, partition, offset, _) in zip(
                _txn_outputs(call), records, strict=False
            ):
                read_as[output] = (topic, partition, offset)
        by_value: dict[str, list[_Slot]] = defaultdict(list)
        for (topic, partition), logged in self.inputs.items():
            for offset, value in logged:
                if value is not None:
                    by_value[value].append((topic, partition, offset))
        carriers: dict[_Slot, list[tuple[_Slot, str]]] = defaultdict(list)
        for value, slots in self.committed_at.items():
            read = read_as.get(value)
            carried = input_of(value)
            for source in [read] if read is not None else by_value.get(carried or "", []):
                carriers[source] += [(slot, value) for slot in slots]
        return carriers

    def _txn_indexes(self, outputs: Iterable[str]) -> list[int]:
        return [i for value in outputs if (call := self.txn_of.get(value)) for i in call.indexes]

    # Over 70 lines: one pass over the input records, each checked against its outputs.
    def _exactly_once(self) -> Iterable[Anomaly]:
        carriers = self._carriers()
        finals = self.final_offsets
        readers_of: dict[_Slot, list[_Call]] = defaultdict(list)
        for call in self.txns:
            for topic, partition, offset, _ in call.invoke.records or ():
                readers_of[(topic, partition, offset)].append(call)
        if finals is None and self.inputs:
            yield _anomaly(
                "unprocessed-input",
                f"the group {self.group or '(unknown)'}'s committed offsets were never read: "
                "nothing can say which input records the pipeline consumed",
            )
        for tp, records in sorted(self.inputs.items()):
            final = finals.get(tp, 0) if finals is not None else None
            unprocessed: list[int] = []
            for offset, value in records:
                if value is None:
                    continue
                carried = carriers.get((*tp, offset), [])
                where = f"{_position_text(tp)}@{offset} ({value})"
                outputs = [output for _, output in carried]
                if len(carried) > 1:
                    yield _anomaly(
                        "duplicate-output",
                        f"{where} is carried by {len(carried)} records of the committed output: "
                        + ", ".join(
                            f"{_slot_text(slot)} by {self._writer(output)}"
                            for slot, output in carried[:_MAX_LISTED]
                        )
                        + (
                            f" and {len(carried) - _MAX_LISTED} more"
                            if len(carried) > _MAX_LISTED
                            else ""
                        ),
                        self._txn_indexes(outputs),
                    )
                if final is None:
                    continue
                if offset < final and not carried:
                    readers = readers_of.get((*tp, offset), [])
                    yield _anomaly(
                        "lost-input",
                        f"{where} is below the group's final committed offset {final} of "
                        f"{_position_text(tp)} but no record of the committed output carries it"
                        + (
                            f"; read by {_listed([_txn_text(c) for c in readers])}"
                            if readers
                            else "; no transaction read it"
                        ),
                        [i for c in readers for i in c.indexes],
                    )
                elif offset >= final and carried:
                    yield _anomaly(
                        "output-without-offset",
                        f"{where} is carried by the committed output at "
                        f"{_listed([_slot_text(slot) for slot, _ in carried])} "
                        f"({_listed([self._writer(o) for o in outputs])}) but the group's final "
                        f"committed offset of {_position_text(tp)} is {final}",
                        self._txn_indexes(outputs),
                    )
                elif offset >= final:
                    unprocessed.append(offset)
            if unprocessed:
                yield _anomaly(
                    "unprocessed-input",
                    f"{len(unprocessed)} input records of {_position_text(tp)} (from "
                    f"@{unprocessed[0]}) are in no output: the group's final committed offset "
                    f"of it is {final}, its end {records[-1][0] + 1}",
                    () if self.final_op is None else (self.final_op,),
                )

    def _writer(self, output: str) -> str:
        call = self.txn_of.get(output)
        return _txn_text(call) if call is not None else f"{output!r}, written by no transaction"

    def _aborted_reads(self, calls: Sequence[_Call]) -> Iterable[Anomaly]:
        by_label = {_txn_label(call): call for call in self.txns}
        # Per transaction (a value no transaction wrote: per value), what showed it.
        shown: dict[str, tuple[list[str], list[int]]] = defaultdict(lambda: ([], []))
        for call in self.txns:
            slots = [s for v in _txn_outputs(call) for s in self.committed_at.get(v, ())]
            if call.outcome == "fail" and slots:
                reasons, indexes = shown[_txn_label(call)]
                reasons.append(
                    f"the committed output has {_listed([_slot_text(s) for s in slots])}"
                )
                indexes += call.indexes
        output_topics = {topic for topic, _ in self.committed}
        for call in calls:
            if (
                call.f != "poll"
                or call.outcome != "ok"
                or call.completion is None
                or _extra(call, "isolation") != "read_committed"
            ):
                continue
            for topic, partition, offset, value in call.completion.records or ():
                if topic not in output_topics or value is None:
                    continue
                writer = self.txn_of.get(value)
                aborted = writer is not None and writer.outcome == "fail"
                if value in self.committed_at and not aborted:
                    continue
                reasons, indexes = shown[_txn_label(writer) if writer is not None else value]
                reasons.append(
                    f"{call.process} polled {value!r} at {_slot_text((topic, partition, offset))} "
                    f"(op {call.completion.index})"
                    + ("" if value in self.committed_at else ", which the committed output lacks")
                )
                indexes += ([] if writer is None else list(writer.indexes)) + [
                    call.completion.index
                ]
        for key, (reasons, indexes) in sorted(shown.items()):
            writer = by_label.get(key)
            what = (
                _txn_text(writer) if writer is not None else f"{key!r}, written by no transaction"
            )
            yield _anomaly(
                "aborted-read", f"read_committed saw {what}: {_listed(reasons)}", indexes
            )
        yield from self._aborted_offsets(calls)

    def _aborted_offsets(self, calls: Sequence[_Call]) -> Iterable[Anomaly]:
        """Committed offsets read that no transaction invoked before the read completed
        committed, but aborted ones."""
        writers: dict[tuple[str, int], list[_Call]] = defaultdict(list)
        for call in self.txns:
            for name, offset in (call.invoke.offsets or {}).items():
                writers[(name, offset)].append(call)
        reported: set[tuple[str, int]] = set()
        for call in _offset_observations(calls):
            if self.group is not None and call.field("group") != self.group:
                continue
            assert call.completion is not None
            done = call.completion.index
            for name, offset in sorted((call.completion.offsets or {}).items()):
                key = (name, offset)
                committers = [c for c in writers.get(key, []) if c.invoke.index < done]
                if key in reported or any(c.outcome != "fail" for c in committers):
                    continue
                reported.add(key)
                by = (
                    f"only {_listed([_txn_text(c) for c in committers])} committed it"
                    if committers
                    else "no transaction committed it"
                )
                yield _anomaly(
                    "aborted-read",
                    f"{call.process} read the group's committed offset of {name} as {offset} "
                    f"(op {call.completion.index}), but {by}",
                    (*[i for c in committers for i in c.indexes], call.completion.index),
                )

    def _lost_commits(self) -> Iterable[Anomaly]:
        for call in self.txns:
            outputs = _txn_outputs(call)
            missing = [v for v in outputs if v not in self.committed_at]
            if call.outcome == "ok" and missing:
                yield _anomaly(
                    "lost-commit",
                    f"{_txn_text(call)}: the committed output lacks {len(missing)} of its "
                    f"{len(outputs)} records ({_listed(missing)})",
                    call.indexes,
                )
            elif call.outcome == "info" and 0 < len(missing) < len(outputs):
                yield _anomaly(
                    "non-atomic-txn",
                    f"{_txn_text(call)}: the committed output has {len(outputs) - len(missing)} "
                    f"of its {len(outputs)} records; it lacks {_listed(missing)}",
                    call.indexes,
                )


def _hanging_transactions(
    calls: Sequence[_Call], drained: Mapping[Position, Sequence[tuple[int, str | None]]]
) -> Iterable[Anomaly]:
    """Partitions a read_committed drain found held open (``open`` on its completion)."""
    writers = {value: call for call in calls if call.f == "txn" for value in _txn_outputs(call)}
    for call in calls:
        held = _extra(call, "open")
        if call.f != "drain-committed" or call.outcome == "ok" or not isinstance(held, Mapping):
            continue
        for name, ends in sorted(held.items()):
            tp = _name_position(name)
            if tp is None or not isinstance(ends, list | tuple) or len(ends) != 2:
                continue
            stable, high = ends
            first = next(((o, v) for o, v in drained.get(tp, ()) if o >= stable), None)
            writer = writers.get(first[1] or "") if first is not None else None
            held_by = ""
            if first is not None:
                by = _txn_text(writer) if writer is not None else "no transaction of the history"
                held_by = f"; the first record held, {first[1]!r} at @{first[0]}, is of {by}"
            yield _anomaly(
                "hanging-txn",
                f"{_position_text(tp)}'s last stable offset stayed at {stable}, below its high "
                f"watermark {high}, after every worker had stopped: a transaction nobody ends "
                f"holds read_committed readers there{held_by}",
                (*(writer.indexes if writer is not None else ()), *call.indexes),
            )


def _committed_offset_regressions(ops: Sequence[Op], calls: Sequence[_Call]) -> Iterable[Anomaly]:
    """Stable reads of committed offsets against what was read or committed before them."""
    stable = {
        call.invoke.index: call
        for call in _offset_observations(calls)
        if call.invoke.extra.get("isolation") == "read_committed"
    }
    by_completion = {
        call.completion.index: call for call in stable.values() if call.completion is not None
    }
    committed_txns = {
        call.completion.index: call
        for call in calls
        if call.f == "txn" and call.outcome == "ok" and call.completion is not None
    }
    # (group, partition name) -> (highest offset known to be committed, the op that showed it)
    known: dict[tuple[str, str], tuple[int, str, tuple[int, ...]]] = {}
    floors: dict[int, dict[tuple[str, str], tuple[int, str, tuple[int, ...]]]] = {}
    for op in ops:
        if op.index in stable:
            floors[op.index] = dict(known)
            continue
        txn = committed_txns.get(op.index)
        if txn is not None:
            group = txn.field("group") or ""
            for name, offset in (txn.invoke.offsets or {}).items():
                key = (group, name)
                if key not in known or offset > known[key][0]:
                    known[key] = (offset, f"{_txn_text(txn)}, acknowledged", txn.indexes)
            continue
        call = by_completion.get(op.index)
        if call is None:
            continue
        assert call.completion is not None
        group = call.field("group") or ""
        read = call.completion.offsets or {}
        names = set(call.invoke.partitions or ()) | set(read)
        for name in sorted(names):
            floor = floors[call.invoke.index].get((group, name))
            got = read.get(name)
            if floor is not None and (got is None or got < floor[0]):
                seen = "no committed offset" if got is None else str(got)
                yield _anomaly(
                    "committed-offset-regression",
                    f"{call.process} read group {group or '(none)'}'s committed offset of {name} "
                    f"as {seen} (op {op.index}) after {floor[1]} showed {floor[0]}",
                    (*floor[2], *call.indexes),
                )
            if got is not None and ((group, name) not in known or got > known[(group, name)][0]):
                known[(group, name)] = (
                    got,
                    f"{call.process}'s read (op {op.index})",
                    call.indexes,
                )


def _replica_divergence(final: FinalState) -> Iterable[Anomaly]:
    for (topic, partition), replicas in sorted(final.replica_logs.items()):
        by_offset: dict[int, dict[str | None, list[int]]] = defaultdict(lambda: defaultdict(list))
        for node, records in sorted(replicas.items()):
            for offset, value in records:
                by_offset[offset][value].append(node)
        differing = [(o, values) for o, values in sorted(by_offset.items()) if len(values) > 1]
        if not differing:
            continue
        offset, values = differing[0]
        shown = "; ".join(
            f"node {_listed(nodes)}: {value!r}"
            for value, nodes in sorted(values.items(), key=lambda kv: min(kv[1]))
        )
        yield _anomaly(
            "replica-divergence",
            f"{topic}-{partition}'s replicas differ below the high watermark at "
            f"{len(differing)} offset(s); first {topic}-{partition}@{offset}: {shown}",
        )


# --- statistics and recovery ------------------------------------------------------------


def _stats(calls: Sequence[_Call], seen: _Seen) -> dict[str, int]:
    stats: dict[str, int] = {
        f"{f}-{what}": 0
        for f in ("send", "poll", "commit", "fault")
        for what in ("invoked", "ok", "fail", "info")
    }
    for call in calls:
        stats[f"{call.f}-invoked"] = stats.get(f"{call.f}-invoked", 0) + 1
        stats[f"{call.f}-{call.outcome}"] = stats.get(f"{call.f}-{call.outcome}", 0) + 1
    stats["records-polled"] = seen.records_polled
    stats["records-drained"] = sum(len(records) for records in seen.drained.values())
    return dict(sorted(stats.items()))


def _is_acks_all(call: _Call) -> bool:
    return call.invoke.acks in (None, "all", "-1")


def _recovery(
    calls: Sequence[_Call], sends: Sequence[_Call], final: FinalState
) -> tuple[tuple[int, float | None], ...]:
    acked = [
        call
        for call in sends
        if call.outcome == "ok" and call.completion is not None and _is_acks_all(call)
    ]
    heals: list[tuple[int, float, int | None]] = []  # (fault op, healed at, completion index)
    if final.heal_times_ms:
        heals = [(index, float(ms), None) for index, ms in final.heal_times_ms]
    else:
        heals = [
            (call.invoke.index, call.completion.time_ms, call.completion.index)
            for call in calls
            if call.f == "fault"
            and call.invoke.fault in HEALING_FAULTS
            and call.outcome == "ok"
            and call.completion is not None
        ]
    recoveries: list[tuple[int, float | None]] = []
    for fault_index, healed_at, healed_index in heals:
        after = [
            call.completion.time_ms
            for call in acked
            if call.completion is not None
            and (
                call.invoke.index > healed_index
                if healed_index is not None
                else call.invoke.time_ms >= healed_at
            )
        ]
        recoveries.append((fault_index, round(min(after) - healed_at, 1) if after else None))
    return tuple(recoveries)
