"""Per-test bookkeeping inside Locust: the sub-millisecond histogram, the fault watchdog, the results file.

- Every successful request's latency goes into a `Histogram`. A worker ships what it recorded
  since its last report to the master (report_to_master) and starts afresh; the master merges
  (worker_report). A local run records straight into the total.
- On the master (or the only process), a watchdog stops the test when only failures were seen for
  `--abort-after-s` seconds (server gone or broken mid-run), and remembers why.
- At test stop and at exit, the results (percentiles at 0.01 ms, the raw histogram, the ramp's
  steps and saturation point, errors, abort reason) go to `--results-json` for the headless runner.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from trainserve.loadtest.histogram import Histogram
from trainserve.loadtest.options import LoadOptions
from trainserve.loadtest.windows import StabilityRule, WindowLog, judge, percentiles_short

log = logging.getLogger(__name__)
_KEY = "trainserve_hist"


class Collector:
    def __init__(self, environment: Environment) -> None:
        self.env = environment
        self.total = Histogram()
        self.ramp: list[dict[str, Any]] = []
        self.saturation: dict[str, Any] | None = None
        self.aborted: str | None = None
        self.started_wall: str | None = None
        self.started: float | None = None
        self.stopped: float | None = None
        self._watchdog: gevent.Greenlet | None = None
        # CPU seconds of this process (time.process_time) and, on a master, of each worker
        self._cpu_mark = time.process_time()
        self.cpu_start = self._cpu_mark
        self.cpu_stop: float | None = None
        self.worker_cpu: dict[str, float] = {}
        # wall-clock span of the requests (s since the epoch): the measured window, also across workers
        self.first_request: float | None = None
        self.last_request: float | None = None
        # windows after the warm-up (loadtest/windows.py), by each request's start (open loop: due) time
        self.log = WindowLog(None, 0.0, 1.0)
        self.stopped_wall: float | None = None
        # a search shape (loadtest/search_shape.py) sets the open-loop rate (None: --rate) and, while it
        # measures one rate, the window log that rate's requests go to instead of the run's
        self.rate: float | None = None
        self.closed_users = 0  # > 0: each open-loop user sends back to back from this many greenlets instead
        self.probe: WindowLog | None = None
        self.search: dict[str, Any] | None = None
        self.fleet: Any = None  # a master's or worker's side of the search (loadtest/search_workers.py)
        self.scheduled_total = 0
        self.answered_total = 0
        ev = environment.events
        ev.request.add_listener(self.on_request)
        ev.report_to_master.add_listener(self.on_report_to_master)
        ev.worker_report.add_listener(self.on_worker_report)
        ev.test_start.add_listener(self.on_test_start)
        ev.test_stop.add_listener(self.on_test_stop)
        ev.quitting.add_listener(self.on_quitting)

    def on_scheduled(self, due_wall: float) -> None:
        """An open-loop request is due now (called by OpenLoopUser before it sends)."""
        self.scheduled_total += 1
        (self.probe or self.log).scheduled(due_wall)

    def on_request(self, request_type: str, name: str, response_time: float, exception: Any = None,
                   context: Any = None, **_: Any) -> None:
        now = time.time()  # wall clock: comparable between the processes of one run
        due = context.get("due_wall") if isinstance(context, dict) else None
        if due is not None:
            self.answered_total += 1
        start = due if due is not None else now - response_time / 1000.0
        if self.probe is not None:
            self.probe.add(start, response_time, exception is not None)
            return
        if not self.log.add(start, response_time, exception is not None):
            return  # warm-up: not counted
        if exception is None:
            self.total.record(response_time)
        if self.first_request is None:
            self.first_request = now
        self.last_request = now

    def on_report_to_master(self, client_id: str, data: dict[str, Any]) -> None:
        data[_KEY] = self.total.to_dict()
        self.total = Histogram()
        now = time.process_time()
        data[_KEY + "_cpu"] = now - self._cpu_mark
        data[_KEY + "_span"] = [self.first_request, self.last_request]
        data[_KEY + "_win"] = self.log.export()
        data[_KEY + "_from"] = self.log.measure_from
        data[_KEY + "_warmup"] = self.log.warmup_excluded
        self.log.warmup_excluded = 0
        self._cpu_mark = now

    def on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        if _KEY in data:
            self.total.merge(Histogram.from_dict(data[_KEY]))
        # each worker's windows count from its own first request after its warm-up: the master's from the
        # earliest (the workers start within moments of each other)
        anchor = data.get(_KEY + "_from")
        if anchor is not None and (self.log.measure_from is None or anchor < self.log.measure_from):
            self.log.measure_from = anchor
        self.log.merge_rows(data.get(_KEY + "_win") or {})
        self.log.warmup_excluded += int(data.get(_KEY + "_warmup") or 0)
        first, last = data.get(_KEY + "_span") or (None, None)
        if first is not None and (self.first_request is None or first < self.first_request):
            self.first_request = first
        if last is not None and (self.last_request is None or last > self.last_request):
            self.last_request = last
        if self.started is not None and _KEY + "_cpu" in data:
            self.worker_cpu[client_id] = self.worker_cpu.get(client_id, 0.0) + float(data[_KEY + "_cpu"])

    def on_test_start(self, **_: Any) -> None:
        self.total = Histogram()
        self.ramp, self.saturation, self.aborted, self.stopped = [], None, None, None
        self.started = time.perf_counter()
        self.cpu_start, self.cpu_stop, self.worker_cpu = time.process_time(), None, {}
        self.first_request = self.last_request = None
        opts = self._options()
        self.log = WindowLog(None, opts.warmup_s if opts else 0.0, opts.window_s if opts else 1.0)
        self.stopped_wall, self.rate, self.probe, self.search = None, None, None, None
        self.closed_users = 0
        self.scheduled_total = self.answered_total = 0
        self.started_wall = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        if not isinstance(self.env.runner, WorkerRunner) and self._watchdog is None:
            self._watchdog = gevent.spawn(self._watch)

    def on_test_stop(self, **_: Any) -> None:
        if self.started is not None and self.stopped is None:
            self.stopped = time.perf_counter()
            self.stopped_wall = time.time()
            self.cpu_stop = time.process_time()
        if self._watchdog is not None:
            self._watchdog.kill(block=False)
            self._watchdog = None
        self.write_results()

    def on_quitting(self, **_: Any) -> None:
        self.write_results()

    def _watch(self) -> None:
        """Stop the test when failures keep coming and nothing succeeds (server gone or broken)."""
        try:
            opts = LoadOptions.from_parsed(self.env.parsed_options)
        except ValueError:
            return
        if opts.abort_after_s <= 0:
            return
        stats = self.env.stats.total
        last_ok_t, last_ok, fails_at_ok = time.perf_counter(), 0, 0
        while True:
            gevent.sleep(0.25)
            ok = stats.num_requests - stats.num_failures
            now = time.perf_counter()
            if ok != last_ok:
                last_ok_t, last_ok, fails_at_ok = now, ok, stats.num_failures
            elif stats.num_failures > fails_at_ok and now - last_ok_t >= opts.abort_after_s:
                self.aborted = (f"stopped after {now - last_ok_t:.1f} s with failures only; "
                                f"last error: {self.top_error() or 'unknown'}")
                log.error("%s", self.aborted)
                self._watchdog = None
                self.env.runner.quit()
                return

    def _options(self) -> LoadOptions | None:
        try:
            return LoadOptions.from_parsed(self.env.parsed_options) if self.env.parsed_options else None
        except (ValueError, TypeError):
            return None

    def measured(self) -> dict[str, Any]:
        """The measured span after the warm-up, its windows and whether they agree (loadtest/windows.py)."""
        opts = self._options()
        end = self.stopped_wall if self.stopped_wall is not None else time.time()
        windows = self.log.complete(end)
        rule = StabilityRule(window_s=self.log.window_s)
        start = self.log.measure_from if self.log.measure_from is not None else end
        return {"warmup_s": opts.warmup_s if opts else 0.0, "warmup_excluded": self.log.warmup_excluded,
                "measured_window_s": round(max(0.0, end - start), 3),
                "windows": [w.row() for w in windows], "stability": judge(windows, rule).to_dict(),
                "percentiles_short": percentiles_short(self.total.count)}

    def top_error(self) -> str | None:
        errors = sorted(self.env.stats.errors.values(), key=lambda e: -e.occurrences)
        return str(errors[0].error) if errors else None

    def results(self) -> dict[str, Any]:
        stats = self.env.stats.total
        try:
            opts: dict[str, Any] | None = dataclasses.asdict(LoadOptions.from_parsed(self.env.parsed_options))
        except (ValueError, TypeError):
            opts = None
        end = self.stopped if self.stopped is not None else time.perf_counter()
        return {
            "started": self.started_wall,
            "window_s": round(end - self.started, 3) if self.started is not None else None,
            "requests_window_s": round(self.last_request - self.first_request, 3)
            if self.first_request is not None and self.last_request is not None else None,
            "latency": self.total.summary(),
            "histogram": self.total.to_dict(),
            "requests": stats.num_requests,
            "failures": stats.num_failures,
            "errors": [{"name": e.name, "error": str(e.error), "occurrences": e.occurrences}
                       for e in self.env.stats.errors.values()],
            "aborted": self.aborted,
            "ramp": self.ramp,
            "saturation": self.saturation,
            "shape": type(self.env.shape_class).__name__ if self.env.shape_class else None,
            "workers": self.env.runner.worker_count if isinstance(self.env.runner, MasterRunner) else 0,
            "options": opts,
            "load_generator": self.cpu_usage(end),
            **self.measured(),
            "search": self.search,
        }

    def cpu_usage(self, end: float) -> dict[str, Any]:
        """CPU seconds the load generator's processes spent during the test (workers: as reported)."""
        own = (self.cpu_stop if self.cpu_stop is not None else time.process_time()) - self.cpu_start
        role = "master" if isinstance(self.env.runner, MasterRunner) else "local"
        per_process = {role: round(own, 3), **{k: round(v, 3) for k, v in self.worker_cpu.items()}}
        window = end - self.started if self.started is not None else None
        return {"cpu_s": round(sum(per_process.values()), 3), "per_process_cpu_s": per_process,
                "window_s": round(window, 3) if window else None,  # the span those CPU seconds were spent in
                "max_process_core_fraction": round(max(per_process.values()) / window, 3) if window else None}

    def write_results(self) -> None:
        path = getattr(self.env.parsed_options, "results_json", "") if self.env.parsed_options else ""
        if not path or isinstance(self.env.runner, WorkerRunner) or self.started is None:
            return
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(self.results(), f, indent=1)
        os.replace(tmp, p)
