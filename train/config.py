"""TrainConfig: everything about one training run except the model architecture (that is the preset)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from trainserve.core.errors import UserError

Device = Literal["cpu", "cuda", "auto"]
Precision = Literal["fp32", "bf16", "fp16"]

DEVICES = ("cpu", "cuda", "auto")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCALES = ("none", "linear")
PLACEMENTS = ("auto", "host", "device")
LR_REFERENCE_BATCH = 256  # linear scaling rule: lr * batch_size / 256 (Goyal et al.)


def _check(cond: bool, field: str, value: Any, allowed: str) -> None:
    if not cond:
        raise UserError(f"training option {field}={value!r} is invalid; allowed: {allowed}")


@dataclass
class TrainConfig:
    """How to train: device, precision, batch, schedule, data and measurement settings."""

    model: str = "cnn"  # zoo family: mlp | cnn | transformer
    preset: str = "tiny"  # size preset of that family
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

    def __post_init__(self) -> None:
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

    @property
    def effective_lr(self) -> float:
        """The learning rate the optimizer gets, after the scaling rule."""
        if self.lr_scale == "linear":
            return self.lr * self.batch_size / LR_REFERENCE_BATCH
        return self.lr

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)
