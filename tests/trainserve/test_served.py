"""The one rule for what bounded a served figure (trainserve.core.served.decide_bound)."""

from __future__ import annotations

from trainserve.core.served import ClientCpu, decide_bound


def _bound(**kw):
    args = {"client": ClientCpu(), "device_busy": None, "gpu_util_percent": None, "frontend_cpu_cores": None,
            "frontends": 1, "device": "cuda", "slo_broken": None, "server_cpu_cores_available": 16}
    return decide_bound(**{**args, **kw})


def test_a_saturated_client_comes_first_as_its_figure_is_not_the_servers() -> None:
    b = _bound(client=ClientCpu(saturated=True, note="process w1 used 97% of a core"), device_busy=0.99,
               slo_broken="p99 40 ms > 20 ms")
    assert b.kind == "client" and "w1 used 97%" in b.detail and "--processes" in b.detail


def test_the_device_is_busy_by_its_executions_or_its_utilization() -> None:
    assert _bound(device_busy=0.93).kind == "device"
    assert _bound(gpu_util_percent=95.0).kind == "device"
    assert "GPU utilization 95%" in _bound(gpu_util_percent=95.0).detail
    assert _bound(device_busy=0.5, gpu_util_percent=60.0).kind == "load"
    # a CPU server's process using nearly all cores: the CPU is the device, and it is busy
    b = _bound(device="cpu", frontend_cpu_cores=15.0, server_cpu_cores_available=16)
    assert b.kind == "device" and "15.0 of 16 cores" in b.detail
    # a CPU server on loopback: its client's share of the host counts, the host's CPUs are the device
    b = _bound(device="cpu", frontend_cpu_cores=1.2, server_cpu_cores_available=2, system_cpu_percent=96.0)
    assert b.kind == "device" and "96% busy (the server, its client and anything else)" in b.detail
    assert _bound(device="cuda", system_cpu_percent=96.0).kind == "load"  # a GPU's host CPU is not its device


def test_a_gpu_servers_front_end_saturates_at_one_core_per_process() -> None:
    assert _bound(frontend_cpu_cores=0.95).kind == "frontend"
    assert _bound(frontend_cpu_cores=0.95, frontends=4).kind == "load"  # four processes: four cores
    assert _bound(frontend_cpu_cores=3.7, frontends=4).kind == "frontend"
    assert _bound(device="cpu", frontend_cpu_cores=0.95).kind == "load"  # on a CPU server that is the device's share
    # a CPU server's device is the whole server's CPU, front ends and model process alike
    assert _bound(device="cpu", frontend_cpu_cores=1.0, server_cpu_cores=15.0, server_cpu_cores_available=16).kind \
        == "device"


def test_the_slo_and_the_offered_load_come_last() -> None:
    b = _bound(slo_broken="the latency SLO: p99 40 ms > 20 ms")
    assert b.kind == "slo" and b.detail == "the latency SLO: p99 40 ms > 20 ms"
    assert _bound().kind == "load"


def test_a_ramp_withholds_only_the_steps_whose_own_client_was_saturated() -> None:
    from tests.trainserve.test_report import _infer
    from trainserve.core import bounds

    r = _infer("cpu", 1, 1, 1087.0, 0.92, ramp=True)
    r.extra["load_generator"] = {"cpu_s": 30.0, "max_process_core_fraction": 0.99}  # the whole run's worst
    steps = r.extra["ramp"]
    for i, p in enumerate(steps):
        p["client_cpu"] = {"per_process_core_fraction": {"local": 0.99 if i == len(steps) - 1 else 0.4}}
    (screened,) = bounds.screen([("load/r.json", r)])
    kept = screened.extra["ramp"]
    assert all(p["requests_s"] is not None for p in kept[:-1])  # the client had room in these steps
    assert kept[-1]["requests_s"] is None and "client saturated" in str(kept[-1][bounds.OUT_OF_BOUNDS])
