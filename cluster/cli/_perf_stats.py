"""The numbers ``lograft perf`` reports: percentiles, and the summary of ``perf e2e``.

Pure functions of the measured latencies; the tests that measure them are
:mod:`cluster.cli._perf_produce`, :mod:`cluster.cli._perf_consume` and
:mod:`cluster.cli._perf_e2e`.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["e2e_summary", "percentile"]

log = logging.getLogger(__name__)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of ``sorted_values`` (nearest rank); 0 when empty."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values))))
    return sorted_values[index]


#: Upper bounds (ms) of the latency histogram's buckets; the last bucket is unbounded.
HISTOGRAM_BOUNDS_MS = (0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 200, 500, 1000, 5000)


def latency_histogram(latencies_ms: Sequence[float]) -> list[list[float | int | None]]:
    """``[upper bound in ms (None: unbounded), records]`` for each bucket of
    :data:`HISTOGRAM_BOUNDS_MS`, empty buckets included (a plot needs them)."""
    counts = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    for latency in latencies_ms:
        counts[bisect.bisect_left(HISTOGRAM_BOUNDS_MS, latency)] += 1
    bounds: list[float | None] = [*HISTOGRAM_BOUNDS_MS, None]
    return [[bound, count] for bound, count in zip(bounds, counts, strict=True)]


def latency_timeline(
    sent_s: Sequence[float], latencies_ms: Sequence[float]
) -> list[list[float | int]]:
    """``[second, records, p50 ms, p99 ms]`` for each whole second of the run (by when each
    record was sent, in seconds from the start); seconds without a record are left out."""
    by_second: dict[int, list[float]] = {}
    for sent, latency in zip(sent_s, latencies_ms, strict=True):
        by_second.setdefault(int(sent), []).append(latency)
    timeline: list[list[float | int]] = []
    for second in sorted(by_second):
        ordered = sorted(by_second[second])
        timeline.append(
            [
                second,
                len(ordered),
                round(percentile(ordered, 0.50), 3),
                round(percentile(ordered, 0.99), 3),
            ]
        )
    return timeline


def e2e_summary(
    latencies_ms: Sequence[float],
    elapsed_s: float,
    *,
    record_size: int,
    acks: object,
    partition: int,
    target_records_per_sec: int | None,
    sent_s: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The JSON object of ``perf e2e`` from each record's latency in ms.

    With ``sent_s`` (when each record was sent, in seconds from the start, in the order of
    ``latencies_ms``) it also holds the latency over time (``timeline``); it always holds
    the ``histogram``.
    """
    ordered = sorted(latencies_ms)
    count = len(ordered)
    extra: dict[str, Any] = {"histogram": latency_histogram(ordered)}
    if sent_s is not None:
        extra["timeline"] = latency_timeline(sent_s, latencies_ms)
    return {
        "test": "e2e",
        "mode": "one-at-a-time" if target_records_per_sec is None else "paced",
        "records": count,
        "record_size": record_size,
        "acks": acks,
        "partition": partition,
        "elapsed_s": round(elapsed_s, 4),
        "records_per_sec": round(count / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "latency_ms_avg": round(sum(ordered) / count, 3) if count else 0.0,
        "latency_ms_p50": round(percentile(ordered, 0.50), 3),
        "latency_ms_p95": round(percentile(ordered, 0.95), 3),
        "latency_ms_p99": round(percentile(ordered, 0.99), 3),
        "latency_ms_p999": round(percentile(ordered, 0.999), 3),
        "latency_ms_max": round(ordered[-1], 3) if count else 0.0,
        "target_records_per_sec": target_records_per_sec,
        **extra,
    }
