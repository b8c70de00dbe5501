"""The sampler on a machine without a GPU, and against a fake NVML and a fake RAPL tree."""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import pytest

from trainserve.core import meters, telemetry
from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord
from trainserve.core.telemetry import Sampler


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _wait_ticks(s: Sampler, n: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while s.summary()["ticks"] < n:
        assert time.monotonic() < deadline, "sampler did not tick"
        time.sleep(0.02)


class FakeNvml(types.ModuleType):
    """Enough of pynvml for the sampler: energy grows 50 J per read, power 200 W."""

    def __init__(self, energy_supported: bool = True) -> None:
        super().__init__("pynvml")
        self.energy_mj = 1_000_000
        self.energy_supported = energy_supported
        self.energy_reads = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
    def nvmlDeviceGetHandleByIndex(self, i: int) -> object:
        return object()
    def nvmlDeviceGetName(self, h: object) -> str:
        return "NVIDIA H200"
    def nvmlDeviceGetUtilizationRates(self, h: object) -> object:
        return types.SimpleNamespace(gpu=30, memory=10)
    def nvmlDeviceGetMemoryInfo(self, h: object) -> object:
        return types.SimpleNamespace(used=3 * 2**30, total=141 * 2**30, free=0)
    def nvmlDeviceGetPowerUsage(self, h: object) -> int:
        return 200_000  # mW
    def nvmlDeviceGetTotalEnergyConsumption(self, h: object) -> int:
        if not self.energy_supported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        self.energy_reads += 1
        self.energy_mj += 50_000
        return self.energy_mj
    def nvmlDeviceGetComputeRunningProcesses(self, h: object) -> list:
        import os
        return [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=123)]


