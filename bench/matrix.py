"""The benchmark matrix of issue 15 (Deliver 5), as JSON and a small HTML report with plots.

Starts three local nodes (``lograft cluster up``, combined roles; RF 3 topics with
``min.insync.replicas=2``) and measures, ``--runs`` times each (every run and the median
are kept):

* ``produce``: ``lograft perf produce`` for acks 0 / 1 / all x values of 100 B, 1 KiB and
  10 KiB x per-record ``send`` and ``send_bulk`` x compression none / lz4 / zstd, on a
  six-partition topic; about ``--produce-mib`` MiB a run.
* ``e2e``: ``lograft perf e2e`` paced at 10, 50 and 90 % of the median per-record
  ``acks=all`` 100 B rate measured above (the achieved rate is reported next to the target:
  the consumer shares the process with the producer and may not keep up);
* ``consume``: ``lograft perf consume`` of one six-partition topic by one consumer, and by
  a group of three consumer processes (records/s from the group's first record to its last;
  the members start reading together, once each owns its two partitions);
* ``scaling``: per-record ``acks=all`` 100 B with 1, 2 and 4 producer processes at once on a
  six-partition topic (all their records over the slowest one's sending time: the
  processes' start-up is left out), and with one producer on 1, 6 and 12 partitions.

Writes bench/results/matrix.json and bench/results/matrix.html (throughput bars, latency
percentiles, end-to-end latency over time and its histogram). Each figure names the hardware,
the settings and the number of runs its median comes from.

Usage: python bench/matrix.py [--runs 3] [--produce-mib 20] [--quick]
``--quick`` runs one value size, no compression and one run: a smoke test of the script.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from _common import LOGRAFT, ROOT, create_topic, local_cluster, run_json, write_report

SIZES = (100, 1024, 10 * 1024)
ACKS = ("0", "1", "all")
COMPRESSIONS = ("none", "lz4", "zstd")
E2E_FRACTIONS = (0.1, 0.5, 0.9)

# One member of a consumer group, in its own process. It joins with the partitions it is
# given paused and says how many it owns each time that changes; once the parent has seen
# the group balanced it writes a line, and the member resumes and reads until the topic is
# quiet. Otherwise the first member to join reads everything before the others are in.
_GROUP_MEMBER = """
import json, sys, threading, time
from cluster.client import Consumer
boot, topic, group, quiet_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
go = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), go.set()), daemon=True).start()
records, first, last = 0, None, None
give_up = time.perf_counter() + 120  # the group forms and hands out partitions first

def on_assign(consumer, partitions):
    if not go.is_set():
        consumer.pause(*partitions)

with Consumer(bootstrap_servers=boot, group_id=group, auto_offset_reset="earliest") as consumer:
    consumer.subscribe([topic], on_assign=on_assign)
    owned = None
    while not go.is_set() and time.perf_counter() < give_up:
        consumer.poll(100)  # everything it owns is paused: this only keeps it in the group
        if len(consumer.assignment()) != owned:
            owned = len(consumer.assignment())
            print(json.dumps({"owned": owned}), flush=True)
    consumer.resume(*consumer.paused())
    idle_since = None
    while time.perf_counter() < give_up:
        if idle_since is not None and time.perf_counter() - idle_since > quiet_ms / 1000:
            break
        batch = consumer.poll(100)
        now = time.time()
        if batch:
            records += len(batch)
            first = now if first is None else first
            last = now
            idle_since = time.perf_counter()
