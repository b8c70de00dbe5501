"""GPU check of the telemetry primitives (runs in about a minute on one GPU).

Writes $OUT/telemetry_check.json (OUT defaults to ./bench-out):
- CPU ms per call of every NVML / psutil reading (read_costs_ms), to explain the cost of a tick;
- the sampler's NVML fields during a busy bf16 matmul loop (utilization, memory, power, energy
  and its source), and its own overhead (CPU ms per tick, % of one core, % of a step);
- the device's peak table entry and the MFU of that loop (FLOPs counted by FlopCounterMode);
- max batch for training and inference of a small MLP (doubling + bisection with real OOMs);
- device memory (NVML) before, during and after, and whether it was released.

    OUT=bench-out python benchmarks/telemetry_check.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch
from torch import nn

from trainserve.train.flops import achieved_tflops, flops_per_sample, mfu, peak_lookup
from trainserve.train.maxbatch import max_batches
from trainserve.core.profile import ProfileRecord
from trainserve.core.telemetry import Sampler, gpu_memory_used_bytes, gpu_name, gpu_process_memory_bytes, read_costs


def main() -> None:
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        raise SystemExit("telemetry_check needs a CUDA device")
    wall_ms: dict = {}  # wall ms per call: a read far above its CPU time waits on the driver / GPU firmware
    cpu_ms = read_costs(0, wall=wall_ms)  # CPU ms per call of each reading a tick may make
    result: dict = {"device": torch.cuda.get_device_name(0), "nvml_name": gpu_name(0),
                    "mem_before_bytes": gpu_memory_used_bytes(0), "read_costs_ms": cpu_ms, "read_wall_ms": wall_ms}

    # A matmul-bound loop: (4096 x 4096) @ (4096 x 4096) in bf16, timed with synchronisation.
    layer = nn.Linear(4096, 4096, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    fps = flops_per_sample(layer, x, train=False)
    for _ in range(20):
        layer(x)
    torch.cuda.synchronize()
    steps, t_steps = 0, 0.0
    with Sampler(interval_s=0.1) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 10.0:
            s0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(50):
                    layer(x)
            torch.cuda.synchronize()
            t_steps += time.perf_counter() - s0
            steps += 1
        window = time.perf_counter() - t0
    samples = steps * 50 * 4096
    record = ProfileRecord(phase="infer", model="linear4096", backend="torch", device="cuda", precision="bf16")
    summary = sampler.apply(record, samples=samples)
    tflops = achieved_tflops(fps, samples / window)
    peak = peak_lookup(result["device"], "bf16")
    step_ms = t_steps / steps * 1e3
    result |= {
        "flops_per_sample": fps,
        "achieved_tflops": tflops,
        "peak": {"tflops": peak.tflops, "entry": peak.device, "note": peak.note},
        "mfu": mfu(tflops, peak.tflops),
        "sampler": {k: v for k, v in summary.items() if k != "timeline"},
        "timeline_points": len(summary["timeline"]),
        "energy": record.energy.__dict__,
        "utilization": {k: v for k, v in record.utilization.__dict__.items() if k != "timeline"},
        "step_ms": step_ms,
        # the sampler's CPU time per step, relative to the step (the < 1% requirement)
        "overhead_percent_of_step": (summary["overhead_cpu_s"] / steps) / (t_steps / steps) * 100,
        "mem_during_bytes": gpu_memory_used_bytes(0),
        "process_mem_during_bytes": gpu_process_memory_bytes(0),
    }
    del layer, x

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))

    def make_batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 1024, device="cuda"), torch.randint(0, 10, (n,), device="cuda")

    t0 = time.perf_counter()
    result["max_batch"] = max_batches(mlp, make_batch, "bf16", "cuda", limit=2**22)
    result["max_batch_seconds"] = time.perf_counter() - t0
    del mlp
    torch.cuda.empty_cache()
    result["mem_after_bytes"] = gpu_memory_used_bytes(0)
    result["torch_reserved_after_bytes"] = torch.cuda.memory_reserved()
    (out / "telemetry_check.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