def test_without_nvml_gpu_fields_are_null_and_cpu_is_measured(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as on a machine without the driver
    with Sampler(interval_s=0.02) as s:
        _busy(0.4)
        _wait_ticks(s, 5)
        latest = s.latest()
    assert latest.gpu_util_percent is None and latest.gpu_mem_used_bytes is None
    assert latest.gpu_power_w is None and latest.gpu_energy_j is None
    assert latest.rss_bytes is not None and latest.rss_bytes > 10 * 2**20
    summary = s.summary()
    assert summary["gpu_available"] is False and summary["gpu_energy_j"] is None
    # the main thread spun for 0.4 s: the process used a good share of a core
    assert summary["cpu_process_max_percent"] > 30
    assert 0 <= summary["cpu_system_mean_percent"] <= 100
    assert summary["window_s"] >= 0.4
    assert len(summary["timeline"]) == summary["ticks"]
    assert telemetry.gpu_memory_used_bytes(0) is None and telemetry.gpu_name(0) is None


def test_start_stop_and_latest(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    s = Sampler(interval_s=0.05)
    with pytest.raises(RuntimeError):
        s.latest()
    s.start()
    first = s.latest()
    _wait_ticks(s, 3)
    assert s.latest().t_s > first.t_s
    s.stop()
    ticks = s.summary()["ticks"]
    time.sleep(0.2)
    assert s.summary()["ticks"] == ticks  # stopped means stopped
    s.stop()  # idempotent
    with pytest.raises(RuntimeError):
        s.start()


def test_invalid_config_names_the_field():
    with pytest.raises(UserError, match="interval_s"):
        Sampler(interval_s=0)
    with pytest.raises(UserError, match="gpu_index"):
        Sampler(gpu_index=-1)


def test_energy_from_nvml_counter_and_apply(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(telemetry, "NVML_UTIL_PERIOD_S", 0.03)  # a product with a short utilization period
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 6)
    summary = s.summary()
    assert summary["gpu_name"] == "NVIDIA H200"
    assert summary["gpu_energy_source"] == "nvml"
    # the counter is read at start and stop (and once a second between): 50 J per read after the first
    assert fake.energy_reads == 2
    assert summary["gpu_energy_j"] == pytest.approx(50.0)
    assert summary["gpu_util_mean_percent"] == 30 and summary["gpu_mem_used_max_bytes"] == 3 * 2**30

    record = ProfileRecord(phase="train", model="cnn", backend="torch", device="cuda")
    s.apply(record, samples=1000)
    assert record.energy.source == "nvml"
    assert record.energy.energy_j == summary["gpu_energy_j"]
    assert record.energy.energy_per_sample_j == pytest.approx(summary["gpu_energy_j"] / 1000)
    assert record.energy.mean_power_w == pytest.approx(summary["gpu_energy_j"] / summary["window_s"], rel=0.05)
    assert record.utilization.gpu_util_max_percent == 30
    assert record.utilization.timeline and "gpu_util_percent" in record.utilization.timeline[0]
    assert "overhead_percent_of_core" in record.extra["telemetry"]
    # 30% utilization with 3 GiB in use: the input-bound hint
    assert any("input-bound" in w for w in record.validity.warnings)
    assert telemetry.gpu_process_memory_bytes(0) == 123


def test_energy_falls_back_to_integrated_power(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(energy_supported=False))
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 5)
    summary = s.summary()
    assert summary["gpu_energy_source"] == "nvml-power"
    # constant 200 W over the sampled span (first to last reading, within the window)
    assert summary["gpu_energy_j"] == pytest.approx(200 * summary["window_s"], rel=0.1)


def test_rapl_sums_packages_and_handles_wraparound(tmp_path: Path):
    for name, e, m in [("intel-rapl:0", 900, 1000), ("intel-rapl:1", 100, 10_000), ("intel-rapl:0:0", 5, 1000)]:
        d = tmp_path / name
        d.mkdir()
        (d / "energy_uj").write_text(f"{e}\n")
        (d / "max_energy_range_uj").write_text(f"{m}\n")
    rapl = telemetry._Rapl(str(tmp_path))
    assert [Path(p).parent.name for p, _ in rapl.zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert rapl.read() == 0.0
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("100\n")  # wrapped: 900 -> 1000 -> 100 = 200 uJ
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("400\n")  # +300 uJ
    assert rapl.read() == pytest.approx(500e-6)
    assert not telemetry._Rapl(str(tmp_path / "missing")).ok


def test_cpu_record_without_rapl_has_an_energy_labelled_estimated(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    real = telemetry._Rapl
    monkeypatch.setattr(telemetry, "_Rapl", lambda *a: real("/nonexistent"))
    monkeypatch.setattr(meters, "host_cpu_model", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    with Sampler(interval_s=0.05) as s:
        _busy(0.3)
        _wait_ticks(s, 2)
    record = ProfileRecord(phase="train", model="cnn", backend="torch", device="cpu")
    summary = s.apply(record, samples=10)
    e = record.energy
    assert e.source == "estimate" and e.device == "cpu"
    assert e.meter.startswith("estimate: TDP 350 W × process CPU utilisation")
    share = summary["cpu_process_mean_percent"] / 100 / os.cpu_count()
    # a busy sampler's short intervals can read a little over every core: the estimate never exceeds the TDP
    assert e.mean_power_w == pytest.approx(350 * min(share, 1.0), rel=1e-3)
    assert e.energy_per_sample_j == pytest.approx(e.energy_j / 10, rel=1e-3)
    assert meters.energy_status("cpu", e.source) == "estimated"
    assert record.utilization.cpu_process_mean_percent is not None
    assert record.validity.warnings == []


def test_cpu_record_on_a_gpu_host_carries_no_gpu_reading(monkeypatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    monkeypatch.setattr(telemetry, "NVML_UTIL_PERIOD_S", 0.03)
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "energy_uj").write_text("0\n")
    (zone / "max_energy_range_uj").write_text("1000000000\n")
    real = telemetry._Rapl
    monkeypatch.setattr(telemetry, "_Rapl", lambda *a: real(str(tmp_path)))
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 6)
        (zone / "energy_uj").write_text("3000000\n")  # 3 J on the CPU package
        _wait_ticks(s, 8)
    record = ProfileRecord(phase="infer", model="cnn", backend="onnxruntime", device="cpu")
    s.apply(record, samples=100)
    u, e = record.utilization, record.energy
    assert u.gpu_util_mean_percent is None and u.gpu_mem_used_max_bytes is None and u.gpu_meter is None
    assert all(not k.startswith("gpu_") for p in u.timeline for k in p)
    assert (e.source, e.meter, e.device) == ("rapl", meters.RAPL_METER, "cpu")
    assert e.energy_j == pytest.approx(3.0) and e.energy_per_sample_j == pytest.approx(0.03)
    # the GPU's readings stay in the telemetry block, under their own names
    assert record.extra["telemetry"]["gpu_energy_source"] == "nvml"

    gpu = ProfileRecord(phase="infer", model="cnn", backend="onnxruntime", device="cuda")
    s.apply(gpu, samples=100)
    assert (gpu.energy.source, gpu.energy.meter, gpu.energy.device) == ("nvml", "NVML device 0", "cuda:0")
    assert gpu.utilization.gpu_meter == "NVML device 0" and gpu.utilization.gpu_mem_used_max_bytes == 3 * 2**30


def test_timeline_is_bounded(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    s = Sampler(interval_s=0.005, max_timeline=8)
    with s:
        _wait_ticks(s, 40)
    summary = s.summary()
    assert summary["ticks"] >= 40
    assert 4 <= len(summary["timeline"]) < 8
    ts = [p["t_s"] for p in summary["timeline"]]
    assert ts == sorted(ts) and ts[0] == 0.0


def test_mark_restarts_the_window(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 6)
        s.mark()
        reads_at_mark = fake.energy_reads
        assert s.summary()["ticks"] == 1
        _wait_ticks(s, 3)
    summary = s.summary()
    assert summary["gpu_energy_j"] == pytest.approx(50.0 * (fake.energy_reads - reads_at_mark))


def test_energy_counter_is_read_about_once_a_second_not_every_tick(monkeypatch):
    # one counter read cost ~4 ms of CPU on a virtualised H200: at 10 Hz that alone was 4% of a core
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with Sampler(interval_s=0.01) as s:
        time.sleep(1.3)
    assert s.summary()["ticks"] > 40
    assert 2 <= fake.energy_reads <= 4  # start, ~1 s, stop
    assert s.summary()["gpu_energy_j"] == pytest.approx(50.0 * (fake.energy_reads - 1))


def test_overhead_is_small(monkeypatch):
    """One tick must cost well under 1% of the 100 ms default interval (CPU time of the thread)."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 20)
    summary = s.summary()
    assert summary["overhead_tick_ms"] is not None and summary["overhead_tick_ms"] < 1.0
    assert summary["overhead_cpu_s"] > 0


def test_power_is_read_every_tick_and_read_costs_names_each_call(monkeypatch):
    fake = FakeNvml()
    calls = []
    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", lambda h: calls.append(h) or 200_000, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nv = telemetry.Nvml(0)
    first = nv.read(energy_due=True)
    second = nv.read(energy_due=False)
    assert first[2] == 200.0 and second[2] == 200.0 and len(calls) == 2
    assert first[3] is not None and second[3] is None and fake.energy_reads == 1
    wall: dict = {}
    costs = telemetry.read_costs(0, repeats=2, wall=wall)
    for name in ("os_times", "psutil_children_recursive", "nvml_utilization", "nvml_total_energy",
                 "nvml_read_as_ticked", "cpu_read_as_ticked"):
        assert costs[name] is not None and costs[name] >= 0, name
        assert wall[name] >= 0, name
    assert wall.keys() <= costs.keys()


def test_a_point_shorter_than_nvmls_period_reads_not_sampled_never_0(monkeypatch):
    """NVML's utilization covers its own past period; on a point shorter than that the
    readings speak for the idle gap before it (a sweep's short point would read 0% while busy)."""
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    busy = {"on": False}
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=95 if busy["on"] else 0, memory=0)
    monkeypatch.setattr(telemetry, "NVML_UTIL_PERIOD_S", 0.3)
    with Sampler(interval_s=0.02) as s:
        _wait_ticks(s, 3)  # idle before the point
        s.mark()
        busy["on"] = True  # the stand-in workload: a point of ~0.1 s, a third of the period
        time.sleep(0.1)
        short = s.summary()
        time.sleep(0.4)  # the same point, now longer than the period
        long = s.summary()
    assert short["gpu_util_mean_percent"] is None and short["gpu_util_sampled"] is False
    assert long["gpu_util_sampled"] is True and long["gpu_util_mean_percent"] == 95
    from trainserve.report.page.render import _op_util  # the sweep table's cell

    assert _op_util("cuda", None) == "not sampled" and _op_util("cuda", 0.0) == "0%" and _op_util("cpu", None) == ""
