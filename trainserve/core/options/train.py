"""`trainserve train` and `compare`: the model, how to train it, and the run it writes.

Field names follow torch where torch has one (DataLoader's `num_workers`, `torch.compile`'s `compile`).
TrainConfig (train/config.py) is TrainOptions plus its checks; ModelOptions is shared with `run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainserve.core.options.common import RunsDir
from trainserve.core.options.spec import opt

FAMILIES = ("mlp", "cnn", "transformer")  # the zoo (train/models.py builds each family's presets)
PRESETS = ("tiny", "small", "base")  # each family's sizes
INPUT_DTYPES = ("float32", "int64")  # int64: token ids, drawn below vocab_size
DEVICES = ("cpu", "cuda", "auto")
PRECISIONS = ("fp32", "bf16", "fp16")
LR_SCALES = ("none", "linear")
PLACEMENTS = ("auto", "host", "device")


@dataclass(kw_only=True)
class ModelOptions:
    """Which model: a zoo family, or a function of the user's own and the shapes it takes."""

    model: str = opt("cnn", f"A zoo family ({', '.join(FAMILIES)}), or your own: path/to/file.py:build or "
                            "package.module:build, a function returning a torch.nn.Module that maps a batch to "
                            "(batch, K) logits (with --input-shape).", flags=("--model", "-m"))
    input_shape: tuple[int, ...] | None = opt(None, "Your own model: one sample's input without the batch, e.g. "
                                                    "3,64,64 (or 128 token ids with --input-dtype int64).",
                                              cli_type=str | None)
    input_dtype: str = opt("float32", f"Your own model: {' or '.join(INPUT_DTYPES)} (token ids, with --vocab-size).",
                           choices=INPUT_DTYPES)
    vocab_size: int | None = opt(None, "Your own model with int64 inputs: token ids 0..V-1.")
    num_classes: int | None = opt(None, "Your own model: K, the classes of its (batch, K) logits (default: read "
                                        "from its output).")


@dataclass(kw_only=True)
class TrainOptions(ModelOptions):
    """How to train: device, precision, batch, schedule, data and measurement settings."""

    preset: str = opt("tiny", "Size preset of a zoo family (a model of your own has none).", flags=("--preset", "-p"),
                      choices=PRESETS)
    device: str = opt("auto", "auto: cuda when a GPU is visible, else cpu; cpu,cuda trains on both (trainserve "
                              "compare).", choices=(*DEVICES, "cpu,cuda"))
    precision: str = opt("fp32", "Autocast precision; fp16 adds a GradScaler.", choices=PRECISIONS)
    batch_size: int = opt(64, "Samples per optimizer step (per process).", unit="samples",
                          flags=("--batch-size", "-b"))
    epochs: int = opt(3, "Epochs to train (the total, also with --resume).")
    steps: int | None = opt(None, "Total optimizer steps; overrides --epochs.")
    lr: float = opt(1e-3, "AdamW learning rate (before --lr-scale).")
    lr_scale: str = opt("none", "none, or linear: lr * batch-size / 256 (the global batch under DDP).",
                        choices=LR_SCALES)
    weight_decay: float = opt(0.01, "AdamW weight decay.", cli=False)
    seed: int = opt(0, "Seed for weights, synthetic data and data order.")
    num_workers: int | None = opt(None, "DataLoader worker processes (auto: 0 on CPU, up to 4 on CUDA).",
                                  flags=("--num-workers",), aliases=("--workers",))
    pin_memory: bool | None = opt(None, "Pinned host batches (auto: on for CUDA).", cli=False)
    compile: bool = opt(False, "torch.compile the model.", flags=("--compile/--no-compile",))
    dataset: str = opt("synthetic", "synthetic, digits (scikit-learn, bundled), or PATH.npz with arrays x, y.")
    samples: int = opt(2048, "Synthetic data: training rows (the test split is a quarter, at least 256).",
                       unit="rows")
    eval_each_epoch: bool = opt(True, "Evaluate on the test split after every epoch.", cli=False)
    warmup_steps: int = opt(5, "Steps left out of step-time statistics (compile, cuDNN autotune).", unit="steps")
    sync_timing: bool = opt(False, "CUDA: synchronise after every step instead of timing with CUDA events.",
                            flags=("--sync-timing/--event-timing",))
    find_max_batch: bool = opt(False, "CUDA: after training, find the largest batch that fits for training and "
                                      "for inference.", flags=("--find-max-batch",))
    data_placement: str = opt("auto", "host (DataLoader workers, pinned memory, async copies) or device (the "
                                      "training split kept on the device, batches gathered there); auto keeps it "
                                      "on the GPU when it takes < 25% of free memory and --num-workers is not "
                                      "given.", choices=PLACEMENTS)
    telemetry: bool = opt(True, "The background resource sampler (utilization, energy); off only to measure its "
                                "own cost.", cli=False)
    target_accuracy: float | None = opt(None, "Stop as soon as the held-out (test split) accuracy after an epoch "
                                              "reaches A (0 < A <= 1); the profile records the time, epochs and "
                                              "energy it took (docs/training.md).")


@dataclass(kw_only=True)
class Seeds:
    seeds: int | None = opt(None, "With --target-accuracy: train N times (seeds SEED, SEED+1, ...) and report the "
                                  "time to accuracy as mean ± sd (default 3 with --target-accuracy).")


@dataclass(kw_only=True)
class TrainJob(Seeds, RunsDir):
    """`trainserve train`: where the run goes, and how it starts."""

    run: str = opt("default", "Run name: artifacts go to RUNS_DIR/RUN/train.")
    resume: bool = opt(False, "Continue from RUN's checkpoint, exactly.", flags=("--resume",))
    overwrite: bool = opt(False, "Train RUN again from scratch, replacing its trained model (without it, a "
                                 "trained RUN is refused).", flags=("--overwrite",))
    nproc: int | None = opt(None, "Data-parallel: N processes under torchrun (one per GPU; gloo on CPU). See "
                                  "docs/distributed.md.")
    shard: bool = opt(False, "With --nproc N: shard parameters, gradients and optimizer state across the N "
                             "processes (FSDP2 fully_shard), each holding about 1/N, instead of a whole copy each "
                             "(DDP).", flags=("--shard",))
    offload: bool = opt(False, "With --shard on --device cuda: keep each rank's parameters, gradients and optimizer "
                               "state in host memory (FSDP2 CPUOffloadPolicy), each layer copied to the GPU for its "
                               "forward and backward and the optimizer step run on the CPU: slower, for a model "
                               "whose state does not fit the card.", flags=("--offload",))
    scaling_baseline: Path | None = opt(None, "DDP: a 1-process run's profile.json (or its train folder) to "
                                              "compute scaling efficiency against.")


@dataclass(kw_only=True)
class CompareJob(TrainJob):
    """`trainserve compare`: the same model on each device, swept or at one point."""

    sweep: bool = opt(True, "Sweep batch sizes and precisions on each device (one line per point) and report the "
                            "GPU speedup at the same configuration and with each device at its best; --no-sweep "
                            "trains once per device at --batch-size and --precision.", flags=("--sweep/--no-sweep",))
    sweep_budget_s: float = opt(60.0, "Seconds the sweep may take on each device; the point that would overrun it "
                                      "is skipped and recorded.", unit="s", flags=("--sweep-budget-s",))
    sweep_device: str = opt("auto", "With --sweep: auto (the CPU, plus the GPU when there is one), or the devices "
                                    "named.", flags=("--device",), choices=("auto", "cpu", "cuda", "cpu,cuda"))
