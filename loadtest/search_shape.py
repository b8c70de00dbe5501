"""`ServerSearch`: the Server scenario's capacity search (loadtest/search.py) run by Locust.

The shape keeps `--open-loop-users` OpenLoopUsers running and changes their arrival rate through the
collector (`collector.rate`), one rate at a time, from a greenlet of its own: Locust calls a shape's
`tick` only once a second, too coarse for half-second windows.

With `--search-closed-users U` (what `trainserve load --search` passes when no --rate is given) the search
first runs a closed-loop probe: each open-loop user sends back to back from U greenlets for a warm-up and
three windows; 0.9 of what the server answered is the first rate, and the steps from it are x1.25
(loadtest/search.py, `estimate_first_rate`). Then, for each rate:

1. the rate is set and a fresh window log (loadtest/windows.py) takes that rate's requests, by their
   scheduled send time; the first `--warmup-s` of them are not counted; a window lasts `--window-s`,
   or long enough for 30 requests at a low rate;
2. each window is judged `grace` after its end (the SLO and a margin), so a request due in it and not
   answered by then is counted as late, above the SLO; windows are added until three agree or
   `--search-probe-s` is spent;
3. the rate is paused until the requests still in flight are answered (at most 2 s), so a rate the
   server could not keep up with does not leave its queue to the next one.

The server's statistics (loadtest/serverstats.py) are read at the end of each rate's warm-up and after
its last window, so the split of the Server figure's latency (loadtest/attribution.py) comes from what
the server did at that rate, not over the whole search.

In one Locust process the rate and the windows live in that process; with `--processes N` the master
runs the search and its N workers send and measure (loadtest/search_workers.py: each worker sends
rate/N and reports each window's histogram; the master judges the merged windows). The search's result
goes to the results file (`search`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import gevent
from locust import LoadTestShape

from trainserve.loadtest.options import LoadOptions
from trainserve.loadtest.search import Probe, RateSearch, SearchConfig, estimate_first_rate, evaluate
from trainserve.loadtest.search_workers import LocalProbes, WorkerProbes
from trainserve.loadtest.serverstats import StatsReader
from trainserve.loadtest.serverstats import window as server_window
from trainserve.loadtest.users import OpenLoopUser
from trainserve.loadtest.windows import StabilityRule, merged, min_requests_for

log = logging.getLogger(__name__)
P99_REQUESTS = min_requests_for(99)
WINDOW_REQUESTS = 30  # the fewest requests a window is expected to hold (it is made longer at low rates)


class ServerSearch(LoadTestShape):
    """Open loop: the highest Poisson arrival rate whose p99 from the scheduled send time meets --slo-p99-ms."""

    use_common_options = True  # --run-time bounds it (the runner sets it above the search's budget)

    def __init__(self) -> None:
        super().__init__()
        self._greenlet: gevent.Greenlet | None = None
        self._stats: StatsReader | None = None
        self.done = False

    def reset_time(self) -> None:
        super().reset_time()
        # a master calls this again once its first tick has started the workers' users (the test's start):
        # a search already begun would run beside the next one and drive the same workers, so it goes
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
        self._greenlet, self.done = None, False

    def tick(self) -> tuple[int, float, list[Any]] | None:
        if self.done:
            return None
        opts = LoadOptions.from_parsed(self.runner.environment.parsed_options)
        if self._greenlet is None:
            collector = self.runner.environment.trainserve
            collector.rate = 0.0  # paused until every user runs
            self._greenlet = gevent.spawn(self._search, opts, collector)
        return opts.open_loop_users, 100.0, [OpenLoopUser]

    def _search(self, opts: LoadOptions, collector: Any) -> None:
        config = search_config(opts)
        search = RateSearch(config)
        self._stats = StatsReader(opts.server_url, opts.model_name, opts.protocol)
        # a master's workers send and measure (registered at init, loadtest/search_workers.py); alone, this process
        probes = collector.fleet if isinstance(getattr(collector, "fleet", None), WorkerProbes) \
            else LocalProbes(collector)
        t0 = time.perf_counter()
        while self.runner.user_count < opts.open_loop_users and time.perf_counter() - t0 < 5.0:
            gevent.sleep(0.05)
        t0 = time.perf_counter()
        try:
            if opts.search_closed_users > 0:
                estimate = self._estimate(opts.search_closed_users, opts.open_loop_users, config, probes)
                search = RateSearch(estimate_first_rate(config, estimate["requests_s"]))
                search.estimate = {**estimate, "first_rate_req_s": round(search.config.start_rate, 3)}
                log.info("search: closed loop at %d users answered %.1f req/s (p99 %s ms); first rate %.1f req/s",
                         estimate["users"], estimate["requests_s"], estimate["p99_ms"], search.config.start_rate)
            while (rate := search.next_rate(time.perf_counter() - t0)) is not None:
                probe = self._probe(rate, config, probes, deadline=t0 + config.budget_s)
                search.record(probe)
                log.info("search: %.1f req/s %s (p99 %s ms)%s", rate, "met the SLO" if probe.passed else "failed",
                         None if probe.p99_ms is None else round(probe.p99_ms, 3),
                         "" if probe.passed else f": {'; '.join(probe.reasons)}")
                probes.drain()
        finally:
            probes.stop()
            collector.search = search.result()
            self.done = True

    @staticmethod
    def _estimate(per_user: int, open_loop_users: int, config: SearchConfig, probes: Any) -> dict[str, Any]:
        """The closed-loop probe: `per_user` greenlets in each open-loop user sending back to back for a warm-up
        and three windows; what the server answered (requests/s, latencies) when it was never left idle."""
        rule = config.rule
        grace = config.slo_p99_ms / 1000.0 * 1.2 + 0.02  # most requests sent in a window are answered by then
        start = time.time()
        probe_log = probes.start(0.0, start, config.warmup_s, rule.window_s, closed=per_user)
        windows, problems = [], []
        for i in range(rule.consecutive):
            gevent.sleep(max(0.0, probe_log.window_end(i) + grace - time.time()))
            window, missing = probes.close(i)
            windows.append(window)
            problems += missing
        busy, per_process = probes.finish()
        probes.drain()
        figure = merged(windows, [w.index for w in windows])
        answered = figure.hist.count - figure.late  # still in flight when a window closed: not answered in it
        s = figure.hist.summary()
        requests_s = round(answered / figure.length_s, 3) if figure.length_s else 0.0
        return {"users": per_user * open_loop_users, "requests_s": requests_s,
                "p50_ms": s.get("p50_ms"), "p99_ms": s.get("p99_ms"), "window_s": round(figure.length_s, 3),
                "requests": figure.requests, "failures": figure.failures, "client_core_fraction": busy,
                "per_process_core_fraction": per_process, "problems": problems,
                "wall_start": round(start + config.warmup_s, 3), "wall_end": round(time.time(), 3)}

    def _probe(self, rate: float, config: SearchConfig, probes: Any, deadline: float) -> Probe:
        assert self._stats is not None  # set by _search, the only caller
        # a window holds at least WINDOW_REQUESTS requests, or its median and count are mostly noise
        rule = dataclasses.replace(config.rule, window_s=max(config.rule.window_s, WINDOW_REQUESTS / rate))
        config = dataclasses.replace(config, rule=rule,
                                     max_probe_s=max(config.max_probe_s, rule.window_s * rule.consecutive))
        grace = config.slo_p99_ms / 1000.0 * 1.2 + 0.02  # an unanswered request is then past the SLO
        start = time.time()
        probe_log = probes.start(rate, start, config.warmup_s, rule.window_s)
        # the server's counters when the counted windows begin (the warm-up left out, as for the client)
        before = gevent.spawn_later(config.warmup_s, self._stats.snapshot)
        windows, problems = [], []
        last = min(start + config.warmup_s + config.max_probe_s,  # the probe's windows end by here
                   time.time() + max(0.0, deadline - time.perf_counter()) - grace)
        i = 0
        while True:
            end = probe_log.window_end(i)
            if end > last and len(windows) >= rule.consecutive:
                break
            gevent.sleep(max(0.0, end + grace - time.time()))
            window, missing = probes.close(i)
            windows.append(window)
            problems += missing
            i += 1
            probe = evaluate(rate, windows, config, problems=problems)
            # stable, and enough requests that the p99 is more than the largest few (else more windows)
            if probe.stability.stable and (probe.figure.requests >= P99_REQUESTS or end > last):
                break
            every = merged(windows, [w.index for w in windows])
            if problems or every.hist.count and every.hist.percentile(99) > 2 * config.slo_p99_ms \
                    and len(windows) >= rule.consecutive:
                break  # a worker's windows are missing, or far past the SLO in every window so far
        busy, per_process = probes.finish()  # cores of the busiest process that sent
        probe = evaluate(rate, windows, config, client_core_fraction=busy, problems=problems,
                         per_process=per_process)
        now = time.time()
        probe.server = server_window(before.get(), self._stats.snapshot(), max(0.0, now - (start + config.warmup_s)))
        probe.wall = (start + config.warmup_s, now)  # for the server's CPU over this rate (trainserve run)
        return probe


def search_config(opts: LoadOptions) -> SearchConfig:
    """The search's settings from the load options (the volume rule: 20 s and 5000 requests, per rate).

    Median latencies within 5% of the SLO of each other agree: a swing that small cannot change the
    decision the search makes, and a busy host's scheduling moves a 1 ms median by more than 10%."""
    rule = StabilityRule(window_s=opts.window_s, min_duration_s=20.0, min_requests=5000,
                         latency_floor_ms=max(StabilityRule.latency_floor_ms, 0.05 * opts.slo_p99_ms))
    return SearchConfig(slo_p99_ms=opts.slo_p99_ms, start_rate=opts.rate, min_rate=min(1.0, opts.rate),
                        budget_s=opts.search_budget_s, warmup_s=opts.warmup_s, max_probe_s=opts.search_probe_s,
                        rule=rule)
