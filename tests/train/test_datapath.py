"""The training data path on the CPU with a tiny model: the host DataLoader beside the split as tensors, run
by the sweep at its best point and written to that point's record and index.json."""

from __future__ import annotations

import json

import trainserve.train.sweep as sw
from trainserve.core.profile import ProfileRecord
from trainserve.train.config import TrainConfig
from trainserve.train.datapath import SPLIT_BATCHES, measure_data_path, split_rows

BASE = TrainConfig(model="mlp", preset="tiny", samples=256)


def test_both_sides_train_and_report_samples_s_and_host_data_time():
    result = measure_data_path(BASE, "cpu", 32, "fp32", warmup_steps=1, timed_steps=4)
    host, device = result.runs
    assert (host.placement, device.placement) == ("host", "device")
    assert host.timed_steps == device.timed_steps == 4
    assert host.samples_s > 0 and device.samples_s > 0 and host.data_wait_ms > 0
    assert 0 <= host.data_wait_share <= 1 and host.workers == 0 and host.pin_memory is False  # the run's CPU feed
    d = result.to_dict()
    assert d["host_over_device"] == host.samples_s / device.samples_s and d["rows"] == 32 * SPLIT_BATCHES


def test_a_cnn_crosses_epochs_when_the_split_is_shorter_than_the_steps():
    cnn = TrainConfig(model="cnn", preset="tiny", samples=256)
    result = measure_data_path(cnn, "cpu", 8, "fp32", warmup_steps=1, timed_steps=SPLIT_BATCHES + 2)
    assert [r.timed_steps for r in result.runs] == [SPLIT_BATCHES + 2] * 2


def test_the_split_is_capped_in_bytes_but_holds_a_batch():
    assert split_rows(64, 1000) == 64 * SPLIT_BATCHES
    assert split_rows(64, 2**30) == 64


def test_the_sweep_measures_it_at_its_best_point_and_writes_it(tmp_path):
    config = sw.SweepConfig(budget_s=60, max_batch=16, patience=9, warmup_steps=1, timed_steps=3, min_batch=8,
                            precisions=("fp32",))
    result = sw.sweep(BASE, "cpu", config)
    best = result.best
    assert result.data_path["batch_size"] == best.batch_size and len(result.data_path["runs"]) == 2
    sw.write_sweep(result, tmp_path)
    assert json.loads((tmp_path / "index.json").read_text())["data_path"]["host_over_device"] > 0
    saved = ProfileRecord.load(tmp_path / sw.file_name(best))
    assert saved.extra["data_path"]["runs"][0]["placement"] == "host"


def test_without_time_left_it_is_skipped_with_its_reason(monkeypatch):
    real = sw.measure_point

    def slow(*args, **kwargs):
        point = real(*args, **kwargs)
        point.seconds = 6.0  # both sides would need ~12 s of the 10
        return point

    monkeypatch.setattr(sw, "measure_point", slow)
    result = sw.sweep(BASE, "cpu", sw.SweepConfig(budget_s=10, max_batch=8, min_batch=8, warmup_steps=1,
                                                   timed_steps=3, precisions=("fp32",)))
    assert "would exceed the sweep's time budget" in result.data_path["skipped"]
    assert result.best.record.extra["data_path"]["skipped"]
