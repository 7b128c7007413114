"""The history of a chaos run: every operation as it was invoked and as it completed.

The model is Jepsen's. Every operation is an ``invoke`` followed, from the same ``process``,
by exactly one completion: ``ok`` (it happened), ``fail`` (it certainly did not happen) or
``info`` (unknown: it timed out or the connection was lost, so it may or may not have
happened). The checker (:mod:`chaos.checker`) reasons only from these records.

The functions (``f``) and their fields:

- ``send``: a producer sends one record. invoke: ``topic``, ``partition`` (may be ``None``
  before the partitioner picks), ``value`` (unique in the run); ok: ``partition``,
  ``offset``; fail / info: ``error``.
- ``poll``: a consumer's poll. ok: ``records``, a list of ``[topic, partition, offset,
  value]``; ``group`` (or ``None`` for a consumer by assignment).
- ``commit``: a group consumer commits. invoke: ``group``, ``offsets``
  (``{"topic/partition": offset}``).
- ``rebalance`` / ``seek``: a consumer's assignment or position changed; ``partitions``.
- ``fault``: the nemesis. invoke: ``fault`` ("kill", "pause", "partition", "heal",
  "power-loss", "restart", ...), ``targets`` (node ids), ``detail``.
- ``drain``: after healing, every record of every partition from the earliest offset:
  ok: ``records`` like ``poll``.

Every completion carries ``ref``, the index of the invocation it completes: a producer has
many sends in flight at once, so "the process's next completion" would pair them wrongly.
Optional fields a workload may add: ``producer`` (a config label), ``acks``,
``idempotent``. Fields this module does not know are kept in :attr:`Op.extra`.

:class:`HistoryWriter` appends one JSON line per operation, flushed per line, so a run that
crashes keeps what it recorded; :func:`read_history` reads such a file back (a torn last
line is ignored).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TextIO

__all__ = [
    "FUNCTIONS",
    "TYPES",
    "HistoryError",
    "HistoryWriter",
    "Op",
    "OpType",
    "read_history",
]

log = logging.getLogger(__name__)

OpType = Literal["invoke", "ok", "fail", "info"]
TYPES: tuple[OpType, ...] = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("send", "poll", "commit", "rebalance", "seek", "fault", "drain")

_CORE_FIELDS = ("index", "time_ms", "process", "type", "f")
_KNOWN_FIELDS = frozenset(
    {
        "topic",
        "partition",
        "offset",
        "value",
        "error",
        "records",
        "group",
        "offsets",
        "partitions",
        "fault",
        "targets",
        "detail",
        "producer",
        "acks",
        "idempotent",
        "ref",
    }
)


class HistoryError(ValueError):
    """A history file or operation that does not follow the format."""


@dataclass(frozen=True, slots=True)
class Op:
    """One operation record: an invocation or a completion."""

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
    records: tuple[tuple[str, int, int, str | None], ...] | None = None
    group: str | None = None
    offsets: Mapping[str, int] | None = None
    partitions: tuple[str, ...] | None = None
    fault: str | None = None
    targets: tuple[int, ...] | None = None
    detail: str | None = None
    producer: str | None = None
    acks: str | None = None
    idempotent: bool | None = None
    ref: int | None = None
    """On a completion: the index of the invocation it completes."""
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

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
        """An op from its JSON object; ``HistoryError`` when it does not follow the format."""
        try:
            op_type = document["type"]
            if op_type not in TYPES:
                raise HistoryError(f"type must be one of {TYPES}, got {op_type!r}")
            fields: dict[str, Any] = {
                "index": int(document["index"]),
                "time_ms": float(document["time_ms"]),
                "process": str(document["process"]),
                "type": op_type,
                "f": str(document["f"]),
            }
        except KeyError as exc:
            raise HistoryError(f"missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise HistoryError(f"bad field: {exc}") from None
        extra: dict[str, Any] = {}
        for name, value in document.items():
            if name in _CORE_FIELDS:
                continue
            if name not in _KNOWN_FIELDS:
                extra[name] = value
            elif value is not None:
                fields[name] = _typed(name, value)
        return cls(**fields, extra=MappingProxyType(extra))


def _typed(name: str, value: Any) -> Any:
    """A known field's JSON value in the type :class:`Op` holds it in."""
    try:
        if name == "records":
            return tuple(
                (str(topic), int(partition), int(offset), None if v is None else str(v))
                for topic, partition, offset, v in value
            )
        if name in ("partition", "offset", "ref"):
            return int(value)
        if name == "targets":
            return tuple(int(target) for target in value)
        if name == "partitions":
            return tuple(str(p) for p in value)
        if name == "offsets":
            return MappingProxyType({str(k): int(v) for k, v in value.items()})
        if name == "idempotent":
            return bool(value)
        return str(value)
    except (TypeError, ValueError, AttributeError) as exc:
        raise HistoryError(f"bad {name}: {value!r} ({exc})") from None


class HistoryWriter:
    """Records ops in order, in memory and as JSON lines in ``path``. Thread-safe.

    ``clock`` returns seconds (``time.monotonic`` by default); ``time_ms`` counts from the
    writer's creation.
    """

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._file: TextIO | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def record(self, process: str, op_type: OpType, f: str, **fields: Any) -> Op:
        """Append one op with the next index and the current time; returns it."""
        known = {k: _typed(k, v) for k, v in fields.items() if k in _KNOWN_FIELDS and v is not None}
        extra = {k: v for k, v in fields.items() if k not in _KNOWN_FIELDS}
        with self._lock:
            op = Op(
                index=len(self._ops),
                time_ms=round((self._clock() - self._start) * 1000.0, 3),
                process=process,
                type=op_type,
                f=f,
                **known,
                extra=MappingProxyType(extra),
            )
            self._ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")
                self._file.flush()
        return op

    def invoke(self, process: str, f: str, **fields: Any) -> Op:
        """Record the invocation of ``f`` by ``process``."""
        return self.record(process, "invoke", f, **fields)

    def complete(self, invoked: Op, op_type: OpType, **fields: Any) -> Op:
        """Record the completion (``ok``, ``fail`` or ``info``) of an invocation."""
        if op_type == "invoke":
            raise HistoryError("a completion cannot be an invoke")
        return self.record(invoked.process, op_type, invoked.f, ref=invoked.index, **fields)

    def ops(self) -> list[Op]:
        """Every op recorded so far, in order."""
        with self._lock:
            return list(self._ops)

    def close(self) -> None:
        """Close the file (the ops stay readable in memory)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_history(path: Path) -> list[Op]:
    """The ops of a history file. A torn last line (a run that crashed while writing it) is
    ignored with a warning; any other malformed line raises ``HistoryError`` naming it."""
    lines = path.read_text(encoding="utf-8").split("\n")
    ops: list[Op] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            document = json.loads(line)
            if not isinstance(document, dict):
                raise HistoryError("not a JSON object")
            ops.append(Op.from_json(document))
        except (json.JSONDecodeError, HistoryError) as exc:
            is_last = all(not rest.strip() for rest in lines[number:])
            if is_last and isinstance(exc, json.JSONDecodeError):
                log.warning("torn last line ignored path=%s line=%d", path, number)
                break
            raise HistoryError(f"{path}:{number}: {exc}") from None
    return ops


def ops_by_index(ops: Sequence[Op]) -> dict[int, Op]:
    """``{index: op}``."""
    return {op.index: op for op in ops}
