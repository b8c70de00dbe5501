"""Data-parallel scaling: train each model with 1 and N processes for a fixed number of steps.

    OUT=bench-out python benchmarks/ddp_scaling.py            # GPUs: N = torch.cuda.device_count()
    OUT=bench-out python benchmarks/ddp_scaling.py --cpu      # CPU smoke check: gloo, tiny presets, N = 2

Every run is `trainserve train --nproc n` (torchrun, DDP; the 1-process run goes through torchrun
too, so both sides pay the same launch path). The per-rank batch is fixed (weak scaling), so the
global batch grows with N. Writes $OUT/ddp_scaling.json: per model and process count the aggregate
throughput (samples/s over all ranks), per-rank figures, and
scaling efficiency = throughput_N / (N * throughput_1). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file: this tree's trainserve, installed or not

from trainserve.core.procs import child_env  # noqa: E402

# (model, preset, per-rank batch) per mode
GPU_CONFIGS = [("cnn", "small", 512), ("transformer", "small", 128)]
CPU_CONFIGS = [("cnn", "tiny", 32), ("transformer", "tiny", 32)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true", help="gloo on CPU with tiny presets (smoke check)")
    p.add_argument("--nproc", type=int, default=None, help="N (default: GPU count; 2 on CPU)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 200 GPU, 30 CPU)")
    p.add_argument("--warmup-steps", type=int, default=None, help="steps left out of timing (default 20 GPU, 5 CPU)")
    p.add_argument("--precision", default=None, help="default bf16 on GPU, fp32 on CPU")
    p.add_argument("--models", default=None, help="comma list of family:preset:batch, e.g. cnn:small:512")
    a = p.parse_args()

    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    import torch

    gpus = torch.cuda.device_count()
    cpu = a.cpu or gpus == 0
    n = a.nproc or (2 if cpu else gpus)
    steps = a.steps or (30 if cpu else 200)
    warmup = a.warmup_steps if a.warmup_steps is not None else (5 if cpu else 20)
    precision = a.precision or ("fp32" if cpu else "bf16")
    configs = CPU_CONFIGS if cpu else GPU_CONFIGS
    if a.models:
        configs = [(f, pr, int(b)) for f, pr, b in (m.split(":") for m in a.models.split(","))]
    counts = [1] if n == 1 else [1, n]

    results: list[dict[str, Any]] = []
    for family, preset, batch in configs:
        base: float | None = None
        for k in counts:
            run = f"ddp-{family}-{preset}-{k}"
            cmd = [sys.executable, "-m", "trainserve", "train", "--nproc", str(k), "--model", family,
                   "--preset", preset, "--device", "cpu" if cpu else "cuda", "--precision", precision,
                   "--batch-size", str(batch), "--steps", str(steps), "--warmup-steps", str(warmup),
                   "--run", run, "--runs-dir", str(out / "runs")]
            print(f"[ddp_scaling] {' '.join(cmd[1:])}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True)
            wall = time.perf_counter() - t0
            (out / f"{run}.log").write_text(proc.stdout + proc.stderr)
            row: dict[str, Any] = {"model": family, "preset": preset, "nproc": k, "per_rank_batch": batch,
                                   "global_batch": batch * k, "steps": steps, "precision": precision,
                                   "wall_s": round(wall, 2), "rc": proc.returncode}
            if proc.returncode != 0:
                row["error"] = (proc.stderr or proc.stdout)[-2000:]
                results.append(row)
                continue
            rec = json.loads((out / "runs" / run / "train" / "profile.json").read_text())
            ddp = rec.get("extra", {}).get("ddp", {})
            tput = rec["speed"]["throughput_samples_s"]
            row.update({"throughput_samples_s": tput, "step_p50_ms": rec["speed"]["latency"]["p50_ms"],
                        "peak_bytes_per_rank_max": ddp.get("peak_bytes_max", rec["memory"]["peak_bytes"]),
                        "ranks": rec.get("extra", {}).get("ranks", []), "device_name": rec.get("device_name")})
            if k == 1:
                base = tput
            if base and tput:
                row["speedup"] = round(tput / base, 4)
                row["scaling_efficiency"] = round(tput / (k * base), 4)
            results.append(row)
            print(f"[ddp_scaling]   -> {tput} samples/s, efficiency {row.get('scaling_efficiency')}", flush=True)

    doc = {"benchmark": "ddp_scaling", "date": _dt.date.today().isoformat(), "mode": "cpu-gloo" if cpu else "cuda-nccl",
           "gpus_visible": gpus, "cpu_count": os.cpu_count(), "torch": torch.__version__,
           "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST")},
           "results": results}
    (out / "ddp_scaling.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"[ddp_scaling] wrote {out / 'ddp_scaling.json'}")
    return 0 if all(r["rc"] == 0 for r in results) else 1


def _env() -> dict[str, str]:
    return child_env(PYTHONUNBUFFERED="1")


if __name__ == "__main__":
    raise SystemExit(main())
