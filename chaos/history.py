"""The history of a chaos run: every operation as it was invoked and as it completed.

The model is Jepsen's. Every operation is an ``invoke`` followed, from the same ``process``,
by exactly one completion: ``ok`` (it happened), ``fail`` (it certainly did not happen) or
``info`` (unknown: it timed out or the connection was lost, so it may or may not have
happened). An invocation without a completion (the run ended first) counts as ``info``.
The checker (:mod:`chaos.checker`) reasons only from these records.

One JSON object per line. The fields every op has: ``index`` (its position, 0, 1, 2 ...),
``time_ms`` (ms since the writer started, from a monotonic clock), ``process`` (who:
"producer-0", "consumer-g0-1", "assign-consumer-0", "nemesis", "drain"), ``type``
("invoke", "ok", "fail", "info") and ``f``. The functions and their fields:

- ``send``: a producer sends one record. invoke: ``topic``, ``partition`` (may be absent
  before the partitioner picks), ``value`` (a string unique in the whole run); ok:
  ``partition``, ``offset``; fail / info: ``error`` (a Kafka error name or exception text).
- ``poll``: a consumer's poll. ok: ``records``, a list of ``[topic, partition, offset,
  value]``; ``group`` (absent or null for a consumer by assignment).
- ``commit``: a group consumer commits. invoke: ``group``, ``offsets``
  (``{"topic/partition": offset}``).
- ``rebalance``: a consumer's assignment changed (a group rebalance, or a new ``assign``);
  ``partitions``: the new assignment as ``"topic/partition"`` strings. Its positions may go
  back to the committed offsets, so the checker does not compare its polls across it.
- ``seek``: a consumer moved its position on purpose; ``partitions``: the partitions it
  moved (absent: all of them).
- ``fault``: the nemesis. invoke: ``fault`` ("kill", "pause", "resume", "partition",
  "heal", "power-loss", "restart", ...), ``targets`` (node ids), ``detail``.
- ``drain``: after healing, every record of every partition from its earliest offset:
  ok: ``records`` like ``poll``, in offset order. invoke: ``topic`` (the topic drained;
  absent in older histories).

The transactional pipeline (the ``txn-pipeline`` workload) adds these; the checker's
exactly-once checks read them, every other check reads the pipeline's polls, seeks and
rebalances (of the input) and the drains as it reads any consumer's:

- ``txn``: one transaction of a pipeline worker: it read ``records`` (the input records of
  one poll), wrote one output record per input record and committed the group's ``offsets``
  (the next offsets to read) in the transaction. invoke: ``group``, ``offsets``,
  ``records``, and extra fields ``txn`` (a label unique in the run), ``transactional_id``
  and ``outputs`` (the output values, in the order of ``records``: each is
  ``<input value>|<txn label>``, see :data:`OUTPUT_SEPARATOR`). ok: the commit returned (the
  worker believes it committed); fail: it certainly did not commit (the commit was never
  asked for, or ``abort_transaction`` returned); info: unknown (the commit was asked for
  and its outcome not learnt). Completions carry ``error`` and an extra ``aborted`` (bool).
- ``txn-init``: a worker's ``init_transactions`` (a new producer of its transactional id,
  which fences the previous one and ends its open transaction); extra
  ``transactional_id``.
- ``offset-fetch``: a read of a group's committed offsets (OffsetFetch; extra
  ``isolation``: ``read_committed`` when it asked for stable offsets, KIP-447, so that a
  transaction in flight is waited for). invoke: ``group``, ``partitions``; ok: ``offsets``
  (partitions without a committed offset are left out).
- ``drain-committed``: after the workers stopped and every transaction ended, a
  ``read_committed`` read of every partition of the output topic from its earliest offset
  (ok: ``records``). invoke: ``topic`` and extra ``source`` (the input topic) and ``group``
  (the pipeline's group). The output's ``read_uncommitted`` read is an ordinary ``drain``.

A poll with the extra ``isolation`` ``read_committed`` is a ``read_committed`` consumer's.

Every completion carries ``ref``, the index of the invocation it completes: a producer has
many sends in flight at once, so "the process's next completion" would pair them wrongly.
Optional fields a workload may add to any op: ``producer`` (a config label), ``acks``
("all", "1", "0"), ``idempotent`` (bool). Any other field is kept, unchanged, in
:attr:`Op.extra` (JSON values), so workloads may record more without changing this module;
other ``f`` names are allowed too (the checker ignores them).

:class:`HistoryWriter` appends one JSON line per operation, flushed per line, so a run that
crashes keeps what it recorded; :func:`read_history` reads such a file back (a torn last
line is ignored; any other malformed line raises :class:`HistoryLineError`).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TextIO

__all__ = [
    "FUNCTIONS",
    "OUTPUT_SEPARATOR",
    "TYPES",
    "HistoryError",
    "HistoryLineError",
    "HistoryWriter",
    "Op",
    "OpType",
    "Record",
    "read_history",
]

log = logging.getLogger(__name__)

OpType = Literal["invoke", "ok", "fail", "info"]
"""An op's ``type``: ``invoke``, or the completion ``ok``, ``fail`` or ``info`` (unknown)."""
TYPES: tuple[OpType, ...] = ("invoke", "ok", "fail", "info")
"""The values of :data:`OpType`; the writer and the reader refuse an op with any other."""
FUNCTIONS = (
    "send",
    "poll",
    "commit",
    "rebalance",
    "seek",
    "fault",
    "drain",
    "txn",
    "txn-init",
    "offset-fetch",
    "drain-committed",
)
"""The functions this module documents (others are allowed; the checker ignores them)."""

