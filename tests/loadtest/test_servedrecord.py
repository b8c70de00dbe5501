"""The served part of a load record: the server process's CPU per ramp step and search rate, and the bounds,
decided once from typed parts (trainserve/core/servedparts.py) before the record is written."""

from __future__ import annotations

import pytest

from tests.loadtest.parts import parts, probe, search, server_info, settings, step
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import BoundKind, ClientCpu, Served, ServerProcess
from trainserve.core.servedparts import LoadParts, RampStop, Saturation
from trainserve.loadtest.serverprocess import Watched
from trainserve.loadtest.servedrecord import add_cpu_energy, add_server_process, decide, instances_of


def _watched(timeline: list[dict], mean: float | None, own: list[dict] | None = None,
             own_mean: float | None = None, started_wall: float = 1000.0, cpu_energy_j: float | None = None,
             window_s: float = 20.0) -> Watched:
    process = ServerProcess(pid=4242, window_s=window_s, ticks=len(timeline), cpu_process_mean_percent=mean,
                            own_cpu_process_mean_percent=own_mean, rss_max_bytes=300 * 1024**2,
                            cpu_energy_j=cpu_energy_j)
    return Watched(process, timeline, own or [], started_wall)


def _ramp(frontends: int = 1, device: str = "cuda") -> tuple[ProfileRecord, LoadParts]:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device=device, batch_size=1)
    r.served = Served(client=ClientCpu(), frontends=frontends)
    idle = ClientCpu(per_process_core_fraction={"w1": 0.3})
    p = parts(settings=settings(mode="ramp", scenario="ramp", slo_p99_ms=20.0), server=server_info(frontends),
              ramp=[step(4, 3000.0, 5.0, client_cpu=idle, device_busy_fraction=0.3, wall_start=1000.0,
                         wall_end=1010.0),
                    step(8, 3100.0, 25.0, client_cpu=idle, device_busy_fraction=0.3, wall_start=1010.0,
                         wall_end=1020.0)],
              saturation=Saturation(users=4, requests_s=3000.0, reason="p99 25 ms > 20 ms", stop=RampStop.SLO))
    return r, p


def _sampled(r: ProfileRecord, p: LoadParts, watched: Watched) -> None:
    add_server_process(r, p, watched)
    decide(r, p)


def test_without_the_servers_cpu_the_capacity_is_bounded_by_the_slo() -> None:
    r, p = _ramp()
    decide(r, p)
    assert [s.bound.kind for s in p.ramp] == [BoundKind.LOAD, BoundKind.SLO]
    assert r.served.bound.kind == BoundKind.SLO and "the next step had p99 25 ms" in r.served.bound.detail


def test_the_ramp_bound_follows_the_stop_kind_not_the_reasons_words() -> None:
    # a plateau whose reason happens to read like the SLO's: the typed stop decides
    r, p = _ramp()
    p.ramp[1].p99_ms = 6.0
    p.saturation = Saturation(users=4, requests_s=3000.0, reason="p99 grew while throughput did not",
                              stop=RampStop.PLATEAU)
    decide(r, p)
    assert r.served.bound.kind == BoundKind.PLATEAU
    p.saturation.stop = RampStop.LIMIT
    decide(r, p)
    assert r.served.bound.kind == BoundKind.LOAD and r.served.bound.detail.startswith("the offered load: p99 grew")


