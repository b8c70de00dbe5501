"""Typed served parts (trainserve/core/servedparts.py) for the tests: every field a load writes, overridable."""

from __future__ import annotations

from typing import Any

from trainserve.core.served import ClientCpu
from trainserve.core.servedparts import LoadParts, LoadSettings, RampStep, SearchProbe, ServerInfo, ServerSearch


def settings(**kw: Any) -> LoadSettings:
    base: dict[str, Any] = dict(protocol="http", mode="closed", users=1, rate=None, duration_s=10.0, processes=1,
                                input_data="random", validate="off", http_client="prepared", url="127.0.0.1:8000",
                                metrics_url=None, locust_exit_code=0, scenario="SingleStream", warmup_s=1.0,
                                window_s=1.0, slo_p99_ms=20.0, repeats=1)
    return LoadSettings(**(base | kw))


def server_info(frontends: int | None = None) -> ServerInfo:
    return ServerInfo(name="trainserve", version="0", metrics={}, instance_group=None, max_batch_size=64,
                      frontends=frontends)


def parts(**kw: Any) -> LoadParts:
    return LoadParts(settings=kw.pop("settings", None) or settings(), server=kw.pop("server", None) or server_info(),
                     **kw)


def step(users: int, requests_s: float, p99_ms: float | None, **kw: Any) -> RampStep:
    base: dict[str, Any] = dict(rate=None, throughput_samples_s=requests_s, p50_ms=None, p90_ms=None, p95_ms=None,
                                p999_ms=None, failures=0, window_s=10.0, mean_ms=None, client_cpu=ClientCpu(),
                                server=None, wall_start=0.0, wall_end=10.0)
    return RampStep(users=users, requests_s=requests_s, p99_ms=p99_ms, **(base | kw))


def probe(rate: float, passed: bool, **kw: Any) -> SearchProbe:
    base: dict[str, Any] = dict(reasons=[], requests_s=rate, window_s=3.0, mean_ms=1.0, min_ms=0.5, max_ms=4.0,
                                p50_ms=1.0, p90_ms=1.5, p95_ms=2.0, p99_ms=3.0, p999_ms=3.5, requests=int(rate * 3),
                                failures=0, late=0, client_core_fraction=None, per_process_core_fraction=None,
                                stability=None, server=None)
    return SearchProbe(rate=rate, passed=passed, **(base | kw))


def search(**kw: Any) -> ServerSearch:
    base: dict[str, Any] = dict(capacity_req_s=17749.6, upper_req_s=18556.4, lower_bound=False, budget_ended=False,
                                bracket=0.045, client_limited=False, stop_reason="bracketed within 5%",
                                slo_p99_ms=20.0, max_error_fraction=0.001, probes=[], estimate=None,
                                first_rate_req_s=100.0, step=1.25, elapsed_s=30.0, stability=None)
    return ServerSearch(**(base | kw))
