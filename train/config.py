"""TrainConfig: everything about one training run except the model architecture (that is the preset)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.options.train import DEVICES, LR_SCALES, PLACEMENTS, PRECISIONS, TrainOptions

__all__ = ["DEVICES", "LR_SCALES", "PLACEMENTS", "PRECISIONS", "TrainConfig", "scaled_lr"]

LR_REFERENCE_BATCH = 256  # linear scaling rule: lr * global batch / 256 (Goyal et al.)


def scaled_lr(lr: float, per_rank_batch: int, world_size: int, rule: str) -> float:
    """The learning rate after `rule`: "linear" scales by the GLOBAL batch (per_rank_batch * world_size) / 256."""
    if rule in ("none", "", None):
        return lr
    if rule != "linear":
        raise UserError(f"--lr-scale {rule!r} is unknown; choose none or linear")
    return lr * per_rank_batch * world_size / LR_REFERENCE_BATCH


def _check(cond: bool, field: str, value: Any, allowed: str) -> None:
    if not cond:
        raise UserError(f"training option {field}={value!r} is invalid; allowed: {allowed}")


@dataclass(kw_only=True)
class TrainConfig(TrainOptions):
    """How to train: TrainOptions (trainserve/core/options/train.py: each field's default and meaning) plus
    the checks that name the bad field."""

    def __post_init__(self) -> None:
        if self.input_shape is not None:
            self.input_shape = tuple(self.input_shape)
        if ":" not in self.model and (self.input_shape is not None or self.vocab_size is not None
                                      or self.num_classes is not None or self.input_dtype != "float32"):
            raise UserError(f"--input-shape, --input-dtype, --vocab-size and --num-classes describe a model of your "
                            f"own (--model file.py:build); the zoo's {self.model!r} takes its shape from --preset "
                            "and the data")
        _check(self.device in DEVICES, "device", self.device, " | ".join(DEVICES))
        _check(self.precision in PRECISIONS, "precision", self.precision, " | ".join(PRECISIONS))
        _check(isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size", self.batch_size,
               "an integer >= 1")
        _check(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        _check(self.steps is None or self.steps >= 1, "steps", self.steps, "an integer >= 1, or unset")
        _check(self.lr > 0 and self.lr < 10, "lr", self.lr, "0 < lr < 10")
        _check(self.lr_scale in LR_SCALES, "lr_scale", self.lr_scale, " | ".join(LR_SCALES))
        _check(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        _check(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        _check(self.num_workers is None or 0 <= self.num_workers <= 64, "num_workers", self.num_workers,
               "0..64, or unset (auto)")
        _check(self.samples >= 16, "samples", self.samples, "an integer >= 16")
        _check(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "an integer >= 0")
        _check(self.data_placement in PLACEMENTS, "data_placement", self.data_placement, " | ".join(PLACEMENTS))
        _check(bool(self.dataset), "dataset", self.dataset, "synthetic | digits | a path to an .npz file")
        if self.target_accuracy is not None and not (isinstance(self.target_accuracy, (int, float))
                                                     and 0 < self.target_accuracy <= 1):
            raise UserError(f"--target-accuracy {self.target_accuracy!r} is out of range; give a held-out "
                            "accuracy A with 0 < A <= 1, e.g. 0.95")

    @property
    def effective_lr(self) -> float:
        """The learning rate the optimizer gets in a 1-process run (under DDP: distributed.finish)."""
        return scaled_lr(self.lr, self.batch_size, 1, self.lr_scale)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        if "workers" in data and "num_workers" not in data:  # a checkpoint written before torch's name
            data = {**data, "num_workers": data["workers"]}
        return cls(**{k: v for k, v in data.items() if k in names})

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)
