"""Turning a finished training run's measurements into the shared ProfileRecord (phase "train")."""

from __future__ import annotations

import copy
import logging
from typing import Any

from trainserve.core import bounds
from trainserve.core.profile import (
    LatencyStats,
    ProfileRecord,
    host_info,
    package_versions,
)
from trainserve.train.config import TrainConfig
from trainserve.train.data import Splits
from trainserve.train.device import device_name
from trainserve.train.flops import achieved_tflops, flops_per_sample, mfu, peak_lookup
from trainserve.train.mathmode import current
from trainserve.train.measure import StepTimes
from trainserve.train.memory import MemoryTracker, analytic_estimate
from trainserve.train.models import model_name

log = logging.getLogger(__name__)

INPUT_BOUND_SHARE = 0.20  # data wait above this share of step time -> "input-bound" warning
MIN_MEASURED_STEPS = 10


def build_record(cfg: TrainConfig, device: str, model: Any, splits: Splits, times: StepTimes,
                 memory: MemoryTracker, n_params: int, sampler: Any, workers: int, pin: bool,
                 channels_last: bool, wall_s: float) -> ProfileRecord:
    import torch

    name = model_name(splits.config)  # the zoo family, or the name of a model of your own (which has no preset)
    rec = ProfileRecord(phase="train", model=name, backend="torch", device=device,  # type: ignore[arg-type]
                        device_name=device_name(device), precision=cfg.precision, batch_size=cfg.batch_size,
                        preset=cfg.preset if name == cfg.model else None)
    rec.speed.latency = LatencyStats.from_samples_ms(times.step_ms)
    if times.total_s > 0:
        rec.speed.throughput_samples_s = round(times.samples / times.total_s, 2)
    memory_notes = memory.fill(rec.memory)
    rec.validity.warmup_excluded = times.warmup_excluded
    rec.validity.window_s = round(times.total_s, 4)
    rec.validity.samples = times.samples
    share = times.data_wait_share
    if len(times.step_ms) < MIN_MEASURED_STEPS:
        rec.validity.warnings.append(f"only {len(times.step_ms)} steps measured after {times.warmup_excluded} "
                                     "warm-up steps; train longer (--steps) for stable figures")
    if share is not None and share > INPUT_BOUND_SHARE:
        rec.validity.warnings.append(f"input-bound: {share:.0%} of step time waiting for data; "
                                     "raise --workers or keep the data on the device")
    rec.settings = {
        "lr": cfg.lr, "effective_lr": cfg.effective_lr, "lr_scale": cfg.lr_scale, "optimizer": "adamw",
        "epochs": cfg.epochs, "steps": cfg.steps, "seed": cfg.seed, "dataset": splits.source,
        "workers": workers, "pin_memory": pin, "compile": cfg.compile, "channels_last": channels_last,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark) if device == "cuda" else None,
        "torch_threads": torch.get_num_threads(), "timing": _timing(device, cfg),
        "warmup_steps": cfg.warmup_steps,
    }
    _add_math_mode(rec, device, cfg.precision, model)
    wait = LatencyStats.from_samples_ms(times.data_wait_ms)
    rec.extra = {"parameters": n_params, "data_wait_share": round(share, 4) if share is not None else None,
                 "data_wait_ms": {"mean": wait.mean_ms, "p50": wait.p50_ms, "p99": wait.p99_ms},
                 "host_cpu_ms_per_step": None if times.host_cpu_ms_per_step is None
                 else round(times.host_cpu_ms_per_step, 4),
                 "wall_s": round(wall_s, 3), "input_shape": list(splits.x_train.shape[1:]),
                 "memory_breakdown": memory_notes}
    rec.versions = package_versions("torch", "numpy")
    if device == "cuda":
        rec.versions["cuda"] = str(torch.version.cuda)
    rec.host = host_info()
    _add_flops(rec, cfg, device, model, splits)
    _add_estimate(rec, n_params, cfg.precision)
    if sampler is not None:
        s = sampler.apply(rec, times.samples)
        if times.total_s > 0:  # the sampler's CPU time over the measured steps, as a share of them
            rec.extra["telemetry"]["overhead_percent_of_step"] = round(s["overhead_cpu_s"] / times.total_s * 100, 4)
    return rec


def _timing(device: str, cfg: TrainConfig) -> str:
    if device != "cuda":
        return "perf_counter"
    return "cuda_synchronize_each_step" if cfg.sync_timing else "cuda_events"


def _add_flops(rec: ProfileRecord, cfg: TrainConfig, device: str, model: Any, splits: Splits) -> None:
    """FLOPs per sample (forward + backward, counted by torch), achieved TFLOP/s and MFU."""
    import torch


    try:
        # on a copy, with the RNG put back: counting runs a forward and backward pass
        with torch.random.fork_rng(devices=[0] if device == "cuda" else []):
            probe = copy.deepcopy(model)
            example = torch.from_numpy(splits.x_train[:2]).to(device)
            if device == "cuda" and cfg.model == "cnn":
                example = example.contiguous(memory_format=torch.channels_last)
            fps = float(flops_per_sample(probe, (example,), train=True))
            del probe
    except Exception as e:  # counting is a nicety: never fail a finished training run over it
        log.warning("could not count FLOPs: %s", e)
        return
    rec.speed.flops_per_sample = fps
    if rec.speed.throughput_samples_s:
        rec.speed.achieved_tflops = round(achieved_tflops(fps, rec.speed.throughput_samples_s), 6)
        if device == "cuda":  # CPU peaks are not tabulated: MFU stays null there
            add_mfu(rec, cfg.precision)


def add_mfu(rec: ProfileRecord, precision: str) -> None:
    """peak_tflops and MFU of a CUDA record with achieved_tflops, for the math that ran.

    The peak is settings["math_mode"]'s (tf32 for fp32 convs on Ampere and later), else
    `precision`'s. An MFU above 100% is withheld as an error (trainserve.core.bounds): null in speed.mfu,
    named in validity.errors, its raw value kept only in extra["out_of_bounds"].
    """

    peak = peak_lookup(rec.device_name, rec.settings.get("math_mode") or precision)
    rec.speed.peak_tflops = peak.tflops
    m = mfu(rec.speed.achieved_tflops, peak.tflops)
    rec.speed.mfu = round(m, 4) if m is not None else None
    if peak.tflops is None and peak.note:
        rec.validity.warnings.append(peak.note)
    bounds.withhold(rec, bounds.check_record(rec))


def _add_math_mode(rec: ProfileRecord, device: str, precision: str, model: Any) -> None:
    """settings["math_mode"] (the math MFU's peak is for) and settings["math"] (per op kind, the switches)."""
    try:
        math = current(device, precision, model)
    except (RuntimeError, AttributeError, ValueError) as e:  # never fail a finished run: MFU uses --precision
        log.warning("could not tell the math mode: %s", e)
        return
    rec.settings["math_mode"] = math.mode
    rec.settings["math"] = math.to_dict()
    if math.note and device == "cuda":
        rec.validity.warnings.append(math.note)


def _add_estimate(rec: ProfileRecord, n_params: int, precision: str) -> None:
    est = analytic_estimate(n_params, precision, optimizer="adamw")
    measured = [rec.memory.weights_bytes, rec.memory.gradients_bytes, rec.memory.optimizer_bytes]
    if None not in measured and sum(measured) > 0:
        # the estimate counts parameters only; measured weights also hold buffers (BatchNorm statistics)
        est["measured_states_bytes"] = int(sum(measured))
        est["estimate_over_measured"] = round(est["total_bytes"] / sum(measured), 4)
    rec.memory.estimate = est
