import json

import pytest
import torch

from trainserve.train.config import TrainConfig
from trainserve.train.loop import fit


def _fit(tmp_path, name="r", resume=False, **kw):
    cfg = TrainConfig(**{"device": "cpu", "samples": 256, "batch_size": 32, "lr": 3e-3, "warmup_steps": 2, **kw})
    return fit(cfg, tmp_path / name, resume=resume)


@pytest.mark.parametrize("family,floor", [("mlp", 0.5), ("cnn", 0.25), ("transformer", 0.25)])
def test_tiny_presets_beat_chance_on_synthetic(tmp_path, family, floor):
    r = _fit(tmp_path, model=family, epochs=3)
    acc = [h["test_accuracy"] for h in r.history]
    assert acc[-1] >= floor, acc  # chance is 0.10
    assert r.history[-1]["train_loss"] < r.history[0]["train_loss"]


def test_digits_reaches_90_percent(tmp_path):
    r = _fit(tmp_path, model="mlp", dataset="digits", epochs=3, lr=1e-2)
    assert r.history[-1]["test_accuracy"] >= 0.90
    assert r.card.config["in_features"] == 64 and r.card.dataset == "digits"


def _weights(path):
    return torch.load(path / "checkpoint.pt", weights_only=True)["model"]


@pytest.mark.parametrize("family", ["mlp", "cnn"])
def test_resume_continues_exactly(tmp_path, family):
    kw = {"model": family, "samples": 64 if family == "cnn" else 256}
    _fit(tmp_path, "straight", epochs=2, **kw)
    _fit(tmp_path, "split", epochs=1, **kw)
    r = _fit(tmp_path, "split", resume=True, epochs=2, **kw)
    assert r.resumed_from_step == r.history[0]["step"]
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    h1 = json.loads((tmp_path / "straight/history.json").read_text())["epochs"]
    h2 = json.loads((tmp_path / "split/history.json").read_text())["epochs"]
    assert [e["train_loss"] for e in h1] == [e["train_loss"] for e in h2]


def test_resume_mid_epoch_with_steps(tmp_path):
    _fit(tmp_path, "straight", model="mlp", steps=13)
    _fit(tmp_path, "split", model="mlp", steps=5)  # stops inside epoch 1 (8 steps per epoch)
    _fit(tmp_path, "split", resume=True, model="mlp", steps=13)
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_profile_measures_steps_and_memory(tmp_path):
    r = _fit(tmp_path, model="mlp", epochs=1, warmup_steps=3)
    rec = r.record
    assert rec.phase == "train" and rec.backend == "torch" and rec.device == "cpu"
    assert rec.validity.warmup_excluded == 3 and rec.speed.latency.count == 8 - 3
    assert rec.validity.samples == 5 * 32
    assert rec.speed.throughput_samples_s > 0 and rec.speed.latency.p50_ms > 0
    lat = rec.speed.latency
    assert lat.min_ms <= lat.p50_ms <= lat.p90_ms <= lat.p99_ms <= lat.max_ms
    n_params = r.card.parameters
    assert rec.memory.weights_bytes == n_params * 4 and rec.memory.gradients_bytes == n_params * 4
    assert rec.memory.optimizer_bytes >= 2 * n_params * 4  # AdamW: two moments per parameter
    assert 0 <= rec.extra["data_wait_share"] < 1


def test_fp16_and_bf16_autocast_train_on_cpu(tmp_path):
    for precision in ("bf16", "fp16"):
        r = _fit(tmp_path, precision, model="mlp", epochs=1, precision=precision)
        assert r.record.precision == precision and r.card.precision == precision
        assert r.history[-1]["train_loss"] == r.history[-1]["train_loss"]  # not NaN


def test_resume_is_exact_with_worker_processes(tmp_path):
    """The DataLoader path (worker processes) resumes exactly and trains exactly like the resident split."""
    kw = {"model": "mlp", "num_workers": 1, "samples": 128}
    straight = _fit(tmp_path, "straight", epochs=2, **kw)
    _fit(tmp_path, "split", epochs=1, **kw)
    _fit(tmp_path, "split", resume=True, epochs=2, **kw)
    resident = _fit(tmp_path, "resident", epochs=2, model="mlp", samples=128)
    a, b, c = _weights(tmp_path / "straight"), _weights(tmp_path / "split"), _weights(tmp_path / "resident")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(a[k], c[k]) for k in a)
    assert straight.record.settings["data_placement"] == "host" and straight.record.settings["workers"] == 1
    assert resident.record.settings["data_placement"] == "device"


def test_data_order_is_a_permutation_per_epoch_and_shards_by_rank():
    from trainserve.train.loader import EpochBatches

    b = EpochBatches(n=100, batch_size=10, seed=1)
    b.set_epoch(0)
    e0 = [i for batch in b for i in batch]
    b.set_epoch(1)
    e1 = [i for batch in b for i in batch]
    assert sorted(e0) == sorted(e1) == list(range(100)) and e0 != e1
    b.set_epoch(1, skip=3)
    assert [i for batch in b for i in batch] == e1[30:]
    ranks = [EpochBatches(100, 10, 1, rank=r, world_size=2) for r in (0, 1)]
    for r in ranks:
        r.set_epoch(1)
    shards = [[i for batch in r for i in batch] for r in ranks]
    assert sorted(shards[0] + shards[1]) == list(range(100)) and not set(shards[0]) & set(shards[1])
