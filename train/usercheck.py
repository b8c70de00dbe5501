"""The model a training config names, zoo or the user's own, and the checks that run before any work.

For a model of the user's own (train/usermodel.py) the input shape, token vocabulary and classes can
come from a user's .npz when the options leave them out; everything is checked on one batch of two
samples before data is generated or anything is written.
"""

from __future__ import annotations

import logging
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from trainserve.core.card import ModelCard, TensorSpec
from trainserve.core.errors import UserError
from trainserve.train import usermodel
from trainserve.train.config import TrainConfig
from trainserve.train.export import export_onnx
from trainserve.train.models import ModelConfig, build_model, io_spec, preset_config


def model_config(cfg: TrainConfig) -> ModelConfig:
    """The config of the model `cfg` trains: a zoo preset, or the user's model, checked on one batch."""
    if not usermodel.is_reference(cfg.model):
        return preset_config(cfg.model, cfg.preset)
    shape, vocab = cfg.input_shape, cfg.vocab_size
    if shape is None or (cfg.input_dtype == "int64" and vocab is None):
        peek = _npz_rows(cfg.dataset)
        if peek is not None:
            shape = shape or peek[0]
            vocab = vocab if vocab is not None or cfg.input_dtype != "int64" else peek[1]
    return usermodel.make_config(cfg.model, shape, cfg.input_dtype, vocab, cfg.num_classes)


def check_export(config: ModelConfig) -> None:
    """Export the model to ONNX in a temporary folder: one sentence, naming the operator, when it cannot be."""
    inputs, outputs = io_spec(config)
    card = ModelCard(family=usermodel.FAMILY, preset=None, config={"vocab_size": getattr(config, "vocab_size", None)},
                     inputs=[TensorSpec(**t) for t in inputs], outputs=[TensorSpec(**t) for t in outputs],
                     classes=[str(i) for i in range(config.num_classes)])
    model = build_model(config).eval()
    export_log = logging.getLogger("trainserve.train.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)  # a fallback to the second exporter is not news here; its failure is
    try:
        with tempfile.TemporaryDirectory() as tmp:
            export_onnx(model, card, Path(tmp) / "model.onnx")
    finally:
        export_log.setLevel(level)


def check_user_model(cfg: TrainConfig, export: bool) -> Any:
    """`trainserve run`'s check before its first stage: build, one batch, and (export) the ONNX export."""
    config = model_config(cfg)
    if export:
        check_export(config)
    return config


def _npz_rows(dataset: str) -> tuple[tuple[int, ...], int | None] | None:
    """(one row's shape, max id + 1 when integer) of a user's .npz, or None for the built-in data."""
    if dataset in ("synthetic", "digits") or not dataset.endswith(".npz"):
        return None
    path = Path(dataset).expanduser()
    if not path.is_file():
        raise UserError(f"dataset {path} not found; pass --dataset synthetic, or an existing .npz file")
    try:
        with np.load(path, allow_pickle=False) as f:
            if "x" not in f.files:
                raise UserError(f"{path} has no array 'x' (it has {sorted(f.files)}); save it with "
                                "numpy.savez(path, x=..., y=...)")
            x = f["x"]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise UserError(f"{path} is not a readable .npz file ({type(e).__name__}); save it with "
                        "numpy.savez(path, x=..., y=...)") from None
    vocab = int(x.max()) + 1 if x.dtype.kind in "iu" and x.size else None
    return tuple(int(d) for d in x.shape[1:]), vocab