print(json.dumps({"records": records, "first": first, "last": last}), flush=True)
"""


def _median(runs: Sequence[dict[str, Any]], field: str) -> float:
    values = [run[field] for run in runs if run.get(field) is not None]
    return round(float(statistics.median(values)), 3) if values else 0.0


def _repeat(runs: int, measure: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    return [measure() for _ in range(runs)]


def _perf(bootstrap: str, *args: str) -> dict[str, Any]:
    return run_json([*LOGRAFT, "--bootstrap", bootstrap, "perf", *args, "--json"])


def _produce(
    bootstrap: str, topic: str, acks: str, size: int, bulk: bool, codec: str, mib: int
) -> Callable[[], dict[str, Any]]:
    records = max(1000, mib * 1024 * 1024 // size)

    def measure() -> dict[str, Any]:
        args = ["produce", "--topic", topic, "--num-records", str(records)]
        args += ["--record-size", str(size), "--acks", acks, "--compression-type", codec]
        return _perf(bootstrap, *args, *(["--bulk"] if bulk else []))

    return measure


def _group(bootstrap: str, topic: str, members: int, partitions: int) -> dict[str, Any]:
    """A group of ``members`` processes reads ``topic``, from when the group is balanced."""
    group = f"matrix-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GROUP_MEMBER, bootstrap, topic, group, "3000"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(members)
    ]
    # One reader thread per member: select() on a buffered pipe misses lines already read
    # into the buffer, and the "owned" lines come in bursts.
    lines: queue.Queue[tuple[int, str]] = queue.Queue()

    def read_lines(index: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((index, line))

    readers = [
        threading.Thread(target=read_lines, args=(index, proc), daemon=True)
        for index, proc in enumerate(procs)
    ]
    for reader in readers:
        reader.start()
    owned = [0] * members
    balanced = [partitions // members] * members
    deadline = time.monotonic() + 120
    while owned != balanced:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RuntimeError(f"the group did not balance in 120 s: members own {owned}")
        try:
            index, line = lines.get(timeout=remaining)
        except queue.Empty:
            continue
        said = json.loads(line)
        if "owned" not in said:
            raise RuntimeError(f"group member {index} ended before the group balanced: {said}")
        owned[index] = said["owned"]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.wait(timeout=600)
    for reader in readers:
        reader.join(timeout=600)
    results: list[dict[str, Any]] = [{}] * members
    while not lines.empty():
        index, line = lines.get_nowait()
        said = json.loads(line)
        if "owned" not in said:  # each member's last line is its result
            results[index] = said
    firsts = [r["first"] for r in results if r["first"] is not None]
    lasts = [r["last"] for r in results if r["last"] is not None]
    total = sum(r["records"] for r in results)
    span = max(lasts) - min(firsts) if firsts else 0.0
    return {
        "records": total,
        "per_member": [r["records"] for r in results],
        "records_per_sec": round(total / span, 1) if span > 0 else 0.0,
    }


def _scaling_producers(
    bootstrap: str, topic: str, producers: int, records: int
) -> Callable[[], dict[str, Any]]:
    def measure() -> dict[str, Any]:
        args = [*LOGRAFT, "--bootstrap", bootstrap, "perf", "produce", "--topic", topic]
        args += ["--num-records", str(records), "--record-size", "100", "--acks", "all"]
        procs = [
            subprocess.Popen([*args, "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
            for _ in range(producers)
        ]
        outputs = [
            json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs
        ]
        # The sending time of the slowest producer, not the wall time of the processes: that
        # counts each process's start-up (imports, metadata), which took longer than sending.
        # The processes start together, so their sends overlap all but the start-up skew.
        sending_s = max(o["elapsed_s"] for o in outputs)
        return {
            "records_per_sec": round(producers * records / sending_s, 1),
            "slowest_sending_s": sending_s,
            "per_producer": [o["records_per_sec"] for o in outputs],
        }

    return measure


def _produce_matrix(
    bootstrap: str, sizes: tuple[int, ...], codecs: tuple[str, ...], runs: int, produce_mib: int
) -> list[dict[str, Any]]:
    """Producer throughput and latency for each record size, acks, API and compression."""
    produce: list[dict[str, Any]] = []
    for size in sizes:
        topic = f"produce-{size}"
        create_topic(bootstrap, topic, 6)
        for acks in ACKS:
            for bulk in (False, True):
                for codec in codecs:
                    measured = _repeat(
                        runs,
                        _produce(bootstrap, topic, acks, size, bulk, codec, produce_mib),
                    )
                    produce.append(
                        {
                            "acks": acks,
                            "record_size": size,
                            "api": "send_bulk" if bulk else "send",
                            "compression": codec,
                            "median_records_per_sec": _median(measured, "records_per_sec"),
                            "median_latency_ms_p50": _median(measured, "latency_ms_p50"),
                            "median_latency_ms_p99": _median(measured, "latency_ms_p99"),
                            "runs": measured,
                        }
                    )
    return produce


def _e2e_levels(bootstrap: str, peak: float, runs: int, e2e_seconds: float) -> list[dict[str, Any]]:
    """End-to-end latency at each fraction of the ``peak`` producer rate."""
    e2e: list[dict[str, Any]] = []
    create_topic(bootstrap, "e2e", 1)
    for fraction in E2E_FRACTIONS:
        rate = max(1, int(peak * fraction))
        count = max(100, int(rate * e2e_seconds))
        measured = _repeat(
            runs,
            lambda rate=rate, count=count: _perf(  # type: ignore[misc]
                bootstrap, "e2e", "--topic", "e2e", "--num-records", str(count),
                "--throughput", str(rate), "--acks", "all", "--timeout-ms", "30000",
            ),
        )  # fmt: skip
        e2e.append(
            {
                "fraction_of_peak": fraction,
                "target_records_per_sec": rate,
                "median_records_per_sec": _median(measured, "records_per_sec"),
                "median_latency_ms_p50": _median(measured, "latency_ms_p50"),
                "median_latency_ms_p99": _median(measured, "latency_ms_p99"),
                "runs": measured,
            }
        )
    return e2e


def _consume(bootstrap: str, runs: int, records: int) -> dict[str, Any]:
    """Consumer throughput over ``records`` records: one consumer, then a group of three."""
    create_topic(bootstrap, "consume", 6)
    fill = ["produce", "--topic", "consume", "--num-records", str(records)]
    _perf(bootstrap, *fill, "--record-size", "100", "--acks", "all", "--bulk")
    one = _repeat(
        runs,
        lambda: _perf(bootstrap, "consume", "--topic", "consume", "--messages", str(records)),
    )
    three = _repeat(runs, lambda: _group(bootstrap, "consume", 3, 6))
    return {
        "records": records,
        "one_consumer": {
            "median_records_per_sec": _median(one, "records_per_sec"),
            "runs": one,
        },
        "group_of_three": {
            "median_records_per_sec": _median(three, "records_per_sec"),
            "runs": three,
        },
    }


def _scaling(bootstrap: str, sizes: tuple[int, ...], runs: int, produce_mib: int) -> dict[str, Any]:
    """Producer throughput by the number of producer processes and of partitions."""
    # Enough that each producer sends for about a second or more: the start-up skew
    # between the processes is then a small part of it.
    scaling_records = max(10_000, produce_mib * 1024 * 1024 // 100)
    by_producers = []
    for producers in (1, 2, 4):
        measured = _repeat(
            runs, _scaling_producers(bootstrap, "produce-100", producers, scaling_records)
        ) if 100 in sizes else []  # fmt: skip
        by_producers.append(
            {
                "producers": producers,
                "median_records_per_sec": _median(measured, "records_per_sec"),
                "runs": measured,
            }
        )
    by_partitions = []
    for partitions in (1, 6, 12):
        topic = f"scale-{partitions}"
        create_topic(bootstrap, topic, partitions)
        measured = _repeat(
            runs, _produce(bootstrap, topic, "all", 100, False, "none", produce_mib // 4)
        )
        by_partitions.append(
            {
                "partitions": partitions,
                "median_records_per_sec": _median(measured, "records_per_sec"),
                "runs": measured,
            }
        )
    return {"producers": by_producers, "partitions": by_partitions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--produce-mib", type=int, default=20)
    parser.add_argument("--e2e-seconds", type=float, default=5.0)
    parser.add_argument("--consume-records", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="a smoke test of the script")
    args = parser.parse_args()
    sizes: tuple[int, ...] = SIZES
    codecs: tuple[str, ...] = COMPRESSIONS
    runs: int = args.runs
    if args.quick:
        sizes, codecs, runs = (100,), ("none",), 1
    report: dict[str, Any] = {
        "hardware": f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}",
        "setup": "three local nodes (combined roles), RF 3, min.insync.replicas=2",
        "runs": runs,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    with tempfile.TemporaryDirectory() as data, local_cluster(data) as bootstrap:
        produce = _produce_matrix(bootstrap, sizes, codecs, runs, args.produce_mib)
        report["produce"] = produce
        peak = next(
            p["median_records_per_sec"]
            for p in produce
            if (p["acks"], p["record_size"], p["api"], p["compression"])
            == ("all", 100, "send", "none")
        )
        e2e = _e2e_levels(bootstrap, peak, runs, args.e2e_seconds)
        report["e2e"] = {"peak_records_per_sec": peak, "levels": e2e}
        report["consume"] = _consume(bootstrap, runs, args.consume_records)
        report["scaling"] = _scaling(bootstrap, sizes, runs, args.produce_mib)
    write_report(report, ROOT / "bench" / "results" / "matrix.json")
    html_path = ROOT / "bench" / "results" / "matrix.html"
    html_path.write_text(render_html(report))
    print(f"wrote {html_path}", file=sys.stderr)


# ---- the HTML report ---------------------------------------------------------------------


def _bars(title: str, rows: Sequence[tuple[str, float]], unit: str) -> str:
    """A horizontal bar chart as inline SVG."""
    width, bar_height, label_width = 760, 16, 300
    top = max((value for _, value in rows), default=0.0) or 1.0
    height = bar_height * len(rows) + 30
    parts = [f'<svg width="{width}" height="{height}" role="img">']
    parts.append(f'<text x="0" y="14" font-weight="bold">{html.escape(title)}</text>')
    for i, (label, value) in enumerate(rows):
        y = 24 + i * bar_height
        length = (width - label_width - 90) * value / top
        parts.append(f'<text x="0" y="{y + 12}" font-size="11">{html.escape(label)}</text>')
        parts.append(
            f'<rect x="{label_width}" y="{y + 2}" width="{length:.1f}" height="{bar_height - 4}"'
            ' fill="#4a7ab5"/>'
        )
        parts.append(
            f'<text x="{label_width + length + 4:.1f}" y="{y + 12}" font-size="11">'
            f"{value:,.1f} {html.escape(unit)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _lines(title: str, series: Mapping[str, Sequence[tuple[float, float]]], y_unit: str) -> str:
    """A line chart (x: seconds) as inline SVG, one polyline per series."""
    width, height, left, bottom = 760, 220, 50, 30
    points = [p for values in series.values() for p in values]
    if not points:
        return ""
    x_top = max(x for x, _ in points) or 1.0
    y_top = max(y for _, y in points) or 1.0
    colours = ("#4a7ab5", "#c0504d", "#9bbb59", "#8064a2", "#f79646", "#4bacc6")
    parts = [f'<svg width="{width}" height="{height + 40}" role="img">']
    parts.append(f'<text x="0" y="14" font-weight="bold">{html.escape(title)}</text>')
    parts.append(f'<text x="0" y="32" font-size="11">{y_top:,.1f} {html.escape(y_unit)}</text>')
    parts.append(
        f'<line x1="{left}" y1="{height}" x2="{width}" y2="{height}" stroke="#888"/>'
        f'<text x="{width - 60}" y="{height + 16}" font-size="11">{x_top:.0f} s</text>'
    )
    for i, (name, values) in enumerate(series.items()):
        colour = colours[i % len(colours)]
        coords = " ".join(
            f"{left + (width - left) * x / x_top:.1f},{height - (height - bottom) * y / y_top:.1f}"
            for x, y in values
        )
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}"/>')
        parts.append(
            f'<text x="{left + 10}" y="{height + 32 - 14 * (len(series) - 1 - i) - 0}" '
            f'font-size="11" fill="{colour}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# Over 70 lines: the report's sections as one page, read top to bottom.
def render_html(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    runs = report["runs"]
    settings = f"{report['hardware']}; {report['setup']}; median of {runs} run(s)"
    sections = [
        "<!doctype html><meta charset='utf-8'><title>lograft benchmark matrix</title>",
        "<body style='font-family:sans-serif'>",
        f"<h1>lograft benchmark matrix</h1><p>{html.escape(settings)}; "
        f"started {html.escape(report['started'])}.</p>",
        "<h2>Produce</h2>",
    ]
    produce = report.get("produce", [])
    for api in ("send", "send_bulk"):
        cells = [p for p in produce if p["api"] == api]
        for field, title, unit in (
            ("median_records_per_sec", f"{api}: records/s ({settings})", "rec/s"),
            ("median_latency_ms_p99", f"{api}: acknowledgement latency p99", "ms"),
        ):
            rows = [
                (f"acks={p['acks']} {p['record_size']} B {p['compression']}", p[field])
                for p in cells
            ]
            sections.append(_bars(title, rows, unit))
    e2e = report.get("e2e", {})
    if e2e:
        sections.append("<h2>End to end</h2>")
        sections.append(
            f"<p>Paced at fractions of the per-record acks=all 100 B peak "
            f"({e2e['peak_records_per_sec']:,.0f} records/s).</p>"
        )
        rows = []
        timelines: dict[str, list[tuple[float, float]]] = {}
        histograms = []
        for level in e2e["levels"]:
            name = f"{level['fraction_of_peak']:.0%} ({level['target_records_per_sec']:,}/s)"
            rows.append((f"{name} p50", level["median_latency_ms_p50"]))
            rows.append((f"{name} p99", level["median_latency_ms_p99"]))
            first = level["runs"][0] if level["runs"] else {}
            timelines[f"{name} p99"] = [(t[0], t[3]) for t in first.get("timeline", [])]
            histograms.append(
                _bars(
                    f"histogram, {name}, first run (records per latency bucket)",
                    [
                        (f"<= {bound} ms" if bound is not None else "> 5000 ms", float(count))
                        for bound, count in first.get("histogram", [])
                    ],
                    "records",
                )
            )
        sections.append(_bars(f"end-to-end latency ({settings})", rows, "ms"))
        sections.append(
            _lines("end-to-end p99 over time, first run of each level", timelines, "ms")
        )
        sections.extend(histograms)
    consume = report.get("consume")
    if consume:
        sections.append("<h2>Consume</h2>")
        sections.append(
            _bars(
                f"consume {consume['records']:,} stored 100 B records ({settings})",
                [
                    ("one consumer", consume["one_consumer"]["median_records_per_sec"]),
                    ("group of three", consume["group_of_three"]["median_records_per_sec"]),
                ],
                "rec/s",
            )
        )
    scaling = report.get("scaling")
    if scaling:
        sections.append("<h2>Scaling</h2>")
        for key, label, what in (
            ("producers", "producer(s)", "producers at once"),
            ("partitions", "partition(s)", "one producer, partitions"),
        ):
            rows = [(f"{s[key]} {label}", s["median_records_per_sec"]) for s in scaling[key]]
            title = f"per-record acks=all 100 B, {what} ({settings})"
            sections.append(_bars(title, rows, "rec/s"))
    sections.append("</body>")
    return "\n".join(sections)


if __name__ == "__main__":
    main()
