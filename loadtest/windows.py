"""Measurement windows and when a load figure may be believed (perf_analyzer's and MLPerf's rules).

A measurement is cut into windows of equal length, after a warm-up that is not counted. Each request
belongs to the window of its start (for open loop: its scheduled send time), so a request that the
server held past a window's end still counts where it was due. A figure is **stable** when either

- the last `consecutive` windows agree: their throughput, and their median latency, each lie within
  `tolerance` of the windows' average (perf_analyzer's rule: three windows within 10%; it compares the
  average latency, the median is less moved by one stray request in a short window). Short windows
  are allowed their counting noise on top, or no open loop could pass: a Poisson count of n varies by
  sqrt(n), so throughput may differ by 3/sqrt(n) (150 requests: 24%); latencies closer together than
  `latency_floor_ms` agree regardless, or
- the measurement is long and large enough on its own: at least `min_duration_s` of windows and
  `min_requests` requests (MLPerf LoadGen's minimum duration and query count).

Otherwise it "did not stabilise", and says why.

`min_requests_for(q)` is how many requests a percentile needs before it is more than its largest
values: `TAIL` requests beyond it (p99: 500; p95: 100; p99.9: 5000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainserve.loadtest.histogram import Histogram

TAIL = 5  # requests at or beyond a percentile for it to count as measured


def min_requests_for(q: float) -> int:
    """Requests a q-th percentile (0 < q < 100) needs: TAIL beyond it."""
    if not 0 < q < 100:
        raise ValueError(f"percentile q={q} is outside (0, 100)")
    return math.ceil(TAIL / (1 - q / 100.0) - 1e-9)


@dataclass
class StabilityRule:
    """When a measurement's windows are believed (see the module docstring)."""

    window_s: float = 1.0  # length of one window, s
    consecutive: int = 3  # windows that must agree
    tolerance: float = 0.10  # each within this fraction of their average
    latency_floor_ms: float = 0.25  # latencies this close agree whatever their ratio (timer and scheduling noise)
    min_duration_s: float = 30.0  # or: at least this much measured ...
    min_requests: int = 5000  # ... and this many requests

    def __post_init__(self) -> None:
        for name, ok, allowed in (("window_s", self.window_s > 0, "> 0 s"),
                                  ("consecutive", self.consecutive >= 2, ">= 2"),
                                  ("tolerance", 0 < self.tolerance < 1, "0 < x < 1"),
                                  ("latency_floor_ms", self.latency_floor_ms >= 0, ">= 0 ms"),
                                  ("min_duration_s", self.min_duration_s > 0, "> 0 s"),
                                  ("min_requests", self.min_requests >= 1, ">= 1")):
            if not ok:
                raise ValueError(f"stability rule {name}={getattr(self, name)!r} is invalid; allowed: {allowed}")


@dataclass
class Window:
    """The requests due in one window: answered (latencies), failed, and still unanswered when it closed."""

    index: int
    length_s: float
    hist: Histogram = field(default_factory=Histogram)
    failures: int = 0
    late: int = 0  # due in this window, no answer by the time it was judged (counted above any SLO)

    @property
    def requests(self) -> int:
        return self.hist.count + self.failures

    @property
    def throughput(self) -> float:
        """Answered requests per second."""
        return self.hist.count / self.length_s

    @property
    def mean_ms(self) -> float | None:
        return self.hist.sum_us / self.hist.count / 1000.0 if self.hist.count else None

    def row(self) -> dict[str, Any]:
        return {"index": self.index, "requests_s": round(self.throughput, 3), "mean_ms": _r(self.mean_ms),
                "p99_ms": _r(self.hist.percentile(99)) if self.hist.count else None,
                "requests": self.requests, "failures": self.failures, "late": self.late}


@dataclass
class Stability:
    stable: bool
    rule: str | None  # "windows" | "volume" | None
    reason: str  # why it is (or is not) stable, one clause
    windows_used: list[int] = field(default_factory=list)  # indices of the windows the figure comes from

    def to_dict(self) -> dict[str, Any]:
        return {"stable": self.stable, "rule": self.rule, "reason": self.reason, "windows_used": self.windows_used}


def _agree(values: list[float], allowances: list[float]) -> bool:
    """Each value within its allowance of the average."""
    avg = sum(values) / len(values)
    return all(abs(v - avg) <= a for v, a in zip(values, allowances))


def judge(windows: list[Window], rule: StabilityRule) -> Stability:
    """Stable by the windows rule (the last `consecutive` windows agree) or the volume rule, else why not."""
    full = [w for w in windows if w.requests > 0]
    last = full[-rule.consecutive:]
    if len(last) == rule.consecutive:
        disagreement = _disagreement(last, rule)
        if not disagreement:
            return Stability(True, "windows", f"{rule.consecutive} consecutive {rule.window_s:g} s windows agree "
                             f"within {rule.tolerance:.0%}", [w.index for w in last])
        windows_reason = f"the last {rule.consecutive} windows' {disagreement}"
    else:
        windows_reason = f"only {len(full)} window(s) with requests, {rule.consecutive} needed"
    duration = sum(w.length_s for w in full)
    requests = sum(w.requests for w in full)
    if duration >= rule.min_duration_s and requests >= rule.min_requests:
        return Stability(True, "volume", f"{duration:.0f} s and {requests} requests measured (at least "
                         f"{rule.min_duration_s:g} s and {rule.min_requests})", [w.index for w in full])
    return Stability(False, None, f"did not stabilise: {windows_reason}, and {duration:.3g} s / {requests} requests "
                     f"is short of {rule.min_duration_s:g} s / {rule.min_requests}", [w.index for w in full])