OUTPUT_SEPARATOR = "|"
"""Between the input value and the transaction label in a pipeline's output value."""

Record = tuple[str, int, int, "str | None"]
"""One record a poll or the drain read: (topic, partition, offset, value)."""

_CORE_FIELDS = ("index", "time_ms", "process", "type", "f")
_STR_FIELDS = frozenset({"topic", "value", "error", "group", "fault", "detail", "producer", "acks"})
_INT_FIELDS = frozenset({"partition", "offset", "ref"})
_KNOWN_FIELDS = (
    _STR_FIELDS
    | _INT_FIELDS
    | {
        "records",
        "offsets",
        "partitions",
        "targets",
        "idempotent",
    }
)


class HistoryError(ValueError):
    """An operation that does not follow the history format, or a writer used wrongly."""


class HistoryLineError(HistoryError):
    """A line of a history file that is not a valid op (``path``, 1-based ``line``)."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Op:
    """One operation record: an invocation or a completion (see the module docstring)."""

    index: int
    time_ms: float
    process: str
    type: OpType
    f: str
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    value: str | None = None
    error: str | None = None
    records: tuple[Record, ...] | None = None
    group: str | None = None
    offsets: Mapping[str, int] | None = field(default=None, hash=False)
    partitions: tuple[str, ...] | None = None
    fault: str | None = None
    targets: tuple[int, ...] | None = None
    detail: str | None = None
    producer: str | None = None
    acks: str | None = None
    idempotent: bool | None = None
    ref: int | None = None
    """On a completion: the index of the invocation it completes."""
    extra: Mapping[str, Any] = field(default_factory=_empty, hash=False)
    """Fields this module does not know, as they were recorded."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object of this op (fields that are ``None`` are left out)."""
        document: dict[str, Any] = {name: getattr(self, name) for name in _CORE_FIELDS}
        for name in sorted(_KNOWN_FIELDS):
            value = getattr(self, name)
            if value is None:
                continue
            if name == "records":
                value = [list(record) for record in value]
            elif name in ("partitions", "targets"):
                value = list(value)
            elif name == "offsets":
                value = dict(value)
            document[name] = value
        document.update(self.extra)
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Op:
        """An op from its JSON object; :class:`HistoryError` when it does not follow the
        format (a missing or mistyped field)."""
        for name in _CORE_FIELDS:
            if name not in document:
                raise HistoryError(f"missing field {name!r}")
        op_type = document["type"]
        if op_type not in TYPES:
            raise HistoryError(f"type must be one of {', '.join(TYPES)}, got {op_type!r}")
        known, extra = _split(
            {k: v for k, v in document.items() if k not in _CORE_FIELDS}, copy_extra=False
        )
        return cls(
            index=_index(document["index"]),
            time_ms=_time(document["time_ms"]),
            process=_name("process", document["process"]),
            type=op_type,
            f=_name("f", document["f"]),
            **known,
            extra=MappingProxyType(extra),
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _index(value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise HistoryError(f"index must be an integer >= 0, got {value!r}")
    return int(value)


def _time(value: Any) -> float:
    if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
        raise HistoryError(f"time_ms must be a finite number, got {value!r}")
    return float(value)


def _name(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise HistoryError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _split(fields: Mapping[str, Any], copy_extra: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The known fields (checked and converted to the types :class:`Op` holds) and the rest.
    ``None`` values of known fields are dropped (absent and null mean the same)."""
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in fields.items():
        if name in _CORE_FIELDS:
            raise HistoryError(f"{name} is set by the writer")
        if name not in _KNOWN_FIELDS:
            extra[name] = value
        elif value is not None:
            known[name] = _typed(name, value)
    if copy_extra and extra:
        # What the file will hold: a value read back equals the value kept in memory.
        try:
            extra = json.loads(json.dumps(extra, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise HistoryError(f"extra fields must be JSON values: {exc}") from None
    return known, extra


def _typed(name: str, value: Any) -> Any:
    """A known field's value, checked, in the type :class:`Op` holds it in."""
    if name in _STR_FIELDS:
        if name == "acks" and _is_int(value):
            return str(value)
        if not isinstance(value, str):
            raise HistoryError(f"{name} must be a string, got {value!r}")
        return value
    if name in _INT_FIELDS:
        if not _is_int(value):
            raise HistoryError(f"{name} must be an integer, got {value!r}")
        return int(value)
    if name == "idempotent":
        if not isinstance(value, bool):
            raise HistoryError(f"idempotent must be true or false, got {value!r}")
        return value
    if name == "records":
        return tuple(_record(record) for record in _sequence(name, value))
    if name == "targets":
        targets = _sequence(name, value)
        if not all(_is_int(target) for target in targets):
            raise HistoryError(f"targets must be node ids (integers), got {value!r}")
        return tuple(int(target) for target in targets)
    if name == "partitions":
        partitions = _sequence(name, value)
        if not all(isinstance(p, str) for p in partitions):
            raise HistoryError(f"partitions must be 'topic/partition' strings, got {value!r}")
        return tuple(partitions)
    if name == "offsets":
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and _is_int(v) for k, v in value.items()
        ):
            raise HistoryError(f"offsets must map 'topic/partition' to an integer: {value!r}")
        return MappingProxyType({k: int(v) for k, v in value.items()})
    raise AssertionError(f"unhandled known field {name}")


def _sequence(name: str, value: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise HistoryError(f"{name} must be a list, got {value!r}")
    return value


def _record(value: Any) -> Record:
    if isinstance(value, list | tuple) and len(value) == 4:
        topic, partition, offset, record_value = value
        if (
            isinstance(topic, str)
            and _is_int(partition)
            and _is_int(offset)
            and (record_value is None or isinstance(record_value, str))
        ):
            return (topic, int(partition), int(offset), record_value)
    raise HistoryError(f"a record must be [topic, partition, offset, value], got {value!r}")


class HistoryWriter:
    """Records ops in order, in memory and (with a ``path``) as JSON lines. Thread-safe.

    The writer creates ``path`` (``FileExistsError`` if it exists: one history per file) and
    writes each op as one line, flushed at once, so a crashed run keeps its history up to
    the last op recorded. ``clock`` returns seconds from a monotonic source
    (``time.monotonic`` by default); ``time_ms`` counts from the writer's creation.
    Every op gets the next ``index``; a completion's ``ref`` is its invocation's index.
    """

    def __init__(
        self, path: Path | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._open_calls: set[int] = set()
        self._closed = False
        self._file: TextIO | None = (
            open(path, "x", encoding="utf-8") if path is not None else None  # noqa: SIM115
        )

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def invoke(self, process: str, f: str, **fields: Any) -> Op:
        """Record that ``process`` invokes ``f``; returns the op (pass it to
        :meth:`complete`)."""
        return self._append(process, "invoke", f, fields, None)

    def complete(self, invoked: Op, op_type: OpType, **fields: Any) -> Op:
        """Record the completion (``ok``, ``fail`` or ``info``) of an invocation this writer
        recorded; ``HistoryError`` if it was already completed."""
        if op_type == "invoke" or op_type not in TYPES:
            raise HistoryError(f"a completion is ok, fail or info, not {op_type!r}")
        if invoked.type != "invoke":
            raise HistoryError(f"op {invoked.index} is a completion, not an invocation")
        return self._append(invoked.process, op_type, invoked.f, fields, invoked)

    def ops(self) -> list[Op]:
        """Every op recorded so far, in order (a copy)."""
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        """Close the file. The ops stay readable in memory; recording more raises
        :class:`HistoryError`."""
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None

    def _append(
        self, process: str, op_type: OpType, f: str, fields: Mapping[str, Any], invoked: Op | None
    ) -> Op:
        known, extra = _split(fields, copy_extra=True)
        if "ref" in known:
            raise HistoryError("ref is set by the writer")
        process = _name("process", process)
        f = _name("f", f)
        with self._lock:
            if self._closed:
                raise HistoryError("the history is closed")
            if invoked is not None:
                if invoked.index not in self._open_calls or self._ops[invoked.index] is not invoked:
                    raise HistoryError(
                        f"op {invoked.index} ({invoked.process} {invoked.f}) is not an open "
                        "invocation of this history"
                    )
                known["ref"] = invoked.index
            op = Op(
                index=len(self._ops),
                time_ms=round((self._clock() - self._start) * 1000.0, 3),
                process=process,
                type=op_type,
                f=f,
                **known,
                extra=MappingProxyType(extra),
            )
            line = json.dumps(op.to_json(), separators=(",", ":"), allow_nan=False) + "\n"
            if self._file is not None:
                self._file.write(line)
                self._file.flush()
            self._ops.append(op)
            if invoked is None:
                self._open_calls.add(op.index)
            else:
                self._open_calls.discard(invoked.index)
        return op


def read_history(path: Path | str) -> list[Op]:
    """The ops of a history file, in order.

    Each line must be one op, with ``index`` counting from 0, ``time_ms`` never going back,
    and each ``ref`` naming an earlier invocation of the same process and function that
    nothing completed yet. A last line without its newline that is not valid JSON is the
    torn write of a run that crashed: it is ignored with a warning. Any other malformed
    line raises :class:`HistoryLineError` naming its line number.
    """
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    # After the last newline: b"" when the file ends cleanly, else an unterminated line.
    unterminated = lines.pop()
    ops: list[Op] = []
    open_calls: dict[int, Op] = {}
    for number, raw in enumerate(lines, start=1):
        ops.append(_parse_line(path, number, raw, ops, open_calls))
    if unterminated.strip():
        number = len(lines) + 1
        try:
            document = json.loads(unterminated.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            log.warning(
                "torn last line ignored path=%s line=%d bytes=%d", path, number, len(unterminated)
            )
        else:
            ops.append(_check_line(path, number, document, ops, open_calls))
    return ops


def _parse_line(
    path: Path, number: int, raw: bytes, ops: list[Op], open_calls: dict[int, Op]
) -> Op:
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HistoryLineError(path, number, f"not JSON ({exc})") from None
    return _check_line(path, number, document, ops, open_calls)


def _check_line(
    path: Path, number: int, document: Any, ops: list[Op], open_calls: dict[int, Op]
) -> Op:
    if not isinstance(document, dict):
        raise HistoryLineError(path, number, "not a JSON object")
    try:
        op = Op.from_json(document)
    except HistoryError as exc:
        raise HistoryLineError(path, number, str(exc)) from None
    if op.index != len(ops):
        raise HistoryLineError(path, number, f"index {op.index}, expected {len(ops)}")
    if ops and op.time_ms < ops[-1].time_ms:
        raise HistoryLineError(
            path, number, f"time_ms {op.time_ms} is before the previous op's {ops[-1].time_ms}"
        )
    if op.type == "invoke":
        if op.ref is not None:
            raise HistoryLineError(path, number, "an invocation has no ref")
        open_calls[op.index] = op
    elif op.ref is not None:
        invoked = open_calls.pop(op.ref, None)
        if invoked is None or invoked.process != op.process or invoked.f != op.f:
            raise HistoryLineError(
                path,
                number,
                f"ref {op.ref} is not an open {op.f} invocation of {op.process}",
            )
    return op
