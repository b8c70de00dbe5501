"""The report from synthetic but realistic records: numbers, self-containment, CPU-only, bad input."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docpaths import assert_documented_artifacts
from trainserve.cli import app
from trainserve.core.errors import UserError
from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.report import build_report

HOST = {"hostname": "bench-01", "cpu_model": "Test CPU 9000", "logical_cpus": 16, "memory_bytes": 128 * 1024**3,
        "platform": "Linux-6.8-x86_64", "python": "3.12.3"}
VERSIONS = {"trainserve": "0.1.0", "torch": "2.11.0", "onnxruntime-gpu": "1.31.1"}
MIB = 1024**2


def _lat(p50: float) -> LatencyStats:
    # a plausible spread around p50, at 0.01 ms resolution
    return LatencyStats(count=5000, mean_ms=round(p50 * 1.05, 2), p50_ms=p50, p90_ms=round(p50 * 1.3, 2),
                        p99_ms=round(p50 * 1.9, 2), p999_ms=round(p50 * 3.1, 2), max_ms=round(p50 * 5, 2),
                        min_ms=round(p50 * 0.8, 2))


def _train(device: str, throughput: float, step_ms: float, batch: int, precision: str | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device=device, batch_size=batch, preset="small",
                      device_name="NVIDIA H200" if device == "cuda" else "Test CPU 9000",
                      precision=precision or ("bf16" if device == "cuda" else "fp32"), host=HOST, versions=VERSIONS)
    r.speed.throughput_samples_s = throughput
    r.speed.latency = _lat(step_ms)
    r.speed.flops_per_sample = 3 * 0.62e9
    r.utilization.cpu_process_mean_percent = 1540.0 if device == "cpu" else 101.0
    r.validity.samples = 100_000
    if device == "cuda":
        r.speed.achieved_tflops = throughput * r.speed.flops_per_sample / 1e12
        r.speed.mfu = 0.1836
        r.memory.weights_bytes = 17 * MIB
        r.memory.gradients_bytes = 17 * MIB
        r.memory.optimizer_bytes = 34 * MIB
        r.memory.activations_bytes = 1058 * MIB
        r.memory.peak_bytes = 1126 * MIB
        r.memory.max_batch = {"train": 4096, "infer": 32768, "ratio": 8.0}
        r.memory.gpu_released = False
        r.memory.gpu_held_bytes = 512 * MIB
        r.utilization.gpu_util_mean_percent = 93.0
        r.energy.mean_power_w = 410.0
        r.energy.energy_j = 410.0 * 100_000 / throughput
        r.energy.source = "nvml"
        r.validity.warnings.append("input-bound: 23% of step time waiting for data")
    else:
        r.memory.peak_bytes = 2300 * MIB
        r.memory.rss_peak_bytes = 2300 * MIB
    return r


def _infer(device: str, batch: int, users: int, throughput: float, p50: float, ramp: bool = False) -> ProfileRecord:
    served = "cnn_gpu" if device == "cuda" else "cnn_cpu"
    r = ProfileRecord(phase="infer", model=served, backend="onnxruntime", device=device, batch_size=batch,
                      concurrency=users, target=f"embedded-{device}/{served}", host=HOST, versions=VERSIONS,
                      device_name="NVIDIA H200" if device == "cuda" else "")
    r.speed.throughput_samples_s = throughput
    r.speed.requests_s = throughput / batch
    r.speed.latency = _lat(p50)
    r.memory.peak_bytes = (503 if device == "cuda" else 180) * MIB
    r.utilization.cpu_process_mean_percent = 180.0
    if device == "cuda":
        r.utilization.gpu_util_mean_percent = 61.0
        r.energy.mean_power_w = 250.0
        r.energy.energy_per_sample_j = 250.0 / throughput
        r.energy.source = "nvml"  # a figure without its meter is not shown as measured
    if ramp:
        r.extra["ramp"] = [
            {"users": u_, "rate": None, "requests_s": x / batch, "throughput_samples_s": x, "p50_ms": p, "p90_ms": p * 1.3,
             "p99_ms": p * 2}
            for u_, x, p in ((1, throughput, p50), (2, throughput * 1.8, p50 * 1.1), (4, throughput * 2.9, p50 * 1.4),
                             (8, throughput * 3.2, p50 * 2.5))]
    return r


def make_run(runs: Path, name: str = "r1", gpu: bool = True) -> Path:
    run = runs / name
    _train("cpu", 363.0, 1410.0, 512).save(run / "compare" / "profile-cpu.json")
    _infer("cpu", 1, 1, 1087.0, 0.92, ramp=True).save(run / "load" / "embedded-cpu.json")
    _infer("cpu", 64, 4, 16600.0, 15.4).save(run / "load" / "embedded-cpu-b64.json")
    if gpu:
        _train("cuda", 98010.0, 5.22, 512, "fp32").save(run / "compare" / "profile-cuda.json")  # compare: same precision
        _train("cuda", 97000.0, 5.28, 512).save(run / "train" / "profile.json")
        gpu_ramp = _infer("cuda", 1, 1, 2500.0, 0.40, ramp=True)
        gpu_ramp.extra["server"] = {"frontends": 4}  # served by 4 front-end processes (serve --frontends)
        gpu_ramp.save(run / "load" / "embedded-gpu.json")
        _infer("cuda", 512, 4, 150000.0, 13.6).save(run / "load" / "embedded-gpu-b512.json")
    # files beside records that are not records, and must be ignored
    (run / "train").mkdir(parents=True, exist_ok=True)
    (run / "train" / "history.json").write_text(json.dumps([{"epoch": 1, "loss": 2.1}]))
    (run / "train" / "model.json").write_text(json.dumps({"family": "cnn", "preset": "small", "parameters": 4_300_000,
                                                          "dataset": "synthetic", "schema_version": 1}))
    (run / "load" / "embedded-cpu_stats.csv").write_text("Type,Name\n")
    return run


@pytest.fixture(scope="module")
def full_report(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    return build_report(make_run(runs)).parent


def test_the_report_folder_holds_what_the_architecture_names(full_report):
    assert_documented_artifacts("report", full_report.parent)


def test_summary_speedups_are_computed_from_the_records(full_report):
    s = json.loads((full_report / "summary.json").read_text())
    sp = s["models"]["cnn"]["speedups"]
    assert sp["train"]["value"] == pytest.approx(98010 / 363)  # compare/ record preferred over train/
    assert sp["train"]["gpu"] == 98010.0
    assert sp["infer_batch1"]["value"] == pytest.approx(0.92 / 0.40)
    # saturated: the best samples/s seen, ramp points included (GPU ramp peak 8000 < 150000)
    assert sp["infer_saturated"]["value"] == pytest.approx(150000 / 16600)
    assert sp["infer_backend"] == "onnxruntime"
    assert s["models"]["cnn"]["max_batch"]["cuda"] == {"train": 4096, "infer": 32768, "ratio": 8.0,
                                                       "precision": "fp32", "source": "compare/profile-cuda.json"}
    tvi = s["models"]["cnn"]["train_vs_infer"]["cuda"]
    assert "memory_ratio" not in tvi  # memory: in memory_compare, only between figures of one kind
    assert tvi["energy_ratio"] == pytest.approx((410 / 98010) / (250 / 150000))
    assert len(s["records"]) == 7  # history.json, model.json and CSVs are not records
    assert s["machines"][0]["gpus"] == ["NVIDIA H200"]


def test_conclusions_state_the_measured_numbers(full_report):
    s = json.loads((full_report / "summary.json").read_text())
    headline = next(h["text"] for h in s["headline"] if h["kind"] == "conclusion")
    assert "the GPU trains 270x faster than the CPU (98,010 vs 363 samples/s) at the same batch 512 and fp32" in headline
    assert "at batch 1 it answers only 2.3x faster (p50 0.40 ms vs 0.92 ms)" in headline
    assert "saturated, it serves 9.0x the CPU's throughput" in headline
    text = " ".join(s["conclusions"])
    assert "4,096 for training and 32,768 for inference (8.0x)" in text
    assert "18.4% MFU" in text
    assert "not measured" not in text


def test_the_headline_leads_the_summary_and_no_conclusion_is_shown_twice(full_report):
    s = json.loads((full_report / "summary.json").read_text())
    md = (full_report / "report.md").read_text()
    html = (full_report / "report.html").read_text()
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    texts = [h["text"] for h in s["headline"]]
    assert [ln for ln in summary.splitlines() if ln.startswith("- **")] == [f"- **{t}**" for t in texts]
    assert "cnn: training speedup at the same configuration: 270x" in texts[0]
    # every conclusion appears once in the Summary: the first of each model as the headline's, the rest after it
    for c in s["conclusions"]:
        assert summary.count(c) == 1, c
    assert html.index("<ul class='headline'>") < html.index("<div class='tiles speedups'>")


def test_warnings_of_every_record_are_listed(full_report):
    s = json.loads((full_report / "summary.json").read_text())
    msgs = [(w["source"], w["message"]) for w in s["warnings"]]
    assert ("compare/profile-cuda.json", "input-bound: 23% of step time waiting for data") in msgs
    assert any(src == "train/profile.json" and "not released" in m and "512 MiB" in m for src, m in msgs)
    html = (full_report / "report.html").read_text()
    assert "input-bound: 23% of step time waiting for data" in html


def test_html_is_self_contained(full_report):
    html = (full_report / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", html, re.I)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    images = re.findall(r"<img[^>]*src='([^']*)'", html)
    assert len(images) >= 5  # throughput, latency, memory, ramp, max batch
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<style>" in html and "270x" in html
    for png in ("throughput-cnn.png", "latency-cnn.png", "memory-cnn.png", "ramp-cnn.png", "maxbatch-cnn.png"):
        assert (full_report / png).read_bytes()[:4] == b"\x89PNG"


def test_markdown_has_the_tables(full_report):
    md = (full_report / "report.md").read_text()
    assert "| cnn | Training, same configuration | 270x |" in md
    assert "| cnn | Inference, batch 1 | 2.3x |" in md
    header = next(line for line in md.splitlines() if line.startswith("|") and "| Train · CPU |" in line)
    assert "Train · GPU" in header and "Infer batch 1 · GPU" in header
    assert "| p99.9 | 4,371.00 ms | 16.18 ms |" in md  # 0.01 ms resolution
    assert "| 8 users |" in md  # the ramp table
    assert "### Load ramp: GPU · onnxruntime · batch 1 · 4 front-end processes" in md
    assert "![Line charts of model cnn under a rising served load: samples per second and latency percentiles against users or offered requests per second](ramp-cnn.png)" in md


def test_cpu_only_run_says_gpu_not_measured(tmp_path):
    html_path = build_report(make_run(tmp_path, gpu=False))
    s = json.loads((html_path.parent / "summary.json").read_text())
    m = s["models"]["cnn"]
    assert m["devices_measured"] == ["cpu"]
    assert all(m["speedups"][k]["value"] is None for k in ("train", "infer_batch1", "infer_saturated"))
    assert m["speedups"]["train"]["note"] == "not measured: no GPU training measurement"
    assert any("GPU not measured" in c for c in s["conclusions"])
    assert s["machines"][0]["gpus"] == []
    html = html_path.read_text()
    assert "· GPU" not in html  # no GPU column at all
    assert "not measured" in html
    md = (html_path.parent / "report.md").read_text()
    assert "| cnn | Training, same configuration | not measured |" in md


def test_cli_writes_the_report_and_rejects_bad_input(tmp_path):
    make_run(tmp_path, "ok", gpu=False)
    runner = CliRunner()
    result = runner.invoke(app, ["report", "--run", "ok", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ok" / "report" / "report.html").is_file()

    result = runner.invoke(app, ["report", "--run", "missing", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 1 and "not found" in result.output

    (tmp_path / "empty" / "train").mkdir(parents=True)
    (tmp_path / "empty" / "train" / "history.json").write_text("[]")
    result = runner.invoke(app, ["report", "--run", "empty", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 1 and "no profile records" in result.output
    assert not (tmp_path / "empty" / "report").exists()


def test_unreadable_records_are_reported_not_fatal(tmp_path):
    run = make_run(tmp_path, gpu=False)
    (run / "load" / "broken.json").write_text("{not json")
    (run / "load" / "future.json").write_text(json.dumps({"schema_version": 99, "phase": "infer"}))
    s = json.loads((build_report(run).parent / "summary.json").read_text())
    found = {w["source"]: w["message"] for w in s["warnings"]}
    assert found["load/broken.json"].startswith("unreadable JSON")
    assert found["load/future.json"].startswith("not a usable profile record (profile record has schema_version 99")
    assert len(s["records"]) == 3


def test_only_broken_records_is_a_user_error(tmp_path):
    (tmp_path / "r" / "load").mkdir(parents=True)
    (tmp_path / "r" / "load" / "x.json").write_text("{")
    with pytest.raises(UserError, match="no profile records.*unreadable"):
        build_report(tmp_path / "r")


def test_a_ramp_is_not_mistaken_for_a_batch1_measurement(tmp_path):
    run = tmp_path / "r"
    ramp = _infer("cpu", 1, 1, 900.0, 5.0, ramp=True)  # overall p50 mixes every step of the ramp
    ramp.speed.latency = _lat(0.5)  # lower than the plain record's, and still not the batch-1 figure
    ramp.save(run / "load" / "embedded-cpu-ramp.json")
    _infer("cpu", 1, 1, 1000.0, 0.95).save(run / "load" / "embedded-cpu-batch1.json")
    s = json.loads((build_report(run).parent / "summary.json").read_text())
    b1 = s["models"]["cnn"]["infer"]["onnxruntime"]["cpu"]["batch1"]
    assert b1["source"] == "load/embedded-cpu-batch1.json" and b1["latency"]["p50_ms"] == 0.95
    # saturated: the best step of the ramp (900 * 3.2 samples/s at 8 users), not a whole record
    sat = s["models"]["cnn"]["infer"]["onnxruntime"]["cpu"]["saturated"]
    assert sat["ramp_point"] and sat["concurrency"] == 8 and sat["throughput_samples_s"] == pytest.approx(2880.0)


def _sweep_point(device: str, precision: str, batch: int, throughput: float, peak: int) -> ProfileRecord:
    r = _train(device, throughput, batch / throughput * 1e3, batch, precision)
    r.memory.peak_bytes = peak
    r.extra["sweep"] = True
    r.extra["sweep_point"] = {"batch_size": batch, "precision": precision}
    return r


def test_sweep_operating_points_and_both_speedup_bases(tmp_path):
    run = make_run(tmp_path)
    for batch, x in ((64, 300.0), (128, 400.0), (256, 380.0)):  # CPU: best at 128
        _sweep_point("cpu", "fp32", batch, x, batch * MIB).save(run / "sweep" / "cpu" / f"fp32-b{batch}.json")
    for precision, scale in (("fp32", 1.0), ("bf16", 2.5)):  # GPU: best at bf16, 1024
        for batch, x in ((128, 20_000.0), (512, 60_000.0), (1024, 80_000.0)):
            _sweep_point("cuda", precision, batch, x * scale, batch * 4 * MIB).save(
                run / "sweep" / "cuda" / f"{precision}-b{batch}.json")
    (run / "sweep" / "cuda" / "index.json").write_text(json.dumps({"kind": "trainserve training sweep"}))
    html = build_report(run)
    s = json.loads((html.parent / "summary.json").read_text())
    m = s["models"]["cnn"]
    cpu = m["operating_points"]["cpu"]
    assert [p["batch_size"] for p in cpu["train"]] == [64, 128, 256]
    assert set(cpu["train"][0]) >= {"batch_size", "precision", "throughput_samples_s", "p50_ms", "peak_bytes"}
    assert cpu["train_best"]["batch_size"] == 128 and cpu["train_best"]["peak_bytes"] == 128 * MIB
    assert m["operating_points"]["cuda"]["train_best"]["precision"] == "bf16"
    assert len(m["operating_points"]["cuda"]["train"]) == 6
    # same configuration: the CPU's best (batch 128, fp32), which the GPU also measured
    same, best = m["speedups"]["train"], m["speedups"]["train_best"]
    assert same["basis"] == "same_config" and same["value"] == pytest.approx(20_000 / 400)
    assert same["gpu_point"]["batch_size"] == 128 and same["gpu_point"]["precision"] == "fp32"
    assert best["basis"] == "best_vs_best" and best["value"] == pytest.approx(200_000 / 400)
    bases = [(h["basis"], h["value"]) for h in s["headline"] if h["kind"] == "train_speedup"]
    assert bases == [("same_config", same["value"]), ("best_vs_best", best["value"])]
    # the training columns keep the compare/ records; sweep points do not replace them
    assert m["train"]["cpu"]["source"] == "compare/profile-cpu.json"
    assert "sweep-cnn.png" in (html.parent / "report.md").read_text()
    assert "Training sweep: operating points" in html.read_text()
    assert (html.parent / "sweep-cnn.png").stat().st_size > 1000
