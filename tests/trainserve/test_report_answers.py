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


def _data_path(record: ProfileRecord, placement: str, throughput: float, wait: float) -> ProfileRecord:
    record.settings["data_placement"] = placement
    record.speed.throughput_samples_s = throughput
    record.extra["data_wait_share"] = wait
    record.validity.warnings = []
    return record


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
    _server("cpu", "cnn_cpu", 600.0, 12.0, 3.0).save(run / "load" / "embedded-cpu-server.json")
    _server("cpu", "cnn_cpu_nobatch", 300.0, 9.5).save(run / "load" / "embedded-cpu-server-nobatch.json")
    _server("cuda", "cnn_gpu", 36000.0, 14.0, 36.0).save(run / "load" / "embedded-cuda-server.json")
    _server("cuda", "cnn_gpu_nobatch", 4000.0, 6.0).save(run / "load" / "embedded-cuda-server-nobatch.json")
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
    assert "Released: yes" in a["gpu_release"]["text"] and "600 MiB used before" in a["gpu_release"]["text"]
    assert "not input-bound" in a["data_path"]["text"] and "1% of step time" in a["data_path"]["text"]
    assert "host placement runs at 0.82x" in a["data_path"]["text"]
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
    s, _ = answered
    server = s["scenarios"]["models"]["cnn"]["cpu"]["Server"]
    assert server["source"] == "load/embedded-cpu-server.json"  # not the batching-off search, though newer
    assert "cnn_nobatch" not in s["models"] and "cnn_cpu_nobatch" not in s["models"]


def test_a_cpu_only_run_says_what_it_did_not_measure(tmp_path):
    html = build_report(make_run(tmp_path, gpu=False))
    a = {x["id"]: x for x in json.loads((html.parent / "summary.json").read_text())["answers"]}
    for q in ("train_speedup", "gpu_release", "dynamic_batching", "max_batch"):
        assert not a[q]["measured"] and a[q]["command"], q
    assert "no GPU" in a["train_speedup"]["text"]
