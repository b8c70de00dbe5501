"""The project's one percentile: nearest rank.

The q-th percentile of n sorted values is the value at rank ceil(q/100 * n) (1-based, at least 1): always a
value that was measured, never one interpolated between two, and the rule Locust and perf_analyzer-like
tools report by, so a p99 here reads as theirs does. Raw samples (core/profile.py's LatencyStats, the
in-process limits in serve/model/inprocess_limits.py) use `percentile`; the load test's latency histogram
(loadtest/histogram.py) finds the same rank with `rank` among its buckets' counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def rank(count: int, q: float) -> int:
    """The 1-based rank of the q-th percentile (q in 0..100) among `count` values (count >= 1)."""
    if count < 1:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is outside 0..100")
    return min(count, max(1, math.ceil(q / 100 * count)))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty sequence (q in 0..100)."""
    if not len(sorted_values):
        raise ValueError("percentile of an empty list")
    return sorted_values[rank(len(sorted_values), q) - 1]
