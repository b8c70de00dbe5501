"""The training sweep on the tiny model: batch sizes, the best point, the budget, the files."""

from __future__ import annotations

import json

import pytest

from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord
from trainserve.train.config import TrainConfig
import trainserve.train.sweep as sw

BASE = TrainConfig(model="mlp", preset="tiny", samples=256)
FAST = dict(warmup_steps=1, timed_steps=3, min_batch=4, precisions=("fp32",))


def test_sweep_measures_batches_and_picks_the_fastest(tmp_path):
    seen = []
    result = sw.sweep(BASE, "cpu", sw.SweepConfig(budget_s=60, max_batch=16, patience=9, **FAST), on_point=seen.append)
    assert [p.batch_size for p in result.points] == [4, 8, 16] == [p.batch_size for p in seen]
    assert all(p.status == "measured" for p in result.points)
    best = result.best
    assert best.record.speed.throughput_samples_s == max(p.record.speed.throughput_samples_s for p in result.points)
    rec = best.record
    assert rec.phase == "train" and rec.extra["sweep"] is True and rec.extra["sweep_point"]["batch_size"] == best.batch_size
    assert rec.validity.warmup_excluded == 1 and rec.speed.latency.count == 3 and rec.memory.peak_bytes is not None
    index = sw.write_sweep(result, tmp_path / "sweep" / "cpu")
    data = json.loads(index.read_text())
    assert data["best"]["batch_size"] == best.batch_size and data["best_by"] == "throughput_samples_s"
    assert len(data["points"]) == 3 and "schema_version" not in data  # the index is not a profile record
    loaded = ProfileRecord.load(tmp_path / "sweep" / "cpu" / "fp32-b8.json")
    assert loaded.extra["sweep"] is True and loaded.batch_size == 8


def test_a_point_that_would_overrun_the_budget_is_skipped_and_recorded(monkeypatch):
    real = sw.measure_point

    def slow(*args, **kwargs):  # each point "took" 6 s: the next (2x the batch) would need ~12 s of the 10
        point = real(*args, **kwargs)
        point.seconds = 6.0
        return point

    monkeypatch.setattr(sw, "measure_point", slow)
    result = sw.sweep(BASE, "cpu", sw.SweepConfig(budget_s=10, max_batch=64, patience=9, **FAST))
    assert [(p.batch_size, p.status) for p in result.points] == [(4, "measured"), (8, "skipped")]
    assert "would exceed the time budget" in result.points[1].reason
    assert result.elapsed_s <= 10


def test_throughput_that_stops_growing_ends_the_climb(monkeypatch):
    real = sw.measure_point

    def flat(*args, **kwargs):
        point = real(*args, **kwargs)
        point.record.speed.throughput_samples_s = 1000.0  # no growth from batch to batch
        return point

    monkeypatch.setattr(sw, "measure_point", flat)
    result = sw.sweep(BASE, "cpu", sw.SweepConfig(budget_s=60, max_batch=1024, patience=2, **FAST))
    assert [p.batch_size for p in result.points] == [4, 8, 16]  # min_points, then two flat points in a row
    assert result.best.batch_size == 4  # a tie goes to the smaller batch


@pytest.mark.parametrize("budget", [0, -1.0])
def test_bad_budget_is_refused(budget):
    with pytest.raises(UserError, match=rf"sweep budget_s={budget!r} is invalid"):
        sw.SweepConfig(budget_s=budget)


def test_cpu_points_count_their_working_set_and_it_grows_with_the_batch():
    config = sw.SweepConfig(budget_s=60, max_batch=64, patience=9, warmup_steps=2, timed_steps=2, min_batch=8,
                            precisions=("fp32",))
    result = sw.sweep(TrainConfig(model="cnn", preset="tiny", samples=256), "cpu", config)
    peaks = {}
    for p in result.measured:
        m = p.record.memory
        assert p.record.extra["memory_breakdown"]["source"] == "torch_profiler_cpu_memory_and_tensor_sizes"
        parts = [m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes]
        assert all(x is not None for x in parts) and m.activations_bytes > 0
        assert m.peak_bytes >= sum(parts) * 0.99  # the peak holds its parts (report/verdict/invariants.py checks it too)
        peaks[p.batch_size] = (m.peak_bytes, m.activations_bytes)
    batches = sorted(peaks)
    assert len(batches) >= 2 and peaks[batches[-1]][1] > peaks[batches[0]][1]  # activations grow with the batch
