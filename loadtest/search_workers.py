"""The capacity search's probes, in one Locust process or across a master and its workers (`--processes N`).

The search (loadtest/search_shape.py) talks to a probe driver: start a rate with a fresh window log,
close window i, finish the probe (the client's busiest process), drain the requests still in flight.

- `LocalProbes`: one process; the users and the windows live in it (the collector's `rate` and `probe`).
- `WorkerProbes`: the master decides each rate and judges each window; its workers send and measure.
  Locust custom messages carry it (one round trip per window, so the master never waits for Locust's
  3-second worker reports):

      master -> workers  trainserve_probe   {"rate", "probe": {"id", "start", "warmup_s", "window_s"} | None,
                                             "closed": users}   (closed > 0: send back to back, not at rate)
      master -> workers  trainserve_close   {"id", "index"}
      worker -> master   trainserve_window  {"id", "index", "hist", "failures", "late", "busy"}
      master -> workers  trainserve_drain   {}
      worker -> master   trainserve_drained {}

  Every worker gets the whole run's rate and the same probe start (wall clock, comparable between the
  processes of one host): its users each send rate/--open-loop-users (one user per worker, so rate/N
  per worker), and its windows have the same indices as every other worker's. A worker closes its own
  window (a request due in it and not answered yet counts as late, at its age) and sends its histogram,
  not its latencies; the master merges the workers' windows into one (latencies, failures and late
  requests added up; the window's length is the same). A worker that does not answer within `REPLY_S`
  fails the probe (its requests are missing from the merged window). The client-limited rule applies per
  worker: the probe's client figure is its busiest worker's share of a core.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import gevent

from trainserve.loadtest.histogram import Histogram
from trainserve.loadtest.windows import Window, WindowLog

log = logging.getLogger(__name__)
DRAIN_S = 2.0  # most seconds to wait, between rates, for answers still in flight
REPLY_S = 2.0  # most seconds the master waits for the workers' windows
PROBE, CLOSE, WINDOW, DRAIN, DRAINED = ("trainserve_probe", "trainserve_close", "trainserve_window",
                                        "trainserve_drain", "trainserve_drained")


class LocalProbes:
    """One Locust process: it sends the rate and keeps the windows itself."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.log: WindowLog | None = None
        self.cpu0 = self.t0 = 0.0

    def start(self, rate: float, start: float, warmup_s: float, window_s: float, closed: int = 0) -> WindowLog:
        """Send `rate` (or, with `closed` > 0, back to back from that many greenlets per user) into a new log."""
        self.log = WindowLog(start, warmup_s, window_s)
        self.cpu0, self.t0 = time.process_time(), time.time()
        self.collector.probe, self.collector.rate, self.collector.closed_users = self.log, rate, closed
        return self.log

    def close(self, i: int) -> tuple[Window, list[str]]:
        assert self.log is not None
        return self.log.close(i, time.time()), []

    def finish(self) -> tuple[float, dict[str, float]]:
        """The probe's windows are done: this process's share of a core over the probe."""
        self.collector.probe = None
        busy = round((time.process_time() - self.cpu0) / max(time.time() - self.t0, 1e-9), 3)
        return busy, {"local": busy}

    def drain(self) -> None:
        drain_here(self.collector)

    def stop(self) -> None:
        self.collector.probe, self.collector.rate, self.collector.closed_users = None, 0.0, 0


def drain_here(collector: Any) -> None:
    """Pause this process's open-loop users and wait (at most DRAIN_S) for the answers still in flight."""
    collector.rate, collector.closed_users = 0.0, 0
    t0 = time.perf_counter()
    while collector.scheduled_total > collector.answered_total and time.perf_counter() - t0 < DRAIN_S:
        gevent.sleep(0.02)


