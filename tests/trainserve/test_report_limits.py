"""The report with in-process limit records (runs/<run>/limits/): summary keys, served vs limit, no mix-ups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainserve.test_report import HOST, make_run
from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.report import build_report


def _limit(run: Path, device: str, batch: int, threads: int, throughput: float, p50: float, sweep: str = "threads",
           spin: bool = False) -> None:
    served = "cnn_gpu" if device == "cuda" else "cnn_cpu"
    r = ProfileRecord(phase="infer", model=served, backend="onnxruntime", device=device, batch_size=batch,
                      concurrency=1, target=f"in-process/{served}", host=HOST)
    r.speed.throughput_samples_s = throughput
    r.speed.latency = LatencyStats.from_samples_ms([p50] * 20)
    r.settings = {"intra_op_threads": threads, "inter_op_threads": 1, "allow_spinning": spin}
    r.extra = {"limit": True, "sweep": sweep}
    r.save(run / "limits" / device / served / f"b{batch}-t{threads}{'-spin' if spin else ''}.json")
    # the per-model summary.json beside the records is not a record and must be skipped
    (run / "limits" / device / served / "summary.json").write_text(json.dumps({"batch1_p50_ms": p50}))


def _add_limits(run: Path, gpu: bool = True) -> Path:
    # served (test_report.make_run): CPU batch-1 p50 0.92 ms, saturated 16,600 samples/s;
    # GPU batch-1 p50 0.40 ms, saturated 150,000 samples/s
    _limit(run, "cpu", 1, 1, 2500.0, 0.40)
    _limit(run, "cpu", 1, 16, 5000.0, 0.20)  # the fastest batch 1: 16 threads
    _limit(run, "cpu", 1, 16, 4800.0, 0.21, spin=True)
    _limit(run, "cpu", 64, 16, 33200.0, 1.93, sweep="layout")  # the best samples/s
    _limit(run, "cpu", 32, 16, 30000.0, 1.07, sweep="batch")
    if gpu:
        _limit(run, "cuda", 1, 16, 10000.0, 0.10)
        _limit(run, "cuda", 512, 16, 300000.0, 1.71, sweep="layout")
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    run = _add_limits(make_run(tmp_path_factory.mktemp("runs")))
    return build_report(run).parent


def test_summary_has_limits_and_server_vs_limit(report):
    s = json.loads((report / "summary.json").read_text())
    cnn = s["models"]["cnn"]
    assert cnn["limits"]["cpu"] == {"batch1_p50_ms": 0.20, "batch1_threads": 16, "best_batch": 64,
                                    "best_throughput_samples_s": 33200.0}
    assert cnn["limits"]["cuda"] == {"batch1_p50_ms": 0.10, "batch1_threads": 16, "best_batch": 512,
                                     "best_throughput_samples_s": 300000.0}
    svl = cnn["server_vs_limit"]
    assert set(svl["cpu"]) == {"batch1_overhead_ms", "saturated_efficiency"}
    assert svl["cpu"]["batch1_overhead_ms"] == pytest.approx(0.92 - 0.20)
    assert svl["cpu"]["saturated_efficiency"] == pytest.approx(16600 / 33200)
    assert svl["cuda"]["batch1_overhead_ms"] == pytest.approx(0.40 - 0.10)
    assert svl["cuda"]["saturated_efficiency"] == pytest.approx(150000 / 300000)
    assert len(cnn["limit_points"]["cpu"]) == 5
    assert cnn["limit_speedups"]["infer_batch1"] == pytest.approx(2.0)


def test_limit_records_are_not_taken_for_served_ones(report):
    s = json.loads((report / "summary.json").read_text())
    cnn = s["models"]["cnn"]
    cpu = cnn["infer"]["onnxruntime"]["cpu"]
    # the in-process batch 1 (0.20 ms) is faster than the served one (0.92 ms), and the best in-process
    # samples/s (33,200) beats the served saturated (16,600): neither may replace the served figure
    assert cpu["batch1"]["source"] == "load/embedded-cpu.json" and cpu["batch1"]["latency"]["p50_ms"] == 0.92
    assert cpu["saturated"]["source"] == "load/embedded-cpu-b64.json"
    assert cnn["speedups"]["infer_batch1"]["value"] == pytest.approx(0.92 / 0.40)
    assert all(not r["source"].startswith("limits/") for r in cnn["ramps"])
    # the headline's batch-1 ratio is the served one, with the in-process one beside it
    assert ("at batch 1 it answers only 2.3x faster (p50 0.40 ms vs 0.92 ms), 2.0x in process "
            "(p50 0.10 ms vs 0.20 ms)") in next(h["text"] for h in s["headline"] if h["kind"] == "conclusion")
    text = " ".join(s["conclusions"])
    assert "cnn on the CPU: onnxruntime in process answers batch 1 in 0.20 ms (16 threads); the served p50 is " \
           "0.72 ms above that; its best is 33,200 samples/s at batch 64, of which the saturated server reaches 50.0%" in text
    assert cpu["batch1"]["limit"]["p50_ms"] == 0.20 and cpu["saturated"]["limit"]["efficiency"] == pytest.approx(0.5)


def test_html_and_markdown_set_served_figures_beside_the_limits(report):
    md = (report / "report.md").read_text()
    assert "### Served vs onnxruntime in process (the limit)" in md
    assert "| CPU | 0.20 ms (16 thr) | 0.92 ms | +0.72 ms | 33,200 (batch 64) | 16,600 | 50.0% |" in md
    assert "| in-process limit (batch-1 p50 / best samples/s) |" in md
    html = (report / "report.html").read_text()
    assert "p50 per request · in process 0.20 ms" in html and "In-process points · GPU" in html
    assert (report / "frontier-cnn.png").stat().st_size > 10_000
    assert "](frontier-cnn.png)" in md


def test_limits_alone_and_a_run_without_limits(tmp_path):
    # no limits: the report has its other sections, and a line saying they were not measured
    plain = build_report(make_run(tmp_path, "plain", gpu=False)).parent
    s = json.loads((plain / "summary.json").read_text())
    assert s["models"]["cnn"]["limits"] == {} and s["models"]["cnn"]["server_vs_limit"] == {}
    assert "In-process limits: not measured" in (plain / "report.md").read_text()
    assert not (plain / "frontier-cnn.png").exists()
    # limits but no served record on the GPU: the limit is reported, overhead and efficiency are not invented
    run = tmp_path / "lonely"
    _limit(run, "cuda", 1, 4, 9000.0, 0.11)
    s = json.loads((build_report(run).parent / "summary.json").read_text())
    assert s["models"]["cnn"]["limits"]["cuda"]["batch1_p50_ms"] == 0.11
    assert s["models"]["cnn"]["server_vs_limit"] == {}
    assert s["models"]["cnn"]["infer"] == {}


def test_each_load_ramp_names_its_limit(report):
    md = (report / "report.md").read_text()
    assert "In-process limit: batch-1 p50 0.20 ms, best 33,200 samples/s at batch 64." in md
    assert "in-process limit: batch-1 p50 0.10 ms, best 300,000 samples/s at batch 512" in (report / "report.html").read_text()
