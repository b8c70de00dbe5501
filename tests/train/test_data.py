import numpy as np
import pytest

from trainserve.train.data import eval_arrays, load_splits
from trainserve.train.models import preset_config
from trainserve.core.errors import UserError


@pytest.mark.parametrize("family,shape,dtype", [("mlp", (32,), np.float32), ("cnn", (3, 32, 32), np.float32),
                                                ("transformer", (32,), np.int64)])
def test_synthetic_shapes_and_determinism(family, shape, dtype):
    cfg = preset_config(family, "tiny")
    a = load_splits(cfg, "synthetic", 64, seed=3)
    b = load_splits(cfg, "synthetic", 64, seed=3)
    c = load_splits(cfg, "synthetic", 64, seed=4)
    assert a.x_train.shape == (64, *shape) and a.x_train.dtype == dtype
    assert a.x_test.shape[0] == 256 and a.y_train.dtype == np.int64
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)
    assert set(np.unique(a.y_test)) == set(range(10))  # every class appears


def test_synthetic_tokens_carry_class_keywords():
    cfg = preset_config("transformer", "tiny")
    s = load_splits(cfg, "synthetic", 200, seed=0)
    # keyword ids are 0..19; each row holds only keywords of its own class
    owners = {}
    for row, label in zip(s.x_train, s.y_train):
        for t in row[row < 20]:
            owners.setdefault(int(t), set()).add(int(label))
    assert all(len(v) == 1 for v in owners.values()) and len(owners) == 20


@pytest.mark.parametrize("family,adapted", [("mlp", {"in_features": 64}), ("cnn", {"image_size": 32}),
                                            ("transformer", {"vocab_size": 17, "seq_len": 64})])
def test_digits_adapts_the_model(family, adapted):
    s = load_splits(preset_config(family, "tiny"), "digits", 0, seed=0)
    assert len(s.x_train) + len(s.x_test) == 1797
    # the card's rows per epoch, which the cost of a whole run is priced from
    assert s.params["samples"] == len(s.x_train)
    for k, v in adapted.items():
        assert getattr(s.config, k) == v
    if family == "transformer":
        assert s.x_train.max() == 16 and s.x_train.dtype == np.int64


def test_npz_adapts_features_classes_and_holds_out(tmp_path):
    p = tmp_path / "d.npz"
    np.savez(p, x=np.random.rand(50, 7), y=np.arange(50) % 3)
    s = load_splits(preset_config("mlp", "tiny"), str(p), 0, seed=0)
    assert s.config.in_features == 7 and s.config.num_classes == 3
    assert len(s.x_train) == 40 and len(s.x_test) == 10 and s.x_train.dtype == np.float32
    assert s.params["samples"] == 40


def _bad(tmp_path, **arrays):
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    return str(p)


@pytest.mark.parametrize("family,make,match", [
    ("mlp", lambda t: str(t / "missing.npz"), "not found"),
    ("mlp", lambda t: (t / "c.npz").write_bytes(b"garbage") and str(t / "c.npz"), "not a readable"),
    ("mlp", lambda t: _bad(t, x=np.zeros((4, 2))), "no array 'y'"),
    ("cnn", lambda t: _bad(t, x=np.zeros((4, 5)), y=np.zeros(4, int)), "needs \\(rows, channels"),
    ("transformer", lambda t: _bad(t, x=np.zeros((4, 5)), y=np.zeros(4, int)), "integer token ids"),
    ("mlp", lambda t: _bad(t, x=np.zeros((4, 5)), y=np.zeros(3, int)), "rows"),
    ("mlp", lambda t: _bad(t, x=np.zeros((4, 5)), y=np.zeros(4)), "integer array"),
])
def test_bad_npz_is_a_user_error(tmp_path, family, make, match):
    with pytest.raises(UserError, match=match):
        load_splits(preset_config(family, "tiny"), make(tmp_path), 0, seed=0)


def test_eval_arrays_rebuilds_the_test_split():
    from trainserve.train.loop import _card

    s = load_splits(preset_config("transformer", "tiny"), "synthetic", 64, seed=5)
    card = _card(_cfg("transformer", samples=64, seed=5), s, 0)
    x, y = eval_arrays(card, limit=10)
    assert x.shape == (10, 32) and x.dtype == np.int64 and y.dtype == np.int64
    assert np.array_equal(x, s.x_test[:10]) and np.array_equal(y, s.y_test[:10])


def _cfg(model, **kw):
    from trainserve.train.config import TrainConfig

    return TrainConfig(model=model, **kw)
