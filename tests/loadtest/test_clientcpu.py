"""The load generator's own CPU: the processes a target gets, and the record's mark when the client was the limit."""

from __future__ import annotations

import time
import types

import pytest

from tests.loadtest.parts import parts, settings
from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.loadtest.clientcpu import StepCpu, auto_processes, client_cpu, from_results, usable_cpus
from trainserve.loadtest.search import highest_rate
from trainserve.loadtest.servedrecord import annotate


def test_auto_processes_grow_with_the_target_within_the_free_cores() -> None:
    # against a GPU server: enough for the users or rate, at most half the cores and 16
    assert auto_processes(mode="closed", users=1, rate=None, ramp_max_users=64, device="cuda", cpus=16) == 1
    assert auto_processes(mode="ramp", users=None, rate=None, ramp_max_users=64, device="cuda", cpus=16) == 4
    assert auto_processes(mode="ramp", users=None, rate=None, ramp_max_users=256, device="cuda", cpus=16) == 8
    assert auto_processes(mode="open", users=None, rate=5000, ramp_max_users=64, device="cuda", cpus=64) == 7
    assert auto_processes(mode="open", users=None, rate=50000, ramp_max_users=64, device="cuda", cpus=128) == 16
    # the Server search: enough for the highest rate it may try (doubling from its first rate within its time)
    reach = highest_rate(100.0, budget_s=10.0, min_probe_s=2.0)
    assert reach == 1600.0 and highest_rate(100.0, budget_s=1000.0, min_probe_s=2.0, max_rate=5e4) == 5e4
    assert auto_processes(mode="search", users=None, rate=reach, ramp_max_users=64, device="cuda", cpus=16) == 2
    assert auto_processes(mode="search", users=None, rate=1e6, ramp_max_users=64, device="cuda", cpus=16) == 8
    # against a CPU server the client takes cores the server needs: an eighth; a 2-core machine gets one
    assert auto_processes(mode="ramp", users=None, rate=None, ramp_max_users=64, device="cpu", cpus=2) == 1
    assert auto_processes(mode="ramp", users=None, rate=None, ramp_max_users=64, device="cpu", cpus=32) == 4


def test_a_process_at_its_core_or_the_client_at_its_cores_is_saturated() -> None:
    busy = client_cpu({"worker-a": 9.7, "worker-b": 4.0, "master": 0.3}, 10.0, user_processes=2, cpus=16)
    assert busy.saturated and "worker-a" in busy.note and busy.per_process_core_fraction["worker-a"] == 0.97
    assert busy.cores == 2 and busy.total_core_fraction == pytest.approx(14.0 / 20.0, abs=1e-3)
    spread = client_cpu({"w1": 8.8, "w2": 8.8, "master": 1.0}, 10.0, user_processes=2, cpus=16)
    assert spread.saturated and "of its 2 cores" in spread.note  # no one process at 90%, the whole client is
    idle = client_cpu({"local": 3.0}, 10.0, user_processes=1, cpus=16)
    assert not idle.saturated and idle.note == "" and idle.total_core_fraction == 0.3
    # more processes than cores: the client has only the cores
    assert client_cpu({"w1": 6.1, "w2": 6.1, "w3": 6.1}, 10.0, user_processes=3, cpus=2).saturated


def _record() -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cuda", batch_size=1, concurrency=64)
    r.speed.latency = LatencyStats(count=1000, mean_ms=2.0)
    r.validity.window_s = 10.0
    return r


@pytest.mark.parametrize("cpu_s, saturated", [(9.8, True), (2.0, False)])
def test_the_record_marks_a_saturated_client_and_names_it_the_bound(cpu_s: float, saturated: bool) -> None:
    r = _record()
    results = {"load_generator": {"per_process_cpu_s": {"local": cpu_s}}, "workers": 0}
    server = {"requests": 1000, "success_ms": 0.5, "queue_ms": 0.1, "compute_input_ms": 0.0,
              "compute_infer_ms": 0.3, "compute_output_ms": 0.0, "busy_s": 9.5, "window_s": 10.0}
    annotate(r, parts(settings=settings(slo_p99_ms=100.0)), results, {"client_ms": 0.1}, server, instances=1)
    assert r.served is not None and r.served.client.saturated is saturated
    # the device was busy 95%: only a saturated client outranks it, as then the figure is the client's
    assert r.served.bound is not None and r.served.bound.kind == ("client" if saturated else "device")
    assert any("load generator was saturated" in w for w in r.validity.warnings) is saturated
    back = ProfileRecord.from_dict(r.to_dict())  # the typed part survives the JSON round trip
    assert back.served == r.served


def test_a_ramp_step_counts_the_client_cpu_of_its_own_window() -> None:
    runner = type("MasterRunner", (), {})()  # named like Locust's master, which runs no users itself
    collector = types.SimpleNamespace(env=types.SimpleNamespace(runner=runner), worker_cpu={})
    step = StepCpu(collector)
    collector.worker_cpu = {"w1": 100.0, "w2": 0.01}  # w1's report arrived within the step: all of it counts
    time.sleep(0.2)  # a window to measure against (sleeping costs the master no CPU)
    cpu = step.finish()
    assert cpu.saturated and "w1" in cpu.note and cpu.cores == 2
    step = StepCpu(collector)  # nothing new reported in this step: the same totals are no CPU at all
    time.sleep(0.2)
    cpu = step.finish()
    assert not cpu.saturated and cpu.per_process_core_fraction["w1"] == 0.0


def test_cpu_seconds_count_over_the_span_they_were_spent_in_not_the_measured_window():
    # a 35 s search whose last probe's window was 3 s: 10 CPU-s per worker is 29% of a core, not 333%
    gen = {"per_process_cpu_s": {"master": 0.5, "w1": 10.0, "w2": 10.2}, "window_s": 35.0}
    client = from_results(gen, 3.0, workers=2)
    assert not client.saturated and max(client.per_process_core_fraction.values()) < 0.3
    # without the span (an older record) the measured window stands in
    assert from_results({k: v for k, v in gen.items() if k != "window_s"}, 3.0, workers=2).saturated


def test_the_workers_that_reported_cpu_count_when_the_runner_no_longer_does():
    # a Server search across 8 workers that had quit when the results were written (the runner counted 0)
    per = {"master": 0.4, **{f"w{i}": 6.5 for i in range(8)}}
    client = from_results({"per_process_cpu_s": per, "window_s": 35.0}, 3.0, workers=0)
    assert client.cores == min(8, usable_cpus()) and not client.saturated  # was: 1 core, 151%, saturated
    # one process alone at its core is still saturated
    assert from_results({"per_process_cpu_s": {"local": 34.0}, "window_s": 35.0}, 3.0, workers=0).saturated
