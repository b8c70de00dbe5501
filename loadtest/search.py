"""The Server scenario's capacity search: the highest Poisson arrival rate that meets the latency SLO.

MLPerf's Server scenario and perf_analyzer's request-rate mode send on a schedule (open loop), so a
server that falls behind shows its queue in the latencies instead of slowing the sender. This module
is the search itself, free of Locust (loadtest/search_shape.py runs it against a server):

1. probe a rate: a warm-up that is not counted, then windows (loadtest/windows.py) until they agree
   or the probe's time is up;
2. the probe passes when its windows are stable, its p99 (counted from each request's scheduled send
   time, unanswered requests counted above the SLO) is within the SLO, and at most `max_error_fraction`
   of its requests failed;
3. the rate steps up while probes pass and down while they fail, until one of each brackets the
   capacity; then bisection, until the bracket is within `precision` or the search's time is spent.
   From a given first rate the step is x2 (the capacity may be anywhere); from a closed-loop estimate
   (`estimate_first_rate`: what the server answered to users sending back to back) it is x1.25, so
   few rates bracket it. That step grows with each step in the same direction (x1.25, x1.56, x1.95,
   then x2), in case the estimate was far off.
   A probe that failed on its latency alone is measured once more before it counts when its windows did not
   agree, or when it was the search's first (the server's first seconds under load: connections opened,
   buffers and lazily built sessions first used);
4. before the search ends on a closed bracket, its upper end is measured once more when it failed on its
   latencies alone and was measured once: a stall of the host (a collection pause, a scheduling hiccup) in a
   few seconds' probe fails its p99 by itself, and nothing makes a probe pass by chance in the same way, so
   the failure that decides the figure is the one confirmed. When the second measurement passes, that rate is
   the highest passing one and the search goes on above it.

The result is the highest passing rate. If no probe failed, or the time ran out before the bracket
closed (`budget_ended`), it is a lower bound ("at least"), and the result says how wide the bracket still was.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from trainserve.loadtest.windows import Stability, StabilityRule, Window, judge, merged, percentiles_short

MAX_ERROR_FRACTION = 0.001  # MLPerf-style: at most 0.1% of requests may fail
CLIENT_BUSY = 0.9  # a probe whose load-generator process used this share of a core or more was the client's
# The first open-loop rate is this share of the closed-loop estimate: a closed loop at enough users runs at the
# server's most throughput, and Poisson arrivals at that rate would queue without bound (perf_analyzer's and
# MLPerf's Server runs likewise start below the Offline figure)
ESTIMATE_SHARE = 0.9
ESTIMATE_STEP = 1.25  # the step from an estimate: 0.9x passes, 1.125x fails, three bisections reach 5%


@dataclass
class SearchConfig:
    """One capacity search."""

    slo_p99_ms: float  # p99 latency from the scheduled send time, ms
    start_rate: float = 100.0  # first rate probed, requests/s
    min_rate: float = 1.0  # below this the search gives up: nothing meets the SLO
    max_rate: float = 1e6  # never probe above this, requests/s
    precision: float = 0.05  # stop when the bracket's upper end is within this fraction of its lower end
    budget_s: float = 30.0  # the whole search, s (a probe is not started unless it fits)
    warmup_s: float = 0.5  # per probe, not counted
    max_probe_s: float = 4.0  # windows per probe end here even when they have not agreed
    max_error_fraction: float = MAX_ERROR_FRACTION
    step: float = 2.0  # before the bracket: the rate is multiplied (passed) or divided (failed) by this
    rule: StabilityRule = field(default_factory=lambda: StabilityRule(window_s=0.5, min_duration_s=20.0))

    def __post_init__(self) -> None:
        checks = [("slo_p99_ms", self.slo_p99_ms > 0, "> 0 ms"),
                  ("start_rate", self.start_rate > 0, "> 0 per second"),
                  ("min_rate", 0 < self.min_rate <= self.start_rate, "0 < min_rate <= start_rate"),
                  ("max_rate", self.max_rate >= self.start_rate, ">= start_rate"),
                  ("precision", 0 < self.precision < 1, "0 < x < 1"),
                  ("step", self.step > 1, "> 1"),
                  ("budget_s", self.budget_s > 0, "> 0 s"),
                  ("warmup_s", self.warmup_s >= 0, ">= 0 s"),
                  ("max_probe_s", self.max_probe_s >= self.rule.window_s * self.rule.consecutive,
                   f">= {self.rule.consecutive} windows of {self.rule.window_s:g} s"),
                  ("max_error_fraction", 0 <= self.max_error_fraction < 1, "0 <= x < 1")]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(f"search option {name}={getattr(self, name)!r} is invalid; allowed: {allowed}")

    @property
    def min_probe_s(self) -> float:
        """The shortest a probe can be: its warm-up and enough windows to agree."""
        return self.warmup_s + self.rule.window_s * self.rule.consecutive


@dataclass
class Probe:
    """One rate tried: its windows, whether they agreed, and whether it met the SLO."""

    rate: float  # offered, requests/s
    stability: Stability
    figure: Window  # the windows the figure comes from, merged
    passed: bool
    reasons: list[str]  # why it failed (empty when it passed)
    client_core_fraction: float | None = None  # CPU of the load generator's busiest process over the probe, cores
    per_process: dict[str, float] | None = None  # each sending process's share of a core (workers by id)
    client_problem: bool = False  # a worker's windows did not arrive: the client failed this rate, not the server
    latency_only: bool = False  # it failed on its latencies alone (p99 over the SLO, windows not agreeing)
    server: dict[str, Any] | None = None  # the server's statistics over this rate's counted windows (serverstats.window)
    wall: tuple[float, float] | None = None  # the counted windows' start and end, wall-clock (time.time())

    @property
    def client_saturated(self) -> bool:
        return self.client_problem or (self.client_core_fraction is not None
                                       and self.client_core_fraction >= CLIENT_BUSY)

    @property
    def p99_ms(self) -> float | None:
        return self.figure.hist.percentile(99) if self.figure.hist.count else None

    def row(self) -> dict[str, Any]:
        s = self.figure.hist.summary()
        return {"rate": round(self.rate, 3), "passed": self.passed, "reasons": self.reasons,
                "requests_s": round(self.figure.throughput, 3) if self.figure.length_s else None,
                "window_s": round(self.figure.length_s, 3), **{k: v for k, v in s.items() if k != "count"},
                "requests": self.figure.requests, "failures": self.figure.failures, "late": self.figure.late,
                "client_core_fraction": self.client_core_fraction, "per_process_core_fraction": self.per_process,
                "stability": self.stability.to_dict(), "server": self.server,
                **({"wall_start": round(self.wall[0], 3), "wall_end": round(self.wall[1], 3)} if self.wall else {})}


def evaluate(rate: float, windows: list[Window], config: SearchConfig, client_core_fraction: float | None = None,
             problems: list[str] | None = None, per_process: dict[str, float] | None = None) -> Probe:
    """Judge one probe's windows against the SLO and the error bound; a probe whose load generator was
    busy (`client_core_fraction` >= CLIENT_BUSY: its busiest sending process) fails, since late sends show
    as late answers, and so does one with `problems` (a worker whose windows are missing)."""
    stability = judge(windows, config.rule)
    figure = merged(windows, stability.windows_used)
    reasons = list(problems or [])
    if not stability.stable:
        reasons.append(stability.reason)
    if figure.hist.count == 0:
        reasons.append("no request answered")
    else:
        p99 = figure.hist.percentile(99)
        if p99 > config.slo_p99_ms:
            reasons.append(f"p99 {p99:.3f} ms > SLO {config.slo_p99_ms:g} ms")
    errors = bool(figure.requests) and figure.failures / figure.requests > config.max_error_fraction
    busy = client_core_fraction is not None and client_core_fraction >= CLIENT_BUSY
    if errors:
        reasons.append(f"{figure.failures} of {figure.requests} requests failed "
                       f"(more than {config.max_error_fraction:.1%})")
    if busy:
        busiest = max(per_process, key=per_process.__getitem__) if per_process and len(per_process) > 1 else None
        reasons.append(f"the load generator{f' (worker {busiest})' if busiest else ''} used "
                       f"{client_core_fraction:.0%} of a core: this rate measured the client")
    return Probe(rate, stability, figure, passed=not reasons, reasons=reasons,
                 client_core_fraction=client_core_fraction, per_process=per_process, client_problem=bool(problems),
                 latency_only=bool(reasons) and not (problems or errors or busy or figure.hist.count == 0))


def estimate_first_rate(config: SearchConfig, requests_s: float) -> SearchConfig:
    """The search from a closed-loop estimate (`requests_s` answered by users sending back to back): its first
    rate ESTIMATE_SHARE of it, its steps ESTIMATE_STEP; `config` unchanged when nothing was answered."""
    if requests_s <= 0:
        return config
    start = min(config.max_rate, max(config.min_rate, ESTIMATE_SHARE * requests_s))
    return replace(config, start_rate=start, step=ESTIMATE_STEP)


def highest_rate(start_rate: float, budget_s: float, min_probe_s: float, max_rate: float = 1e6) -> float:
    """The highest rate a search from `start_rate` may probe within `budget_s`: it doubles at most once per
    probe, and bisection stays below the doubling that failed (the client's processes are sized for it)."""
    probes = max(1, int(budget_s // max(min_probe_s, 1e-9)))
    return min(max_rate, start_rate * 2.0 ** min(probes - 1, 60))


class RateSearch:
    """Exponential bracketing, then bisection; feed it probes with `record`, ask `next_rate` what to try."""

    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.probes: list[Probe] = []
        self.best: Probe | None = None  # highest passing
        self.lowest_failed: Probe | None = None
        self.stop_reason: str | None = None
        self.budget_ended = False  # the time ran out before the bracket closed: the capacity is a lower bound
        self.estimate: dict[str, Any] | None = None  # the closed-loop probe that set the first rate, if one did
        self.elapsed_s = 0.0  # seconds since the search began, as of the last next_rate
        self._again: float | None = None  # a rate to probe once more before it counts as failed

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)
        if probe.passed and (self.best is None or probe.rate > self.best.rate):
            self.best = probe
            if self.lowest_failed is not None and self.lowest_failed.rate <= probe.rate:
                # the bracket's upper end passed when measured again: the next failing rate above it is the end
                above = [p for p in self.probes if not p.passed and p.rate > probe.rate]
                self.lowest_failed = min(above, key=lambda p: p.rate) if above else None
        elif not probe.passed and sum(p.rate == probe.rate for p in self.probes) == 1 \
                and (self._only_unsettled(probe) or (len(self.probes) == 1 and probe.latency_only)):
            # its windows met the SLO but did not agree: measured again, as perf_analyzer measures until it
            # is stable, rather than let one noisy probe move the bracket down. The first rate also carries the
            # server's first seconds under load (warming caches, pools, the allocator), which can fail a p99
            # that a 30 s window at the same rate, and later probes near it, meet (docs/BENCHMARKS.md)
            self._again = probe.rate
        elif not probe.passed and (self.lowest_failed is None or probe.rate < self.lowest_failed.rate):
            self.lowest_failed = probe

    def _confirm(self, top: Probe) -> bool:
        """Whether the bracket's upper end is to be measured once more before the search ends on it."""
        return top.latency_only and sum(p.rate == top.rate for p in self.probes) == 1

    @staticmethod
    def _only_unsettled(probe: Probe) -> bool:
        """The probe failed for one reason alone: its windows did not stabilise (not the SLO, errors, the client)."""
        return not probe.stability.stable and probe.reasons == [probe.stability.reason]

    def next_rate(self, elapsed_s: float) -> float | None:
        """The next rate to probe, or None when the search is over (`stop_reason` says why)."""
        c = self.config
        self.elapsed_s = elapsed_s
        lo = self.best.rate if self.best else None
        hi = self.lowest_failed.rate if self.lowest_failed else None
        if elapsed_s + c.min_probe_s > c.budget_s:
            self.budget_ended = not (lo is not None and hi is not None and hi <= lo * (1 + c.precision))
            self.stop_reason = (f"the search's budget ended before it bracketed capacity ({c.budget_s:g} s)"
                                if self.budget_ended else f"the search's {c.budget_s:g} s were spent")
            return None
        if not self.probes:
            return c.start_rate
        if self._again is not None:
            rate, self._again = self._again, None
            return rate
        if hi is None:  # everything passed so far: go up
            if lo is not None and lo >= c.max_rate:
                self.stop_reason = f"the highest rate allowed ({c.max_rate:g} req/s) met the SLO"
                return None
            return min(c.max_rate, (lo or c.start_rate) * self._step())
        if lo is None:  # everything failed so far: go down
            down = hi / self._step()
            if down < c.min_rate:
                self.stop_reason = f"no rate down to {c.min_rate:g} req/s met the SLO"
                return None
            return down
        if hi <= lo * (1 + c.precision):
            if self._confirm(self.lowest_failed):
                return hi
            self.stop_reason = f"bracketed within {c.precision:.0%}"
            return None
        return (lo + hi) / 2

    def _step(self) -> float:
        """The next step before the bracket: `step` to the power of the distinct rates tried so far (all of
        them on one side of the capacity), at most x2, so a far-off estimate is left behind in a few probes."""
        step = self.config.step
        return step if step >= 2 else min(2.0, step ** len({p.rate for p in self.probes}))

    def result(self) -> dict[str, Any]:
        """The Server figure and how it was found (record.extra["search"])."""
        best, hi = self.best, self.lowest_failed
        out: dict[str, Any] = {
            "capacity_req_s": round(best.rate, 3) if best else None,
            "upper_req_s": round(hi.rate, 3) if hi else None,  # lowest rate that failed
            # nothing failed, the client failed first, or the time ran out before the bracket closed: the
            # server's capacity is at least this
            "lower_bound": best is not None and (hi is None or hi.client_saturated or self.budget_ended),
            "budget_ended": self.budget_ended,
            "bracket": round(hi.rate / best.rate - 1, 4) if best and hi and hi.rate > best.rate else None,
            # the lowest failing rate failed because the client was busy: the capacity is the client's
            # limit, a lower bound of the server's
            "client_limited": bool(hi and hi.client_saturated),
            "stop_reason": self.stop_reason,
            "slo_p99_ms": self.config.slo_p99_ms,
            "max_error_fraction": self.config.max_error_fraction,
            "probes": [p.row() for p in self.probes],
            "estimate": self.estimate,  # the closed-loop probe that set the first rate (None: --rate set it)
            "first_rate_req_s": round(self.config.start_rate, 3),
            "step": self.config.step,
            "elapsed_s": round(self.elapsed_s, 3),
            "stability": best.stability.to_dict() if best else self._unstable(),
        }
        if best is not None:
            out["figure"] = best.row()
            out["percentiles_short"] = percentiles_short(best.figure.hist.count)
        return out

    def _unstable(self) -> dict[str, Any] | None:
        """No probe passed: whether that was because none stabilised (the last probe's reason)."""
        if not self.probes:
            return None
        if all(not p.stability.stable for p in self.probes):
            return self.probes[-1].stability.to_dict()
        return {"stable": True, "rule": None, "reason": "probes stabilised but none met the SLO",
                "windows_used": []}
