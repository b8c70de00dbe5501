"""The memory frontier (train/frontier.py) on the CPU, with tiny transformers: the split adds up, checkpointing
lowers activations, a capacity stops a series, the fit predicts a point it did not see; and the sweep
(train/frontier_sweep.py) brackets each series' edge."""

from __future__ import annotations

import pytest

from trainserve.train.frontier import FrontierConfig, features, fit_series, measure_train
from trainserve.train.frontier_sweep import run_frontier

TINY = dict(seq_len=32, vocab_size=64, batch_size=16, infer_precisions=(), budget_s=60)


def test_split_adds_up_and_checkpointing_lowers_activations():
    cfg = FrontierConfig(sizes=(64,), **TINY)
    plain = measure_train(64, cfg, "fp32", checkpointing=False)
    ckpt = measure_train(64, cfg, "fp32", checkpointing=True)
    for m in (plain, ckpt):
        held = m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]
        assert held + max(m["activations_bytes"], m["step_temporaries_bytes"]) == m["peak_bytes"]
        assert m["activations_bytes"] > 0
        # AdamW: two fp32 moments per fp32 weight, and a scalar step count per tensor
        assert 2 * m["weights_bytes"] <= m["optimizer_bytes"] <= 2.01 * m["weights_bytes"]
    assert ckpt["weights_bytes"] == plain["weights_bytes"]
    assert ckpt["activations_bytes"] < plain["activations_bytes"]


def test_a_size_past_the_cap_is_recorded_and_the_next_is_not_tried():
    cfg = FrontierConfig(sizes=(32, 64, 96), train_precisions=("fp32",), checkpointing=(False,),
                         memory_cap_bytes=5_000_000, check_edge=False, **TINY)
    result = run_frontier(cfg)
    got = [(p.size, p.status) for p in result.points if p.source == "measured"]
    assert got == [(32, "fits"), (64, "does_not_fit")]
    assert "past the capacity" in result.points[1].note
    assert result.capacity_bytes == 5_000_000


def test_the_fit_predicts_a_measured_point_it_did_not_see():
    cfg = FrontierConfig(sizes=(32, 48, 64, 96), **TINY)
    rows = [(*features(s, cfg), measure_train(s, cfg, "fp32", False)["peak_bytes"]) for s in cfg.sizes]
    a, b, c, _ = fit_series(rows[:3], cfg.batch_size)  # 96 left out
    params, acts, measured = rows[3]
    predicted = a * params + b * cfg.batch_size * acts + c
    assert predicted == pytest.approx(measured, rel=0.15)


def test_the_optimizer_step_can_set_the_peak_while_checkpointing_still_lowers_activations():
    # a large vocabulary at a small batch: AdamW's temporaries over every gradient outweigh the activations,
    # so the peak is the step's and equal with and without checkpointing; the activations part still differs
    cfg = FrontierConfig(sizes=(64,), seq_len=128, vocab_size=8192, batch_size=8, infer_precisions=())
    plain = measure_train(64, cfg, "bf16", checkpointing=False)
    ckpt = measure_train(64, cfg, "bf16", checkpointing=True)
    assert plain["peak_phase"] == ckpt["peak_phase"] == "optimizer step"
    assert plain["peak_bytes"] == ckpt["peak_bytes"]
    assert ckpt["activations_bytes"] < plain["activations_bytes"]


def test_the_predicted_edge_is_measured_and_the_size_above_does_not_fit():
    cfg = FrontierConfig(sizes=(32, 48), train_precisions=("fp32",), checkpointing=(False,),
                         memory_cap_bytes=11_000_000, **TINY)
    result = run_frontier(cfg)
    (fit,) = result.fits
    assert fit.edge_size is not None and fit.edge_size > 48
    edge = next(p for p in result.points if p.size == fit.edge_size)
    assert edge.source == "edge_check" and edge.status == fit.edge_checked == "fits"
    assert edge.peak_bytes == fit.edge_measured_bytes <= 11_000_000
    assert edge.peak_bytes == pytest.approx(edge.predicted_bytes, rel=0.15)
    assert abs(fit.edge_error) <= 0.15
    above = next(p for p in result.points if p.size == fit.edge_above_size)
    assert above.size == fit.edge_size + 32 and above.status == fit.edge_above_checked == "does_not_fit"


