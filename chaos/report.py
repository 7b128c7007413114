"""The HTML report of a chaos run: faults over throughput and latency, then the anomalies.

One self-contained file (inline SVG, no script): per second, the acknowledged sends as bars
with the sends that ended ``info`` (unknown) or ``fail`` stacked on them; the p50 and maximum
latency of the sends acknowledged in that second as lines on a second scale; each fault as a
shaded band from its injection to its healing, labelled; then the summary, the recovery after
each heal, the anomalies by kind and every anomaly with the operations that show it; a run
with a transactional pipeline adds its transactions by outcome and error.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaos.checker import CheckResult
from chaos.history import Op

__all__ = ["render_report"]

_WIDTH = 960
_HEIGHT = 200
_LEFT = 48
_INJECTING = frozenset({"kill", "pause", "partition", "power-loss"})
_MAX_ANOMALIES = 200
_MAX_OPS_SHOWN = 8


@dataclass
class _Second:
    acked: int = 0
    unknown: int = 0
    failed: int = 0
    latencies: list[float] | None = None


def _per_second(ops: Sequence[Op]) -> dict[int, _Second]:
    invoked = {op.index: op for op in ops if op.f == "send" and op.type == "invoke"}
    seconds: dict[int, _Second] = defaultdict(_Second)
    for op in ops:
        if op.f != "send" or op.type == "invoke":
            continue
        second = seconds[int(op.time_ms // 1000)]
        if op.type == "ok":
            second.acked += 1
            start = invoked.get(op.ref) if op.ref is not None else None
            if start is not None:
                if second.latencies is None:
                    second.latencies = []
                second.latencies.append(op.time_ms - start.time_ms)
        elif op.type == "info":
            second.unknown += 1
        else:
            second.failed += 1
    return seconds


def _fault_bands(ops: Sequence[Op]) -> list[tuple[float, float, str]]:
    bands: list[tuple[float, float, str]] = []
    started: dict[str, tuple[float, str]] = {}
    for op in ops:
        if op.f != "fault" or op.type != "ok":
            continue
        key = ",".join(str(t) for t in op.targets or ())
        if op.fault in _INJECTING:
            started[key] = (op.time_ms, f"{op.fault} {key}")
        elif key in started:
            begin, label = started.pop(key)
            bands.append((begin, op.time_ms, label))
    end = max((op.time_ms for op in ops), default=0.0)
    bands += [(begin, end, label) for begin, label in started.values()]
    return bands


# Over 70 lines: one chart drawn layer by layer: fault bands, bars, latency lines, legend.
def _svg(ops: Sequence[Op]) -> str:
    seconds = _per_second(ops)
    last = int(max((o.time_ms for o in ops), default=0) // 1000) + 1
    x = (_WIDTH - _LEFT) / max(last, 1)
    top = max((s.acked + s.unknown + s.failed for s in seconds.values()), default=1) or 1
    slowest = max(
        (max(s.latencies) for s in seconds.values() if s.latencies),
        default=1.0,
    )
    plot = _HEIGHT - 10

    def bar(second: int, base: float, count: int, colour: str, what: str) -> tuple[str, float]:
        height = count / top * plot
        return (
            f'<rect x="{_LEFT + second * x:.1f}" y="{_HEIGHT - base - height:.1f}" '
            f'width="{max(x - 1, 1):.1f}" height="{height:.1f}" fill="{colour}">'
            f"<title>{second} s: {count} {what}</title></rect>",
            base + height,
        )

    parts = [
        f'<svg width="{_WIDTH}" height="{_HEIGHT + 50}" xmlns="http://www.w3.org/2000/svg" '
        'font-family="sans-serif">'
    ]
    for begin, end, label in _fault_bands(ops):
        left = _LEFT + begin / 1000 * x
        width = max((end - begin) / 1000 * x, 1)
        parts.append(
            f'<rect x="{left:.1f}" y="0" width="{width:.1f}" height="{_HEIGHT}" '
            f'fill="#f4cccc"><title>{html.escape(label)}</title></rect>'
            f'<text x="{left + 2:.1f}" y="10" font-size="9" fill="#990000">'
            f"{html.escape(label)}</text>"
        )
    for second, counts in sorted(seconds.items()):
        base = 0.0
        for count, colour, what in (
            (counts.acked, "#6fa8dc", "acknowledged"),
            (counts.unknown, "#f1c232", "unknown (info)"),
            (counts.failed, "#cc0000", "failed"),
        ):
            if count:
                shape, base = bar(second, base, count, colour, what)
                parts.append(shape)
    for name, quantile, colour in (("p50", 0.5, "#38761d"), ("max", 1.0, "#999999")):
        runs: list[list[str]] = []
        previous = None
        for second, counts in sorted(seconds.items()):
            if not counts.latencies:
                continue
            ordered = sorted(counts.latencies)
            value = ordered[min(int(len(ordered) * quantile), len(ordered) - 1)]
            point = f"{_LEFT + second * x + x / 2:.1f},{_HEIGHT - value / slowest * plot:.1f}"
            if previous is None or second != previous + 1:
                runs.append([])  # no line across seconds without an acknowledgement
            runs[-1].append(point)
            previous = second
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{colour}"/>')
                continue
            parts.append(
                f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                f'stroke-width="1.5"><title>{name} send latency</title></polyline>'
            )
    parts.append(
        f'<text x="0" y="12" font-size="10">{top}/s</text>'
        f'<text x="0" y="{_HEIGHT}" font-size="10">0</text>'
        f'<text x="{_WIDTH - 50}" y="12" font-size="10" fill="#38761d">{slowest:.0f} ms</text>'
        f'<text x="{_LEFT}" y="{_HEIGHT + 14}" font-size="10">0 s</text>'
        f'<text x="{_WIDTH - 30}" y="{_HEIGHT + 14}" font-size="10">{last} s</text>'
        f'<text x="{_LEFT}" y="{_HEIGHT + 30}" font-size="11">bars: sends completed per second '
        "by outcome (blue acknowledged, yellow unknown, red failed), scale at the top left · "
        "red bands: faults, from injection to healing</text>"
        f'<text x="{_LEFT}" y="{_HEIGHT + 45}" font-size="11">lines: latency of the sends '
        "acknowledged in that second, p50 (green) and max (grey), scale at the top right"
        "</text></svg>"
    )
    return "\n".join(parts)


def _table(rows: Sequence[Sequence[object]], head: Sequence[str] = ()) -> str:
    header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table>{f'<tr>{header}</tr>' if header else ''}{body}</table>"


def _faults(ops: Sequence[Op], recovery: Mapping[int, float | None]) -> str:
    rows = []
    completions = {op.ref: op for op in ops if op.f == "fault" and op.type != "invoke"}
    for op in ops:
        if op.f != "fault" or op.type != "invoke":
            continue
        done = completions.get(op.index)
        outcome: str = "(none)" if done is None else done.type
        if done is not None and done.error:
            outcome += f": {done.error}"
        ms = recovery.get(op.index, "")
        rows.append(
            (
                f"{op.time_ms / 1000:.1f} s",
                op.fault,
                list(op.targets or ()),
                op.detail or "",
                outcome,
                "-" if ms is None else ms,
            )
        )
    return _table(
        rows, ("at", "fault", "nodes", "detail", "outcome", "recovery (ms to 1st acks=all ok)")
    )


def _transactions(ops: Sequence[Op]) -> str:
    """The pipeline's transactions (``txn`` ops) and producer initialisations by outcome and
    error name; empty when the history has none."""
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for op in ops:
        if op.f in ("txn", "txn-init") and op.type != "invoke":
            error = (op.error or "").split(":")[0]
            counts[(op.f, op.type, error)] += 1
    if not counts:
        return ""
    outcome = {"ok": "committed", "fail": "aborted", "info": "unknown"}
    rows = [
        (f, outcome.get(t, t) if f == "txn" else t, error or "-", n)
        for (f, t, error), n in sorted(counts.items())
    ]
    return "<h2>Transactions</h2>" + _table(rows, ("op", "outcome", "error", "count"))


def render_report(summary: Mapping[str, Any], ops: Sequence[Op], result: CheckResult) -> str:
    """The report's HTML text."""
    by_index = {op.index: op for op in ops}
    rows = []
    for anomaly in result.anomalies[:_MAX_ANOMALIES]:
        shown = "<br>".join(
            html.escape(json.dumps(by_index[i].to_json(), separators=(",", ":")))
            for i in anomaly.op_indexes[:_MAX_OPS_SHOWN]
            if i in by_index
        )
        rows.append(
            f"<tr><td>{html.escape(anomaly.kind)}</td><td>{html.escape(anomaly.message)}</td>"
            f"<td><code>{shown}</code></td></tr>"
        )
    more = len(result.anomalies) - _MAX_ANOMALIES
    counts = _table([(kind, count) for kind, count in result.counts.items()], ("kind", "count"))
    stats = _table(sorted(result.stats.items()), ("operations", "count"))
    recovery = dict(result.recovery_ms)
    title = html.escape(
        f"lograft chaos: {summary['scenario']} ({summary['workload']}) seed {summary['seed']}"
    )
    verdict = (
        "valid: no anomaly found"
        if result.valid
        else f"<b>ANOMALIES FOUND: {len(result.anomalies)}</b>"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:20px}}td,th{{border-top:1px solid #ddd;padding:3px;
vertical-align:top;font-size:13px;text-align:left}}code{{font-size:11px}}</style></head><body>
<h1>{title}</h1>
<p>{verdict} · target {html.escape(str(summary.get("target", "local")))} ·
workload {html.escape(str(summary["workload"]))} · {summary["duration_s"]} s of load ·
{summary["operations"]} operations · {summary["faults"]} faults injected ·
replicas compared below the high watermark: {"yes" if summary.get("replicas_compared") else "no"}
· results in <code>{html.escape(str(summary.get("results", "")))}</code></p>
{_svg(ops)}
<h2>Faults</h2>{_faults(ops, recovery)}
{_transactions(ops)}
<h2>Anomalies by kind</h2>{counts}
<h2>Anomalies</h2><table><tr><th>kind</th><th>what</th><th>operations</th></tr>
{"".join(rows) or "<tr><td colspan=3>none</td></tr>"}</table>
{f"<p>{more} more anomalies in result.json</p>" if more > 0 else ""}
<h2>Operations</h2>{stats}
</body></html>
"""