def test_a_front_end_at_its_core_in_the_next_step_bounds_the_capacity() -> None:
    r, p = _ramp()
    # the sampler started at wall time 1000; its process CPU (100 = one core) is 40% in step 1, 97% in step 2
    timeline = [{"t_s": t, "cpu_process_percent": 40.0 if t < 10 else 97.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    _sampled(r, p, _watched(timeline, 70.0))
    assert p.ramp[0].frontend_cpu_cores == 0.4 and p.ramp[1].frontend_cpu_cores == 0.97
    assert [s.bound.kind for s in p.ramp] == ["load", "frontend"]
    assert r.served.frontend_cpu_cores == 0.7 and r.served.server_process.pid == 4242
    assert r.served.bound.kind == "frontend" and "0.97 cores for 1 front-end process" in r.served.bound.detail


def test_with_several_front_ends_the_model_process_is_not_counted_as_front_end() -> None:
    # a GPU server: the server (model process and 4 front ends) at 3.69 cores was read as 4 front
    # ends saturated; the model process's own ~0.9 core is not front end
    timeline = [{"t_s": t, "cpu_process_percent": 369.0 if t < 10 else 460.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    own = [{"t_s": t, "cpu_process_percent": 90.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    r, p = _ramp(frontends=4)
    _sampled(r, p, _watched(timeline, 369.0, own, 90.0))
    assert r.served.server_cpu_cores == 3.69 and r.served.frontend_cpu_cores == 2.79
    assert [s.frontend_cpu_cores for s in p.ramp] == [2.79, 3.7]
    assert [s.server_cpu_cores for s in p.ramp] == [3.69, 4.6]
    assert [s.bound.kind for s in p.ramp] == ["load", "frontend"]  # 3.7 of 4 front-end cores: saturated
    # one process is its own front end, whatever the pid alone used
    r1, p1 = _ramp()
    _sampled(r1, p1, _watched(timeline, 369.0, own, 90.0))
    assert r1.served.frontend_cpu_cores == 3.69


def test_a_cpu_server_is_busy_by_the_whole_servers_cpu() -> None:
    r, p = _ramp(frontends=2, device="cpu")
    r.host = {"logical_cpus": 4}
    timeline = [{"t_s": t, "cpu_process_percent": 380.0} for t in (1.0, 5.0, 11.0, 15.0)]
    own = [{"t_s": t, "cpu_process_percent": 300.0} for t in (1.0, 5.0, 11.0, 15.0)]
    _sampled(r, p, _watched(timeline, 380.0, own, 300.0))
    assert r.served.frontend_cpu_cores == 0.8
    assert [s.bound.kind for s in p.ramp] == ["device", "device"]
    assert "3.8 of 4 cores" in p.ramp[0].bound.detail


def test_a_cpu_servers_step_with_the_host_busy_is_bounded_by_the_device() -> None:
    r, p = _ramp(device="cpu")
    timeline = [{"t_s": t, "cpu_process_percent": 120.0, "cpu_system_percent": 60.0 if t < 10 else 97.0}
                for t in (1.0, 5.0, 11.0, 15.0)]
    _sampled(r, p, _watched(timeline, 120.0))
    assert [s.system_cpu_percent for s in p.ramp] == [60.0, 97.0]
    assert [s.bound.kind for s in p.ramp] == ["load", "device"]
    assert r.served.bound.kind == "device" and "97% busy" in r.served.bound.detail


def test_the_server_process_fills_the_memory_and_cpu_the_load_did_not_measure() -> None:
    r, p = _ramp(device="cpu")
    r.utilization.cpu_process_mean_percent = 55.0  # measured by the load stage: kept
    _sampled(r, p, _watched([], 120.0))
    assert r.memory.rss_peak_bytes == r.memory.peak_bytes == 300 * 1024**2
    assert (r.memory.peak_meter, r.memory.peak_device) == ("process RSS (psutil)", "cpu")
    assert r.utilization.cpu_process_mean_percent == 55.0


def test_instances_come_from_the_instance_groups() -> None:
    assert instances_of([{"kind": "KIND_GPU", "count": 2}, {"kind": "KIND_GPU", "count": 1}]) == 3
    assert instances_of(None) == 1 and instances_of([{}]) == 1


def test_a_ramp_with_no_step_inside_the_slo_is_bounded_by_it() -> None:
    r, p = _ramp()
    p.saturation = Saturation(users=None, requests_s=None, reason="p99 25 ms > 20 ms", stop=RampStop.SLO)
    decide(r, p)
    assert r.served.bound.kind == "slo"
    assert "the ramp's stop (--ramp-stop-p99-ms): no step met it (p99 25 ms > 20 ms)" in r.served.bound.detail


def _search(**kw) -> tuple[ProfileRecord, LoadParts]:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device="cuda", batch_size=1)
    r.served = Served(client=ClientCpu(), device_busy_fraction=0.6)
    return r, parts(settings=settings(mode="search", scenario="Server"), search=search(**kw))


def test_a_bracketed_server_search_is_bounded_by_the_slo_at_the_next_rate() -> None:
    r, p = _search()
    decide(r, p)
    assert r.served.bound.kind == "slo"
    assert r.served.bound.detail == ("the latency SLO: the next rate tried, 18,556 req/s, did not meet p99 ≤ 20 ms "
                                     "with ≤ 0.1% errors")
    # a saturated device still comes first; a search that never bracketed (a lower bound) is not the SLO's
    busy, bp = _search()
    busy.served.device_busy_fraction = 0.95
    decide(busy, bp)
    assert busy.served.bound.kind == "device"
    low, lp = _search(lower_bound=True)
    decide(low, lp)
    assert low.served.bound.kind == "load"


def test_a_search_whose_budget_ended_first_is_bounded_by_the_budget_not_the_offered_load() -> None:
    # a 16-core host: 30 s of doubling from 100 req/s ended at 6,400 req/s with every rate passing, and the
    # record blamed "the offered load"
    r, p = _search(capacity_req_s=6400.0, upper_req_s=None, lower_bound=True, budget_ended=True)
    decide(r, p)
    assert r.served.bound.kind == "budget"
    assert r.served.bound.detail.startswith("the search's budget ended before it bracketed capacity (6,400 req/s")
    assert "offered load" not in r.served.bound.detail and "--duration" in r.served.bound.detail
    wide, wp = _search(capacity_req_s=25000.0, upper_req_s=31250.0, lower_bound=True, budget_ended=True)
    decide(wide, wp)
    assert wide.served.bound.kind == "budget"
    assert "25,000 req/s met the SLO and 31,250 did not" in wide.served.bound.detail


def test_a_search_the_client_limited_is_bounded_by_the_client() -> None:
    # gRPC's search stopped at 12,500 req/s because a Locust process was busy at 13,000,
    # while the whole search's mean client CPU (0.83 of each core) was under the mark
    r, p = _search(capacity_req_s=12500.0, upper_req_s=13000.0, lower_bound=True, client_limited=True,
                   probes=[probe(13000.0, False, client_core_fraction=0.92),
                           probe(12500.0, True, client_core_fraction=0.86)])
    r.served.client = ClientCpu(per_process_core_fraction={"w1": 0.83}, total_core_fraction=0.83)
    decide(r, p)
    assert r.served.bound.kind == "client"
    assert "at the next rate tried, 13,000 req/s, its busiest process used 92% of a core" in r.served.bound.detail
    assert "add --processes" in r.served.bound.detail
    # a worker whose windows never arrived limits it too, whatever its CPU
    lost, lp = _search(capacity_req_s=12500.0, upper_req_s=13000.0, lower_bound=True, client_limited=True,
                       probes=[probe(13000.0, False, client_core_fraction=0.5)])
    decide(lost, lp)
    assert lost.served.bound.kind == "client" and "a worker's windows did not arrive" in lost.served.bound.detail


def _probed() -> tuple[ProfileRecord, LoadParts]:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device="cuda", batch_size=1)
    r.served = Served(client=ClientCpu(), frontends=4)
    rates = [(8000.0, True, 1000.0), (16000.0, False, 1010.0), (12000.0, True, 1020.0), (14000.0, False, 1030.0)]
    s = search(capacity_req_s=12000.0, upper_req_s=14000.0,
               probes=[probe(rate, ok, wall_start=t0, wall_end=t0 + 8.0) for rate, ok, t0 in rates])
    return r, parts(settings=settings(mode="search", scenario="Server"), server=server_info(4), search=s)


def _timeline(percent_at: dict[float, float]) -> list[dict[str, float]]:
    """Two samples in each probe's window (started at wall 1000, probes 10 s apart), the percent given per probe."""
    return [{"t_s": t + dt, "cpu_process_percent": pct} for t, pct in percent_at.items() for dt in (2.0, 6.0)]


def test_a_searchs_bound_reads_the_servers_cpu_at_its_capacity_and_the_next_rate_not_the_stage_mean() -> None:
    own = _timeline({0.0: 50.0, 10.0: 90.0, 20.0: 80.0, 30.0: 85.0})
    # the front ends saturated only at 16,000 req/s, a rate far above the capacity: the SLO bounds the figure
    r, p = _probed()
    _sampled(r, p, _watched(_timeline({0.0: 200.0, 10.0: 480.0, 20.0: 300.0, 30.0: 330.0}), 460.0, own, 75.0))
    assert [x.frontend_cpu_cores for x in p.search.probes] == [1.5, 3.9, 2.2, 2.45]
    assert r.served.frontend_cpu_cores == 3.85  # the stage's mean: saturated by its reading, not at the capacity
    assert r.served.bound.kind == "slo" and "14,000 req/s" in r.served.bound.detail
    # saturated at the next rate tried: that is why it failed
    r, p = _probed()
    _sampled(r, p, _watched(_timeline({0.0: 200.0, 10.0: 480.0, 20.0: 300.0, 30.0: 455.0}), 360.0, own, 75.0))
    assert r.served.bound.kind == "frontend" and "3.70 cores for 4 front-end processes" in r.served.bound.detail


def _plateau(next_mean_ms: float) -> tuple[ProfileRecord, LoadParts]:
    """9 users at 1.3 ms (6,960 req/s, every user in flight), then 11 users adding < 5% throughput."""
    r, p = _ramp()
    p.ramp = [step(9, 6960.0, 3.0, mean_ms=1.3), step(11, 7100.0, 3.5, mean_ms=next_mean_ms)]
    p.saturation = Saturation(users=9, requests_s=6960.0, reason="throughput grew less than 5%",
                              stop=RampStop.PLATEAU)
    return r, p


def test_a_plateau_whose_users_were_not_in_flight_is_the_clients() -> None:
    # 11 users at 1.3 ms each carry 8,460 req/s; 7,100 measured: 9.2 requests in flight, the rest waited on Locust
    r, p = _plateau(next_mean_ms=1.3)
    decide(r, p)
    assert r.served.bound.kind == "client" and "kept only 9.2 requests in flight" in r.served.bound.detail
    # the same users all in flight (latency grew to 1.55 ms): the server queued them, a plateau of the server's
    q, qp = _plateau(next_mean_ms=1.55)
    decide(q, qp)
    assert q.served.bound.kind == "plateau" and "11.0 of 11 users' requests in flight" in q.served.bound.detail


def _cpu_record(figure_wall: tuple[float, float] | None = None) -> tuple[ProfileRecord, LoadParts]:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu",
                      host={"logical_cpus": 16, "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"})
    r.validity.window_s, r.validity.samples = 10.0, 1000
    p = parts()
    if figure_wall is not None:
        p.search = search(figure=probe(1000.0, True, wall_start=figure_wall[0], wall_end=figure_wall[1]))
    return r, p


def _cpu_watched(cpu_energy_j: float | None = None) -> Watched:
    """A CPU server's sample: 4 cores busy for 5 s, then 8 (the search's figure)."""
    timeline = [{"t_s": float(t), "cpu_process_percent": 400.0 if t < 5 else 800.0} for t in range(10)]
    return _watched(timeline, 600.0, started_wall=100.0, cpu_energy_j=cpu_energy_j, window_s=10.0)


def test_a_cpu_servers_energy_without_rapl_is_an_estimate_that_says_so() -> None:
    r, p = _cpu_record()
    add_cpu_energy(r, p, _cpu_watched())
    e = r.energy
    assert (e.source, e.device) == ("estimate", "cpu") and e.meter.startswith("estimate: TDP 350 W")
    assert e.mean_power_w == pytest.approx(350 * 6 / 16)
    assert e.energy_per_sample_j == pytest.approx(350 * 6 / 16 * 10 / 1000)


def test_a_cpu_servers_search_estimate_reads_the_figures_own_windows() -> None:
    r, p = _cpu_record(figure_wall=(105.0, 109.0))
    add_cpu_energy(r, p, _cpu_watched())
    assert r.energy.mean_power_w == pytest.approx(350 * 8 / 16)


def test_a_cpu_servers_energy_is_rapls_where_readable() -> None:
    r, p = _cpu_record()
    add_cpu_energy(r, p, _cpu_watched(cpu_energy_j=1500.0))
    assert r.energy.source == "rapl" and r.energy.meter == "RAPL package counters"
    assert r.energy.mean_power_w == pytest.approx(150.0) and r.energy.energy_per_sample_j == pytest.approx(1.5)


def test_a_gpu_record_is_left_to_nvml() -> None:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cuda")
    r.validity.window_s, r.validity.samples = 10.0, 1000
    add_cpu_energy(r, parts(), _cpu_watched(cpu_energy_j=1500.0))
    assert r.energy.source is None


def test_the_decided_parts_survive_the_record_they_are_written_into() -> None:
    r, p = _ramp()
    _sampled(r, p, _watched([{"t_s": 5.0, "cpu_process_percent": 50.0}], 50.0))
    p.write(r)
    back = ProfileRecord.from_dict(r.to_dict())
    assert back.served == r.served and LoadParts.of(back) == p
    assert isinstance(LoadParts.of(back).ramp[1].bound.kind, BoundKind)
