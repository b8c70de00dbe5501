import math
import random

import pytest

from trainserve.loadtest.histogram import Histogram
from trainserve.core.profile import percentile


def _exact(values: list[float], q: float) -> float:
    return percentile(sorted(values), q)


def test_sub_millisecond_values_are_exact_to_a_microsecond() -> None:
    h = Histogram()
    values = [0.123, 0.456, 0.789, 1.234, 1.999, 0.01]
    for v in values:
        h.record(v)
    for q in (50, 90, 99, 99.9):
        assert h.percentile(q) == pytest.approx(_exact(values, q), abs=0.0005)
    s = h.summary()
    assert s["count"] == 6 and s["min_ms"] == 0.01 and s["max_ms"] == 1.999


def test_larger_values_within_a_tenth_of_a_percent() -> None:
    rng = random.Random(1)
    values = [rng.lognormvariate(1.0, 1.5) for _ in range(20000)]  # ms, about 0.05 .. 500
    h = Histogram()
    for v in values:
        h.record(v)
    for q in (50, 90, 99, 99.9):
        want = _exact(values, q)
        assert h.percentile(q) == pytest.approx(want, rel=0.001, abs=0.001), q
    assert h.summary()["mean_ms"] == pytest.approx(sum(values) / len(values), rel=1e-4)


def test_merge_equals_recording_everything_in_one() -> None:
    rng = random.Random(2)
    a, b, both = Histogram(), Histogram(), Histogram()
    for i in range(5000):
        v = rng.expovariate(1 / 3.0)
        (a if i % 2 else b).record(v)
        both.record(v)
    a.merge(Histogram.from_dict(b.to_dict()))  # through the wire format, as from a worker
    assert a.counts == both.counts and a.count == both.count and a.max_us == both.max_us
    assert a.summary() == both.summary()


def test_minus_gives_the_latencies_since_a_snapshot() -> None:
    h = Histogram()
    for _ in range(100):
        h.record(0.5)
    snap = h.copy()
    for _ in range(100):
        h.record(50.0)
    step = h.minus(snap)
    assert step.count == 100
    assert step.percentile(50) == pytest.approx(50.0, rel=0.001)
    assert step.summary()["p99_ms"] == pytest.approx(50.0, rel=0.001)
    with pytest.raises(ValueError):
        snap.minus(h)


def test_empty_and_bad_inputs() -> None:
    h = Histogram()
    assert h.summary()["p50_ms"] is None
    with pytest.raises(ValueError):
        h.percentile(50)
    h.record(-1.0)  # clock oddities count as 0
    assert h.percentile(100) == 0.0
    with pytest.raises(ValueError):
        h.percentile(101)
    assert math.isclose(Histogram.from_dict(h.to_dict()).percentile(50), 0.0)
