"""The load record's server figures: each from its own device's meter, over the record's own window."""

from __future__ import annotations

import pytest

from tests.loadtest.test_metrics import TEXT
from trainserve.core.meters import energy_status
from trainserve.core.profile import ProfileRecord
from trainserve.loadtest.metrics import MetricsScraper, parse_prometheus
from trainserve.loadtest.runner import _apply_server_metrics, figure_wall_window


def _scraper() -> MetricsScraper:
    """Ten scrapes a second apart: 100 J/s of GPU energy for 5 s, then 300 J/s (the search's figure)."""
    s = MetricsScraper("http://unused", "m")
    s._wall_offset_s = 1000.0
    energy = 0.0
    for t in range(10):
        s.scrapes.append((float(t), parse_prometheus(TEXT.format(util=0.5, energy=energy, n=t, rows=t, queue=0))))
        energy += 100.0 if t < 5 else 300.0
    return s


def _record(device: str, window_s: float, samples: int) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device=device)  # type: ignore[arg-type]
    r.validity.window_s, r.validity.samples = window_s, samples
    return r


def test_a_cpu_record_takes_none_of_the_gpu_gauges_a_server_exposes():
    r = _record("cpu", 9.0, 900)
    _apply_server_metrics(r, _scraper().summary(), 900)
    u, e = r.utilization, r.energy
    assert u.gpu_util_mean_percent is None and u.gpu_mem_used_max_bytes is None and u.gpu_meter is None
    assert all("gpu_util_percent" not in p for p in u.timeline)
    assert u.cpu_system_mean_percent == 50.0  # the CPU's own gauge stays
    assert e.mean_power_w is None and e.energy_per_sample_j is None and e.source is None
    assert energy_status("cpu", e.source) == "not measured"


def test_a_gpu_record_takes_nvml_energy_over_its_own_window():
    r = _record("cuda", 4.5, 900)
    _apply_server_metrics(r, _scraper().summary(), 900)
    e = r.energy
    assert e.source == "nvml" and e.device == "cuda" and "NVML" in e.meter
    assert e.mean_power_w == pytest.approx(1700 / 9)  # the counter over the scraped 9 s
    assert e.energy_j == pytest.approx(1700 / 9 * 4.5)  # over the measured window, not the whole load
    assert e.energy_per_sample_j == pytest.approx(1700 / 9 * 4.5 / 900)
    assert r.utilization.gpu_meter and r.utilization.gpu_util_mean_percent == 50.0


def test_a_capacity_search_figure_takes_the_energy_of_its_own_windows():
    results = {"search": {"figure": {"wall_start": 1005.0, "wall_end": 1009.0, "window_s": 4.0}}}
    window = figure_wall_window(results)
    assert window == (1005.0, 1009.0) and figure_wall_window({"latency": {}}) is None
    summary = _scraper().summary(window)
    assert summary["wall_window"]["narrowed"] is True and summary["scrapes"] == 5
    r = _record("cuda", 4.0, 400)
    _apply_server_metrics(r, summary, 400)
    assert r.energy.source == "nvml" and r.energy.mean_power_w == pytest.approx(300.0)
    assert r.energy.energy_per_sample_j == pytest.approx(3.0)


def test_a_window_with_too_few_scrapes_keeps_the_whole_load_and_says_so():
    summary = _scraper().summary((1003.2, 1003.8))
    assert summary["wall_window"]["narrowed"] is False and summary["scrapes"] == 10
