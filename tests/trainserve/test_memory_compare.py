"""Memory like with like: training's and inference's working sets at one batch size, their process totals,
and a ratio only between two figures of one kind — in summary.json and in the report's sentences."""

from __future__ import annotations

import json
import re

import pytest

from trainserve.core.profile import LatencyStats, ProfileRecord
from trainserve.report import build_report

MiB = 1 << 20
HOST = {"hostname": "bench", "logical_cpus": 4}


def _train(device: str, source: str, peak: int, rss: int, gpu_used: int | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="train", model="cnn", backend="torch", device=device, batch_size=64, precision="fp32",
                      host=HOST)
    r.speed.throughput_samples_s = 1000.0
    m = r.memory
    m.weights_bytes, m.gradients_bytes, m.optimizer_bytes = 4 * MiB, 4 * MiB, 8 * MiB
    m.activations_bytes, m.peak_bytes, m.rss_peak_bytes = peak - 16 * MiB, peak, rss
    r.utilization.gpu_mem_used_max_bytes = gpu_used
    r.extra = {"memory_breakdown": {"source": source}}
    return r


def _served(device: str, rss: int, gpu_used: int | None = None) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model=f"cnn_{'gpu' if device == 'cuda' else 'cpu'}", backend="onnxruntime",
                      device=device, batch_size=64, concurrency=4, host=HOST)
    r.speed.throughput_samples_s = 5000.0
    r.speed.latency = LatencyStats(count=100, p50_ms=2.0, p99_ms=4.0)
    r.memory.rss_peak_bytes = r.memory.peak_bytes = rss
    r.utilization.gpu_mem_used_max_bytes = gpu_used
    return r


def _limit(device: str, batch: int, working_set: int) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model=f"cnn_{'gpu' if device == 'cuda' else 'cpu'}", backend="onnxruntime",
                      device=device, batch_size=batch, concurrency=1, target="in-process/cnn", host=HOST)
    r.speed.throughput_samples_s = 8000.0
    r.speed.latency = LatencyStats(count=50, p50_ms=1.0, p99_ms=1.5)
    r.memory.peak_bytes = working_set
    r.extra = {"limit": True, "sweep": "batch", "working_set": {"bytes": working_set, "how": "session delta: test"}}
    return r


@pytest.fixture
def summary(tmp_path) -> dict:
    run = tmp_path / "m1"
    _train("cpu", "torch_profiler_cpu_memory_and_tensor_sizes", 96 * MiB, 900 * MiB).save(run / "train" / "profile.json")
    _served("cpu", 300 * MiB).save(run / "load" / "cpu-sat.json")
    _limit("cpu", 64, 24 * MiB).save(run / "limits" / "cpu" / "cnn_cpu" / "b64-t4.json")
    _limit("cpu", 32, 20 * MiB).save(run / "limits" / "cpu" / "cnn_cpu" / "b32-t4.json")
    # the GPU: a record from before the working set was counted on its side is not set against inference's
    _train("cuda", "rss_growth_and_tensor_sizes", 400 * MiB, 2000 * MiB, gpu_used=2 << 30).save(
        run / "compare" / "profile-cuda.json")
    _served("cuda", 1500 * MiB, gpu_used=1 << 30).save(run / "load" / "gpu-sat.json")
    return json.loads((build_report(run).parent / "summary.json").read_text())


def test_working_sets_at_one_batch_and_process_totals_are_compared_kind_by_kind(summary):
    cpu = summary["models"]["cnn"]["memory_compare"]["cpu"]
    assert cpu["train"]["working_set"]["bytes"] == 96 * MiB and cpu["train"]["working_set"]["batch_size"] == 64
    # inference's working set at the training batch (64), not at another batch the limits measured
    assert cpu["infer"]["working_set"]["bytes"] == 24 * MiB and cpu["infer"]["working_set"]["batch_size"] == 64
    assert cpu["train"]["process_total"]["bytes"] == 900 * MiB and cpu["infer"]["process_total"]["bytes"] == 300 * MiB
    assert cpu["ratios"] == {"working_set": pytest.approx(4.0), "process_total": pytest.approx(3.0)}
    gpu = summary["models"]["cnn"]["memory_compare"]["cuda"]
    assert gpu["train"]["working_set"] is None and "re-run training" in gpu["notes"][0]
    assert gpu["ratios"] == {"working_set": None, "process_total": pytest.approx(2.0)}  # NVML on both sides


def test_every_memory_ratio_in_the_report_is_between_figures_of_one_kind(summary):
    for d, c in summary["models"]["cnn"]["memory_compare"].items():
        for kind, r in c["ratios"].items():
            t, i = c["train"][kind], c["infer"][kind]
            if r is not None:
                assert t["kind"] == i["kind"] == kind and r == pytest.approx(t["bytes"] / i["bytes"]), (d, kind)
    # no other memory ratio anywhere in summary.json
    flat = json.dumps(summary)
    assert "memory_ratio" not in flat
    # every sentence that compares memory names one kind and states both figures of it
    memory_lines = [c for c in summary["conclusions"] if "as much for training" in c]
    assert len(memory_lines) == 3
    for line in memory_lines:
        assert re.search(r"(working set at batch \d+|process total): training .* inference .* as much for training",
                         line), line


def test_the_schema_describes_memory_compare(summary):
    from tests.trainserve.test_summary_schema import _errors

    assert _errors(summary) == []


def test_a_training_batch_beyond_the_served_batches_is_probed_and_compared(tmp_path):
    from tests.loadtest.tiny_repo import build_repository
    from trainserve.serve.model import inprocess_limits as limits

    build_repository(tmp_path / "repo")  # max_batch_size 16; training ran at 64
    [result] = limits.measure_repository(tmp_path / "repo", limits.LimitsConfig(
        budget_s=1.0, max_threads=1, points="served", working_set_batch=64))
    assert set(result.working_set) == {1, 2, 4, 8, 16, 64} and result.working_set_how.startswith("session delta")
    result.model = "cnn_cpu"
    run = tmp_path / "m2"
    limits.save(result, run / "limits")
    _train("cpu", "torch_profiler_cpu_memory_and_tensor_sizes", 96 * MiB, 900 * MiB).save(run / "train" / "profile.json")
    _served("cpu", 300 * MiB).save(run / "load" / "cpu-sat.json")
    s = json.loads((build_report(run).parent / "summary.json").read_text())
    cpu = s["models"]["cnn"]["memory_compare"]["cpu"]
    assert cpu["infer"]["working_set"]["batch_size"] == 64 and cpu["infer"]["working_set"]["bytes"] == result.working_set[64]
    assert cpu["ratios"]["working_set"] is not None


def test_a_gpu_without_per_process_memory_falls_back_to_the_device_s(monkeypatch):
    from trainserve.serve.model import working_set as ws

    used = iter([1000, 1400, 1900])  # baseline, after batch 1, after batch 2
    monkeypatch.setattr(ws, "process_bytes", lambda device, device_id=0: None)  # NVML lists no process here
    monkeypatch.setattr(ws, "device_bytes", lambda device_id=0: next(used))

    class Session:
        def get_outputs(self):
            return []

        def run(self, outputs, feed):
            return []

    got, how = ws.measure_working_set(Session, {1: {}, 2: {}}, "cuda")
    assert got == {1: 400, 2: 900} and how == ws.HOW_DEVICE_WIDE