def test_a_stable_series_jumps_to_its_edge_instead_of_walking_every_size():
    sizes = tuple(range(32, 32 * 12, 32))
    cfg = FrontierConfig(sizes=sizes, train_precisions=("fp32",), checkpointing=(False,),
                         memory_cap_bytes=40_000_000, **TINY)
    result = run_frontier(cfg)
    (fit,) = result.fits
    walked = [p.size for p in result.points if p.source == "measured"]
    assert len(walked) < len(sizes) and fit.edge_above_checked == "does_not_fit"
    assert fit.edge_measured_bytes <= 40_000_000 and abs(fit.edge_error) <= 0.15


def test_bad_sizes_are_one_sentence():
    from trainserve.core.errors import UserError

    with pytest.raises(UserError, match="sizes=.*ascending"):
        FrontierConfig(sizes=(64, 32))


def test_an_edge_far_past_the_measured_sizes_is_a_lower_bound_not_a_prediction():
    from trainserve.train.frontier import MAX_EXTRAPOLATION, features

    cfg = FrontierConfig(sizes=(32, 48), train_precisions=("fp32",), checkpointing=(False,),
                         memory_cap_bytes=50 * 2**30, check_edge=False, **TINY)
    (fit,) = run_frontier(cfg).fits
    largest = features(48, cfg)[0]
    assert fit.beyond and largest < fit.edge_params <= MAX_EXTRAPOLATION * largest


def test_the_record_carries_a_modelled_per_rank_sharded_series():
    cfg = FrontierConfig(sizes=(32, 48), train_precisions=("fp32",), checkpointing=(False, True), check_edge=False,
                         **TINY)
    points = run_frontier(cfg).points
    plain = {p.size: p for p in points if p.series == "train fp32"}
    sharded = {p.size: p for p in points if p.series == "train fp32 shard/2"}
    assert sharded.keys() == plain.keys() and not any(p.series == "train fp32 ckpt shard/2" for p in points)
    for size, p in sharded.items():
        assert p.source == "modelled" and p.ranks == 2
        assert p.optimizer_bytes == plain[size].optimizer_bytes // 2
        assert p.activations_bytes == plain[size].activations_bytes
        assert p.peak_bytes < plain[size].peak_bytes


def test_a_far_edge_is_reached_in_bounded_jumps_and_bracketed_by_a_real_out_of_memory(monkeypatch):
    # a synthetic device: 16 bytes a parameter plus activations, and a real out-of-memory 3% short of the
    # capacity (what a CUDA context costs), so the fit's edge is optimistic and the search must bisect
    import torch

    from trainserve.train import frontier, frontier_sweep

    cap = 2 * 2**30

    def fake(size, cfg, precision, checkpointing):
        params, acts = features(size, cfg)
        act = 4 * cfg.batch_size * acts + 2**20
        if 16 * params + act > 0.97 * cap:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return {"peak_bytes": 16 * params + act, "weights_bytes": 4 * params, "gradients_bytes": 4 * params,
                "optimizer_bytes": 8 * params, "activations_bytes": act, "step_temporaries_bytes": 0,
                "peak_phase": "forward/backward"}

    monkeypatch.setattr(frontier_sweep, "measure_train", fake)
    cfg = FrontierConfig(train_precisions=("fp32",), checkpointing=(False,), infer_precisions=(), memory_cap_bytes=cap,
                         budget_s=60)
    result = run_frontier(cfg)
    (fit,) = result.fits
    points = [p for p in result.points if p.series == "train fp32"]
    fitted = [p.params for p in points if p.status == "fits"]
    assert all(b <= frontier.MAX_EXTRAPOLATION * a for a, b in zip(fitted, fitted[1:]))  # no jump past the bound
    assert len(points) <= 4 + frontier.MAX_EDGE_STEPS and points[-1].source == "edge_check"
    assert fit.edge_checked == "fits" and fit.edge_above_checked == "does_not_fit"
    above = next(p for p in points if p.size == fit.edge_above_size)
    assert "out of memory" in above.note and above.peak_bytes is None
    assert fit.edge_above_size == fit.edge_size + frontier.EDGE_STEP
