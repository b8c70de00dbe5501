"""The model card (`model.json`): everything later stages need to rebuild, export and serve a model.

Export and serving read only this card and the checkpoint beside it; they never import the
training code's state. Shapes are per sample (the batch dimension is left out); dtypes are numpy
names ("float32", "int64").
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic

CARD_SCHEMA_VERSION = 1
CARD_NAME = "model.json"
CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class TensorSpec:
    name: str
    shape: list[int]  # per sample, batch dimension excluded
    dtype: str  # numpy dtype name


@dataclass
class ModelCard:
    """What a trained model is: family, preset, architecture config, I/O, classes, precision."""

    family: str  # "mlp" | "cnn" | "transformer" | "user" (file.py:build) | "onnx" (trained elsewhere)
    preset: str | None
    config: dict[str, Any]  # the family's config dataclass as a dict
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    classes: list[str]
    precision: str = "fp32"  # precision it was trained in (weights are stored in fp32)
    dataset: str = ""  # "synthetic" | "digits" | absolute path of the user's .npz
    data: dict[str, Any] = field(default_factory=dict)  # how to rebuild the splits: seed, samples, ...
    parameters: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)  # final eval accuracy/loss
    checkpoint: str = CHECKPOINT_NAME  # file name beside the card
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    schema_version: int = CARD_SCHEMA_VERSION

    @property
    def name(self) -> str:
        """The model's name in a model repository ("cnn" -> "cnn_cpu", "cnn_gpu"); a model of your own (family
        "user") or an ONNX file trained elsewhere ("onnx") carries its name in its config."""
        return str(self.config.get("name") or self.family) if self.family in ("user", "onnx") else self.family

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, folder: Path) -> Path:
        path = Path(folder) / CARD_NAME
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "model card") -> ModelCard:
        if data.get("schema_version") != CARD_SCHEMA_VERSION:
            raise UserError(f"{source} has schema_version {data.get('schema_version')!r}, expected "
                            f"{CARD_SCHEMA_VERSION}; re-train to write a current card")
        try:
            d = dict(data)
            d["inputs"] = [TensorSpec(**t) for t in d["inputs"]]
            d["outputs"] = [TensorSpec(**t) for t in d["outputs"]]
            card = cls(**d)
        except (KeyError, TypeError) as e:
            raise UserError(f"{source} is malformed ({e}); re-train to write a new one") from None
        return card

    @classmethod
    def load(cls, path: Path) -> ModelCard:
        """Load `model.json` (or the folder holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / CARD_NAME
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"no model card at {path}; train a model first (trainserve train)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"model card {path} is not valid JSON ({e}); re-train to write a new one") from None
        if not isinstance(data, dict):
            raise UserError(f"model card {path} is not a JSON object; re-train to write a new one")
        return cls.from_dict(data, source=str(path))


def example_inputs(card: ModelCard, batch: int, seed: int = 0) -> dict[str, Any]:
    """Random numpy inputs for the card's tensors: normal floats, token ids below the vocabulary size."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for t in card.inputs:
        shape = (batch, *t.shape)
        if np.dtype(t.dtype).kind == "f":
            out[t.name] = rng.standard_normal(shape).astype(t.dtype)
        else:
            high = int(card.config.get("vocab_size") or 2)  # an ONNX file trained elsewhere names no vocabulary
            out[t.name] = rng.integers(0, high, size=shape).astype(t.dtype)
    return out