def _disagreement(last: list[Window], rule: StabilityRule) -> str:
    """What the windows differ in beyond the rule, with their spread ('' when they agree): their throughput
    first (each allowed its counting noise), then their median latency (a window without an answer has none,
    so it cannot agree)."""
    tput = [w.throughput for w in last]
    t_avg = sum(tput) / len(tput)
    if not _agree(tput, [t_avg * max(rule.tolerance, 3 / math.sqrt(max(w.requests, 1))) for w in last]):
        return f"throughput differ by more than {rule.tolerance:.0%} ({min(tput):.4g}-{max(tput):.4g} req/s)"
    medians = [w.hist.percentile(50) for w in last if w.hist.count]
    if len(medians) == len(last):
        m_avg = sum(medians) / len(medians)
        if _agree(medians, [max(rule.tolerance * m_avg, rule.latency_floor_ms)] * len(last)):
            return ""
    spread = f"{min(medians):.3g}-{max(medians):.3g} ms" if medians else "no answered requests"
    return f"median latency differ by more than {rule.tolerance:.0%} ({spread})"


def merged(windows: list[Window], indices: list[int]) -> Window:
    """One window made of the chosen ones (their latencies, failures and late requests together)."""
    out = Window(index=-1, length_s=0.0)
    for w in windows:
        if w.index in indices:
            out.hist.merge(w.hist)
            out.failures += w.failures
            out.late += w.late
            out.length_s += w.length_s
    return out


def percentiles_short(count: int) -> list[str]:
    """The percentiles (summary keys) that `count` requests are too few for."""
    return [key for key, q in (("p95_ms", 95), ("p99_ms", 99), ("p999_ms", 99.9)) if count < min_requests_for(q)]


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


class WindowLog:
    """Requests sorted into windows by their start time (open loop: the scheduled send time), after a warm-up.

    Times are wall-clock seconds (time.time()), comparable between the processes of one run. A request
    that started during the warm-up is not counted (`warmup_excluded`); one that answers after its
    window was closed is counted there already as late, so it is not counted again (`late_answers`).
    """

    def __init__(self, t0: float | None, warmup_s: float, window_s: float) -> None:
        # t0 None: the first request's start (Locust's start-up — connecting, preparing inputs — is not
        # part of the warm-up the server gets)
        self.warmup_s = warmup_s
        self.measure_from = t0 + warmup_s if t0 is not None else None
        self.window_s = window_s
        self.windows: dict[int, Window] = {}
        self.sent: dict[int, int] = {}  # open loop: requests due per window
        self.closed: set[int] = set()
        self.warmup_excluded = 0
        self.late_answers = 0

    def index(self, start: float) -> int | None:
        if self.measure_from is None:
            self.measure_from = start + self.warmup_s
        return None if start < self.measure_from else int((start - self.measure_from) // self.window_s)

    def window(self, i: int) -> Window:
        w = self.windows.get(i)
        if w is None:
            w = self.windows[i] = Window(i, self.window_s)
        return w

    def add(self, start: float, ms: float, failed: bool) -> bool:
        """Count one answer (latency `ms` from `start`); False when the warm-up or a closed window took it."""
        i = self.index(start)
        if i is None:
            self.warmup_excluded += 1
            return False
        if i in self.closed:
            self.late_answers += 1
            return False
        w = self.window(i)
        if failed:
            w.failures += 1
        else:
            w.hist.record(ms)
        return True

    def scheduled(self, due: float) -> None:
        i = self.index(due)
        if i is not None:
            self.sent[i] = self.sent.get(i, 0) + 1

    def window_end(self, i: int) -> float:
        if self.measure_from is None:
            raise ValueError("window_end of a window log that has seen no request and has no start")
        return self.measure_from + (i + 1) * self.window_s

    def close(self, i: int, now: float) -> Window:
        """Judge window `i` now: requests due in it and not answered count as late, at their age so far
        (a lower bound of their latency, which the SLO check needs to be above the SLO: close late enough)."""
        w = self.window(i)
        missing = self.sent.get(i, 0) - w.requests
        if missing > 0:
            age_ms = (now - self.window_end(i)) * 1000.0
            for _ in range(missing):
                w.hist.record(age_ms)
            w.late = missing
        self.closed.add(i)
        return w

    def complete(self, until: float) -> list[Window]:
        """The windows that ended by `until`, in order (a window cut short by the end is left out)."""
        if self.measure_from is None:
            return []
        return [self.windows.get(i) or Window(i, self.window_s)
                for i in range(int(max(0.0, until - self.measure_from) // self.window_s))]

    def merge_rows(self, data: dict[str, Any]) -> None:
        """Add a worker's windows ({index: {"hist", "failures"}}, as `export` wrote them)."""
        for key, d in data.items():
            w = self.window(int(key))
            w.hist.merge(Histogram.from_dict(d["hist"]))
            w.failures += int(d["failures"])

    def export(self) -> dict[str, Any]:
        """This process's windows since the last export, for the master (then forgotten here)."""
        out = {str(i): {"hist": w.hist.to_dict(), "failures": w.failures} for i, w in self.windows.items()}
        self.windows = {}
        return out
