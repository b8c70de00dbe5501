"""A log-linear latency histogram (HDR-style) with 1 µs buckets below 2.048 ms.

Locust's own percentiles round to 1 ms below 100 ms, too coarse for a server that answers in
0.3 ms. This histogram records every latency in integer microseconds:

- below 2048 µs every microsecond has its own bucket (exact to 0.001 ms);
- above, each power-of-two range [2^k, 2^(k+1)) µs is split into 1024 equal buckets, so a value
  is known to within 0.1 % (at 100 ms: within 0.1 ms).

Buckets are kept in a sparse dict, so a histogram is small in JSON and two of them merge by adding
counts: Locust workers send theirs to the master (report_to_master / worker_report), and the step
ramp subtracts two snapshots of the running total to get one step's latencies.
"""

from __future__ import annotations

import math
from typing import Any

from trainserve.core import percentiles

_EXACT = 2048  # µs: values below are their own bucket
_SUB = 1024  # linear buckets per power of two above _EXACT


def _index(us: int) -> int:
    if us < _EXACT:
        return us
    shift = us.bit_length() - 11  # so that us >> shift is in [1024, 2048)
    return _EXACT + (shift - 1) * _SUB + ((us >> shift) - _SUB)


def _bounds(index: int) -> tuple[int, int]:
    """[low, high) in µs of bucket `index`."""
    if index < _EXACT:
        return index, index + 1
    shift = (index - _EXACT) // _SUB + 1
    low = ((index - _EXACT) % _SUB + _SUB) << shift
    return low, low + (1 << shift)


class Histogram:
    """Latencies in ms, recorded at 1 µs resolution (0.1 % above 2 ms); mergeable and subtractable."""

    __slots__ = ("counts", "count", "sum_us", "min_us", "max_us")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.count = 0
        self.sum_us = 0
        self.min_us: int | None = None
        self.max_us: int | None = None

    def record(self, ms: float) -> None:
        """Add one latency in milliseconds (negative values count as 0)."""
        us = int(ms * 1000.0 + 0.5) if ms > 0 else 0
        i = us if us < _EXACT else _index(us)  # most latencies: the bucket is the value itself
        counts = self.counts
        counts[i] = counts.get(i, 0) + 1
        self.count += 1
        self.sum_us += us
        if self.count == 1:
            self.min_us = self.max_us = us
        elif us < self.min_us:  # type: ignore[operator]  # set by the first record
            self.min_us = us
        elif us > self.max_us:  # type: ignore[operator]
            self.max_us = us

    def merge(self, other: Histogram) -> None:
        """Add `other`'s counts into this one."""
        for i, c in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + c
        self.count += other.count
        self.sum_us += other.sum_us
        if other.min_us is not None and (self.min_us is None or other.min_us < self.min_us):
            self.min_us = other.min_us
        if other.max_us is not None and (self.max_us is None or other.max_us > self.max_us):
            self.max_us = other.max_us

    def minus(self, earlier: Histogram) -> Histogram:
        """The latencies recorded since `earlier`, a snapshot (copy) of this histogram.

        min and max are bucket bounds of the difference, since the exact extremes are not kept.
        """
        out = Histogram()
        for i in self.counts.keys() | earlier.counts.keys():
            d = self.counts.get(i, 0) - earlier.counts.get(i, 0)
            if d < 0:
                raise ValueError("minus: 'earlier' is not a snapshot of this histogram")
            if d:
                out.counts[i] = d
        out.count = self.count - earlier.count
        out.sum_us = self.sum_us - earlier.sum_us
        if out.counts:
            out.min_us = _bounds(min(out.counts))[0]
            out.max_us = _bounds(max(out.counts))[1] - 1
        return out

    def copy(self) -> Histogram:
        out = Histogram()
        out.counts = dict(self.counts)
        out.count, out.sum_us, out.min_us, out.max_us = self.count, self.sum_us, self.min_us, self.max_us
        return out

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile (q in 0..100) in ms; the bucket's midpoint above 2 ms."""
        if self.count == 0:
            raise ValueError("percentile of an empty histogram")
        wanted = percentiles.rank(self.count, q)
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= wanted:
                low, high = _bounds(i)
                us = low if high - low == 1 else (low + high - 1) / 2
                # the extremes are exact: never report beyond what was seen
                if self.max_us is not None:
                    us = min(us, self.max_us)
                if self.min_us is not None:
                    us = max(us, self.min_us)
                return us / 1000.0
        raise AssertionError("unreachable: counts do not add up to count")

    def summary(self) -> dict[str, Any]:
        """count, mean, min, max and p50/p90/p95/p99/p99.9 in ms rounded to 0.01 ms (None when empty)."""
        if self.count == 0:
            return {"count": 0, "mean_ms": None, "min_ms": None, "max_ms": None,
                    "p50_ms": None, "p90_ms": None, "p95_ms": None, "p99_ms": None, "p999_ms": None}
        return {
            "count": self.count,
            "mean_ms": round(self.sum_us / self.count / 1000.0, 3),
            "min_ms": round((self.min_us or 0) / 1000.0, 3),
            "max_ms": round((self.max_us or 0) / 1000.0, 3),
            "p50_ms": round(self.percentile(50), 3),
            "p90_ms": round(self.percentile(90), 3),
            "p95_ms": round(self.percentile(95), 3),
            "p99_ms": round(self.percentile(99), 3),
            "p999_ms": round(self.percentile(99.9), 3),
        }

    def sd_ms(self) -> float:
        """Standard deviation in ms, from the buckets' midpoints (0 for fewer than two values)."""
        if self.count < 2:
            return 0.0
        mean = self.sum_us / self.count
        acc = 0.0
        for i, c in self.counts.items():
            low, high = _bounds(i)
            acc += c * ((low + high - 1) / 2 - mean) ** 2
        return math.sqrt(acc / (self.count - 1)) / 1000.0

    def to_dict(self) -> dict[str, Any]:
        # JSON object keys are strings; msgpack (Locust's worker messages) keeps ints, both load back
        return {"counts": {str(i): c for i, c in self.counts.items()}, "count": self.count,
                "sum_us": self.sum_us, "min_us": self.min_us, "max_us": self.max_us}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        out = cls()
        out.counts = {int(i): int(c) for i, c in data["counts"].items()}
        out.count = int(data["count"])
        out.sum_us = int(data["sum_us"])
        out.min_us = data.get("min_us")
        out.max_us = data.get("max_us")
        return out
