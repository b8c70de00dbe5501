"""Fill a load record's `served` part (core/served.py): client CPU, attribution and bound, per record and per ramp step.

`annotate` runs in the load runner once Locust is done; `add_server_cpu` runs in `trainserve run`,
which alone samples the server process's CPU, and re-decides the bounds with it.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from trainserve.core import meters
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import IN_FLIGHT_FRACTION, Bound, ClientCpu, Served, as_dict, decide_bound, in_flight
from trainserve.core.telemetry import EnergyReading, fill_energy
from trainserve.loadtest.attribution import attribute, calibrate_client
from trainserve.loadtest.clientcpu import from_results
from trainserve.loadtest.model_info import ModelInfo
from trainserve.loadtest.search import CLIENT_BUSY
from trainserve.loadtest.serverstats import StatsReader, busy_fraction, window

RAMP_STOP = "the ramp's stop (--ramp-stop-p99-ms)"  # how a bound names the limit a ramp stopped at

log = logging.getLogger(__name__)


def instances_of(instance_group: Any) -> int:
    """Model instances a server runs (Triton's instance_group counts), 1 when not stated."""
    if not isinstance(instance_group, list):
        return 1
    return max(1, sum(int(g.get("count", 1) or 1) for g in instance_group if isinstance(g, dict)))


def annotate(record: ProfileRecord, results: dict[str, Any], calibration: dict[str, Any] | None,
             server: dict[str, Any] | None, instances: int, slo_p99_ms: float) -> None:
    """Set record.served and each ramp row's client_cpu / attribution / bound."""
    client_ms = (calibration or {}).get("client_ms")
    # a Server search's figure is one rate's windows: the server's statistics over that rate, not the whole search
    search = record.extra.get("search") or {}
    if search:
        server = (search.get("figure") or {}).get("server")
    client = from_results(results.get("load_generator") or {}, record.validity.window_s, results.get("workers") or 0)
    served = record.served = Served(client=client, device_busy_fraction=busy_fraction(server, instances))
    # the embedded server's front-end processes (its served config's `frontends`): the front-end bound's cores
    if frontends := (record.extra.get("server") or {}).get("frontends"):
        served.frontends = int(frontends)
    served.attribution = attribute(record.speed.latency.mean_ms, client_ms, server)
    record.extra["attribution"] = {"calibration": calibration, "server_window": server, "instances": instances}
    for row in record.extra.get("ramp") or []:
        row["attribution"] = as_dict(attribute(row.get("mean_ms"), client_ms, row.get("server")))
        row["device_busy_fraction"] = busy_fraction(row.get("server"), instances)
    record.settings["slo_p99_ms"] = slo_p99_ms
    redecide(record, slo_p99_ms)
    if client.saturated:
        record.validity.client_saturated = True  # the verdict reads it (report/verdict/verdict.py)
        record.validity.warnings.append(f"the load generator was saturated ({client.note}): the figures are the "
                                        "client's limit, not the server's; add --processes")


def redecide(record: ProfileRecord, slo_p99_ms: float | None = None) -> None:
    """The bound of every ramp step and of the record's own figure (the ramp's capacity, or the record's load)."""
    served = record.served
    if served is None:
        return
    slo = slo_p99_ms if slo_p99_ms is not None else (record.settings.get("slo_p99_ms") or None)
    rows = record.extra.get("ramp") or []
    for row in rows:
        over = slo and row.get("p99_ms") is not None and row["p99_ms"] > slo
        broken = f"{RAMP_STOP}: p99 {row['p99_ms']} ms > {slo:g} ms" if over else None
        row["bound"] = as_dict(_decide(record, _client(row.get("client_cpu")), row.get("device_busy_fraction"),
                                       row.get("frontend_cpu_cores"), broken, row.get("system_cpu_percent"),
                                       row.get("server_cpu_cores")))
    saturation = record.extra.get("saturation") or {}
    if rows and saturation and saturation.get("users") is None:
        served.bound = Bound("slo", f"{RAMP_STOP}: no step met it ({saturation.get('reason') or 'from the first'})")
        return
    if rows and saturation.get("users") is not None:
        i = next((k for k, r in enumerate(rows) if r.get("users") == saturation["users"]), None)
        # the capacity point and the step after it, where the ramp stopped: what saturated there bounds it
        near = rows[i:i + 2] if i is not None else rows[-1:]
        for kind in ("client", "device", "frontend"):
            hit = next((r["bound"] for r in near if r["bound"]["kind"] == kind), None)
            if hit:
                served.bound = Bound(hit["kind"], hit["detail"])
                return
        reason = saturation.get("reason") or ""
        if reason.startswith("p99 "):  # "p99 X ms > Y ms" ("> SLO Y ms" in records written before the two names)
            served.bound = Bound("slo", f"{RAMP_STOP}: the next step had {reason}")
        elif "grew less" in reason:
            served.bound = _plateau(near, reason)
        else:
            served.bound = Bound("load", f"the offered load: {reason or 'the ramp reached its user or time limit'}")
        return
    front, whole = _near_capacity(record)
    served.bound = _decide(record, _search_client(record) or served.client, served.device_busy_fraction,
                           front if front is not None else served.frontend_cpu_cores, _search_broke(record),
                           step_server_cores=whole, budget_ended=_search_budget(record))


def _plateau(near: list[dict[str, Any]], reason: str) -> Bound:
    """Throughput stopped growing with users. Little's law tells who held it: users that each had a request in flight
    turned into latency, so the server queued; users without one were waiting on the load generator."""
    last = near[-1] if near else {}
    users, n = last.get("users"), in_flight(last)
    if users and n is not None and n < IN_FLIGHT_FRACTION * users:
        return Bound("client", f"the client: its {users} closed-loop users kept only {n:.1f} requests in flight "
                               f"(requests/s x mean latency), so they waited on the load generator, not the server; "
                               "add --processes")
    held = f" ({n:.1f} of {users} users' requests in flight: the added users became queueing)" if users and n else ""
    return Bound("plateau", f"a plateau: {reason}{held}, while neither the device, the front end nor the client was "
                            "measured saturated (a limit this run does not measure)")


def _near_capacity(record: ProfileRecord) -> tuple[float | None, float | None]:
    """A Server search's front-end and whole-server CPU at its capacity rate and the next rate it tried (the
    busier of the two, as a ramp's best step and the next): the stage's mean covers every rate and repeat."""
    search = record.extra.get("search") or {}
    marks = [r for r in (search.get("capacity_req_s"), search.get("upper_req_s")) if r]
    near = [p for p in _probes_at(search, *marks) if p.get("frontend_cpu_cores") is not None]
    if not near:
        return None, None
    return max(p["frontend_cpu_cores"] for p in near), max(p.get("server_cpu_cores") or 0.0 for p in near)


def _probes_at(search: dict[str, Any], *rates: float) -> list[dict[str, Any]]:
    """A Server search's probes of these rates, in the order they ran."""
    return [p for p in search.get("probes") or [] if any(abs((p.get("rate") or 0) - r) < 1e-3 for r in rates)]


def _search_client(record: ProfileRecord) -> ClientCpu | None:
    """A Server search whose lowest failing rate failed because a load-generator process was busy: the figure is the
    client's limit (the whole search's mean CPU, over every rate, can stay well under that process's core)."""
    search = record.extra.get("search") or {}
    upper = search.get("upper_req_s")
    if not search.get("client_limited") or not upper:
        return None
    probe = (_probes_at(search, upper) or [{}])[-1]  # the last time that rate was tried
    busy = probe.get("client_core_fraction")
    what = (f"its busiest process used {busy:.0%} of a core" if busy is not None and busy >= CLIENT_BUSY
            else "a worker's windows did not arrive")
    return ClientCpu(saturated=True, note=f"at the next rate tried, {upper:,.0f} req/s, {what}")


def _search_broke(record: ProfileRecord) -> str | None:
    """A Server search that bracketed its capacity was stopped by the SLO at the next rate it tried (unless the
    device, the front end or the client was saturated, which decide_bound names first)."""
    search = record.extra.get("search") or {}
    upper = search.get("upper_req_s")
    if not search.get("capacity_req_s") or search.get("lower_bound") or not upper:
        return None
    slo = search.get("slo_p99_ms")
    meet = f"p99 ≤ {slo:g} ms with ≤ {100 * (search.get('max_error_fraction') or 0.001):g}% errors" if slo else "the SLO"
    return f"the latency SLO: the next rate tried, {upper:,.0f} req/s, did not meet {meet}"


def _search_budget(record: ProfileRecord) -> str | None:
    """A Server search whose time ran out before it bracketed its capacity: the figure is where it had got to."""
    search = record.extra.get("search") or {}
    if not search.get("budget_ended") or not search.get("capacity_req_s"):
        return None
    upper = search.get("upper_req_s")
    where = (f"{search['capacity_req_s']:,.0f} req/s met the SLO and {upper:,.0f} did not" if upper
             else f"{search['capacity_req_s']:,.0f} req/s, the highest rate tried, met the SLO")
    return f"the search's budget ended before it bracketed capacity ({where}); pass a longer --duration"


def _decide(record: ProfileRecord, client: ClientCpu, busy: float | None, frontend_cores: float | None,
            broken: str | None, step_system_cpu: float | None = None, step_server_cores: float | None = None,
            budget_ended: str | None = None) -> Bound:
    served = record.served
    assert served is not None
    # the whole run's means describe a plain record; a ramp's steps have only what was sampled in their window
    whole = not record.extra.get("ramp")
    return decide_bound(client=client, device_busy=busy, frontend_cpu_cores=frontend_cores,
                        gpu_util_percent=record.utilization.gpu_util_mean_percent if whole else None,
                        system_cpu_percent=record.utilization.cpu_system_mean_percent if whole else step_system_cpu,
                        frontends=served.frontends, device=record.device, slo_broken=broken,
                        server_cpu_cores_available=(record.host or {}).get("logical_cpus"),
                        server_cpu_cores=step_server_cores if step_server_cores is not None
                        else served.server_cpu_cores if whole else None, budget_ended=budget_ended)


def _client(d: dict[str, Any] | None) -> ClientCpu:
    return ClientCpu(**d) if isinstance(d, dict) else ClientCpu()


def add_server_cpu(record: ProfileRecord, timeline: list[dict[str, Any]], started_wall: float,
                   mean_percent: float | None, own_timeline: list[dict[str, Any]] | None = None,
                   own_mean_percent: float | None = None) -> None:
    """The server's CPU (100 = one core) and the host's, per record and ramp step; then the bounds again.

    `timeline` / `mean_percent`: the server's pid with its children; `own_*`: the pid alone. A server of several
    front ends is a model process (the pid) that starts them (its children), so their CPU is the difference;
    a server of one process is its own front end."""
    served = record.served
    if served is None:
        return
    several = served.frontends > 1 and own_timeline is not None

    def front(total: float, own: float | None) -> float:
        return max(0.0, total - own) if several and own is not None else total

    if mean_percent is not None:
        served.server_cpu_cores = round(mean_percent / 100, 3)
        served.frontend_cpu_cores = round(front(mean_percent, own_mean_percent) / 100, 3)
    # a ramp's steps, and a search's rates: each row's own share of the timelines
    for row in [*(record.extra.get("ramp") or []), *((record.extra.get("search") or {}).get("probes") or [])]:
        t0, t1 = row.get("wall_start"), row.get("wall_end")
        if t0 is None or t1 is None:
            continue
        process = _mean_in(timeline, "cpu_process_percent", started_wall, t0, t1)
        own = _mean_in(own_timeline or [], "cpu_process_percent", started_wall, t0, t1)
        system = _mean_in(timeline, "cpu_system_percent", started_wall, t0, t1)
        if process is not None:
            row["server_cpu_cores"] = round(process / 100, 3)
            row["frontend_cpu_cores"] = round(front(process, own) / 100, 3)
        if system is not None:
            row["system_cpu_percent"] = round(system, 2)
    redecide(record)


def add_cpu_energy(record: ProfileRecord, summary: dict[str, Any], started_wall: float) -> None:
    """A CPU server's energy from the sampler that watched its process (trainserve run): RAPL's package counters
    where readable, else the TDP × utilisation estimate (trainserve/core/meters.py), labelled as such.

    The load stage sees the server only through its metrics page, which has no CPU energy, so a CPU record
    leaves it empty for this. A capacity search's estimate takes the server's utilisation in the figure's own
    windows; RAPL's counters are read at the load's ends only, so there its mean power is the whole search's,
    and its meter says so."""
    window = record.validity.window_s
    if record.device != "cpu" or record.energy.source is not None or not window:
        return
    figure = (record.extra.get("search") or {}).get("figure") or {}
    t0, t1 = figure.get("wall_start"), figure.get("wall_end")
    if summary.get("cpu_energy_j") is not None and summary.get("window_s"):
        meter = meters.RAPL_METER + (" (mean power over the whole search)" if t0 is not None else "")
        reading = EnergyReading(summary["cpu_energy_j"], summary["window_s"], meters.RAPL, meter, "cpu")
    else:
        percent = summary.get("cpu_process_mean_percent")
        if t0 is not None and t1 is not None:
            percent = _mean_in(summary.get("timeline") or [], "cpu_process_percent", started_wall, t0, t1) or percent
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

    def annotate(self, record: ProfileRecord, results: dict[str, Any], instances: int, slo_p99_ms: float) -> None:
        annotate(record, results, self.calibration, self.server, instances, slo_p99_ms)
        if self.problem:
            record.validity.warnings.append(self.problem)
        elif self.server is None:
            record.validity.warnings.append("the server did not answer its statistics extension: no latency "
                                            "attribution and no device-busy figure")
