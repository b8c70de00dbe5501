"""The analytic memory estimate and the measured breakdown's consistency."""

from __future__ import annotations

import pytest

from trainserve.train.memory import analytic_estimate, breakdown_from_measurements, fill_memory
from trainserve.core.profile import Memory

N = 1_000_000


def test_fp32_adamw_is_16_bytes_per_param():
    e = analytic_estimate(N, "fp32", "adamw")
    assert e["bytes_per_param"]["total"] == 16
    assert (e["weights_bytes"], e["gradients_bytes"], e["optimizer_bytes"], e["master_weights_bytes"]) == (
        4 * N, 4 * N, 8 * N, 0)
    assert e["total_bytes"] == 16 * N
    assert e["total_bytes"] == e["weights_bytes"] + e["gradients_bytes"] + e["optimizer_bytes"] + e["master_weights_bytes"]
    assert "activations not included" in e["note"]


def test_sgd_momentum_and_half_weights_with_master_copy():
    assert analytic_estimate(N, "fp32", "sgd")["total_bytes"] == 12 * N
    autocast = analytic_estimate(N, "bf16", "adamw")
    assert autocast["total_bytes"] == 16 * N and autocast["master_weights_bytes"] == 0
    half = analytic_estimate(N, "bf16", "adamw", autocast=False)
    assert half["bytes_per_param"] == {"weights": 2, "gradients": 2, "optimizer_state": 8,
                                       "master_weights": 4, "total": 16}
    assert "master" in half["note"]


@pytest.mark.parametrize(("args", "match"), [((-1, "fp32"), "n_params"), ((N, "int8"), "precision"),
                                             ((N, "fp32", "lion"), "optimizer")])
def test_estimate_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        analytic_estimate(*args)


def test_breakdown_sums_to_peak():
    mib = 2**20
    b = breakdown_from_measurements(weights=16 * mib, after_backward=32 * mib, after_step=64 * mib,
                                    peak=200 * mib, reserved=256 * mib)
    assert b["weights_bytes"] == 16 * mib
    assert b["gradients_bytes"] == 16 * mib
    assert b["optimizer_bytes"] == 32 * mib
    assert b["activations_bytes"] == 136 * mib
    assert b["sum_bytes"] == b["peak_bytes"] == 200 * mib
    assert b["consistent"] is True and b["notes"] == []
    m = Memory()
    fill_memory(m, b)
    assert (m.weights_bytes, m.activations_bytes, m.cuda_reserved_peak_bytes) == (16 * mib, 136 * mib, 256 * mib)
    assert m.peak_bytes == 200 * mib


def test_breakdown_never_negative_and_flags_inconsistency():
    b = breakdown_from_measurements(weights=100, after_backward=90, after_step=300, peak=250)
    assert b["gradients_bytes"] == 0 and b["optimizer_bytes"] == 210 and b["activations_bytes"] == 0
    assert b["consistent"] is False and len(b["notes"]) == 2
    with pytest.raises(ValueError, match="peak"):
        breakdown_from_measurements(1, 2, 3, -1)


def test_cuda_tracker_parts_are_tensor_sizes_and_sum_to_the_peak(monkeypatch):
    """The CUDA path of MemoryTracker without a GPU: the allocator's counters are faked."""
    import torch

    from trainserve.train.memory import MemoryTracker
    from trainserve.core.profile import Memory

    mib = 2**20
    allocated = {"now": 10 * mib}  # 10 MiB resident before the run (e.g. the data split)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 10 * mib + 200 * mib)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 256 * mib)
    t = MemoryTracker("cuda")
    t.weights, t.gradients, t.optimizer = 16 * mib, 16 * mib, 32 * mib
    for name, live in (("weights", 16), ("after_backward", 16 + 16 + 6), ("after_step", 64 + 6)):
        allocated["now"] = 10 * mib + live * mib  # 6 MiB of batches and logits live at the first step
        t.moment(name)
    m = Memory()
    info = t.fill(m)
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == (16 * mib, 16 * mib, 32 * mib)
    assert m.activations_bytes == 200 * mib - 64 * mib and m.peak_bytes == 200 * mib
    parts = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes
    assert abs(parts - m.peak_bytes) <= 0.05 * m.peak_bytes and info["consistent"] is True
    assert info["other_live_at_moments_bytes"] == {"weights": 0, "after_backward": 6 * mib, "after_step": 6 * mib}


def _cpu_memory(tmp_path, batch: int) -> dict:
    from trainserve.train.config import TrainConfig
    from trainserve.train.loop import fit

    cfg = TrainConfig(device="cpu", model="cnn", samples=4 * batch, batch_size=batch, steps=3, warmup_steps=2)
    r = fit(cfg, tmp_path / f"b{batch}")
    return r.record.memory, r.record.extra


def test_cpu_training_memory_counts_activations_and_grows_with_the_batch(tmp_path):
    small, extra = _cpu_memory(tmp_path, 4)
    big, _ = _cpu_memory(tmp_path, 64)
    assert extra["memory_breakdown"]["source"] == "torch_profiler_cpu_memory_and_tensor_sizes", extra
    for m in (small, big):
        parts = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes + m.activations_bytes
        assert m.activations_bytes > 0 and parts == m.peak_bytes
    # the model's parts do not depend on the batch; its activations do (16x the rows: several times the bytes)
    assert (big.weights_bytes, big.gradients_bytes, big.optimizer_bytes) == (
        small.weights_bytes, small.gradients_bytes, small.optimizer_bytes)
    assert big.activations_bytes > 4 * small.activations_bytes
    assert big.peak_bytes > small.peak_bytes
    assert big.rss_peak_bytes > 0  # the process total stays beside the working set
