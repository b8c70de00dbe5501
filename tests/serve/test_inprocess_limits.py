"""In-process limits (serve/model/inprocess_limits.py, `trainserve limits`) on tiny repositories: records, summary, budget, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docpaths import assert_documented_artifacts
from trainserve.serve.model import inprocess_limits as limits
from trainserve.serve.model.inprocess_limits import LimitsConfig, measure_repository
from tests.conftest import REPO_ROOT, subprocess_env
from tests.loadtest.tiny_repo import build_repository
from tests.serve.tiny_models import int64_onnx
from trainserve.cli import app
from trainserve.core.errors import UserError

SUMMARY_KEYS = {"batch1_p50_ms", "batch1_threads", "best_batch", "best_throughput_samples_s"}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """runs/r1/model_repository/tiny_cpu (FP32 (B, 4) -> (B, 3), max_batch_size 16), as export would write it."""
    build_repository(tmp_path / "r1" / "model_repository")
    return tmp_path / "r1"


def test_limits_write_a_record_per_point_and_a_summary(run_dir):
    result = CliRunner().invoke(app, ["limits", "--run", "r1", "--runs-dir", str(run_dir.parent), "--budget-s", "2",
                                      "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "tiny_cpu cpu threads batch    1 · 1 thread(s)" in result.output  # progress, one line per point
    out = run_dir / "limits" / "cpu" / "tiny_cpu"
    assert_documented_artifacts("limits", run_dir)
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    records = [json.loads(p.read_text()) for p in sorted(out.glob("b*.json"))]
    assert len(records) == summary["points"] >= 3
    for r in records:
        assert (r["phase"], r["backend"], r["device"], r["target"]) == ("infer", "onnxruntime", "cpu", "in-process/tiny_cpu")
        assert r["extra"]["limit"] is True and r["settings"]["intra_op_threads"] >= 1
        assert r["validity"]["warmup_excluded"] >= limits.WARMUP_RUNS and r["speed"]["latency"]["count"] >= 1
        assert r["speed"]["latency"]["p50_ms"] > 0 and r["speed"]["throughput_samples_s"] > 0
    batch1 = [r for r in records if r["batch_size"] == 1]
    assert {r["extra"]["sweep"] for r in batch1} == {"threads"}
    assert summary["batch1_p50_ms"] == min(r["speed"]["latency"]["p50_ms"] for r in batch1)
    assert summary["batch1_threads"] in {r["settings"]["intra_op_threads"] for r in batch1}
    # every power of two up to max_batch_size 16, and the best samples/s is at least batch 1's
    assert {r["batch_size"] for r in records} == {1, 2, 4, 8, 16}
    assert summary["best_throughput_samples_s"] >= max(r["speed"]["throughput_samples_s"] for r in batch1)
    assert summary["best_batch"] in {1, 2, 4, 8, 16}
    # the model's working set at every batch, on the summary and on each point's record
    assert set(summary["working_set_bytes"]) == {"1", "2", "4", "8", "16"}
    for r in records:
        assert r["memory"]["peak_bytes"] == summary["working_set_bytes"][str(r["batch_size"])] >= 0
        assert r["extra"]["working_set"]["how"].startswith("session delta")


def test_the_budget_bounds_the_measurement(run_dir, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RUNS", 10**9)  # only the budget stops each point
    t0 = time.perf_counter()
    [result] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=1.0, max_threads=2))
    elapsed = time.perf_counter() - t0
    # Spent, not cut short: the last point runs until the deadline, so the measurement takes the whole budget.
    # Bounded: past the deadline only the run in flight and the bookkeeping remain, well under the budget
    # again even on a loaded machine; without the budget 10^9 runs per point would take hours.
    assert elapsed >= 1.0 and result.elapsed_s <= elapsed
    # (result.elapsed_s leaves out the working-set probe, which runs before the budget starts)
    assert result.elapsed_s < 2 * 1.0 + max(max(p.latencies_ms) for p in result.points) / 1e3, f"{elapsed:.2f} s"
    assert len(result.points) == 2 + 1 + 2 + 3  # batch 1 at 1, 2 threads (+ spinning at 2), batch 16 at 1, 2; 2..8
    # every point measured; none had the 3 windows of 0.1 s a stable figure needs in its eighth of a second
    assert not any("ran out" in w for w in result.warnings)
    assert not any(p.stable for p in result.points) and "did not stabilise" in result.warnings[-1]

    # a budget too small for every point: at least one point, and a warning naming what was left out
    [tight] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=0.001, max_threads=2))
    assert 1 <= len(tight.points) < 8 and tight.warnings and "raise --budget-s" in tight.warnings[0]
    assert tight.summary()["batch1_p50_ms"] > 0


def test_variable_dims_and_models_without_suffix(tmp_path):
    int64_onnx(tmp_path / "ints" / "1" / "model.onnx")  # INT64 (B, S), no config.pbtxt: max_batch_size auto 4
    [result] = measure_repository(tmp_path, LimitsConfig(budget_s=0.5, max_threads=1))
    assert result.model == "ints" and {p.batch for p in result.points} == {1, 2, 4}


def test_thread_counts_go_up_to_the_cores():
    assert LimitsConfig(max_threads=1).thread_counts() == [1]
    assert LimitsConfig(max_threads=6).thread_counts() == [1, 2, 4, 6]
    assert LimitsConfig(max_threads=16).thread_counts() == [1, 2, 4, 8, 16]


@pytest.mark.parametrize("args, message", [
    (["--run", "nope"], "run 'nope' not found"),
    (["--run", "bare"], "has no model repository"),
    (["--run", "r1", "--budget-s", "0"], "--budget-s 0.0 is invalid"),
    (["--run", "r1", "--budget-s", "-3"], "--budget-s -3.0 is invalid"),
    (["--run", "r1", "--model", "other"], "model 'other' is not in"),
    (["--run", "r1", "--device", "cuda"], None),  # no CUDA provider here; with one, no *_gpu model
])
def test_bad_input_is_one_sentence(run_dir, args, message):
    (run_dir.parent / "bare").mkdir()
    result = CliRunner().invoke(app, ["limits", "--runs-dir", str(run_dir.parent), *args])
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output
    if message is None:
        assert "cuda" in lines[0].lower()
    else:
        assert message in lines[0]
    assert not (run_dir / "limits").exists()


def test_a_device_not_among_the_choices_is_refused_by_the_command_line(run_dir):
    result = CliRunner().invoke(app, ["limits", "--runs-dir", str(run_dir.parent), "--run", "r1", "--device", "tpu"])
    assert result.exit_code == 2  # typer's usage error, listing the choices
    text = " ".join(result.output.replace("│", " ").split())  # unwrapped from its box
    assert "'tpu' is not one of 'cpu', 'cuda'" in text and "Traceback" not in text
    assert not (run_dir / "limits").exists()


def test_cuda_without_a_gpu_is_refused_before_onnxruntime_tries(monkeypatch):
    monkeypatch.setattr(limits, "cuda_device_count", lambda: 0)  # what a machine without a GPU or driver reports
    with pytest.raises(UserError, match="--device cuda needs (an NVIDIA GPU|onnxruntime's CUDA execution provider)"):
        limits.check_device("cuda")
    limits.check_device("cpu")  # nothing to check


def test_limits_never_import_torch(run_dir):
    code = ("import sys; from pathlib import Path; from serve.model.inprocess_limits import LimitsConfig, measure_repository, save; "
            f"[r] = measure_repository(Path({str(run_dir / 'model_repository')!r}), LimitsConfig(budget_s=0.2, max_threads=1)); "
            f"save(r, Path({str(run_dir / 'limits')!r})); assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=subprocess_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


def test_several_instances_are_also_timed_at_once(run_dir):
    cfg = run_dir / "model_repository" / "tiny_cpu" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1 kind: KIND_CPU", "count: 2 kind: KIND_CPU"))
    [result] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=2.0, max_threads=2))
    [both] = [p for p in result.points if p.sweep == "instances"]
    assert (both.instances, both.batch, both.threads) == (2, 16, 1)  # 2 sessions of cores / 2 threads, largest batch
    assert len(both.latencies_ms) >= 2 * limits.MIN_RUNS
    # samples/s over the wall-clock window of both sessions: what the served layout can reach at most
    assert both.throughput_samples_s == pytest.approx(16 * len(both.latencies_ms) / both.window_s)
    records = dict(limits.records(result))
    assert records["b16-t1-x2.json"].settings["instances"] == 2 and records["b16-t1-x2.json"].concurrency == 2
    assert result.summary()["best_instances"] in (1, 2)


def test_the_instances_point_keeps_its_share_of_a_short_budget(run_dir, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RUNS", 10**9)  # every point runs for its whole share, as a slow model's does
    cfg = run_dir / "model_repository" / "tiny_cpu" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1 kind: KIND_CPU", "count: 2 kind: KIND_CPU"))
    [result] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=0.8, max_threads=2))
    assert [p.instances for p in result.points if p.sweep == "instances"] == [2]
    assert not any("instances at once" in w for w in result.warnings)


def test_a_point_ends_once_its_windows_agree_and_records_them(run_dir, monkeypatch):
    monkeypatch.setattr(limits, "TOLERANCE", 0.99)  # any windows agree: each point stops after its first three
    [result] = measure_repository(run_dir / "model_repository",
                                  LimitsConfig(budget_s=30.0, max_threads=1, points="served"))
    assert result.elapsed_s < 15  # 3 windows of at most 1 s per point, not its share of 30 s
    for p in result.points:
        assert p.stable and len(p.windows_samples_s) == limits.CONSECUTIVE and p.spread is not None
    records = dict(limits.records(result))
    r = next(iter(records.values()))
    assert r.extra["stable"] is True and len(r.extra["windows_samples_s"]) == 3 and r.extra["spread"] >= 0
    assert not any("did not stabilise" in w for w in result.warnings)

    monkeypatch.setattr(limits, "TOLERANCE", 0.0)  # no windows ever agree: each point takes its whole share
    [slow] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=2.0, max_threads=1,
                                                                           points="served"))
    assert slow.elapsed_s >= 2.0 * 0.9 and not any(p.stable for p in slow.points)
    assert "did not stabilise" in slow.warnings[-1]


def test_windows_agree_by_the_load_figures_rule():
    assert limits.agree([100.0, 105.0, 95.0]) and limits.agree([1.0, 500.0, 100.0, 105.0, 95.0])
    assert not limits.agree([100.0, 130.0, 95.0]) and not limits.agree([100.0, 100.0])
    p = limits.Point("layout", 16, 1, False, [1.0], 3, 1.0, windows_samples_s=[90.0, 100.0, 110.0])
    assert p.spread == pytest.approx(0.1)


def test_served_points_measure_what_the_server_runs_and_name_the_rest(run_dir):
    [one] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=3.0, max_threads=2, points="served"))
    # one instance on both cores: batch 1 at 2 threads and at 1 (the server's small-batch session), batch 16 at 2
    assert sorted((p.sweep, p.batch, p.threads, p.instances) for p in one.points) == \
        [("layout", 16, 2, 1), ("threads", 1, 1, 1), ("threads", 1, 2, 1)]
    assert not any(p.spinning for p in one.points)
    assert any("spinning" in s and "--points all" in s for s in one.skipped)
    assert any("batches 2, 4, 8" in s for s in one.skipped)
    assert one.summary()["skipped"] == one.skipped

    cfg = run_dir / "model_repository" / "tiny_cpu" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("count: 1 kind: KIND_CPU", "count: 2 kind: KIND_CPU"))
    [two] = measure_repository(run_dir / "model_repository", LimitsConfig(budget_s=3.0, max_threads=2, points="served"))
    # two instances of one thread each: the largest batch on both at once, as the server runs it
    assert sorted((p.sweep, p.batch, p.threads, p.instances) for p in two.points) == \
        [("instances", 16, 1, 2), ("threads", 1, 1, 1)]
    assert two.points[-1].windows_samples_s and two.summary()["best_instances"] == 2 or \
        two.summary()["best_batch"] == 1


def test_points_outside_the_choices_are_refused():
    with pytest.raises(UserError, match="--points 'some' is invalid; choose one of all, served"):
        LimitsConfig(points="some")
