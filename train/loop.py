"""The training loop: `fit(config, out_dir)` trains, evaluates, checkpoints and profiles one model.

Everything the user can get wrong (model, preset, device, precision, data, checkpoint) is checked
before anything is written; artifacts are written atomically. `rank`/`world_size` are accepted so a
data-parallel launcher can shard the batches; only rank 0 writes files.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.train import checkpoint as ckpt
from trainserve.train import distributed, release
from trainserve.core.card import CHECKPOINT_NAME, ModelCard, TensorSpec
from trainserve.train.config import TrainConfig
from trainserve.train.data import Splits, load_splits
from trainserve.train.gc_control import StepGC
from trainserve.train.device import autocast, check_precision, grad_scaler, resolve_device
from trainserve.train.loader import DeviceFeed, EpochBatches, ResidentBatches, choose_placement, make_loader
from trainserve.train.measure import MemoryTracker, StepTimer, tensor_bytes
from trainserve.train.step import train_step
from trainserve.train.models import build_model, config_to_dict, io_spec, preset_config
from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic

log = logging.getLogger(__name__)

HISTORY_NAME, PROFILE_NAME = "history.json", "profile.json"
PROGRESS_EVERY_S = 0.25  # how often the progress callback (and its loss sync) runs


@dataclass
class Progress:
    """What a progress bar shows; handed to `on_progress` a few times a second."""

    epoch: int  # 1-based
    epochs: int
    step: int  # optimizer steps done, over the whole run
    total_steps: int
    loss: float | None
    samples_s: float | None
    memory_bytes: int | None
    phase: str = "train"  # "train" | "eval"


@dataclass
class FitResult:
    out_dir: Path
    card: ModelCard
    history: list[dict[str, Any]]
    record: Any  # trainserve.core.profile.ProfileRecord
    resumed_from_step: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class _Setup:
    cfg: TrainConfig
    device: str
    splits: Splits
    state: dict[str, Any] | None  # the checkpoint resumed from


def prepare(cfg: TrainConfig, out_dir: Path, resume: bool) -> _Setup:
    """Check everything the user can get wrong; writes nothing."""
    model_cfg = preset_config(cfg.model, cfg.preset)
    device = resolve_device(cfg.device)
    check_precision(device, cfg.precision)
    if cfg.find_max_batch and device != "cuda":
        raise UserError("--find-max-batch needs a CUDA device (on a CPU the OS kills the process instead of "
                        "reporting out of memory); pass --device cuda or leave it out")
    state = None
    if resume:
        state = ckpt.load(out_dir / CHECKPOINT_NAME)
        old = TrainConfig.from_dict(state["train_config"])
        for name in ("model", "preset", "dataset", "samples", "seed", "batch_size"):
            if getattr(old, name) != getattr(cfg, name):
                raise UserError(f"--resume: the checkpoint was trained with {name}={getattr(old, name)!r}, "
                                f"not {getattr(cfg, name)!r}; pass the same value or train a new --run")
    splits = load_splits(model_cfg, cfg.dataset, cfg.samples, cfg.seed)
    if state is not None and state["card"]["config"] != config_to_dict(splits.config):
        raise UserError("--resume: the data now gives a different model shape than the checkpoint's; "
                        "train a new --run")
    return _Setup(cfg, device, splits, state)


def fit(cfg: TrainConfig, out_dir: Path, resume: bool = False,
        on_progress: Callable[[Progress], None] | None = None, rank: int = 0, world_size: int = 1) -> FitResult:
    """Train `cfg` and write checkpoint.pt, model.json, history.json, profile.json into `out_dir`."""
    import torch

    gpu_before = release.before(cfg.device)  # NVML, before this run touches the GPU
    setup = prepare(cfg, Path(out_dir), resume)
    device, splits, state = setup.device, setup.splits, setup.state
    dist_ctx = distributed.current()  # rank 0 of 1 unless launched by torchrun (see train/distributed.py)
    if dist_ctx.distributed:
        rank, world_size = dist_ctx.rank, dist_ctx.world_size
    is_main = rank == 0
    out_dir = Path(out_dir)
    if is_main and state is None:
        for name in (CHECKPOINT_NAME, HISTORY_NAME, PROFILE_NAME, "model.json"):  # a fresh run replaces the old one
            (out_dir / name).unlink(missing_ok=True)

    family = cfg.model
    channels_last = family == "cnn" and device == "cuda"
    batches = EpochBatches(len(splits.x_train), cfg.batch_size, cfg.seed, rank, world_size)
    data_bytes = splits.x_train.nbytes + splits.y_train.nbytes
    placement = choose_placement(cfg.data_placement, device, data_bytes, cfg.workers is not None)
    workers = pin = resident = None
    if placement == "device":  # before the memory baseline: the resident split is not training memory
        resident = ResidentBatches(splits.x_train, splits.y_train, batches, device, channels_last)
    else:
        workers = cfg.workers if cfg.workers is not None else (min(4, _cpus() // 2) if device == "cuda" else 0)
        pin = cfg.pin_memory if cfg.pin_memory is not None else device == "cuda"
    memory = MemoryTracker(device)
    torch.manual_seed(cfg.seed)
    model = build_model(splits.config)
    if channels_last:
        torch.backends.cudnn.benchmark = True  # fixed training shapes: autotune conv algorithms once (warm-up)
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    memory.weights = tensor_bytes(list(model.parameters()) + list(model.buffers()))
    memory.moment("weights")
    n_params = sum(p.numel() for p in model.parameters())
    lr = distributed.scaled_lr(cfg.lr, cfg.batch_size, world_size, cfg.lr_scale)  # global batch under DDP
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay,
                                  fused=device == "cuda")
    scaler = grad_scaler(device, cfg.precision)
    scaling = scaler.is_enabled()  # fp16 only: otherwise the scaler's calls are skipped, not just no-ops
    history: list[dict[str, Any]] = []
    start_step = 0
    if state is not None:
        memory.use_moments = False
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        history, start_step = list(state["history"]), int(state["step"])
    forward = distributed.wrap(model, dist_ctx)  # DDP when world_size > 1; `model` stays the plain module
    forward = torch.compile(forward) if cfg.compile else forward

    spe = len(batches)  # steps per epoch
    total_steps = cfg.steps if cfg.steps is not None else cfg.epochs * spe
    n_epochs = math.ceil(total_steps / spe)
    if start_step >= total_steps:
        raise UserError(f"--resume: the checkpoint already has {start_step} steps ({start_step // spe} epochs); "
                        "raise --epochs or --steps to train further")
    if state is not None:
        ckpt.set_rng_state(state["rng"])  # last: nothing above may draw random numbers after this
    loader = make_loader(splits.x_train, splits.y_train, batches, workers, pin) if placement == "host" else None
    card = _card(cfg, splits, n_params)
    timer = StepTimer(device, cfg.warmup_steps, sync=cfg.sync_timing)
    sampler = _telemetry_sampler(device) if cfg.telemetry else None
    step, first = start_step, True
    t_last = time.perf_counter()
    t_start = t_last
    loss_fn = torch.nn.functional.cross_entropy
    shown = _LazyLoss(device)
    x = y = logits = loss = feed = loss_sum = correct = None  # freed by name after training
    rss_every = 16  # CPU: read the RSS every few steps (a /proc read, ~20 us)
    step_gc = StepGC()

    try:
        step_gc.start()
        for epoch in range(start_step // spe, n_epochs):
            model.train()
            batches.set_epoch(epoch, skip=step - epoch * spe)
            feed = iter(resident) if loader is None else iter(DeviceFeed(iter(loader), device, channels_last))
            loss_sum = torch.zeros((), device=device)
            correct = torch.zeros((), device=device, dtype=torch.long)
            seen, t_epoch = 0, time.perf_counter()
            while step < min(total_steps, (epoch + 1) * spe):
                timer.begin()
                try:
                    x, y = next(feed)
                except StopIteration:
                    break
                timer.fetched()
                logits, loss = train_step(model, forward, loss_fn, x, y, optimizer, scaler, scaling, device,
                                          cfg.precision, memory if first else None)
                first = False
                optimizer.zero_grad(set_to_none=True)
                n = len(y)
                # running sums stay on the device: no host sync inside the step
                loss_sum.add_(loss.detach(), alpha=n)
                correct.add_((logits.detach().argmax(-1) == y).sum())
                timer.end(n)
                step += 1
                seen += n
                step_gc.after_step(step)
                if sampler is not None and step - start_step == cfg.warmup_steps:
                    sampler.mark()  # utilization and energy cover the measured steps only
                if dist_ctx.sync_check:
                    distributed.after_step(model, dist_ctx, step)
                if device == "cpu" and step % rss_every == 0:
                    memory.sample()
                if on_progress is not None:
                    now = time.perf_counter()
                    if now - t_last >= PROGRESS_EVERY_S:
                        t_last = now
                        on_progress(Progress(epoch + 1, n_epochs, step, total_steps, shown.read(loss_sum, seen),
                                             seen / (now - t_epoch), memory.current_bytes()))
            timer.flush()
            train_s = time.perf_counter() - t_epoch
            entry = {"epoch": epoch + 1, "step": step, "train_loss": _r((loss_sum / max(seen, 1)).item()),
                     "train_accuracy": _r(correct.item() / max(seen, 1)), "train_seconds": _r(train_s),
                     "samples_s": _r(seen / train_s) if train_s > 0 else None}
            if cfg.eval_each_epoch or step >= total_steps:
                if on_progress is not None:
                    on_progress(Progress(epoch + 1, n_epochs, step, total_steps, entry["train_loss"], None,
                                         memory.current_bytes(), phase="eval"))
                entry.update(evaluate(forward, splits, device, cfg, channels_last))
            entry.update(distributed.epoch_means(dist_ctx, entry, ("train_loss", "train_accuracy")))
            history.append(entry)
            log.debug("epoch %d/%d: %s", epoch + 1, n_epochs, entry)
            card.metrics = {k: v for k, v in entry.items() if k.startswith(("test_", "train_"))}
            if is_main:
                ckpt.save(out_dir / CHECKPOINT_NAME, {
                    "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                    "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                    "epoch": step // spe, "step": step, "card": card.to_dict(), "rng": ckpt.rng_state(),
                    "train_config": cfg.to_dict(), "history": history})
    except torch.OutOfMemoryError:
        done = f"; the checkpoint of epoch {history[-1]['epoch']} is kept" if history else ""
        raise UserError(f"out of memory on {device} at batch size {cfg.batch_size}{done}; "
                        "lower --batch-size (or use --precision bf16)") from None
    finally:
        step_gc.stop()
        if sampler is not None:
            sampler.stop()
    wall_s = time.perf_counter() - t_start

    from trainserve.train.record import build_record

    record = build_record(cfg, device, model, splits, timer.times, memory, n_params, sampler, workers, pin,
                          channels_last, wall_s)
    record.settings["data_placement"] = placement
    record.extra["gc"] = step_gc.summary()
    record.extra["data_on_device_bytes"] = resident.nbytes if placement == "device" and device == "cuda" else 0
    distributed.finish(record, dist_ctx, timer.times, cfg)
    # free what training held, so the search sees the memory a fresh run has
    del forward, optimizer, scaler, loader, feed, resident, x, y, logits, loss, loss_sum, correct, shown
    if cfg.find_max_batch:
        record.memory.max_batch = search_max_batch(model, splits, cfg, device)
    del model
    if device == "cuda" and not dist_ctx.distributed:
        release.finish(record, gpu_before)
    if is_main:
        card.save(out_dir)
        write_json_atomic(out_dir / HISTORY_NAME, {"epochs": history, "steps_per_epoch": spe,
                                                    "batch_size": cfg.batch_size})
        record.save(out_dir / PROFILE_NAME)
    return FitResult(out_dir, card, history, record, resumed_from_step=start_step)


def search_max_batch(model: Any, splits: Splits, cfg: TrainConfig, device: str) -> dict[str, Any]:
    """{"train": N, "infer": M, "ratio": M/N} for this model and precision, on synthetic batches."""
    import torch

    from trainserve.train.maxbatch import max_batches

    sample = torch.from_numpy(splits.x_train[:1])
    high = getattr(splits.config, "vocab_size", 0)  # token ids for the transformer
    classes = splits.config.num_classes

    def make_batch(n: int) -> tuple[Any, Any]:
        shape = (n, *sample.shape[1:])
        x = (torch.randint(0, high, shape, device=device) if cfg.model == "transformer"
             else torch.randn(shape, device=device))
        if cfg.model == "cnn":
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, classes, (n,), device=device)

    torch.cuda.empty_cache()
    return max_batches(model, make_batch, cfg.precision, device, start=cfg.batch_size)


def evaluate(forward: Any, splits: Splits, device: str, cfg: TrainConfig, channels_last: bool) -> dict[str, float]:
    """Loss and accuracy on the test split (eval mode, no gradients, same autocast)."""
    import torch

    model = forward
    model.eval()
    bs = max(cfg.batch_size, 256)
    x_all, y_all = torch.from_numpy(splits.x_test), torch.from_numpy(splits.y_test)
    loss_sum, correct = torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long)
    with torch.no_grad(), autocast(device, cfg.precision):
        for i in range(0, len(x_all), bs):
            x = x_all[i:i + bs].to(device, non_blocking=True)
            y = y_all[i:i + bs].to(device, non_blocking=True)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            logits = model(x).float()
            loss_sum += torch.nn.functional.cross_entropy(logits, y, reduction="sum")
            correct += (logits.argmax(-1) == y).sum()
    model.train()
    n = len(y_all)
    return {"test_loss": _r(loss_sum.item() / n), "test_accuracy": _r(correct.item() / n)}


def _card(cfg: TrainConfig, splits: Splits, n_params: int) -> ModelCard:
    inputs, outputs = io_spec(splits.config)
    return ModelCard(family=cfg.model, preset=cfg.preset, config=config_to_dict(splits.config),
                     inputs=[TensorSpec(**t) for t in inputs], outputs=[TensorSpec(**t) for t in outputs],
                     classes=splits.classes, precision=cfg.precision, dataset=splits.source,
                     data=splits.params, parameters=n_params)


class _LazyLoss:
    """The running mean loss for the progress bar without stalling the GPU: each call starts an
    asynchronous copy to pinned host memory and shows the value the previous call copied."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.host: Any = None
        self.event: Any = None
        self.value: float | None = None

    def read(self, loss_sum: Any, seen: int) -> float | None:
        if not self.cuda:
            return float(loss_sum) / max(seen, 1)
        import torch

        if self.event is not None and self.event.query():
            self.value = float(self.host[0]) / max(self.host_seen, 1)
        if self.event is None or self.event.query():
            if self.host is None:
                self.host = torch.empty(1, pin_memory=True)
            self.host.copy_(loss_sum.detach().reshape(1), non_blocking=True)
            self.host_seen = seen
            self.event = torch.cuda.Event()
            self.event.record()
        return self.value


def _telemetry_sampler(device: str) -> Any:
    """The shared resource sampler (trainserve.core.telemetry) when present; None keeps the loop bare."""
    try:
        from trainserve.core.telemetry import Sampler
    except ImportError:
        return None
    sampler = Sampler(interval_s=0.1, gpu_index=0)
    sampler.start()
    return sampler


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _r(x: float) -> float:
    return round(float(x), 5)
