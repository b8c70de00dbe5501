"""A training sweep on one device: throughput, step time and peak memory over batch sizes and precisions.

`sweep(base, device, config)` trains short points (a few warm-up steps left out, then timed steps)
at batch sizes doubling from `min_batch`, in each precision the device runs well: fp32 everywhere
(on CUDA with its TF32 policy recorded), bf16 on CUDA, and bf16 on a CPU only when a quick probe
finds it faster than fp32. A precision stops climbing at the first out-of-memory (CUDA), when
throughput stopped growing, at `max_batch`, or when its next point would overrun the time budget;
such a point is recorded as skipped. Each measured point is a ProfileRecord (phase "train",
`extra["sweep"] = True`), written by `write_sweep` to `runs/<run>/sweep/<device>/` with an
index.json; the device's best point is the one with the most samples/s.

At the best point it then measures the data path (train/datapath.py): the host DataLoader as training
feeds it beside the split resident on the device, written to that point's record (`extra["data_path"]`) and
to index.json; DATA_PATH_SHARE of the budget is kept for it.

Points reuse the training loop's parts (model zoo, StepTimer, MemoryTracker, build_record, the
telemetry sampler) and keep one batch resident on the device, tiled from the training split: the
sweep measures the model's compute at each batch, not the input pipeline (see `trainserve train`).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.fsutil import staged_dir, write_json_atomic
from trainserve.core.telemetry import Sampler
from trainserve.train.config import TrainConfig
from trainserve.train.datapath import measure_data_path
from trainserve.train.data import load_splits
from trainserve.train.device import (
    check_precision,
    device_name,
    grad_scaler,
    precision_supported,
    resolve_device,
)
from trainserve.train.maxbatch import is_oom, release_memory
from trainserve.train.measure import StepTimer
from trainserve.train.memory import MemoryTracker, cpu_step_peak_bytes, tensor_bytes
from trainserve.train.models import build_model
from trainserve.train.usercheck import model_config
from trainserve.train.record import build_record
from trainserve.train.step import train_step

log = logging.getLogger(__name__)

INDEX_NAME = "index.json"
DEFAULT_BUDGET_S = 60.0  # per device; `trainserve run --quick` passes 25
MIN_TIMED_STEPS = 3  # a point cut short at the budget still has this many timed steps
DATA_PATH_SHARE = 0.15  # of the budget, kept for the data path at the best point
CPU_MAX_BATCH = 4096  # a CPU process is killed, not told, when it runs out of memory: stay well below


@dataclass
class SweepConfig:
    """How much of the batch x precision grid one device's sweep may measure."""

    budget_s: float = DEFAULT_BUDGET_S  # wall seconds for the whole sweep on this device, probe included
    min_batch: int = 8  # the first batch size; the next ones double it
    max_batch: int | None = None  # None: CPU_MAX_BATCH on a CPU, 2**20 on CUDA (out-of-memory stops it first)
    precisions: tuple[str, ...] | None = None  # None: fp32 and bf16 on CUDA; fp32 (+ bf16 if the probe wins) on a CPU
    warmup_steps: int = 3  # steps per point left out of the statistics (allocator, cudnn autotuning)
    timed_steps: int = 10  # steps per point that are measured
    min_gain: float = 0.05  # a point must beat the precision's best samples/s by this share to count as growth
    patience: int = 2  # stop a precision after this many points in a row without growth
    min_points: int = 3  # batch sizes measured per precision before growth is judged
    probe_batch: int = 32  # CPU bf16 probe: batch of the fp32-vs-bf16 comparison
    probe_min_speedup: float = 1.1  # bf16 joins a CPU sweep only when this much faster than fp32
    data_path: bool = True  # at the best point, the host DataLoader beside the split resident on the device

    def __post_init__(self) -> None:
        if not self.budget_s > 0:
            raise UserError(f"sweep budget_s={self.budget_s!r} is invalid; give a number of seconds > 0 "
                            "(--sweep-budget-s), or turn the sweep off with --no-sweep")
        for name in ("min_batch", "timed_steps", "patience", "min_points", "probe_batch"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise UserError(f"sweep {name}={value!r} is invalid; allowed: an integer >= 1")
        if self.max_batch is not None and self.max_batch < self.min_batch:
            raise UserError(f"sweep max_batch={self.max_batch!r} is invalid; allowed: >= min_batch ({self.min_batch})")
        if self.warmup_steps < 0:
            raise UserError(f"sweep warmup_steps={self.warmup_steps!r} is invalid; allowed: an integer >= 0")
        if self.precisions is not None:
            bad = [p for p in self.precisions if p not in ("fp32", "bf16", "fp16")]
            if bad or not self.precisions:
                raise UserError(f"sweep precisions={self.precisions!r} are invalid; allowed: fp32, bf16, fp16")


@dataclass
class SweepPoint:
    """One (batch, precision) of the grid: measured (with its record), skipped, or out of memory."""

    device: str
    precision: str
    batch_size: int
    status: str  # "measured" | "skipped" | "oom"
    reason: str = ""  # why skipped / stopped
    seconds: float = 0.0  # wall time the point took, model build and record included
    record: Any = None  # trainserve.core.profile.ProfileRecord when measured

    def row(self) -> dict[str, Any]:
        """The point's line in index.json (and in summary.json's operating points)."""
        out: dict[str, Any] = {"device": self.device, "precision": self.precision, "batch_size": self.batch_size,
                               "status": self.status, "seconds": round(self.seconds, 3)}
        if self.reason:
            out["reason"] = self.reason
        r = self.record
        if r is not None:
            out |= {"throughput_samples_s": r.speed.throughput_samples_s, "p50_ms": r.speed.latency.p50_ms,
                    "p99_ms": r.speed.latency.p99_ms, "peak_bytes": r.memory.peak_bytes,
                    "gpu_util_mean_percent": r.utilization.gpu_util_mean_percent, "file": file_name(self)}
        return out


@dataclass
class SweepResult:
    device: str
    device_name: str
    points: list[SweepPoint]
    budget_s: float
    elapsed_s: float
    precisions: list[str]
    probe: dict[str, Any] | None  # the CPU's fp32-vs-bf16 probe, when it ran
    math_mode: dict[str, Any]  # TF32 policy on CUDA, threads on CPU
    notes: list[str] = field(default_factory=list)
    data_path: dict[str, Any] | None = None  # DataPathResult.to_dict(), or {"skipped": why, ...}; None: not asked

    @property
    def measured(self) -> list[SweepPoint]:
        return [p for p in self.points if p.status == "measured"]

    @property
    def best(self) -> SweepPoint | None:
        """The point with the most samples/s (ties: the smaller batch, which needs less memory)."""
        ok = [p for p in self.measured if p.record.speed.throughput_samples_s]
        return max(ok, key=lambda p: (p.record.speed.throughput_samples_s, -p.batch_size)) if ok else None


def file_name(point: SweepPoint) -> str:
    return f"{point.precision}-b{point.batch_size}.json"


def sweep(base: TrainConfig, device: str, config: SweepConfig,
          on_point: Callable[[SweepPoint], None] | None = None) -> SweepResult:
    """Measure `base`'s model on `device` over the grid; `on_point` sees each point as it ends."""
    import torch


    device = resolve_device(device)
    model_cfg = model_config(base)  # a model of your own is built and run once here: not the sweep's time
    t0 = time.monotonic()
    deadline = t0 + config.budget_s
    climb_end = deadline - (DATA_PATH_SHARE * config.budget_s if config.data_path else 0.0)
    # a small split: the sweep tiles it into batches on the device, it never iterates over it
    splits = load_splits(model_cfg, base.dataset, min(base.samples, 1024), base.seed)
    max_batch = config.max_batch or (CPU_MAX_BATCH if device == "cpu" else 2**20)
    probe = None
    if config.precisions is not None:
        precisions = list(config.precisions)
        for p in precisions:
            check_precision(device, p)
    elif device == "cuda":
        precisions = ["fp32"] + (["bf16"] if precision_supported("cuda", "bf16") else [])
    else:
        precisions = ["fp32"]
        if precision_supported("cpu", "bf16"):
            probe = _probe_bf16(base, splits, config)
            if probe["bf16_faster"]:
                precisions.append("bf16")
    points: list[SweepPoint] = []
    notes: list[str] = []
    for i, precision in enumerate(precisions):
        # each precision gets an equal share of what is left; a precision that ends early leaves it to the next
        share_end = time.monotonic() + (climb_end - time.monotonic()) / (len(precisions) - i)
        first = next((p for p in points if p.status == "measured"), None)  # the cost of a first point
        points += _climb(base, splits, device, precision, config, max_batch, share_end, on_point, first)
    result = SweepResult(device=device, device_name=device_name(device), points=points, budget_s=config.budget_s,
                         elapsed_s=time.monotonic() - t0, precisions=precisions, probe=probe,
                         math_mode=_math_mode(device, torch), notes=notes)
    if not result.measured:
        raise UserError(f"the {device} sweep measured no point within its {config.budget_s:g} s budget; "
                        "raise --sweep-budget-s or use a smaller --preset")
    if config.data_path and result.best is not None:
        result.data_path = _data_path(base, result, config, deadline)
        result.best.record.extra["data_path"] = result.data_path
        result.elapsed_s = time.monotonic() - t0
    return result


def _data_path(base: TrainConfig, result: SweepResult, config: SweepConfig, deadline: float) -> dict[str, Any]:
    """The data path at the best point, or why it was skipped (the budget, or the device's memory)."""
    best = result.best
    assert best is not None
    at = {"device": result.device, "batch_size": best.batch_size, "precision": best.precision}
    need = 2 * best.seconds  # two sides, each about the best point's cost: a model, warm-up and timed steps
    left = deadline - time.monotonic()
    if need > left:
        return at | {"skipped": f"would exceed the sweep's time budget (needs ~{need:.1f} s, {max(left, 0):.1f} s "
                                "left); raise --sweep-budget-s"}
    try:
        return measure_data_path(base, result.device, best.batch_size, best.precision, config.warmup_steps,
                                 config.timed_steps, deadline).to_dict()
    except Exception as e:
        if not is_oom(e):
            raise
    release_memory()  # outside the handler: its traceback holds the tensors
    return at | {"skipped": f"out of memory on {result.device} with the split resident beside batch "
                            f"{best.batch_size}"}


def _climb(base: TrainConfig, splits: Any, device: str, precision: str, config: SweepConfig, max_batch: int,
           share_end: float, on_point: Callable[[SweepPoint], None] | None,
           last: SweepPoint | None = None) -> list[SweepPoint]:
    """Batch sizes min_batch, 2x, 4x ... in one precision, until a stop rule fires.

    `last` is the point the first estimate starts from (another precision's first point), if any.
    """
    out: list[SweepPoint] = []
    best = 0.0
    flat = 0  # points in a row without growth
    batch = config.min_batch
    while batch <= max_batch:
        if last is not None or time.monotonic() >= share_end:
            # a step's time grows at most in proportion to the batch: the doubled point costs <= 2x the last
            need = last.seconds * batch / last.batch_size if last is not None else 0.0
            left = share_end - time.monotonic()
            if need > left or left <= 0:
                point = SweepPoint(device, precision, batch, "skipped",
                                   f"would exceed the time budget (needs ~{need:.1f} s, {max(left, 0):.1f} s left)")
                out.append(point)
                if on_point:
                    on_point(point)
                break
        point = measure_point(base, splits, device, precision, batch, config, deadline=share_end)
        out.append(point)
        if on_point:
            on_point(point)
        if point.status == "oom" or point.record.validity.partial:
            break
        last = point
        samples_s = point.record.speed.throughput_samples_s or 0.0
        if samples_s > best * (1 + config.min_gain):
            flat = 0
        else:
            flat += 1
        best = max(best, samples_s)
        if len(out) >= config.min_points and flat >= config.patience:
            log.debug("%s %s: throughput stopped growing at batch %d", device, precision, batch)
            break
        batch *= 2
    return out


def measure_point(base: TrainConfig, splits: Any, device: str, precision: str, batch: int,
                  config: SweepConfig, deadline: float | None = None) -> SweepPoint:
    """Train `config.warmup_steps + config.timed_steps` steps at (batch, precision) on a fresh model.

    Out of memory on CUDA gives a point with status "oom"; the memory is given back either way, so
    the next point starts from the same free device memory. Past `deadline` (time.monotonic()) the
    point stops after MIN_TIMED_STEPS timed steps and its record is marked partial.
    """

    t0 = time.monotonic()
    cfg = base.replace(device=device, precision=precision, batch_size=batch, warmup_steps=config.warmup_steps,
                       steps=config.warmup_steps + config.timed_steps, epochs=1, find_max_batch=False)
    oom = False
    record = None
    try:
        record = _train_point(cfg, splits, device, deadline)
    except Exception as e:
        if not is_oom(e):
            raise
        oom = True  # released below, outside the handler: the traceback holds the tensors
    release_memory()
    gc.collect()
    seconds = time.monotonic() - t0
    if oom:
        return SweepPoint(device, precision, batch, "oom", f"out of memory on {device} at batch {batch}", seconds)
    record.extra["sweep"] = True
    record.extra["sweep_point"] = {"batch_size": batch, "precision": precision, "warmup_steps": config.warmup_steps,
                                   "timed_steps": config.timed_steps, "point_wall_s": round(seconds, 3)}
    reason = "; ".join(w for w in record.validity.warnings if w.startswith("cut short")) if record.validity.partial else ""
    return SweepPoint(device, precision, batch, "measured", reason, seconds, record)


def _train_point(cfg: TrainConfig, splits: Any, device: str, deadline: float | None = None) -> Any:
    """The training step of train.loop.fit on one resident batch; returns the point's ProfileRecord."""
    import torch


    channels_last = cfg.model == "cnn" and device == "cuda"  # as fit() does
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.backends.cudnn.benchmark = channels_last
    x_all, y_all = torch.from_numpy(splits.x_train), torch.from_numpy(splits.y_train)
    idx = torch.arange(cfg.batch_size) % len(x_all)  # tile the split up to the batch size
    memory = MemoryTracker(device)  # after the batch's host copy, before anything on the device
    x, y = x_all[idx].to(device), y_all[idx].to(device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    torch.manual_seed(cfg.seed)
    model = build_model(splits.config)
    model = model.to(device, memory_format=torch.channels_last) if channels_last else model.to(device)
    memory.weights = tensor_bytes(list(model.parameters()) + list(model.buffers()))
    memory.moment("weights")
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.effective_lr, weight_decay=cfg.weight_decay,
                                  fused=device == "cuda")
    scaler = grad_scaler(device, cfg.precision)
    scaling = scaler.is_enabled()
    forward = torch.compile(model) if cfg.compile else model
    timer = StepTimer(device, cfg.warmup_steps, sync=False)  # CUDA events, resolved once in flush()
    sampler = Sampler(interval_s=0.1, gpu_index=0).start() if cfg.telemetry else None
    loss_fn = torch.nn.functional.cross_entropy
    model.train()
    t_start = time.perf_counter()
    total = cfg.steps or 1
    steps_done = 0
    try:
        for step in range(total):
            if (deadline is not None and step >= cfg.warmup_steps + MIN_TIMED_STEPS
                    and time.monotonic() > deadline):
                break
            if step == cfg.warmup_steps:
                if device == "cuda":
                    torch.cuda.synchronize()  # the window starts with the device idle
                if sampler is not None:
                    sampler.mark()
            timer.begin()
            timer.fetched()
            args = (model, forward, loss_fn, x, y, optimizer, scaler, scaling, device, cfg.precision,
                    memory if step == 0 else None)
            if device == "cpu" and step == 1 and cfg.warmup_steps >= 2:
                # a warm-up step under torch's CPU memory profiler, as fit() does: the point's working set
                # (activations, gradients) counted as the CUDA allocator counts it, not RSS growth
                (logits, loss), memory.cpu_step_peak = cpu_step_peak_bytes(lambda: train_step(*args))
            else:
                logits, loss = train_step(*args)
            optimizer.zero_grad(set_to_none=True)
            timer.end(cfg.batch_size)
            steps_done += 1
            if device == "cpu":
                memory.sample()
        timer.flush()  # one synchronisation: the last step's end event
    finally:
        if sampler is not None:
            sampler.stop()
    wall_s = time.perf_counter() - t_start
    del forward, optimizer, scaler, logits, loss, x, y
    record = build_record(cfg, device, model, splits, timer.times, memory, n_params, sampler, 0, False,
                          channels_last, wall_s)
    record.settings["data_placement"] = "device (one batch resident, tiled from the training split)"
    # the batch lives on the device, so an idle GPU here means the batch is too small to fill it, not that
    # input is starved: the telemetry's generic input-bound hint would mislead
    record.validity.warnings = [
        w.replace("the run is likely input-bound", f"batch {cfg.batch_size} is too small to keep the GPU busy "
                  "(the data is already on the device)") for w in record.validity.warnings]
    if steps_done < total:
        record.validity.partial = True
        record.validity.warnings.append(f"cut short at the sweep's time budget after {steps_done - cfg.warmup_steps} "
                                        f"of {total - cfg.warmup_steps} timed steps")
    del model
    return record


def _probe_bf16(base: TrainConfig, splits: Any, config: SweepConfig) -> dict[str, Any]:
    """CPU: a few steps of fp32 and of bf16 at one batch; bf16 joins the sweep only if clearly faster."""
    quick = SweepConfig(budget_s=config.budget_s, warmup_steps=1, timed_steps=3)
    cfg = base.replace(telemetry=False)
    times = {}
    for p in ("fp32", "bf16"):
        point = measure_point(cfg, splits, "cpu", p, config.probe_batch, quick)
        times[p] = point.record.speed.throughput_samples_s or 0.0
    faster = times["bf16"] >= times["fp32"] * config.probe_min_speedup
    return {"batch_size": config.probe_batch, "fp32_samples_s": times["fp32"], "bf16_samples_s": times["bf16"],
            "min_speedup": config.probe_min_speedup, "bf16_faster": faster}


def _math_mode(device: str, torch: Any) -> dict[str, Any]:
    """What 'fp32' means here: on CUDA whether matmuls and convolutions may use TF32 tensor cores."""
    if device == "cuda":
        return {"fp32_matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "fp32_cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "policy": "torch defaults, unchanged: TF32 off for matmuls, on for cuDNN convolutions"
                if not torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
                else "as set in this process"}
    return {"torch_threads": torch.get_num_threads()}


def write_sweep(result: SweepResult, out_dir: Path, extra: dict[str, Any] | None = None) -> Path:
    """Write one record per measured point and index.json into `out_dir` (replaced as a whole)."""
    with staged_dir(out_dir) as tmp:
        for p in result.measured:
            p.record.extra["sweep_point"]["math_mode"] = result.math_mode
            p.record.save(tmp / file_name(p))
        best = result.best
        write_json_atomic(tmp / INDEX_NAME, {
            "kind": "trainserve training sweep",
            "device": result.device, "device_name": result.device_name,
            "budget_s": result.budget_s, "elapsed_s": round(result.elapsed_s, 3),
            "precisions": result.precisions, "probe": result.probe, "math_mode": result.math_mode,
            "best_by": "throughput_samples_s",
            "best": best.row() if best else None,
            "points": [p.row() for p in result.points],
            "notes": result.notes, "data_path": result.data_path, **(extra or {})})
    return out_dir / INDEX_NAME
