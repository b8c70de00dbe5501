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

from trainserve.core.card import CHECKPOINT_NAME, ModelCard, TensorSpec
from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic
from trainserve.core.telemetry import Sampler
from trainserve.train import checkpoint as ckpt
from trainserve.train import distributed, release, sharding
from trainserve.train.config import TrainConfig, scaled_lr
from trainserve.train.data import Splits, load_splits
from trainserve.train.device import (
    autocast,
    check_precision,
    grad_scaler,
    resolve_device,
)
from trainserve.train.gc_control import StepGC
from trainserve.train.loader import (
    DeviceFeed,
    EpochBatches,
    ResidentBatches,
    choose_placement,
    host_feed,
    make_loader,
)
from trainserve.train.maxbatch import max_batches
from trainserve.train.measure import StepTimer
from trainserve.train.memory import MemoryTracker, cpu_step_peak_bytes, tensor_bytes
from trainserve.train.models import build_model, config_to_dict, family_of, io_spec
from trainserve.train.usercheck import model_config
from trainserve.train.record import build_record
from trainserve.train.step import train_step
from trainserve.train.target import AccuracyTarget

log = logging.getLogger(__name__)

HISTORY_NAME, PROFILE_NAME = "history.json", "profile.json"
PROGRESS_EVERY_S = 0.25  # how often the progress callback (and its loss sync) runs
RSS_EVERY_STEPS = 16  # CPU: read the RSS every few steps (a /proc read, ~20 us)


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
    model_cfg = model_config(cfg)  # a model of the user's own is built and run on one batch here
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
    """Train `cfg` and write checkpoint.pt, model.json, history.json, profile.json into `out_dir`.

    The steps, in order: check the inputs (`prepare`), build the run (`_Training.__init__`), the
    epochs (`train`: the step loop, then each epoch's eval and checkpoint), the profile record
    (`record`), the max-batch search and GPU release (`finish`), and the artifacts (`write`).
    """
    gpu_before = release.before(cfg.device)  # NVML, before this run touches the GPU
    setup = prepare(cfg, Path(out_dir), resume)
    run = _Training(setup, Path(out_dir), rank, world_size, on_progress)
    run.train()
    record = run.record()
    run.finish(record, gpu_before)
    run.write(record)
    return FitResult(run.out_dir, run.card, run.history, record, resumed_from_step=run.start_step)


