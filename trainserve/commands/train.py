"""`trainserve train` and `trainserve compare`: thin wrappers over train.loop and train.compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainserve.commands._model_options import (
    InputDtypeOpt,
    InputShapeOpt,
    ModelOpt,
    NumClassesOpt,
    VocabOpt,
    model_fields,
)
from trainserve.commands.choices import (
    LrScale,
    Placement,
    Precision,
    Preset,
    RunsDirOpt,
    SweepDevice,
    TrainDevice,
)
from trainserve.core.errors import UserError

PresetOpt = Annotated[Preset, typer.Option("--preset", "-p", help="Size preset.")]
PrecisionOpt = Annotated[Precision, typer.Option(help="Autocast precision; fp16 adds a GradScaler.")]
BatchOpt = Annotated[int, typer.Option("--batch-size", "-b", help="Samples per optimizer step.")]
EpochsOpt = Annotated[int, typer.Option(help="Epochs to train (the total, also with --resume).")]
StepsOpt = Annotated[int | None, typer.Option(help="Total optimizer steps; overrides --epochs.")]
LrOpt = Annotated[float, typer.Option(help="AdamW learning rate (before --lr-scale).")]
LrScaleOpt = Annotated[LrScale, typer.Option(help="none, or linear: lr * batch-size / 256.")]
SeedOpt = Annotated[int, typer.Option(help="Seed for weights, synthetic data and data order.")]
WorkersOpt = Annotated[int | None, typer.Option(help="DataLoader worker processes (auto: 0 on CPU, up to 4 on CUDA).")]
CompileOpt = Annotated[bool, typer.Option("--compile/--no-compile", help="torch.compile the model.")]
DatasetOpt = Annotated[str, typer.Option(help="synthetic, digits (scikit-learn, bundled), or PATH.npz with arrays x, y.")]
SamplesOpt = Annotated[int, typer.Option(help="Synthetic data: training rows.")]
WarmupOpt = Annotated[int, typer.Option(help="Steps left out of step-time statistics.")]
SyncOpt = Annotated[bool, typer.Option("--sync-timing/--event-timing",
                                       help="CUDA: synchronise after every step instead of timing with CUDA events.")]
RunOpt = Annotated[str, typer.Option(help="Run name: artifacts go to RUNS_DIR/RUN/train.")]
TargetOpt = Annotated[float | None, typer.Option("--target-accuracy", help=(
    "Stop as soon as the held-out (test split) accuracy after an epoch reaches A (0 < A <= 1); the profile "
    "records the time, epochs and energy it took (docs/training.md)."))]
SeedsOpt = Annotated[int | None, typer.Option("--seeds", help=(
    "With --target-accuracy: train N times (seeds SEED, SEED+1, ...) and report the time to accuracy as mean ± sd "
    "(default 3 with --target-accuracy)."))]


def train(
    model: ModelOpt = "cnn",
    preset: PresetOpt = Preset("tiny"),
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = "float32",
    vocab_size: VocabOpt = None,
    num_classes: NumClassesOpt = None,
    device: Annotated[TrainDevice, typer.Option(help=(
        "auto: cuda when a GPU is visible, else cpu; cpu,cuda trains on both (trainserve compare)."))] = TrainDevice("auto"),
    precision: PrecisionOpt = Precision("fp32"),
    batch_size: BatchOpt = 64,
    epochs: EpochsOpt = 3,
    steps: StepsOpt = None,
    lr: LrOpt = 1e-3,
    lr_scale: LrScaleOpt = LrScale("none"),
    seed: SeedOpt = 0,
    workers: WorkersOpt = None,
    compile: CompileOpt = False,
    dataset: DatasetOpt = "synthetic",
    samples: SamplesOpt = 2048,
    warmup_steps: WarmupOpt = 5,
    sync_timing: SyncOpt = False,
    data_placement: Annotated[Placement, typer.Option(help=(
        "host (DataLoader workers, pinned memory, async copies) or device (the training split kept on "
        "the device, batches gathered there); auto keeps it on the GPU when it takes < 25% of free memory "
        "and --workers is not given."))] = Placement("auto"),
    run: RunOpt = "default",
    runs_dir: RunsDirOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from RUN's checkpoint, exactly.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help=(
        "Train RUN again from scratch, replacing its trained model (without it, a trained RUN is refused)."))] = False,
    find_max_batch: Annotated[bool, typer.Option("--find-max-batch", help=(
        "CUDA: after training, find the largest batch that fits for training and for inference."))] = False,
    nproc: Annotated[int | None, typer.Option(help="Data-parallel: N processes under torchrun (one per GPU; "
                                              "gloo on CPU). See docs/distributed.md.")] = None,
    scaling_baseline: Annotated[Path | None, typer.Option(help="DDP: a 1-process run's profile.json (or its train "
                                                          "folder) to compute scaling efficiency against.")] = None,
    target_accuracy: TargetOpt = None,
    seeds: SeedsOpt = None,
) -> None:
    """Train a model; write checkpoint, model card, history and profile to RUNS_DIR/RUN/train."""
    from trainserve.train import distributed, launch

    if (rc := launch.relaunch(nproc, device.value)) is not None:  # --nproc: this command again, under torchrun
        raise typer.Exit(rc)
    from trainserve.core.runs import run_dir
    from trainserve.train.config import TrainConfig

    devices = device.value.split(",")
    mine = model_fields(model, input_shape, input_dtype, vocab_size, num_classes)  # zoo family or your own
    cfg = TrainConfig(**mine, preset=preset.value, device=devices[0], precision=precision.value,
                      batch_size=batch_size, epochs=epochs, steps=steps, lr=lr, lr_scale=lr_scale.value, seed=seed,
                      workers=workers, compile=compile, dataset=dataset, samples=samples,
                      warmup_steps=warmup_steps, sync_timing=sync_timing, find_max_batch=find_max_batch,
                      data_placement=data_placement.value, target_accuracy=target_accuracy)
    from trainserve.train.seeds import resolve_seeds

    n_seeds = resolve_seeds(seeds, target_accuracy)
    if nproc or resume:  # the repeats are fresh single-process runs: not the default for these
        if seeds is not None and seeds > 1:
            raise UserError(f"--seeds {seeds} trains fresh single-process runs; drop --nproc and --resume, or "
                            "leave --seeds out")
        n_seeds = 1
    root = run_dir(run, runs_dir, writable=True)
    if len(devices) > 1:
        if resume:
            raise UserError(f"--device {device.value} trains a fresh run on both devices to compare them; "
                            "drop --resume, or resume one device at a time")
        _compare(cfg, root, n_seeds)
        return
    from trainserve.commands._train_view import live_progress, print_summary
    from trainserve.core.card import CHECKPOINT_NAME
    from trainserve.train.loop import fit

    if not resume and not overwrite and (root / "train" / CHECKPOINT_NAME).exists():
        # a fresh run replaces the old one's files as it starts: a mistake (or a kill) would lose a finished run
        raise UserError(f"run {run!r} already has a trained model in {root / 'train'}; pass --resume to continue "
                        "it, --overwrite to train it again from scratch, or another --run")

    with distributed.session(cfg.device) as dist_ctx:  # joins torchrun's process group when launched by it
        if scaling_baseline is not None:
            dist_ctx.baseline_throughput = distributed.baseline_throughput_from(scaling_baseline)
        if not dist_ctx.is_writer:  # ranks > 0 train silently; rank 0 shows progress and writes
            fit(cfg, root / "train", resume=resume)
            return
        with live_progress() as on_progress:
            result = fit(cfg, root / "train", resume=resume, on_progress=on_progress)
            if n_seeds > 1:
                from trainserve.train.loop import PROFILE_NAME
                from trainserve.train.seeds import train_more_seeds

                train_more_seeds(cfg, result.record, n_seeds, root / "train" / ".seeds",
                                 lambda c, d: fit(c, d, on_progress=on_progress))
                result.record.save(root / "train" / PROFILE_NAME)
    print_summary(result)


SweepOpt = Annotated[bool, typer.Option("--sweep/--no-sweep", help=(
    "Sweep batch sizes and precisions on each device (one line per point) and report the GPU speedup at the same "
    "configuration and with each device at its best; --no-sweep trains once per device at --batch-size and "
    "--precision."))]
SweepBudgetOpt = Annotated[float, typer.Option("--sweep-budget-s", help=(
    "Seconds the sweep may take on each device; the point that would overrun it is skipped and recorded."))]


def compare(
    model: ModelOpt = "cnn",
    preset: PresetOpt = Preset("tiny"),
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = "float32",
    vocab_size: VocabOpt = None,
    num_classes: NumClassesOpt = None,
    precision: PrecisionOpt = Precision("fp32"),
    batch_size: BatchOpt = 64,
    epochs: EpochsOpt = 1,
    steps: StepsOpt = None,
    lr: LrOpt = 1e-3,
    seed: SeedOpt = 0,
    workers: WorkersOpt = None,
    compile: CompileOpt = False,
    dataset: DatasetOpt = "synthetic",
    samples: SamplesOpt = 2048,
    warmup_steps: WarmupOpt = 5,
    run: RunOpt = "default",
    runs_dir: RunsDirOpt = None,
    sweep: SweepOpt = True,
    sweep_budget_s: SweepBudgetOpt = 60.0,
    device: Annotated[SweepDevice, typer.Option(help=(
        "With --sweep: auto (the CPU, plus the GPU when there is one), or the devices named."))] = SweepDevice("auto"),
    target_accuracy: TargetOpt = None,
    seeds: SeedsOpt = None,
) -> None:
    """Train the same model on CPU and on CUDA and compare them.

    By default it sweeps batch sizes and precisions on each device within --sweep-budget-s seconds
    (records in RUNS_DIR/RUN/sweep/<device>/); with --no-sweep it trains once per device at
    --batch-size and --precision and writes both profiles and the speed-up to RUNS_DIR/RUN/compare.
    """
    from trainserve.core.runs import run_dir
    from trainserve.train.config import TrainConfig

    mine = model_fields(model, input_shape, input_dtype, vocab_size, num_classes)  # zoo family or your own
    cfg = TrainConfig(**mine, preset=preset.value, device="cpu", precision=precision.value,
                      batch_size=batch_size, epochs=epochs, steps=steps, lr=lr, seed=seed, workers=workers,
                      compile=compile, dataset=dataset, samples=samples, warmup_steps=warmup_steps,
                      target_accuracy=target_accuracy)
    if sweep and target_accuracy is not None:
        raise UserError("--target-accuracy trains each device until it reaches the accuracy, which a sweep does not "
                        "do; add --no-sweep")
    if sweep:
        from trainserve.commands._sweep_view import run_sweeps

        run_sweeps(cfg, device.value, sweep_budget_s, run_dir(run, runs_dir, writable=True))
        return
    if device.value != "auto":
        raise UserError(f"--device {device.value!r} needs --sweep; without it compare trains on both the CPU and "
                        "the GPU")
    from trainserve.train.seeds import resolve_seeds

    _compare(cfg, run_dir(run, runs_dir, writable=True), resolve_seeds(seeds, target_accuracy))


def _compare(cfg, root: Path, seeds: int = 1) -> None:
    from trainserve.commands._train_view import live_progress, print_compare
    from trainserve.core.fsutil import write_json_atomic
    from trainserve.core.speedup import speedups_of_records
    from trainserve.train.compare import compare_devices

    with live_progress() as on_progress:
        records = compare_devices(cfg, root / "compare", on_progress=on_progress, seeds=seeds)
    speedups = speedups_of_records([(f"compare/profile-{d}.json", r) for d, r in records.items()])
    write_json_atomic(root / "compare" / "speedup.json", speedups)
    print_compare(records, speedups, root / "compare")
