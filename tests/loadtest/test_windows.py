"""Windows and the stability rules (loadtest/windows.py), on hand-made windows."""

from __future__ import annotations

import pytest

from trainserve.loadtest.windows import StabilityRule, Window, WindowLog, judge, min_requests_for, percentiles_short


def window(i: int, n: int, ms: float, length_s: float = 1.0, failures: int = 0) -> Window:
    w = Window(i, length_s)
    for _ in range(n):
        w.hist.record(ms)
    w.failures = failures
    return w


def test_three_agreeing_windows_are_stable() -> None:
    rule = StabilityRule(window_s=1.0)
    s = judge([window(0, 500, 9.0), window(1, 1000, 2.0), window(2, 1020, 2.05), window(3, 990, 1.98)], rule)
    assert s.stable and s.rule == "windows" and s.windows_used == [1, 2, 3]


def test_throughput_that_swings_is_unstable_with_its_reason() -> None:
    rule = StabilityRule(window_s=1.0)
    s = judge([window(0, 1000, 2.0), window(1, 400, 2.0), window(2, 1000, 2.0)], rule)
    assert not s.stable and s.rule is None
    assert "did not stabilise" in s.reason and "throughput" in s.reason


def test_latency_that_swings_is_unstable() -> None:
    s = judge([window(0, 1000, 2.0), window(1, 1000, 8.0), window(2, 1000, 2.0)], StabilityRule())
    assert not s.stable and "median latency" in s.reason


def test_counting_noise_of_short_windows_is_allowed() -> None:
    # 100 requests per window vary by about 10 by chance alone: 85 vs 115 is not instability
    s = judge([window(0, 85, 2.0), window(1, 115, 2.0), window(2, 100, 2.0)], StabilityRule())
    assert s.stable


def test_volume_rule_when_windows_never_agree() -> None:
    rule = StabilityRule(window_s=1.0, min_duration_s=4.0, min_requests=3000)
    ws = [window(i, 1000 if i % 2 else 500, 2.0) for i in range(5)]
    s = judge(ws, rule)
    assert s.stable and s.rule == "volume"
    assert not judge(ws[:3], rule).stable


def test_too_few_windows() -> None:
    s = judge([window(0, 1000, 2.0)], StabilityRule())
    assert not s.stable and "only 1 window" in s.reason


def test_requests_a_percentile_needs() -> None:
    assert min_requests_for(99) == 500 and min_requests_for(95) == 100 and min_requests_for(99.9) == 5000
    assert percentiles_short(600) == ["p999_ms"]
    assert percentiles_short(50) == ["p95_ms", "p99_ms", "p999_ms"]
    with pytest.raises(ValueError):
        min_requests_for(100)


def test_log_leaves_out_warmup_and_counts_unanswered_as_late() -> None:
    log = WindowLog(t0=100.0, warmup_s=1.0, window_s=0.5)
    assert not log.add(100.5, 300.0, failed=False)  # started in the warm-up
    assert log.warmup_excluded == 1
    for due in (101.1, 101.2, 101.3):
        log.scheduled(due)
    log.add(101.1, 2.0, failed=False)
    log.add(101.2, 3.0, failed=True)
    w = log.close(0, now=101.7)  # the request due at 101.3 is still out, 200 ms after the window's end
    assert (w.hist.count, w.failures, w.late) == (2, 1, 1)
    assert w.hist.max_us == 200_000
    assert not log.add(101.3, 250.0, failed=False)  # its answer, after the window was judged
    assert log.late_answers == 1
    assert [x.index for x in log.complete(until=102.6)] == [0, 1, 2]
