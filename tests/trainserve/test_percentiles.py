"""trainserve/core/percentiles.py: the project's one percentile is nearest rank, and every figure uses it."""

from __future__ import annotations

import math
import random

import pytest

from tests.conftest import REPO_ROOT
from tests.test_history_words import product_files
from trainserve.core.percentiles import percentile, rank
from trainserve.core.profile import LatencyStats
from trainserve.loadtest.histogram import Histogram


def test_nearest_rank_is_a_measured_value_at_rank_ceil_q_n():
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.0  # not 2.5, the interpolated median
    assert percentile(values, 75) == 3.0 and percentile(values, 76) == 4.0
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile([7.0], 99.9) == 7.0
    assert [rank(1000, q) for q in (50, 90, 99)] == [500, 900, 990]
    for n in range(1, 50):
        for q in (1, 25, 50, 90, 99, 99.9):
            assert rank(n, q) == max(1, math.ceil(q / 100 * n))


def test_outside_its_domain_it_raises():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside 0..100"):
        rank(10, 101)


def test_samples_and_the_histogram_agree():
    rng = random.Random(1)
    samples_us = [rng.randint(50, 2000) for _ in range(1001)]  # the histogram is exact below 2048 µs
    hist = Histogram()
    for us in samples_us:
        hist.record(us / 1000)
    stats = LatencyStats.from_samples_ms([us / 1000 for us in samples_us])
    for q, field in ((50, "p50_ms"), (99, "p99_ms"), (99.9, "p999_ms")):
        assert hist.percentile(q) == pytest.approx(getattr(stats, field), abs=1e-9)


def test_no_other_percentile_rule_in_product_code():
    others = [str(p.relative_to(REPO_ROOT)) for p in product_files()
              if any(w in p.read_text() for w in ("np.percentile(", "np.quantile(", "statistics.quantiles("))]
    assert not others, f"use trainserve.core.percentiles (nearest rank): {others}"
