"""TrainConfig: everything about one training run except the model architecture (that is the preset)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainserve.core.errors import UserError

DEVICES = ("cpu", "cuda", "auto")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCALES = ("none", "linear")
PLACEMENTS = ("auto", "host", "device")
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


@dataclass
class TrainConfig:
    """How to train: device, precision, batch, schedule, data and measurement settings."""

    model: str = "cnn"  # zoo family (mlp | cnn | transformer), or a reference: file.py:build | package.module:build
    preset: str = "tiny"  # size preset of a zoo family (a model of your own has none)
    input_shape: tuple[int, ...] | None = None  # your own model: one sample's input, batch excluded, e.g. (3, 64, 64)
    input_dtype: str = "float32"  # your own model: float32 | int64 (token ids)
    vocab_size: int | None = None  # your own model with int64 inputs: ids are 0..vocab_size-1
    num_classes: int | None = None  # your own model: K of its (batch, K) logits; None -> read from its output
    device: str = "auto"  # cpu | cuda | auto (cuda when a GPU is visible)
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast; fp16 adds a GradScaler)
    batch_size: int = 64  # samples per optimizer step (per process)
    epochs: int = 3  # passes over the training split; with `steps` it is derived
    steps: int | None = None  # total optimizer steps; overrides epochs when set
    lr: float = 1e-3  # AdamW learning rate before scaling
    lr_scale: str = "none"  # none | linear (lr * batch_size / 256)
    weight_decay: float = 0.01
    seed: int = 0  # model init, data generation and data order
    workers: int | None = None  # DataLoader worker processes; None = 0 on CPU, up to 4 on CUDA
    pin_memory: bool | None = None  # pinned host batches; None = on for CUDA
    compile: bool = False  # torch.compile the model for training
    dataset: str = "synthetic"  # synthetic | digits | path to an .npz with x, y
    samples: int = 2048  # synthetic data: training rows (the test split is a quarter, >= 256)
    eval_each_epoch: bool = True  # evaluate on the test split after every epoch
    warmup_steps: int = 5  # first steps left out of step-time statistics (compile, cudnn autotune)
    sync_timing: bool = False  # CUDA: synchronise after every step instead of timing with CUDA events
    find_max_batch: bool = False  # CUDA: after training, search the largest train and inference batch
    data_placement: str = "auto"  # auto | host (DataLoader, pinned, async copy) | device (split kept on the device)
    telemetry: bool = True  # the background resource sampler (utilization, energy); off only to measure its cost
    target_accuracy: float | None = None  # stop at the first end-of-epoch test accuracy >= this (0 < A <= 1)

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
        _check(self.workers is None or 0 <= self.workers <= 64, "workers", self.workers, "0..64, or unset (auto)")
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
        return cls(**{k: v for k, v in data.items() if k in names})

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)
