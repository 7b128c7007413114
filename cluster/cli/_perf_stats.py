"""The numbers ``lograft perf`` reports: percentiles, and the summary of ``perf e2e``.

Pure functions of the measured latencies; the tests that measure them are
:mod:`cluster.cli._perf_produce`, :mod:`cluster.cli._perf_consume` and
:mod:`cluster.cli._perf_e2e`.
"""

from __future__ import annotations

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


def e2e_summary(
    latencies_ms: Sequence[float],
    elapsed_s: float,
    *,
    record_size: int,
    acks: object,
    partition: int,
    target_records_per_sec: int | None,
) -> dict[str, Any]:
    """The JSON object of ``perf e2e`` from each record's latency in ms."""
    ordered = sorted(latencies_ms)
    count = len(ordered)
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
    }
