"""The HTML report of a chaos run: faults over throughput and latency, then the anomalies.

One self-contained file (inline SVG, no script): acknowledged sends per second as bars,
the p50/max send latency of each second as lines, each fault as a shaded band from its
injection to its healing, and every anomaly with the operations that show it.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from chaos.checker import CheckResult
from chaos.history import Op

__all__ = ["render_report"]

_WIDTH = 900
_HEIGHT = 220


def _per_second(ops: Sequence[Op]) -> tuple[dict[int, int], dict[int, list[float]]]:
    invoked: dict[tuple[str, int], Op] = {}
    acked: dict[int, int] = defaultdict(int)
    latency: dict[int, list[float]] = defaultdict(list)
    open_ops: dict[str, Op] = {}
    for op in ops:
        if op.f != "send":
            continue
        if op.type == "invoke":
            open_ops[op.process] = op
            invoked[(op.process, op.index)] = op
        elif op.type == "ok":
            start = open_ops.pop(op.process, None)
            second = int(op.time_ms // 1000)
            acked[second] += 1
            if start is not None:
                latency[second].append(op.time_ms - start.time_ms)
        else:
            open_ops.pop(op.process, None)
    return acked, latency


def _fault_bands(ops: Sequence[Op]) -> list[tuple[float, float, str]]:
    bands: list[tuple[float, float, str]] = []
    started: dict[str, tuple[float, str]] = {}
    for op in ops:
        if op.f != "fault" or op.type != "ok":
            continue
        key = ",".join(str(t) for t in op.targets or ())
        if op.fault in ("kill", "pause", "partition", "power-loss"):
            started[key] = (op.time_ms, f"{op.fault} {key}")
        elif key in started:
            begin, label = started.pop(key)
            bands.append((begin, op.time_ms, label))
    end = max((op.time_ms for op in ops), default=0.0)
    bands += [(begin, end, label) for begin, label in started.values()]
    return bands


def _svg(ops: Sequence[Op]) -> str:
    acked, latency = _per_second(ops)
    seconds = max([*acked, *latency, int(max((o.time_ms for o in ops), default=0) // 1000)]) + 1
    x = _WIDTH / max(seconds, 1)
    top = max(acked.values(), default=1)
    slowest = max((max(v) for v in latency.values() if v), default=1.0)
    parts = [f'<svg width="{_WIDTH}" height="{_HEIGHT + 20}" xmlns="http://www.w3.org/2000/svg">']
    for begin, end, label in _fault_bands(ops):
        left = begin / 1000 * x
        parts.append(
            f'<rect x="{left:.1f}" y="0" width="{max((end - begin) / 1000 * x, 1):.1f}" '
            f'height="{_HEIGHT}" fill="#f4cccc"><title>{html.escape(label)}</title></rect>'
        )
    for second, count in sorted(acked.items()):
        height = count / top * (_HEIGHT - 10)
        parts.append(
            f'<rect x="{second * x:.1f}" y="{_HEIGHT - height:.1f}" width="{max(x - 1, 1):.1f}"'
            f' height="{height:.1f}" fill="#6fa8dc"><title>{second}s: {count} acked</title></rect>'
        )
    points = []
    for second in sorted(latency):
        values = sorted(latency[second])
        p50 = values[len(values) // 2]
        points.append(f"{second * x + x / 2:.1f},{_HEIGHT - p50 / slowest * (_HEIGHT - 10):.1f}")
    if points:
        parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="#cc0000" '
            'stroke-width="1.5"><title>p50 send latency</title></polyline>'
        )
    parts.append(
        f'<text x="2" y="{_HEIGHT + 15}" font-size="11">0 s … {seconds} s · bars: acknowledged '
        f"sends per second (max {top}) · line: p50 latency (top {slowest:.0f} ms) · red bands: "
        "faults</text></svg>"
    )
    return "\n".join(parts)


def render_report(summary: dict[str, Any], ops: Sequence[Op], result: CheckResult) -> str:
    """The report's HTML text."""
    by_index = {op.index: op for op in ops}
    rows = []
    for anomaly in result.anomalies[:200]:
        shown = "<br>".join(
            html.escape(str(by_index[i].to_json())) for i in anomaly.op_indexes[:6] if i in by_index
        )
        rows.append(
            f"<tr><td>{html.escape(anomaly.kind)}</td><td>{html.escape(anomaly.message)}</td>"
            f"<td><code>{shown}</code></td></tr>"
        )
    counts = "".join(
        f"<tr><td>{html.escape(kind)}</td><td>{count}</td></tr>"
        for kind, count in result.counts.items()
    )
    title = html.escape(f"lograft chaos: {summary['scenario']} seed {summary['seed']}")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:20px}}td{{border-top:1px solid #ddd;padding:3px;
vertical-align:top;font-size:13px}}code{{font-size:11px}}</style></head><body>
<h1>{title}</h1>
<p>{"valid: no anomaly found" if result.valid else "<b>ANOMALIES FOUND</b>"} ·
workload {html.escape(str(summary["workload"]))} · {summary["duration_s"]} s ·
{summary["operations"]} operations · {summary["faults"]} faults</p>
{_svg(ops)}
<h2>Anomalies by kind</h2><table>{counts}</table>
<h2>Anomalies</h2><table><tr><th>kind</th><th>what</th><th>operations</th></tr>
{"".join(rows) or "<tr><td colspan=3>none</td></tr>"}</table>
<h2>Recovery</h2><p>{html.escape(str(summary["recovery_ms"]))}</p>
</body></html>
"""
