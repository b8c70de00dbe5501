"""The server process's CPU, added by `trainserve run` per ramp step, and the bounds decided again with it."""

from __future__ import annotations

import pytest

from trainserve.core.profile import ProfileRecord
from trainserve.core.served import ClientCpu, Served, as_dict
from trainserve.loadtest.servedrecord import add_cpu_energy, add_server_cpu, instances_of, redecide


def _ramp_record() -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device="cuda", batch_size=1)
    r.served = Served(client=ClientCpu())
    r.settings["slo_p99_ms"] = 20.0
    idle = as_dict(ClientCpu(per_process_core_fraction={"w1": 0.3}))
    r.extra["ramp"] = [
        {"users": 4, "requests_s": 3000.0, "p99_ms": 5.0, "client_cpu": idle, "device_busy_fraction": 0.3,
         "wall_start": 1000.0, "wall_end": 1010.0},
        {"users": 8, "requests_s": 3100.0, "p99_ms": 25.0, "client_cpu": idle, "device_busy_fraction": 0.3,
         "wall_start": 1010.0, "wall_end": 1020.0},
    ]
    r.extra["saturation"] = {"users": 4, "requests_s": 3000.0, "reason": "p99 25 ms > SLO 20.0 ms"}
    return r


def test_without_the_servers_cpu_the_capacity_is_bounded_by_the_slo() -> None:
    r = _ramp_record()
    redecide(r)
    assert [s["bound"]["kind"] for s in r.extra["ramp"]] == ["load", "slo"]
    assert r.served.bound.kind == "slo" and "the next step had p99 25 ms" in r.served.bound.detail