class _Training:
    """One training run of `fit`: the model, its optimizer, the data feed and the meters they share."""

    def __init__(self, setup: _Setup, out_dir: Path, rank: int, world_size: int,
                 on_progress: Callable[[Progress], None] | None) -> None:
        import torch

        cfg, device, splits, state = setup.cfg, setup.device, setup.splits, setup.state
        self.cfg, self.device, self.splits, self.out_dir, self.on_progress = cfg, device, splits, out_dir, on_progress
        self.dist_ctx = distributed.current()  # rank 0 of 1 unless launched by torchrun (see train/distributed.py)
        if self.dist_ctx.distributed:
            rank, world_size = self.dist_ctx.rank, self.dist_ctx.world_size
        self.is_main = rank == 0
        if self.is_main and state is None:
            for name in (CHECKPOINT_NAME, HISTORY_NAME, PROFILE_NAME, "model.json"):  # a fresh run replaces the old one
                (out_dir / name).unlink(missing_ok=True)

        # data: where the training split lives decides how batches reach the device
        self.channels_last = cfg.model == "cnn" and device == "cuda"
        self.batches = EpochBatches(len(splits.x_train), cfg.batch_size, cfg.seed, rank, world_size)
        data_bytes = splits.x_train.nbytes + splits.y_train.nbytes
        self.placement = choose_placement(cfg.data_placement, device, data_bytes, cfg.num_workers is not None)
        self.workers: int | None = None
        self.pin: bool | None = None
        self.resident: ResidentBatches | None = None
        if self.placement == "device":  # before the memory baseline: the resident split is not training memory
            self.resident = ResidentBatches(splits.x_train, splits.y_train, self.batches, device, self.channels_last)
        else:
            self.workers, self.pin = host_feed(cfg.num_workers, cfg.pin_memory, device)

        # model and optimizer, with their memory counted as they appear
        self.memory = MemoryTracker(device)
        torch.manual_seed(cfg.seed)
        model = build_model(splits.config)
        if self.channels_last:
            torch.backends.cudnn.benchmark = True  # fixed training shapes: autotune conv algorithms once (warm-up)
        model = model.to(device, memory_format=torch.channels_last) if self.channels_last else model.to(device)
        self.n_params = sum(p.numel() for p in model.parameters())
        offload = self._shard(model)  # before the optimizer: it must hold each rank's shards, not whole parameters
        self.memory.weights = tensor_bytes(list(model.parameters()) + list(model.buffers()))  # this rank's part
        self.memory.moment("weights")
        lr = scaled_lr(cfg.lr, cfg.batch_size, world_size, cfg.lr_scale)  # the global batch under DDP
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay,
                                           fused=device == "cuda" and not offload)  # offloaded: host tensors
        self.scaler = grad_scaler(device, cfg.precision)
        self.scaling = self.scaler.is_enabled()  # fp16 only: otherwise the scaler's calls are skipped, not just no-ops
        self.history: list[dict[str, Any]] = []
        self.start_step = 0
        if state is not None:
            self._load_state(model, state)
        self.model = model  # the plain module: state_dict, max-batch search
        forward = distributed.wrap(model, self.dist_ctx)  # DDP when world_size > 1
        self.forward = torch.compile(forward) if cfg.compile else forward

        # schedule
        self.spe = len(self.batches)  # steps per epoch
        self.total_steps = cfg.steps if cfg.steps is not None else cfg.epochs * self.spe
        self.n_epochs = math.ceil(self.total_steps / self.spe)
        if self.start_step >= self.total_steps:
            raise UserError(f"--resume: the checkpoint already has {self.start_step} steps "
                            f"({self.start_step // self.spe} epochs); raise --epochs or --steps to train further")
        if state is not None:
            ckpt.set_rng_state(state["rng"])  # last: nothing above may draw random numbers after this

        # meters
        self.loader = (make_loader(splits.x_train, splits.y_train, self.batches, self.workers, self.pin)
                       if self.placement == "host" else None)
        self.card = _card(cfg, splits, self.n_params)
        self.timer = StepTimer(device, cfg.warmup_steps, sync=cfg.sync_timing)
        self.sampler = _telemetry_sampler(device) if cfg.telemetry else None
        self.target = (AccuracyTarget(cfg.target_accuracy, device, self.sampler)
                       if cfg.target_accuracy is not None else None)
        self.step, self.first = self.start_step, True
        self.t_last = self.t_start = time.perf_counter()
        self.shown: Any = _LazyLoss(device)
        self.step_gc = StepGC()
        self.wall_s = 0.0

    def _load_state(self, model: Any, state: dict[str, Any]) -> None:
        """--resume: the checkpoint's model, optimizer, scaler and history. A sharded run's checkpoint is whole,
        its optimizer state keyed by parameter name: each rank takes its shards of it (sharding.load_full_state)."""
        was_sharded = bool(state.get("sharded"))
        if was_sharded != self.sharded:
            raise UserError(f"--resume: {self.out_dir / CHECKPOINT_NAME} was written by a "
                            f"{'sharded (--shard)' if was_sharded else 'replicated'} run; resume it "
                            f"{'with --nproc N --shard' if was_sharded else 'without --shard'}, or train it again "
                            "with --overwrite")
        self.memory.use_moments = False
        if self.sharded:
            sharding.load_full_state(model, self.optimizer, state["model"], state["optimizer"])
        else:
            model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self.history, self.start_step = list(state["history"]), int(state["step"])

    def _shard(self, model: Any) -> bool:
        """FSDP2 --shard: split the model across the ranks (its state to the host with --offload); True when
        offloaded, so the optimizer steps host tensors."""
        self.sharded = self.dist_ctx.distributed and self.dist_ctx.shard
        offload = self.sharded and self.dist_ctx.offload
        if self.sharded:
            sharding.shard(model, offload=offload)
        self.memory.offload = offload
        return offload

    # --- the epochs -------------------------------------------------------------------------------

    def train(self) -> None:
        """Every epoch left: the step loop, then its eval and checkpoint; stops early at --target-accuracy."""
        import torch

        try:
            self.step_gc.start()
            if self.target is not None:
                self.target.start()
            for epoch in range(self.start_step // self.spe, self.n_epochs):
                sums = self._train_epoch(epoch)
                entry = self._end_epoch(epoch, *sums)
                if self._target_reached(epoch, entry):
                    break
        except torch.OutOfMemoryError:
            done = f"; the checkpoint of epoch {self.history[-1]['epoch']} is kept" if self.history else ""
            raise UserError(f"out of memory on {self.device} at batch size {self.cfg.batch_size}{done}; "
                            "lower --batch-size (or use --precision bf16)") from None
        finally:
            self.step_gc.stop()
            if self.sampler is not None:
                self.sampler.stop()
        self.wall_s = time.perf_counter() - self.t_start

    def _train_epoch(self, epoch: int) -> tuple[Any, Any, int, float]:
        """The optimizer steps of one epoch; (loss sum, correct count, samples seen, seconds)."""
        import torch

        cfg, device, timer, memory = self.cfg, self.device, self.timer, self.memory
        self.model.train()
        self.batches.set_epoch(epoch, skip=self.step - epoch * self.spe)
        feed = (iter(self.resident) if self.loader is None
                else iter(DeviceFeed(iter(self.loader), device, self.channels_last)))
        loss_fn = torch.nn.functional.cross_entropy
        # running sums stay on the device: no host sync inside the step
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        seen, t_epoch = 0, time.perf_counter()
        while self.step < min(self.total_steps, (epoch + 1) * self.spe):
            timer.begin()
            try:
                x, y = next(feed)
            except StopIteration:
                break
            timer.fetched()
            args = (self.model, self.forward, loss_fn, x, y, self.optimizer, self.scaler, self.scaling, device,
                    cfg.precision, memory if self.first else None)
            if device == "cpu" and self.step - self.start_step == 1 and cfg.warmup_steps >= 2:
                # the second step (a warm-up one, left out of the timings) under torch's CPU memory profiler:
                # the optimizer state exists and gradients are None, as in every later step
                (logits, loss), memory.cpu_step_peak = cpu_step_peak_bytes(lambda: train_step(*args))
            else:
                logits, loss = train_step(*args)
            self.first = False
            self.optimizer.zero_grad(set_to_none=True)
            n = len(y)
            loss_sum.add_(loss.detach(), alpha=n)
            correct.add_((logits.detach().argmax(-1) == y).sum())
            timer.end(n)
            self.step += 1
            seen += n
            self._after_step(epoch, loss_sum, seen, t_epoch)
        timer.flush()
        return loss_sum, correct, seen, time.perf_counter() - t_epoch

    def _after_step(self, epoch: int, loss_sum: Any, seen: int, t_epoch: float) -> None:
        """Per-step bookkeeping outside the step itself: GC, telemetry window, DDP check, RSS, progress."""
        step = self.step
        self.step_gc.after_step(step)
        if self.sampler is not None and step - self.start_step == self.cfg.warmup_steps:
            self.sampler.mark()  # utilization and energy cover the measured steps only
        if self.dist_ctx.sync_check:
            distributed.after_step(self.model, self.dist_ctx, step)
        if self.device == "cpu" and step % RSS_EVERY_STEPS == 0:
            self.memory.sample()
        if self.on_progress is not None:
            now = time.perf_counter()
            if now - self.t_last >= PROGRESS_EVERY_S:
                self.t_last = now
                self.on_progress(Progress(epoch + 1, self.n_epochs, step, self.total_steps,
                                          self.shown.read(loss_sum, seen), seen / (now - t_epoch),
                                          self.memory.current_bytes()))

    def _end_epoch(self, epoch: int, loss_sum: Any, correct: Any, seen: int, train_s: float) -> dict[str, Any]:
        """The epoch's history entry (train figures, eval on the test split), and the checkpoint."""
        cfg, step = self.cfg, self.step
        entry = {"epoch": epoch + 1, "step": step, "train_loss": _r((loss_sum / max(seen, 1)).item()),
                 "train_accuracy": _r(correct.item() / max(seen, 1)), "train_seconds": _r(train_s),
                 "samples_s": _r(seen / train_s) if train_s > 0 else None}
        # --target-accuracy needs the held-out accuracy of every epoch to know when to stop
        if cfg.eval_each_epoch or self.target is not None or step >= self.total_steps:
            if self.on_progress is not None:
                self.on_progress(Progress(epoch + 1, self.n_epochs, step, self.total_steps, entry["train_loss"],
                                          None, self.memory.current_bytes(), phase="eval"))
            entry.update(evaluate(self.forward, self.splits, self.device, cfg, self.channels_last))
        entry.update(distributed.epoch_means(self.dist_ctx, entry, ("train_loss", "train_accuracy")))
        self.history.append(entry)
        log.debug("epoch %d/%d: %s", epoch + 1, self.n_epochs, entry)
        self.card.metrics = {k: v for k, v in entry.items() if k.startswith(("test_", "train_"))}
        if self.sharded:  # every rank joins the gather; the writer saves the whole model
            model_state, optimizer_state = sharding.full_state(self.model, self.optimizer)
        else:
            model_state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()} if self.is_main else {}
            optimizer_state = self.optimizer.state_dict() if self.is_main else {}
        if self.is_main:
            ckpt.save(self.out_dir / CHECKPOINT_NAME, {
                "model": model_state, "sharded": self.sharded,
                "optimizer": optimizer_state, "scaler": self.scaler.state_dict(),
                "epoch": step // self.spe, "step": step, "card": self.card.to_dict(), "rng": ckpt.rng_state(),
                "train_config": cfg.to_dict(), "history": self.history})
        return entry

    def _target_reached(self, epoch: int, entry: dict[str, Any]) -> bool:
        """Whether --target-accuracy was reached at this epoch's eval; every rank follows rank 0's answer."""
        if self.target is None:
            return False
        reached = self.target.check(epoch + 1, self.step, entry.get("test_accuracy"))
        return bool(distributed.all_gather(self.dist_ctx, reached)[0])

    # --- after training ---------------------------------------------------------------------------

    def record(self) -> Any:
        """The run's ProfileRecord (phase "train"), with every rank's throughput under DDP."""
        rec = build_record(self.cfg, self.device, self.model, self.splits, self.timer.times, self.memory,
                           self.n_params, self.sampler, self.workers, self.pin, self.channels_last, self.wall_s)
        rec.settings["data_placement"] = self.placement
        rec.extra["gc"] = self.step_gc.summary()
        rec.extra["data_on_device_bytes"] = (self.resident.nbytes if self.resident is not None and self.device == "cuda"
                                             else 0)
        if self.target is not None:
            rec.time_to_accuracy = self.target.result()
            if self.start_step:
                rec.validity.warnings.append(f"time to accuracy counts from step {self.start_step}, where this "
                                             "resumed run started, not from the first step of training")
        distributed.finish(rec, self.dist_ctx, self.timer.times, self.cfg)
        return rec

    def finish(self, rec: Any, gpu_before: int | None) -> None:
        """Free what training held; then the max-batch search (it needs the memory a fresh run has) and,
        on a single GPU, whether the run gave the device's memory back."""
        self.forward = self.optimizer = self.scaler = self.loader = self.resident = self.shown = None
        if self.cfg.find_max_batch:
            rec.memory.max_batch = search_max_batch(self.model, self.splits, self.cfg, self.device)
        self.model = None
        if self.device == "cuda" and not self.dist_ctx.distributed:
            release.finish(rec, gpu_before)

    def write(self, rec: Any) -> None:
        """Rank 0 writes the model card, history and profile (the checkpoint is written each epoch)."""
        if not self.is_main:
            return
        self.card.save(self.out_dir)
        write_json_atomic(self.out_dir / HISTORY_NAME, {"epochs": self.history, "steps_per_epoch": self.spe,
                                                        "batch_size": self.cfg.batch_size})
        rec.save(self.out_dir / PROFILE_NAME)


def search_max_batch(model: Any, splits: Splits, cfg: TrainConfig, device: str) -> dict[str, Any]:
    """{"train": N, "infer": M, "ratio": M/N} for this model and precision, on synthetic batches."""
    import torch


    sample = torch.from_numpy(splits.x_train[:1])
    high = getattr(splits.config, "vocab_size", 0)  # token ids for the transformer
    classes = splits.config.num_classes

    def make_batch(n: int) -> tuple[Any, Any]:
        shape = (n, *sample.shape[1:])
        x = (torch.randint(0, high, shape, device=device) if not sample.is_floating_point()
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
    family = family_of(splits.config)  # "user" for a model of your own, which has no preset
    return ModelCard(family=family, preset=cfg.preset if family == cfg.model else None,
                     config=config_to_dict(splits.config),
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
    """The shared resource sampler (trainserve.core.telemetry), started; tests and benchmarks swap this function."""
    sampler = Sampler(interval_s=0.1, gpu_index=0)
    sampler.start()
    return sampler



def _r(x: float) -> float:
    return round(float(x), 5)
