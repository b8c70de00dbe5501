"""Fill a load record's `served` part (core/served.py) and its ramp's and search's steps (core/servedparts.py):
client CPU, attribution, the server process's CPU, and the bound, decided once, per record and per ramp step.

`annotate` runs in the load runner once Locust is done, before the record is written: everything the bound
needs is in hand by then (the server process's CPU too, when `--server-pid` had the load stage sample it).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from trainserve.core import meters
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import (
    IN_FLIGHT_FRACTION,
    Bound,
    BoundKind,
    ClientCpu,
    Served,
    decide_bound,
    in_flight,
)
from trainserve.core.servedparts import LoadParts, RampStep, RampStop, Saturation, SearchProbe, ServerSearch
from trainserve.core.telemetry import EnergyReading, fill_energy
from trainserve.loadtest.attribution import attribute, calibrate_client
from trainserve.loadtest.clientcpu import from_results
from trainserve.loadtest.model_info import ModelInfo
from trainserve.loadtest.search import CLIENT_BUSY
from trainserve.loadtest.serverprocess import Watched
from trainserve.loadtest.serverstats import StatsReader, busy_fraction, window

RAMP_STOP = "the ramp's stop (--ramp-stop-p99-ms)"  # how a bound names the limit a ramp stopped at

log = logging.getLogger(__name__)


def instances_of(instance_group: Any) -> int:
    """Model instances a server runs (Triton's instance_group counts), 1 when not stated."""
    if not isinstance(instance_group, list):
        return 1
    return max(1, sum(int(g.get("count", 1) or 1) for g in instance_group if isinstance(g, dict)))


def annotate(record: ProfileRecord, parts: LoadParts, results: dict[str, Any], calibration: dict[str, Any] | None,
             server: dict[str, Any] | None, instances: int, watched: Watched | None = None) -> None:
    """Set record.served, each ramp step's attribution and busy fraction, the server process's figures, then
    every bound."""
    client_ms = (calibration or {}).get("client_ms")
    # a Server search's figure is one rate's windows: the server's statistics over that rate, not the whole search
    if parts.search is not None:
        server = parts.search.figure.server if parts.search.figure is not None else None
    client = from_results(results.get("load_generator") or {}, record.validity.window_s, results.get("workers") or 0)
    served = record.served = Served(client=client, device_busy_fraction=busy_fraction(server, instances),
                                    slo_p99_ms=parts.settings.slo_p99_ms)
    # the embedded server's front-end processes (its served config's `frontends`): the front-end bound's cores
    if parts.server.frontends:
        served.frontends = int(parts.server.frontends)
    served.attribution = attribute(record.speed.latency.mean_ms, client_ms, server)
    record.extra["attribution"] = {"calibration": calibration, "server_window": server, "instances": instances}
    for step in parts.ramp:
        step.attribution = attribute(step.mean_ms, client_ms, step.server)
        step.device_busy_fraction = busy_fraction(step.server, instances)
    if watched is not None:
        add_server_process(record, parts, watched)
    decide(record, parts)
    if client.saturated:
        record.validity.client_saturated = True  # the verdict reads it (report/verdict/verdict.py)
        record.validity.warnings.append(f"the load generator was saturated ({client.note}): the figures are the "
                                        "client's limit, not the server's; add --processes")


def decide(record: ProfileRecord, parts: LoadParts) -> None:
    """The bound of every ramp step and of the record's own figure (the ramp's capacity, or the record's load)."""
    served = record.served
    assert served is not None  # set by annotate, the only caller outside the tests
    slo = parts.settings.slo_p99_ms
    for step in parts.ramp:
        over = step.p99_ms is not None and step.p99_ms > slo
        broken = f"{RAMP_STOP}: p99 {step.p99_ms} ms > {slo:g} ms" if over else None
        step.bound = _decide(record, parts, step.client_cpu, step.device_busy_fraction, step.frontend_cpu_cores,
                             broken, step.system_cpu_percent, step.server_cpu_cores)
    if parts.ramp and parts.saturation is not None:
        served.bound = _ramp_bound(parts.ramp, parts.saturation)
        return
    search = parts.search
    front, whole = _near_capacity(search) if search is not None else (None, None)
    served.bound = _decide(record, parts, (_search_client(search) if search else None) or served.client,
                           served.device_busy_fraction, front if front is not None else served.frontend_cpu_cores,
                           _search_broke(search) if search else None, step_server_cores=whole,
                           budget_ended=_search_budget(search) if search else None)


def _ramp_bound(steps: list[RampStep], saturation: Saturation) -> Bound:
    """The ramp's capacity: what saturated at its capacity point or the step after it, else why the ramp stopped."""
    if saturation.users is None:
        return Bound(BoundKind.SLO, f"{RAMP_STOP}: no step met it ({saturation.reason or 'from the first'})")
    i = next((k for k, s in enumerate(steps) if s.users == saturation.users), None)
    # the capacity point and the step after it, where the ramp stopped: what saturated there bounds it
    near = steps[i:i + 2] if i is not None else steps[-1:]
    for kind in (BoundKind.CLIENT, BoundKind.DEVICE, BoundKind.FRONTEND):
        hit = next((s.bound for s in near if s.bound is not None and s.bound.kind == kind), None)
        if hit is not None:
            return Bound(hit.kind, hit.detail)
    if saturation.stop == RampStop.SLO:
        return Bound(BoundKind.SLO, f"{RAMP_STOP}: the next step had {saturation.reason}")
    if saturation.stop == RampStop.PLATEAU:
        return _plateau(near, saturation.reason)
    return Bound(BoundKind.LOAD, f"the offered load: {saturation.reason or 'the ramp reached its user or time limit'}")


def _plateau(near: list[RampStep], reason: str) -> Bound:
    """Throughput stopped growing with users. Little's law tells who held it: users that each had a request in flight
    turned into latency, so the server queued; users without one were waiting on the load generator."""
    last = near[-1] if near else None
    users, n = (last.users, in_flight(last)) if last is not None else (None, None)
    if users and n is not None and n < IN_FLIGHT_FRACTION * users:
        return Bound(BoundKind.CLIENT, f"the client: its {users} closed-loop users kept only {n:.1f} requests in "
                                       "flight (requests/s x mean latency), so they waited on the load generator, "
                                       "not the server; add --processes")
    held = f" ({n:.1f} of {users} users' requests in flight: the added users became queueing)" if users and n else ""
    return Bound(BoundKind.PLATEAU, f"a plateau: {reason}{held}, while neither the device, the front end nor the "
                                    "client was measured saturated (a limit this run does not measure)")


def _near_capacity(search: ServerSearch) -> tuple[float | None, float | None]:
    """A Server search's front-end and whole-server CPU at its capacity rate and the next rate it tried (the
    busier of the two, as a ramp's best step and the next): the stage's mean covers every rate and repeat."""
    marks = [r for r in (search.capacity_req_s, search.upper_req_s) if r]
    near = [p for p in search.probes_at(*marks) if p.frontend_cpu_cores is not None]
    if not near:
        return None, None
    return (max(p.frontend_cpu_cores or 0.0 for p in near), max(p.server_cpu_cores or 0.0 for p in near))


def _search_client(search: ServerSearch) -> ClientCpu | None:
    """A Server search whose lowest failing rate failed because a load-generator process was busy: the figure is the
    client's limit (the whole search's mean CPU, over every rate, can stay well under that process's core)."""
    upper = search.upper_req_s
    if not search.client_limited or not upper:
        return None
    probes = search.probes_at(upper)
    busy = probes[-1].client_core_fraction if probes else None  # the last time that rate was tried
    what = (f"its busiest process used {busy:.0%} of a core" if busy is not None and busy >= CLIENT_BUSY
            else "a worker's windows did not arrive")
    return ClientCpu(saturated=True, note=f"at the next rate tried, {upper:,.0f} req/s, {what}")


def _search_broke(search: ServerSearch) -> str | None:
    """A Server search that bracketed its capacity was stopped by the SLO at the next rate it tried (unless the
    device, the front end or the client was saturated, which decide_bound names first)."""
    upper = search.upper_req_s
    if not search.capacity_req_s or search.lower_bound or not upper:
        return None
    slo = search.slo_p99_ms
    meet = f"p99 ≤ {slo:g} ms with ≤ {100 * (search.max_error_fraction or 0.001):g}% errors" if slo else "the SLO"
    return f"the latency SLO: the next rate tried, {upper:,.0f} req/s, did not meet {meet}"


def _search_budget(search: ServerSearch) -> str | None:
    """A Server search whose time ran out before it bracketed its capacity: the figure is where it had got to."""
    if not search.budget_ended or not search.capacity_req_s:
        return None
    upper = search.upper_req_s
    where = (f"{search.capacity_req_s:,.0f} req/s met the SLO and {upper:,.0f} did not" if upper
             else f"{search.capacity_req_s:,.0f} req/s, the highest rate tried, met the SLO")
    return f"the search's budget ended before it bracketed capacity ({where}); pass a longer --duration"


def _decide(record: ProfileRecord, parts: LoadParts, client: ClientCpu, busy: float | None,
            frontend_cores: float | None, broken: str | None, step_system_cpu: float | None = None,
            step_server_cores: float | None = None, budget_ended: str | None = None) -> Bound:
    served = record.served
    assert served is not None
    # the whole run's means describe a plain record; a ramp's steps have only what was sampled in their window
    whole = not parts.ramp
    return decide_bound(client=client, device_busy=busy, frontend_cpu_cores=frontend_cores,
                        gpu_util_percent=record.utilization.gpu_util_mean_percent if whole else None,
                        system_cpu_percent=record.utilization.cpu_system_mean_percent if whole else step_system_cpu,
                        frontends=served.frontends, device=record.device, slo_broken=broken,
                        server_cpu_cores_available=(record.host or {}).get("logical_cpus"),
                        server_cpu_cores=step_server_cores if step_server_cores is not None
                        else served.server_cpu_cores if whole else None, budget_ended=budget_ended)


def add_server_process(record: ProfileRecord, parts: LoadParts, watched: Watched) -> None:
    """The server process's sample into the record: its memory and CPU where the load stage measured none, its
    CPU per ramp step and search rate, and on a CPU server its energy."""
    p = watched.process
    served = record.served
    assert served is not None
    served.server_process = p
    m, u = record.memory, record.utilization
    if m.rss_peak_bytes is None:
        m.rss_peak_bytes = p.rss_max_bytes
    if m.peak_bytes is None and record.device == "cpu":
        m.peak_bytes = p.rss_max_bytes
        m.peak_meter, m.peak_device = meters.PROCESS_RSS, "cpu"
    if u.cpu_process_mean_percent is None:
        u.cpu_process_mean_percent, u.cpu_process_max_percent = p.cpu_process_mean_percent, p.cpu_process_max_percent
    add_cpu_energy(record, parts, watched)
    add_server_cpu(record, parts, watched)


def add_server_cpu(record: ProfileRecord, parts: LoadParts, watched: Watched) -> None:
    """The server's CPU (100 = one core) and the host's, per record, ramp step and search rate.

    `watched.timeline`: the server's pid with its children; `own_timeline`: the pid alone. A server of several
    front ends is a model process (the pid) that starts them (its children), so their CPU is the difference;
    a server of one process is its own front end."""
    served, p = record.served, watched.process
    assert served is not None
    several = served.frontends > 1 and p.own_cpu_process_mean_percent is not None

    def front(total: float, own: float | None) -> float:
        return max(0.0, total - own) if several and own is not None else total

    if p.cpu_process_mean_percent is not None:
        served.server_cpu_cores = round(p.cpu_process_mean_percent / 100, 3)
        served.frontend_cpu_cores = round(front(p.cpu_process_mean_percent, p.own_cpu_process_mean_percent) / 100, 3)
    rows: list[RampStep | SearchProbe] = [*parts.ramp, *(parts.search.probes if parts.search is not None else [])]
    for row in rows:
        t0, t1 = row.wall_start, row.wall_end
        if t0 is None or t1 is None:
            continue
        process = _mean_in(watched.timeline, "cpu_process_percent", watched.started_wall, t0, t1)
        own = _mean_in(watched.own_timeline, "cpu_process_percent", watched.started_wall, t0, t1)
        system = _mean_in(watched.timeline, "cpu_system_percent", watched.started_wall, t0, t1)
        if process is not None:
            row.server_cpu_cores = round(process / 100, 3)
            row.frontend_cpu_cores = round(front(process, own) / 100, 3)
        if system is not None:
            row.system_cpu_percent = round(system, 2)


def add_cpu_energy(record: ProfileRecord, parts: LoadParts, watched: Watched) -> None:
    """A CPU server's energy from the server process's sample: RAPL's package counters where readable, else the
    TDP × utilisation estimate (trainserve/core/meters.py), labelled as such.

    The server's metrics page has no CPU energy, so a CPU record has none before this. A capacity search's
    estimate takes the server's utilisation in the figure's own windows; RAPL's counters are read at the load's
    ends only, so there its mean power is the whole search's, and its meter says so."""
    window, p = record.validity.window_s, watched.process
    if record.device != "cpu" or record.energy.source is not None or not window:
        return
    figure = parts.search.figure if parts.search is not None else None
    t0, t1 = (figure.wall_start, figure.wall_end) if figure is not None else (None, None)
    if p.cpu_energy_j is not None and p.window_s:
        meter = meters.RAPL_METER + (" (mean power over the whole search)" if t0 is not None else "")
        reading = EnergyReading(p.cpu_energy_j, p.window_s, meters.RAPL, meter, "cpu")
    else:
        percent = p.cpu_process_mean_percent
        if t0 is not None and t1 is not None:
            percent = _mean_in(watched.timeline, "cpu_process_percent", watched.started_wall, t0, t1) or percent
        est = meters.estimate_cpu_power(percent, record.host.get("logical_cpus") or os.cpu_count(),
                                        record.host.get("cpu_model") or meters.host_cpu_model())
        if est is None:
            return
        reading = EnergyReading(est.power_w * window, window, meters.ESTIMATE, est.meter, "cpu")
    fill_energy(record, reading, record.validity.samples, window)


def _mean_in(timeline: list[dict[str, Any]], key: str, started_wall: float, t0: float, t1: float) -> float | None:
    values = [p[key] for p in timeline if t0 <= started_wall + p["t_s"] <= t1 and p.get(key) is not None]
    return sum(values) / len(values) if values else None


class ServedWindow:
    """Around one load test: the client's calibration and the server's statistics before, then after."""

    def __init__(self, url: str, info: ModelInfo, arrays: dict[str, Any], protocol: str, http_client: str,
                 want_outputs: bool, batch: int, input_data: str) -> None:
        self.calibration: dict[str, Any] | None = None
        self.problem: str | None = None
        self.reader = StatsReader(url, info.name, protocol)
        # without the server's statistics there is nothing to split, so the server is not sent the calibration's
        # one real request either
        if self.reader.snapshot() is not None:
            try:
                self.calibration = calibrate_client(url, info, arrays, protocol, http_client, want_outputs,
                                                    batch, input_data)
            except Exception as e:  # noqa: BLE001 -- the client's share unknown, the load still done
                self.problem = f"the client's own time was not calibrated ({e}); its share is left out"
                log.warning("%s", self.problem)
        self.before = self.reader.snapshot()
        self.t0 = time.perf_counter()
        self.server: dict[str, Any] | None = None

    def stop(self) -> None:
        self.server = window(self.before, self.reader.snapshot(), time.perf_counter() - self.t0)

    def annotate(self, record: ProfileRecord, parts: LoadParts, results: dict[str, Any], instances: int,
                 watched: Watched | None) -> None:
        annotate(record, parts, results, self.calibration, self.server, instances, watched)
        if self.problem:
            record.validity.warnings.append(self.problem)
        elif self.server is None:
            record.validity.warnings.append("the server did not answer its statistics extension: no latency "
                                            "attribution and no device-busy figure")
