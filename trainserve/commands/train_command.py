"""`trainserve train` and `trainserve compare`: thin wrappers over train.loop and train.compare."""

from __future__ import annotations

from pathlib import Path
import typer

from trainserve.commands._model_options import model_fields
from trainserve.commands._typer import Args, options_of
from trainserve.core.errors import UserError


@options_of("train")
def train(o: Args) -> None:
    """Train a model; write checkpoint, model card, history and profile to RUNS_DIR/RUN/train."""
    from trainserve.train import distributed, launch

    if o.shard and not (o.nproc or distributed.launched_by_torchrun()):
        raise UserError("--shard splits the model across the --nproc processes; add --nproc 2 (or more), or drop "
                        "--shard")
    if o.offload:
        _check_offload(o.shard, o.device)
    if (rc := launch.relaunch(o.nproc, o.device)) is not None:  # --nproc: this command again, under torchrun
        raise typer.Exit(rc)
    from trainserve.core.runs import run_dir
    from trainserve.train.config import TrainConfig

    devices = o.device.split(",")
    cfg = TrainConfig(**o.of(TrainConfig, **model_fields(o), device=devices[0]))  # zoo family or your own
    from trainserve.train.seeds import resolve_seeds

    n_seeds = resolve_seeds(o.seeds, o.target_accuracy)
    if o.nproc or o.resume:  # the repeats are fresh single-process runs: not the default for these
        if o.seeds is not None and o.seeds > 1:
            raise UserError(f"--seeds {o.seeds} trains fresh single-process runs; drop --nproc and --resume, or "
                            "leave --seeds out")
        n_seeds = 1
    root = run_dir(o.run, o.runs_dir, writable=True)
    if len(devices) > 1:
        if o.resume:
            raise UserError(f"--device {o.device} trains a fresh run on both devices to compare them; "
                            "drop --resume, or resume one device at a time")
        _compare(cfg, root, n_seeds)
        return
    from trainserve.commands._train_view import live_progress, print_summary
    from trainserve.core.card import CHECKPOINT_NAME
    from trainserve.train.loop import fit

    if not o.resume and not o.overwrite and (root / "train" / CHECKPOINT_NAME).exists():
        # a fresh run replaces the old one's files as it starts: a mistake (or a kill) would lose a finished run
        raise UserError(f"run {o.run!r} already has a trained model in {root / 'train'}; pass --resume to continue "
                        "it, --overwrite to train it again from scratch, or another --run")

    with distributed.session(cfg.device) as dist_ctx:  # joins torchrun's process group when launched by it
        dist_ctx.shard, dist_ctx.offload = o.shard, o.offload
        if o.scaling_baseline is not None:
            dist_ctx.baseline_throughput = distributed.baseline_throughput_from(o.scaling_baseline)
        if not dist_ctx.is_writer:  # ranks > 0 train silently; rank 0 shows progress and writes
            fit(cfg, root / "train", resume=o.resume)
            return
        with live_progress() as on_progress:
            result = fit(cfg, root / "train", resume=o.resume, on_progress=on_progress)
            if n_seeds > 1:
                from trainserve.train.loop import PROFILE_NAME
                from trainserve.train.seeds import train_more_seeds

                train_more_seeds(cfg, result.record, n_seeds, root / "train" / ".seeds",
                                 lambda c, d: fit(c, d, on_progress=on_progress))
                result.record.save(root / "train" / PROFILE_NAME)
    print_summary(result)


@options_of("compare")
def compare(o: Args) -> None:
    """Train the same model on CPU and on CUDA and compare them.

    By default it sweeps batch sizes and precisions on each device within --sweep-budget-s seconds
    (records in RUNS_DIR/RUN/sweep/<device>/); with --no-sweep it trains once per device at
    --batch-size and --precision and writes both profiles and the speed-up to RUNS_DIR/RUN/compare.
    """
    from trainserve.core.runs import run_dir
    from trainserve.train.config import TrainConfig

    cfg = TrainConfig(**o.of(TrainConfig, **model_fields(o), device="cpu"))  # zoo family or your own
    if o.sweep and o.target_accuracy is not None:
        raise UserError("--target-accuracy trains each device until it reaches the accuracy, which a sweep does not "
                        "do; add --no-sweep")
    if o.sweep:
        from trainserve.commands._sweep_view import run_sweeps

        run_sweeps(cfg, o.sweep_device, o.sweep_budget_s, run_dir(o.run, o.runs_dir, writable=True))
        return
    if o.sweep_device != "auto":
        raise UserError(f"--device {o.sweep_device!r} needs --sweep; without it compare trains on both the CPU and "
                        "the GPU")
    from trainserve.train.seeds import resolve_seeds

    _compare(cfg, run_dir(o.run, o.runs_dir, writable=True), resolve_seeds(o.seeds, o.target_accuracy))


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


def _check_offload(shard: bool, device: str) -> None:
    """--offload moves the sharded state from the GPU to the host: it needs --shard and a GPU."""
    if not shard:
        raise UserError("--offload keeps the sharded parameters, gradients and optimizer state in host memory; add "
                        "--shard (with --nproc N), or drop --offload")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device != "cuda":
        raise UserError(f"--offload moves the sharded state from the GPU to host memory, and on --device {device} it "
                        "is in host memory already; drop --offload, or train with --device cuda")