class WorkerProbes:
    """The master's side: rates out to the workers, their windows back and merged (registered at init)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.ids = itertools.count(1)
        self.probe_id = 0
        self.workers: list[str] = []  # the workers running users when the probe started
        self.windows: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
        self.drained: set[str] = set()
        self.busy: dict[str, float] = {}
        self.template: WindowLog | None = None
        runner.register_message(WINDOW, self._on_window)
        runner.register_message(DRAINED, self._on_drained)

    def _on_window(self, environment: Any, msg: Any, **_: Any) -> None:
        d = msg.data or {}
        if d.get("id") == self.probe_id:
            self.windows.setdefault((d["id"], d["index"]), {})[msg.node_id] = d

    def _on_drained(self, environment: Any, msg: Any, **_: Any) -> None:
        self.drained.add(msg.node_id)

    def start(self, rate: float, start: float, warmup_s: float, window_s: float, closed: int = 0) -> WindowLog:
        self.probe_id = next(self.ids)
        self.windows, self.busy = {}, {}
        self.workers = sorted(c.id for c in self.runner.clients.values() if c.user_count > 0)
        self.template = WindowLog(start, warmup_s, window_s)  # the master only reads its window ends
        self.runner.send_message(PROBE, {"rate": rate, "probe": {"id": self.probe_id, "start": start,
                                                                  "warmup_s": warmup_s, "window_s": window_s},
                                       "closed": closed})
        return self.template

    def close(self, i: int) -> tuple[Window, list[str]]:
        """Window i of every worker, merged; the problems (a worker that did not report it)."""
        assert self.template is not None
        key = (self.probe_id, i)
        self.runner.send_message(CLOSE, {"id": self.probe_id, "index": i})
        t0 = time.perf_counter()
        while len(self.windows.get(key, {})) < len(self.workers) and time.perf_counter() - t0 < REPLY_S:
            gevent.sleep(0.005)
        got = self.windows.pop(key, {})
        out = Window(i, self.template.window_s)
        for worker, d in got.items():
            out.hist.merge(Histogram.from_dict(d["hist"]))
            out.failures += int(d["failures"])
            out.late += int(d["late"])
            self.busy[worker] = float(d["busy"])
        missing = [w for w in self.workers if w not in got]
        return out, [f"worker {w} did not report window {i} within {REPLY_S:g} s" for w in missing]

    def finish(self) -> tuple[float | None, dict[str, float]]:
        """The busiest worker's share of a core over the probe (as of its last window), and each worker's."""
        return (max(self.busy.values()) if self.busy else None), dict(sorted(self.busy.items()))

    def drain(self) -> None:
        self.drained = set()
        self.runner.send_message(DRAIN, {})
        t0 = time.perf_counter()
        while not set(self.workers) <= self.drained and time.perf_counter() - t0 < DRAIN_S + REPLY_S:
            gevent.sleep(0.02)

    def stop(self) -> None:
        self.probe_id = 0
        self.runner.send_message(PROBE, {"rate": 0.0, "probe": None})


class WorkerSide:
    """A worker's side: it sets its users' rate and window log as the master says, and reports its windows."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.probe_id = 0
        self.cpu0 = self.t0 = 0.0
        runner.register_message(PROBE, self._on_probe)
        runner.register_message(CLOSE, self._on_close)
        runner.register_message(DRAIN, self._on_drain, concurrent=True)  # it waits: off the message loop

    def _on_probe(self, environment: Any, msg: Any, **_: Any) -> None:
        collector, spec = environment.trainserve, msg.data.get("probe")
        self.probe_id = spec["id"] if spec else 0
        collector.probe = WindowLog(spec["start"], spec["warmup_s"], spec["window_s"]) if spec else None
        self.cpu0, self.t0 = time.process_time(), time.time()
        collector.rate, collector.closed_users = float(msg.data["rate"]), int(msg.data.get("closed") or 0)

    def _on_close(self, environment: Any, msg: Any, **_: Any) -> None:
        collector, d = environment.trainserve, msg.data
        probe = collector.probe
        if probe is None or d["id"] != self.probe_id:
            return  # a probe this worker did not take part in: the master counts it missing
        w = probe.close(int(d["index"]), time.time())
        busy = (time.process_time() - self.cpu0) / max(time.time() - self.t0, 1e-9)
        self.runner.send_message(WINDOW, {"id": d["id"], "index": w.index, "hist": w.hist.to_dict(),
                                          "failures": w.failures, "late": w.late, "busy": round(busy, 3)})

    def _on_drain(self, environment: Any, msg: Any, **_: Any) -> None:
        collector = environment.trainserve
        collector.probe = None
        drain_here(collector)
        self.runner.send_message(DRAINED, {})


def install(runner: Any) -> WorkerProbes | WorkerSide | None:
    """Register the search's messages on a master or a worker (at Locust's init); None on a local runner."""
    kind = type(runner).__name__  # by name, as loadtest/clientcpu.py does
    if kind == "MasterRunner":
        return WorkerProbes(runner)
    if kind == "WorkerRunner":
        return WorkerSide(runner)
    return None
