"""CPU vs GPU training of the same model: two profiles and their speed-up, in `runs/<run>/compare/`."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from train.config import TrainConfig
from trainserve.errors import UserError
from trainserve.fsutil import staged_dir, write_json_atomic


def compare_devices(cfg: TrainConfig, out_dir: Path, on_progress: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """Train `cfg` on cpu, then on cuda; write profile-cpu.json, profile-cuda.json and speedup.json."""
    import torch

    from train.loop import fit, prepare

    if not torch.cuda.is_available():
        raise UserError("compare needs a CUDA GPU and none is visible to PyTorch; "
                        "run it on a GPU machine, or train on one device with trainserve train --device cpu")
    cpu_cfg, gpu_cfg = cfg.replace(device="cpu"), cfg.replace(device="cuda")
    scratch_parent = out_dir.parent
    for c in (cpu_cfg, gpu_cfg):  # every user mistake surfaces before the long CPU run
        prepare(c, scratch_parent, resume=False)
    records = {}
    with staged_dir(out_dir) as tmp:
        for c in (cpu_cfg, gpu_cfg):
            work = tmp / f"train-{c.device}"
            result = fit(c, work, on_progress=on_progress)
            records[c.device] = result.record
            result.record.save(tmp / f"profile-{c.device}.json")
            shutil.rmtree(work)
        speedup = speedup_summary(records["cpu"], records["cuda"])
        write_json_atomic(tmp / "speedup.json", speedup)
    return speedup


def speedup_summary(cpu: Any, gpu: Any) -> dict[str, Any]:
    """GPU over CPU: throughput ratio and step-time ratio, with both devices named."""
    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    return {
        "model": cpu.model, "preset": cpu.preset, "precision": cpu.precision, "batch_size": cpu.batch_size,
        "cpu": {"device_name": cpu.device_name, "throughput_samples_s": cpu.speed.throughput_samples_s,
                "step_p50_ms": cpu.speed.latency.p50_ms, "peak_bytes": cpu.memory.peak_bytes},
        "cuda": {"device_name": gpu.device_name, "throughput_samples_s": gpu.speed.throughput_samples_s,
                 "step_p50_ms": gpu.speed.latency.p50_ms, "peak_bytes": gpu.memory.peak_bytes},
        "speedup_throughput": ratio(gpu.speed.throughput_samples_s, cpu.speed.throughput_samples_s),
        "speedup_step_p50": ratio(cpu.speed.latency.p50_ms, gpu.speed.latency.p50_ms),
    }
