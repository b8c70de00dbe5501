"""Load shapes, selectable in the web UI's class picker (or with --load-shape when headless).

- `StepRamp`: closed-loop users up in steps until a step's p99 passes the ramp's stop (--ramp-stop-p99-ms), throughput
  stops growing, or the user limit is reached; each step's numbers and the saturation point go to
  the results (record.extra["ramp"]).
- `PoissonRate`: open loop at a fixed arrival rate (the `--rate` option), for `--run-time` seconds.

Shapes run on the master (or the only process). The ramp reads the latency histogram that the
collector merges from workers every few seconds (Locust's report interval, 3 s), so with workers use
steps of 15 s or more.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from locust import LoadTestShape

from trainserve.core.servedparts import RampStop, Saturation
from trainserve.core.typedjson import to_json
from trainserve.loadtest.attribution import StepWindow
from trainserve.loadtest.histogram import Histogram
from trainserve.loadtest.options import LoadOptions
from trainserve.loadtest.users import OpenLoopUser, TritonGrpcUser, TritonHttpUser

log = logging.getLogger(__name__)


def _options(shape: LoadTestShape) -> LoadOptions:
    return LoadOptions.from_parsed(shape.runner.environment.parsed_options)


def _run_time_limit(shape: LoadTestShape) -> float | None:
    run_time = getattr(shape.runner.environment.parsed_options, "run_time", None)
    return float(run_time) if run_time else None


class StepRamp(LoadTestShape):
    """Closed-loop users up in steps until latency breaks the SLO or throughput stops growing."""

    use_common_options = True  # --run-time bounds the whole ramp

    def __init__(self) -> None:
        super().__init__()
        self._reset()

    def _reset(self) -> None:
        self.step = -1
        self.step_started = 0.0
        self.snapshot = Histogram()
        self.failures_at_start = 0
        self.done = False

    def reset_time(self) -> None:
        super().reset_time()
        self._reset()

    def tick(self) -> tuple[int, float, list[Any]] | None:
        if self.done:
            return None
        opts = _options(self)
        collector = self.runner.environment.trainserve
        limit = _run_time_limit(self)
        elapsed = self.get_run_time()
        step = int(elapsed // opts.ramp_step_s)
        users = opts.ramp_start_users + max(step, 0) * opts.ramp_step_users
        over = (limit is not None and elapsed >= limit) or users > opts.ramp_max_users
        if step != self.step or over:
            if self.step >= 0 and self._finish_step(opts, collector, reason_if_last="limit" if over else None):
                self.done = True
                return None
            if over:
                self.done = True
                return None
            self.step = step
            self.step_started = time.perf_counter()
            self.snapshot = collector.total.copy()
            self.failures_at_start = self.runner.stats.total.num_failures
            self.served = StepWindow(collector, opts.server_url, opts.model_name, opts.protocol)
        cls = TritonGrpcUser if opts.protocol == "grpc" else TritonHttpUser
        return users, float(max(users, 1)) * 10, [cls]  # spawn the whole step at once

    def _finish_step(self, opts: LoadOptions, collector: Any, reason_if_last: str | None) -> bool:
        """Record the step that just ended; True when the ramp should stop here."""
        window = max(time.perf_counter() - self.step_started, 1e-9)
        step_hist = collector.total.minus(self.snapshot)
        summary = step_hist.summary()
        users = opts.ramp_start_users + self.step * opts.ramp_step_users
        requests_s = step_hist.count / window
        row = {"users": users, "rate": None, "requests_s": round(requests_s, 2),
               "throughput_samples_s": round(requests_s * opts.batch_size, 2),
               "p50_ms": summary["p50_ms"], "p90_ms": summary["p90_ms"], "p95_ms": summary["p95_ms"],
               "p99_ms": summary["p99_ms"],
               "p999_ms": summary["p999_ms"], "failures": self.runner.stats.total.num_failures - self.failures_at_start,
               "window_s": round(window, 3), **self.served.finish(summary["mean_ms"])}
        steps = collector.ramp
        steps.append(row)
        log.info("ramp step: %d users, %.1f req/s, p99 %s ms", users, requests_s, summary["p99_ms"])
        reason, stop = None, RampStop.LIMIT
        if summary["p99_ms"] is not None and summary["p99_ms"] > opts.ramp_stop_p99_ms:
            reason, stop = f"p99 {summary['p99_ms']} ms > {opts.ramp_stop_p99_ms:g} ms", RampStop.SLO
        elif len(steps) >= 2 and steps[-2]["requests_s"] > 0 and \
                requests_s < steps[-2]["requests_s"] * (1 + opts.min_gain):
            reason, stop = f"throughput grew less than {opts.min_gain:.0%}", RampStop.PLATEAU
        if reason is None and reason_if_last is None:
            return False
        good = [s for s in steps if s["p99_ms"] is not None and s["p99_ms"] <= opts.ramp_stop_p99_ms]
        best = max(good, key=lambda s: s["requests_s"]) if good else None
        collector.saturation = to_json(Saturation(
            users=best["users"] if best else None, requests_s=best["requests_s"] if best else None,
            reason=reason or "ramp reached its user or time limit without saturating", stop=stop))
        return reason is not None or reason_if_last is not None


class PoissonRate(LoadTestShape):
    """Open loop: Poisson arrivals at `--rate` per second, latency from the scheduled send time."""

    use_common_options = True  # --run-time ends it

    def tick(self) -> tuple[int, float, list[Any]] | None:
        limit = _run_time_limit(self)
        if limit is not None and self.get_run_time() >= limit:
            return None
        n = _options(self).open_loop_users
        return n, 100.0, [OpenLoopUser]  # all at once
