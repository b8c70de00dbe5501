"""The report's Answers section: each README question answered from crafted records with its figure and
link, or "not measured" with the reason and the command that measures it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainserve.test_report import MIB, _infer, _sweep_point, make_run
from trainserve.core.profile import ProfileRecord
from trainserve.report import build_report
from trainserve.report.answers.answers import QUESTIONS


def _server(device: str, model: str, capacity: float, p99: float, mean_batch: float | None = None) -> ProfileRecord:
    r = _infer(device, 1, 1, capacity, p99 / 2)
    r.model, r.concurrency = model, None
    r.settings = {"scenario": "Server", "mode": "open"}
    r.speed.latency.p99_ms = p99
    r.extra["search"] = {"capacity_req_s": capacity, "lower_bound": False, "slo_p99_ms": 20.0, "probes": []}
    return r


def _shared(device: str, model: str, rate: float, p50: float, p99: float) -> ProfileRecord:
    """One side of the shared-rate pair, as trainserve run marks it (pipeline._mark_shared_rate)."""
    r = _infer(device, 1, 1, rate, p50)
    r.model, r.concurrency = model, None
    r.settings = {"scenario": "open loop", "mode": "open", "rate": rate, "duration_s": 10.0}
    r.speed.latency.p99_ms = p99
    base = model.removesuffix("_nobatch")
    r.extra["shared_rate"] = {"rate_req_s": rate, "pair": [base, base + "_nobatch"],
                              "basis": "0.8 x the lower of the two Server capacities"}
    return r


def _data_path(record: ProfileRecord, placement: str, throughput: float, wait: float) -> ProfileRecord:
    record.settings["data_placement"] = placement
    record.speed.throughput_samples_s = throughput
    record.extra["data_wait_share"] = wait
    record.validity.warnings = []
    return record


def _compared(device: str, precision: str, batch: int, host: float, device_side: float, wait_ms: float,
              share: float) -> ProfileRecord:
    """A sweep's best point with its data-path comparison (train/datapath.py's DataPathResult.to_dict())."""
    r = _sweep_point(device, precision, batch, device_side, batch * MIB)
    r.extra["data_path"] = {"device": device, "batch_size": batch, "precision": precision, "rows": batch * 16,
                            "host_over_device": host / device_side, "seconds": 2.0, "runs": [
                                {"placement": "host", "samples_s": host, "step_p50_ms": 10.0, "data_wait_ms": wait_ms,
                                 "data_wait_share": share, "timed_steps": 10, "workers": 4 if device == "cuda" else 0,
                                 "pin_memory": device == "cuda"},
                                {"placement": "device", "samples_s": device_side, "step_p50_ms": 9.8,
                                 "data_wait_ms": 0.05, "data_wait_share": 0.005, "timed_steps": 10}]}
    return r


def _answered_run(runs: Path) -> Path:
    run = make_run(runs)
    train = ProfileRecord.load(run / "compare" / "profile-cuda.json")  # the GPU's training column
    train.memory.gpu_released, train.memory.gpu_held_bytes = True, 0
    train.utilization.gpu_mem_used_max_bytes = 3000 * MIB
    train.extra["gpu_release"] = {"nvml_used_before_bytes": 600 * MIB, "nvml_used_after_free_bytes": 600 * MIB,
                                  "nvml_used_after_exit_bytes": 590 * MIB}
    train.save(run / "compare" / "profile-cuda.json")
    train = ProfileRecord.load(run / "train" / "profile.json")
    _data_path(train, "device", 97000.0, 0.01).save(run / "train" / "profile.json")
    host = ProfileRecord.load(run / "train" / "profile.json")
    _data_path(host, "host", 80000.0, 0.03).save(run / "train" / "data-host.json")
    cpu = ProfileRecord.load(run / "compare" / "profile-cpu.json")
    _data_path(cpu, "host", 363.0, 0.02).save(run / "compare" / "profile-cpu.json")
    for batch, x in ((64, 300.0), (128, 400.0)):
        _sweep_point("cpu", "fp32", batch, x, batch * MIB).save(run / "sweep" / "cpu" / f"fp32-b{batch}.json")
    _compared("cuda", "bf16", 512, 41000.0, 42000.0, 0.3, 0.02).save(run / "sweep" / "cuda" / "bf16-b512.json")
    _server("cpu", "cnn_cpu", 600.0, 12.0, 3.0).save(run / "load" / "embedded-cpu-server.json")
    _server("cpu", "cnn_cpu_nobatch", 300.0, 9.5).save(run / "load" / "embedded-cpu-server-nobatch.json")
    _server("cuda", "cnn_gpu", 36000.0, 14.0, 36.0).save(run / "load" / "embedded-cuda-server.json")
    _server("cuda", "cnn_gpu_nobatch", 4000.0, 6.0).save(run / "load" / "embedded-cuda-server-nobatch.json")
    _shared("cuda", "cnn_gpu", 3200.0, 0.01, 2.5).save(run / "load" / "embedded-cuda-shared-rate.json")
    _shared("cuda", "cnn_gpu_nobatch", 3200.0, 0.02, 7.25).save(run / "load" / "embedded-cuda-shared-rate-nobatch.json")
    return run


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> tuple[dict, Path]:
    html = build_report(_answered_run(tmp_path_factory.mktemp("answers")))
    return json.loads((html.parent / "summary.json").read_text()), html


def test_every_question_has_one_answer_in_the_readmes_order(answered):
    s, _ = answered
    assert [a["id"] for a in s["answers"]] == [q.id for q in QUESTIONS]
    assert [a["question"] for a in s["answers"]] == [q.readme for q in QUESTIONS]


def test_each_measured_question_is_answered_with_its_figure_and_link(answered):
    s, html = answered
    a = {x["id"]: x for x in s["answers"]}
    assert all(a[q]["measured"] for q in a if q != "scaling"), [x["text"] for x in a.values() if not x["measured"]]
    assert "9.0x the samples/s saturated (150,000 vs 16,600)" in a["infer_speedup"]["text"]
    assert "dynamic batching carries 9.0x the requests/s" in a["dynamic_batching"]["text"]
    assert "+8.00 ms p99" in a["dynamic_batching"]["text"] and "CPU: dynamic batching carries 2.0x" in \
        a["dynamic_batching"]["text"]
    assert a["dynamic_batching"]["link"] == "#batching-cnn"
    assert "At 3,200 req/s offered to both (0.8 x the lower of the two Server capacities, open loop for 10 s each): " \
           "batching p99 2.50 ms (p50 0.01 ms), without batching p99 7.25 ms (p50 0.02 ms)" in a["dynamic_batching"]["text"]
    assert "At one shared rate: not measured in this run: no load offered both variants one rate; `trainserve load " \
           "--model cnn_cpu --rate R --duration 10s`, and the same on cnn_cpu_nobatch, measures it" in \
           a["dynamic_batching"]["text"]
    assert "Released: yes" in a["gpu_release"]["text"] and "600 MiB used before" in a["gpu_release"]["text"]
    data = a["data_path"]["text"]
    assert "GPU, at the sweep's best batch (512, bf16): the host DataLoader (pinned memory, non_blocking copies, " \
           "4 workers) feeds 41,000 samples/s, 0.30 ms of host data time per step (2% of step time), the data " \
           "resident on the GPU 42,000 samples/s — host at 0.98x of device: the data path does not limit " \
           "training" in data
    assert data.index("GPU, at") < data.index("CPU: host placement at batch 512") and "not input-bound" in data and "not measured" not in data
    assert "training fits batch 4,096" in a["max_batch"]["text"]
    assert "best at batch 128 fp32" in a["batch_precision"]["text"]
    page = html.read_text()
    for anchor in ("answers", "batching-cnn", "data-path-cnn", "max-batch-cnn", "sweep-cnn"):
        assert f"id='{anchor}'" in page, anchor
    md = (html.parent / "report.md").read_text()
    assert md.index("## Answers") < md.index("## Summary")
    assert "released: 0 B held (before 600 MiB, peak 2.93 GiB, after exit 590 MiB)" in page
    assert "590 MiB used once it had exited" in a["gpu_release"]["text"]


def test_a_question_without_records_says_not_measured_why_and_how(answered):
    s, html = answered
    scaling = next(a for a in s["answers"] if a["id"] == "scaling")
    assert not scaling["measured"] and scaling["text"].startswith("not measured in this run: ")
    assert "--nproc" in scaling["command"]
    assert "--nproc" in (html.parent / "report.md").read_text()


def test_batching_off_records_stay_out_of_the_served_figures(answered):
    s, html = answered
    # the shared-rate loads are batch 1 at one user's worth of concurrency, yet never the batch-1 column
    assert s["models"]["cnn"]["infer"]["onnxruntime"]["cuda"]["batch1"]["source"] != "load/embedded-cuda-shared-rate.json"
    assert "0.01 ms / 2.50 ms at 3,200 req/s" in html.read_text()
    server = s["scenarios"]["models"]["cnn"]["cpu"]["Server"]
    assert server["source"] == "load/embedded-cpu-server.json"  # not the batching-off search, though newer
    assert "cnn_nobatch" not in s["models"] and "cnn_cpu_nobatch" not in s["models"]


def test_a_cpu_only_run_says_what_it_did_not_measure(tmp_path):
    html = build_report(make_run(tmp_path, gpu=False))
    a = {x["id"]: x for x in json.loads((html.parent / "summary.json").read_text())["answers"]}
    for q in ("train_speedup", "gpu_release", "dynamic_batching", "max_batch"):
        assert not a[q]["measured"] and a[q]["command"], q
    assert "no GPU" in a["train_speedup"]["text"]


def test_the_data_path_says_when_it_limits_training_and_what_it_did_not_measure(tmp_path):
    run = make_run(tmp_path, gpu=False)
    _compared("cpu", "fp32", 1024, 2000.0, 3000.0, 154.0, 0.3).save(run / "sweep" / "cpu" / "fp32-b1024.json")
    html = build_report(run)
    a = {x["id"]: x for x in json.loads((html.parent / "summary.json").read_text())["answers"]}["data_path"]
    assert a["measured"] and "the host DataLoader (no copy: the host is the device, 0 workers) feeds 2,000" in a["text"]
    assert "as pre-materialised tensors 3,000 samples/s — host at 0.67x of device: the data path limits training " \
           "(it costs 33% of the samples/s; its steps waited 153.95 ms longer for their batches)" in a["text"]
    assert "GPU: not measured in this run: no GPU in this run; `trainserve compare --sweep --device cuda`" in a["text"]
    assert "host DataLoader (sweep's best point, 0 workers)" in (html.parent / "report.md").read_text()


def test_a_skipped_comparison_says_why(tmp_path):
    run = make_run(tmp_path)
    r = _sweep_point("cuda", "bf16", 512, 42000.0, 512 * MIB)
    r.extra["data_path"] = {"device": "cuda", "batch_size": 512, "precision": "bf16",
                            "skipped": "would exceed the sweep's time budget (needs ~9.0 s, 2.0 s left)"}
    r.save(run / "sweep" / "cuda" / "bf16-b512.json")
    html = build_report(run)
    a = {x["id"]: x for x in json.loads((html.parent / "summary.json").read_text())["answers"]}["data_path"]
    assert "GPU host-vs-device comparison: not measured in this run: would exceed the sweep's time budget" in a["text"]


@pytest.mark.parametrize("host, device, share, verdict", [
    # a small model whose loader cannot keep its steps fed, and a larger one it keeps up with (4 workers, pinned)
    (119806.0, 430246.0, 0.84, "host at 0.28x of device: the data path limits training (it costs 72% of the "
                               "samples/s; its steps waited 28.75 ms longer for their batches)"),
    # a quarter of the step waiting on the host, yet no slower: the wait absorbed GPU work queued ahead
    (68801.0, 68733.0, 0.25, "host at 1.0x of device: the data path does not limit training"),
    # a CPU run on 2 cores busy with other work: host-fed steps slower, but not for want of batches
    (131.0, 442.0, 0.015, "host at 0.30x of device: not the data path, though: the host-fed steps took"),
])
def test_the_gpu_verdict_rests_on_the_samples_s_ratio(tmp_path, host, device, share, verdict):
    run = make_run(tmp_path)
    wait = 28.8 if share > 0.5 else 1.8  # ms per step; the resident side waits 0.05 ms
    _compared("cuda", "bf16", 4096, host, device, wait, share).save(run / "sweep" / "cuda" / "bf16-b4096.json")
    html = build_report(run)
    a = {x["id"]: x for x in json.loads((html.parent / "summary.json").read_text())["answers"]}["data_path"]
    assert verdict in a["text"] and "GPU: not measured" not in a["text"]
