"""Training data: learnable synthetic sets per family, scikit-learn's bundled digits, or a user's .npz.

Everything here is numpy and deterministic from a seed; nothing is downloaded. `load_splits` also
adapts the model config to the data (features, classes, vocabulary, sequence length), and
`eval_arrays` rebuilds the test split from a model card, so export and serving can check a model
against the data it was trained on.
"""

from __future__ import annotations

import dataclasses
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.train.models import (
    CNNConfig,
    MLPConfig,
    ModelConfig,
    TransformerConfig,
    UserModelConfig,
    config_from_dict,
    family_of,
)
from trainserve.core.errors import UserError

KEYWORDS_PER_CLASS = 2  # transformer synthetic data: token ids reserved per class
TEST_FRACTION = 0.2  # digits and .npz without x_test/y_test: share held out for evaluation


@dataclass
class Splits:
    """Train and test arrays (batch first) in the model's input dtype, int64 labels, adapted config."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: list[str]
    config: ModelConfig  # the preset, adapted to the data's shape
    source: str  # "synthetic" | "digits" | absolute .npz path
    params: dict[str, Any]  # what rebuilds these splits (goes into the model card's `data`); `samples`: training rows


def load_splits(config: ModelConfig, dataset: str, samples: int, seed: int) -> Splits:
    """The train/test splits for `dataset` shaped for the family of `config`."""
    if dataset == "synthetic":
        return _synthetic(config, samples, seed)
    if dataset == "digits":
        if isinstance(config, UserModelConfig):
            raise UserError("--dataset digits is shaped for the zoo's models; for your own model pass "
                            "--dataset PATH.npz (arrays x, y) or leave it out for synthetic data")
        return _digits(config, seed)
    if isinstance(config, UserModelConfig):
        return _user_npz(config, Path(dataset), seed)
    return _npz(config, Path(dataset), seed)


def eval_arrays(card: Any, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The test split of the data a model card was trained on: (inputs, int64 labels), batch first.

    Inputs have the card's dtype and per-sample shape; `limit` keeps the first `limit` rows.
    """
    params = dict(card.data or {})
    source = params.get("source") or card.dataset
    if not source:
        raise UserError("the model card does not say which data it was trained on; re-train to write a new card")
    splits = load_splits(config_from_dict(card.family, card.config), source, int(params.get("samples", 2048)), int(params.get("seed", 0)))
    x, y = splits.x_test, splits.y_test
    spec = card.inputs[0]
    if list(x.shape[1:]) != list(spec.shape) or str(x.dtype) != spec.dtype:
        raise UserError(f"data {source} now has shape {list(x.shape[1:])} {x.dtype}, but the model card expects "
                        f"{spec.shape} {spec.dtype}; re-train on the current data")
    if limit is not None:
        x, y = x[:limit], y[:limit]
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


# --- synthetic -------------------------------------------------------------------------------