def test_a_front_end_at_its_core_in_the_next_step_bounds_the_capacity() -> None:
    r = _ramp_record()
    # the sampler started at wall time 1000; its process CPU (100 = one core) is 40% in step 1, 97% in step 2
    timeline = [{"t_s": t, "cpu_process_percent": 40.0 if t < 10 else 97.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    add_server_cpu(r, timeline, started_wall=1000.0, mean_percent=70.0)
    steps = r.extra["ramp"]
    assert steps[0]["frontend_cpu_cores"] == 0.4 and steps[1]["frontend_cpu_cores"] == 0.97
    assert [s["bound"]["kind"] for s in steps] == ["load", "frontend"]
    assert r.served.frontend_cpu_cores == 0.7
    assert r.served.bound.kind == "frontend" and "0.97 cores for 1 front-end process" in r.served.bound.detail


def test_with_several_front_ends_the_model_process_is_not_counted_as_front_end() -> None:
    # a GPU server: the server (model process and 4 front ends) at 3.69 cores was read as 4 front
    # ends saturated; the model process's own ~0.9 core is not front end
    r = _ramp_record()
    r.served.frontends = 4
    timeline = [{"t_s": t, "cpu_process_percent": 369.0 if t < 10 else 460.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    own = [{"t_s": t, "cpu_process_percent": 90.0} for t in (1.0, 5.0, 11.0, 15.0, 19.0)]
    add_server_cpu(r, timeline, started_wall=1000.0, mean_percent=369.0, own_timeline=own, own_mean_percent=90.0)
    assert r.served.server_cpu_cores == 3.69 and r.served.frontend_cpu_cores == 2.79
    steps = r.extra["ramp"]
    assert [s["frontend_cpu_cores"] for s in steps] == [2.79, 3.7]
    assert [s["server_cpu_cores"] for s in steps] == [3.69, 4.6]
    assert [s["bound"]["kind"] for s in steps] == ["load", "frontend"]  # 3.7 of 4 front-end cores: saturated
    # one process is its own front end, whatever the pid alone used
    r1 = _ramp_record()
    add_server_cpu(r1, timeline, started_wall=1000.0, mean_percent=369.0, own_timeline=own, own_mean_percent=90.0)
    assert r1.served.frontend_cpu_cores == 3.69


def test_a_cpu_server_is_busy_by_the_whole_servers_cpu() -> None:
    r = _ramp_record()
    r.device, r.served.frontends, r.host = "cpu", 2, {"logical_cpus": 4}
    timeline = [{"t_s": t, "cpu_process_percent": 380.0} for t in (1.0, 5.0, 11.0, 15.0)]
    own = [{"t_s": t, "cpu_process_percent": 300.0} for t in (1.0, 5.0, 11.0, 15.0)]
    add_server_cpu(r, timeline, started_wall=1000.0, mean_percent=380.0, own_timeline=own, own_mean_percent=300.0)
    assert r.served.frontend_cpu_cores == 0.8
    assert [s["bound"]["kind"] for s in r.extra["ramp"]] == ["device", "device"]
    assert "3.8 of 4 cores" in r.extra["ramp"][0]["bound"]["detail"]


def test_a_cpu_servers_step_with_the_host_busy_is_bounded_by_the_device() -> None:
    r = _ramp_record()
    r.device = "cpu"
    timeline = [{"t_s": t, "cpu_process_percent": 120.0, "cpu_system_percent": 60.0 if t < 10 else 97.0}
                for t in (1.0, 5.0, 11.0, 15.0)]
    add_server_cpu(r, timeline, started_wall=1000.0, mean_percent=120.0)
    steps = r.extra["ramp"]
    assert [s["system_cpu_percent"] for s in steps] == [60.0, 97.0]
    assert [s["bound"]["kind"] for s in steps] == ["load", "device"]
    assert r.served.bound.kind == "device" and "97% busy" in r.served.bound.detail


def test_instances_come_from_the_instance_groups() -> None:
    assert instances_of([{"kind": "KIND_GPU", "count": 2}, {"kind": "KIND_GPU", "count": 1}]) == 3
    assert instances_of(None) == 1 and instances_of([{}]) == 1


def test_a_ramp_with_no_step_inside_the_slo_is_bounded_by_it() -> None:
    r = _ramp_record()
    r.extra["saturation"] = {"users": None, "requests_s": None, "reason": "p99 25 ms > SLO 20.0 ms"}
    redecide(r)
    assert r.served.bound.kind == "slo" and "the ramp's stop (--ramp-stop-p99-ms): no step met it (p99 25 ms > SLO 20.0 ms)" \
        in r.served.bound.detail


def _search_record(**search) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device="cuda", batch_size=1)
    r.served = Served(client=ClientCpu(), device_busy_fraction=0.6)
    r.extra["search"] = {"capacity_req_s": 17749.6, "upper_req_s": 18556.4, "lower_bound": False,
                         "slo_p99_ms": 20.0, "max_error_fraction": 0.001, **search}
    return r


def test_a_bracketed_server_search_is_bounded_by_the_slo_at_the_next_rate() -> None:
    r = _search_record()
    redecide(r)
    assert r.served.bound.kind == "slo"
    assert r.served.bound.detail == ("the latency SLO: the next rate tried, 18,556 req/s, did not meet p99 ≤ 20 ms "
                                     "with ≤ 0.1% errors")
    # a saturated device still comes first; a search that never bracketed (a lower bound) is not the SLO's
    busy = _search_record()
    busy.served.device_busy_fraction = 0.95
    redecide(busy)
    assert busy.served.bound.kind == "device"
    low = _search_record(lower_bound=True)
    redecide(low)
    assert low.served.bound.kind == "load"


def test_a_search_whose_budget_ended_first_is_bounded_by_the_budget_not_the_offered_load() -> None:
    # a 16-core host: 30 s of doubling from 100 req/s ended at 6,400 req/s with every rate passing, and the
    # record blamed "the offered load"
    r = _search_record(capacity_req_s=6400.0, upper_req_s=None, lower_bound=True, budget_ended=True)
    redecide(r)
    assert r.served.bound.kind == "budget"
    assert r.served.bound.detail.startswith("the search's budget ended before it bracketed capacity (6,400 req/s")
    assert "offered load" not in r.served.bound.detail and "--duration" in r.served.bound.detail
    wide = _search_record(capacity_req_s=25000.0, upper_req_s=31250.0, lower_bound=True, budget_ended=True)
    redecide(wide)
    assert wide.served.bound.kind == "budget"
    assert "25,000 req/s met the SLO and 31,250 did not" in wide.served.bound.detail


def test_a_search_the_client_limited_is_bounded_by_the_client() -> None:
    # gRPC's search stopped at 12,500 req/s because a Locust process was busy at 13,000,
    # while the whole search's mean client CPU (0.83 of each core) was under the mark; the record said "the
    # offered load"
    r = _search_record(capacity_req_s=12500.0, upper_req_s=13000.0, lower_bound=True, client_limited=True,
                       probes=[{"rate": 13000.0, "passed": False, "client_core_fraction": 0.92},
                               {"rate": 12500.0, "passed": True, "client_core_fraction": 0.86}])
    r.served.client = ClientCpu(per_process_core_fraction={"w1": 0.83}, total_core_fraction=0.83)
    redecide(r)
    assert r.served.bound.kind == "client"
    assert "at the next rate tried, 13,000 req/s, its busiest process used 92% of a core" in r.served.bound.detail
    assert "add --processes" in r.served.bound.detail
    # a worker whose windows never arrived limits it too, whatever its CPU
    lost = _search_record(capacity_req_s=12500.0, upper_req_s=13000.0, lower_bound=True, client_limited=True,
                          probes=[{"rate": 13000.0, "passed": False, "client_core_fraction": 0.5}])
    redecide(lost)
    assert lost.served.bound.kind == "client" and "a worker's windows did not arrive" in lost.served.bound.detail


def _probed_search() -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="cnn_gpu", backend="onnxruntime", device="cuda", batch_size=1)
    r.served = Served(client=ClientCpu(), frontends=4)
    probes = [(8000.0, True, 1000.0), (16000.0, False, 1010.0), (12000.0, True, 1020.0), (14000.0, False, 1030.0)]
    r.extra["search"] = {"capacity_req_s": 12000.0, "upper_req_s": 14000.0, "lower_bound": False,
                         "slo_p99_ms": 20.0, "max_error_fraction": 0.001,
                         "probes": [{"rate": rate, "passed": ok, "wall_start": t0, "wall_end": t0 + 8.0}
                                    for rate, ok, t0 in probes]}
    return r


def _timeline(percent_at: dict[float, float]) -> list[dict[str, float]]:
    """Two samples in each probe's window (started at wall 1000, probes 10 s apart), the percent given per probe."""
    return [{"t_s": t + dt, "cpu_process_percent": pct} for t, pct in percent_at.items() for dt in (2.0, 6.0)]


def test_a_searchs_bound_reads_the_servers_cpu_at_its_capacity_and_the_next_rate_not_the_stage_mean() -> None:
    own = _timeline({0.0: 50.0, 10.0: 90.0, 20.0: 80.0, 30.0: 85.0})
    # the front ends saturated only at 16,000 req/s, a rate far above the capacity: the SLO bounds the figure
    r = _probed_search()
    add_server_cpu(r, _timeline({0.0: 200.0, 10.0: 480.0, 20.0: 300.0, 30.0: 330.0}), 1000.0, 460.0, own, 75.0)
    assert [p["frontend_cpu_cores"] for p in r.extra["search"]["probes"]] == [1.5, 3.9, 2.2, 2.45]
    assert r.served.frontend_cpu_cores == 3.85  # the stage's mean: saturated by its reading, not at the capacity
    assert r.served.bound.kind == "slo" and "14,000 req/s" in r.served.bound.detail
    # saturated at the next rate tried: that is why it failed
    r = _probed_search()
    add_server_cpu(r, _timeline({0.0: 200.0, 10.0: 480.0, 20.0: 300.0, 30.0: 455.0}), 1000.0, 360.0, own, 75.0)
    assert r.served.bound.kind == "frontend" and "3.70 cores for 4 front-end processes" in r.served.bound.detail


def _plateau_record(next_mean_ms: float) -> ProfileRecord:
    """9 users at 1.3 ms (6,960 req/s, every user in flight), then 11 users adding < 5% throughput."""
    r = _ramp_record()
    r.extra["ramp"] = [
        {"users": 9, "requests_s": 6960.0, "mean_ms": 1.3, "p99_ms": 3.0},
        {"users": 11, "requests_s": 7100.0, "mean_ms": next_mean_ms, "p99_ms": 3.5},
    ]
    r.extra["saturation"] = {"users": 9, "requests_s": 6960.0, "reason": "throughput grew less than 5%"}
    return r


def test_a_plateau_whose_users_were_not_in_flight_is_the_clients() -> None:
    # 11 users at 1.3 ms each carry 8,460 req/s; 7,100 measured: 9.2 requests in flight, the rest waited on Locust
    r = _plateau_record(next_mean_ms=1.3)
    redecide(r)
    assert r.served.bound.kind == "client" and "kept only 9.2 requests in flight" in r.served.bound.detail
    # the same users all in flight (latency grew to 1.55 ms): the server queued them, a plateau of the server's
    q = _plateau_record(next_mean_ms=1.55)
    redecide(q)
    assert q.served.bound.kind == "plateau" and "11.0 of 11 users' requests in flight" in q.served.bound.detail


def _cpu_record(search: dict | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu",
                      host={"logical_cpus": 16, "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"})
    r.validity.window_s, r.validity.samples = 10.0, 1000
    if search is not None:
        r.extra["search"] = search
    return r


def _watched(cpu_energy_j: float | None = None) -> dict:
    """The sampler's summary of a CPU server: 4 cores busy for 5 s, then 8 (the search's figure)."""
    timeline = [{"t_s": float(t), "cpu_process_percent": 400.0 if t < 5 else 800.0} for t in range(10)]
    return {"window_s": 10.0, "cpu_energy_j": cpu_energy_j, "cpu_process_mean_percent": 600.0, "timeline": timeline}


def test_a_cpu_servers_energy_without_rapl_is_an_estimate_that_says_so() -> None:
    r = _cpu_record()
    add_cpu_energy(r, _watched(), started_wall=100.0)
    e = r.energy
    assert (e.source, e.device) == ("estimate", "cpu") and e.meter.startswith("estimate: TDP 350 W")
    assert e.mean_power_w == pytest.approx(350 * 6 / 16)
    assert e.energy_per_sample_j == pytest.approx(350 * 6 / 16 * 10 / 1000)


def test_a_cpu_servers_search_estimate_reads_the_figures_own_windows() -> None:
    r = _cpu_record({"figure": {"wall_start": 105.0, "wall_end": 109.0}})
    add_cpu_energy(r, _watched(), started_wall=100.0)
    assert r.energy.mean_power_w == pytest.approx(350 * 8 / 16)


def test_a_cpu_servers_energy_is_rapls_where_readable() -> None:
    r = _cpu_record()
    add_cpu_energy(r, _watched(cpu_energy_j=1500.0), started_wall=100.0)
    assert r.energy.source == "rapl" and r.energy.meter == "RAPL package counters"
    assert r.energy.mean_power_w == pytest.approx(150.0) and r.energy.energy_per_sample_j == pytest.approx(1.5)


def test_a_gpu_record_is_left_to_nvml() -> None:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cuda")
    r.validity.window_s, r.validity.samples = 10.0, 1000
    add_cpu_energy(r, _watched(cpu_energy_j=1500.0), started_wall=100.0)
    assert r.energy.source is None