def _synthetic(config: ModelConfig, samples: int, seed: int) -> Splits:
    family = family_of(config)
    n_test = max(256, samples // 4)
    # one stream for the class structure, one each for the train and test draws
    s_struct, s_train, s_test = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    make = {"mlp": _synth_tabular, "cnn": _synth_images, "transformer": _synth_tokens, "user": _synth_user}[family]
    structure = make(config, s_struct, None, 0)
    x_tr, y_tr = make(config, s_train, structure, samples)
    x_te, y_te = make(config, s_test, structure, n_test)
    return Splits(x_tr, y_tr, x_te, y_te, [f"class_{i}" for i in range(config.num_classes)], config,
                  "synthetic", {"source": "synthetic", "seed": seed, "samples": samples})


def _synth_tabular(cfg: MLPConfig, rng: np.random.Generator, centers: Any, n: int) -> Any:
    """Gaussian clusters: one centre per class, unit-variance centres, noise std 1."""
    if centers is None:
        return rng.normal(0.0, 1.0, (cfg.num_classes, cfg.in_features)).astype(np.float32)
    y = rng.integers(0, cfg.num_classes, n)
    x = centers[y] + rng.normal(0.0, 1.0, (n, cfg.in_features)).astype(np.float32)
    return x.astype(np.float32), y.astype(np.int64)


def _synth_images(cfg: CNNConfig, rng: np.random.Generator, templates: Any, n: int) -> Any:
    """Per-class low-frequency templates (std 2), shifted by up to 2 pixels, plus pixel noise (std 1)."""
    c, s = cfg.in_channels, cfg.image_size
    if templates is None:
        coarse = rng.normal(0.0, 2.0, (cfg.num_classes, c, 4, 4)).astype(np.float32)  # (K, C, 4, 4)
        reps = -(-s // 4)
        return np.repeat(np.repeat(coarse, reps, axis=2), reps, axis=3)[:, :, :s, :s]  # (K, C, S, S)
    y = rng.integers(0, cfg.num_classes, n)
    shifts = rng.integers(-2, 3, (n, 2))
    x = rng.standard_normal((n, c, s, s), dtype=np.float32)  # noise first, templates added in place
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            idx = np.nonzero((shifts[:, 0] == dy) & (shifts[:, 1] == dx))[0]
            if idx.size:
                x[idx] += np.roll(templates[y[idx]], (dy, dx), axis=(2, 3))
    return x, y.astype(np.int64)


def _synth_tokens(cfg: TransformerConfig, rng: np.random.Generator, structure: Any, n: int) -> Any:
    """Random filler tokens with a few of the class's keyword tokens planted at random positions."""
    n_kw = cfg.num_classes * KEYWORDS_PER_CLASS
    if cfg.vocab_size < n_kw + 2:
        raise UserError(f"synthetic token data needs vocab_size >= {n_kw + 2} for {cfg.num_classes} classes, "
                        f"the model has {cfg.vocab_size}; pick a larger preset or your own data")
    if structure is None:
        return rng.permutation(n_kw).reshape(cfg.num_classes, KEYWORDS_PER_CLASS)  # class -> keyword ids
    y = rng.integers(0, cfg.num_classes, n)
    x = rng.integers(n_kw, cfg.vocab_size, (n, cfg.seq_len))
    plant = max(1, cfg.seq_len // 8)  # keywords per sequence
    pos = np.argsort(rng.random((n, cfg.seq_len)), axis=1)[:, :plant]  # distinct positions per row
    kw = structure[y[:, None], rng.integers(0, KEYWORDS_PER_CLASS, (n, plant))]
    np.put_along_axis(x, pos, kw, axis=1)
    return x.astype(np.int64), y.astype(np.int64)


def _synth_user(cfg: UserModelConfig, rng: np.random.Generator, structure: Any, n: int) -> Any:
    """A model of the user's own: class templates plus noise (floats), or planted keyword tokens (int64),
    in its input shape."""
    if cfg.input_dtype == "int64":
        flat = TransformerConfig(vocab_size=int(cfg.vocab_size or 2), seq_len=int(np.prod(cfg.input_shape)),
                                 d_model=2, n_heads=1, n_layers=1, d_ff=1, num_classes=cfg.num_classes)
        out = _synth_tokens(flat, rng, structure, n)
        return out if structure is None else (out[0].reshape(n, *cfg.input_shape), out[1])
    if structure is None:
        return rng.normal(0.0, 1.0, (cfg.num_classes, *cfg.input_shape)).astype(np.float32)  # (K, *shape)
    y = rng.integers(0, cfg.num_classes, n)
    x = rng.standard_normal((n, *cfg.input_shape), dtype=np.float32)
    x += structure[y]
    return x, y.astype(np.int64)


# --- scikit-learn digits (8x8 grey images, 0..16, 1797 rows) --------------------------------

def _digits(config: ModelConfig, seed: int) -> Splits:
    from sklearn.datasets import load_digits

    d = load_digits()
    x, y = d.data.astype(np.float32), d.target.astype(np.int64)  # (N, 64) in 0..16
    family = family_of(config)
    if family == "mlp":
        x = x / 8.0 - 1.0
        config = dataclasses.replace(config, in_features=64, num_classes=10)
    elif family == "cnn":
        img = np.repeat(np.repeat(x.reshape(-1, 1, 8, 8), 4, axis=2), 4, axis=3)  # nearest 8x8 -> 32x32
        x = np.repeat(img, config.in_channels, axis=1) / 8.0 - 1.0
        config = dataclasses.replace(config, image_size=32, num_classes=10)
    else:
        x = x.astype(np.int64)  # pixel intensities 0..16 are the tokens
        config = dataclasses.replace(config, vocab_size=17, seq_len=64, num_classes=10)
    x_tr, y_tr, x_te, y_te = _holdout(x.astype(_dtype(config)), y, seed)
    return Splits(x_tr, y_tr, x_te, y_te, [str(i) for i in range(10)], config,
                  "digits", {"source": "digits", "seed": seed, "samples": len(x_tr)})


def _holdout(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = max(1, int(round(len(x) * TEST_FRACTION)))
    te, tr = order[:n_test], order[n_test:]
    return x[tr], y[tr], x[te], y[te]


def _dtype(config: ModelConfig) -> type:
    return np.int64 if family_of(config) == "transformer" else np.float32  # digits: never a user model


# --- user .npz ----------------------------------------------------------------------------

def _npz(config: ModelConfig, path: Path, seed: int) -> Splits:
    path = path.expanduser().resolve()
    arrays = _read_npz(path)  # x and y present; x_test and y_test both or neither
    family = family_of(config)
    x, y = _check_xy(arrays["x"], arrays["y"], family, path, "x", "y")
    if "x_test" in arrays:
        x_te, y_te = _check_xy(arrays["x_test"], arrays["y_test"], family, path, "x_test", "y_test")
        if x_te.shape[1:] != x.shape[1:]:
            raise UserError(f"{path}: x_test rows have shape {x_te.shape[1:]}, x rows {x.shape[1:]}; make them equal")
        x_tr, y_tr = x, y
    else:
        if len(x) < 2:
            raise UserError(f"{path} has {len(x)} row; give at least 2 (one is held out for evaluation)")
        x_tr, y_tr, x_te, y_te = _holdout(x, y, seed)
    n_classes = int(max(y_tr.max(), y_te.max())) + 1
    if n_classes < 2:
        raise UserError(f"{path}: labels y must name at least 2 classes (0 and 1), found only 0")
    if family == "mlp":
        config = dataclasses.replace(config, in_features=x.shape[1], num_classes=n_classes)
    elif family == "cnn":
        config = dataclasses.replace(config, in_channels=x.shape[1], image_size=x.shape[2], num_classes=n_classes)
    else:
        vocab = int(max(x_tr.max(), x_te.max())) + 1
        config = dataclasses.replace(config, vocab_size=max(2, vocab), seq_len=x.shape[1], num_classes=n_classes)
    return Splits(x_tr, y_tr, x_te, y_te, [str(i) for i in range(n_classes)], config,
                  str(path), {"source": str(path), "seed": seed, "samples": len(x_tr)})


def _user_npz(config: UserModelConfig, path: Path, seed: int) -> Splits:
    """A user's .npz for a model of the user's own: rows must have the model's input shape, labels < K."""
    path = path.expanduser().resolve()
    arrays = _read_npz(path)
    shape, kind = list(config.input_shape), config.input_dtype

    def checked(xk: str, yk: str) -> tuple[np.ndarray, np.ndarray]:
        x, y = arrays[xk], arrays[yk]
        if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or len(y) != len(x) or len(x) == 0:
            raise UserError(f"{path}: {yk} must be a 1-D integer array of class ids, one per row of {xk} "
                            f"({len(x)} rows), got shape {y.shape} dtype {y.dtype}")
        if list(x.shape[1:]) != shape:
            raise UserError(f"{path}: {xk} rows have shape {list(x.shape[1:])} but the model takes {shape}; "
                            "make --input-shape match the data")
        if y.min() < 0 or y.max() >= config.num_classes:
            raise UserError(f"{path}: {yk} has class ids {int(y.min())}..{int(y.max())} but the model outputs "
                            f"{config.num_classes} classes; use ids 0..{config.num_classes - 1}")
        if kind == "int64":
            if not np.issubdtype(x.dtype, np.integer) or x.min() < 0 or x.max() >= int(config.vocab_size or 0):
                raise UserError(f"{path}: {xk} must hold token ids 0..{config.vocab_size - 1} for --vocab-size "
                                f"{config.vocab_size}, got dtype {x.dtype}")
            return x.astype(np.int64), y.astype(np.int64)
        x = x.astype(np.float32)
        if not np.isfinite(x).all():
            raise UserError(f"{path}: {xk} contains NaN or infinite values; clean the data first")
        return x, y.astype(np.int64)

    x, y = checked("x", "y")
    if "x_test" in arrays and "y_test" in arrays:
        (x_tr, y_tr), (x_te, y_te) = (x, y), checked("x_test", "y_test")
    elif len(x) < 2:
        raise UserError(f"{path} has {len(x)} row; give at least 2 (one is held out for evaluation)")
    else:
        x_tr, y_tr, x_te, y_te = _holdout(x, y, seed)
    return Splits(x_tr, y_tr, x_te, y_te, [str(i) for i in range(config.num_classes)], config,
                  str(path), {"source": str(path), "seed": seed, "samples": len(x_tr)})


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise UserError(f"dataset {path} not found; pass --dataset synthetic, digits, or an existing .npz file")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as e:
        raise UserError(f"{path} is not a readable .npz file ({type(e).__name__}); save it with numpy.savez(path, x=..., y=...)") from None
    for key in ("x", "y"):
        if key not in arrays:
            raise UserError(f"{path} has no array {key!r} (it has {sorted(arrays)}); save it with numpy.savez(path, x=..., y=...)")
    if ("x_test" in arrays) != ("y_test" in arrays):
        raise UserError(f"{path} has only one of x_test / y_test; give both or neither")
    return arrays


_SHAPES = {"mlp": "(rows, features)", "cnn": "(rows, channels, H, W) with H == W >= 8", "transformer": "(rows, tokens)"}


def _check_xy(x: np.ndarray, y: np.ndarray, family: str, path: Path, xk: str, yk: str) -> tuple[np.ndarray, np.ndarray]:
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise UserError(f"{path}: {yk} must be a 1-D integer array of class ids, got shape {y.shape} dtype {y.dtype}")
    if len(y) != len(x) or len(x) == 0:
        raise UserError(f"{path}: {xk} has {len(x)} rows and {yk} has {len(y)}; they must be equal and non-zero")
    if y.min() < 0:
        raise UserError(f"{path}: {yk} has negative class ids; use 0..classes-1")
    want_ndim = 4 if family == "cnn" else 2
    ok = x.ndim == want_ndim and (family != "cnn" or (x.shape[2] == x.shape[3] >= 8))
    if not ok:
        raise UserError(f"{path}: {xk} has shape {x.shape} but the {family} model needs {_SHAPES[family]}; "
                        "reshape it or pick another --model")
    if family == "transformer":
        if not np.issubdtype(x.dtype, np.integer) or x.min() < 0:
            raise UserError(f"{path}: {xk} must hold non-negative integer token ids for the transformer, got dtype {x.dtype}")
        return x.astype(np.int64), y.astype(np.int64)
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise UserError(f"{path}: {xk} has dtype {x.dtype}; the {family} model needs numbers (float32)")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise UserError(f"{path}: {xk} contains NaN or infinite values; clean the data first")
    return x, y.astype(np.int64)
