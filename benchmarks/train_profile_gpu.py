"""The training resource profile on a GPU: one `trainserve train --find-max-batch` run in a child process, checked.

The parent never touches CUDA (NVML only), so it can read the device's used memory before the
child starts and after it exits: what the run held after freeing everything it could (the
profile's gpu_held_bytes: CUDA context, loaded kernels) versus what stays after process exit
(should be 0). Then it checks the profile: memory breakdown sums to torch's peak within 5%,
MFU, energy per sample, max batch (train, infer, ratio). Writes $OUT/train_profile-<model>.json
and keeps the run under $OUT/runs (OUT defaults to ./bench-out). About a minute per model on an H200.

  python benchmarks/train_profile_gpu.py --model cnn          # small preset, batch 512, bf16
  python benchmarks/train_profile_gpu.py --model transformer  # small preset, batch 128, bf16
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainserve.core.telemetry import gpu_memory_used_bytes  # noqa: E402  (NVML only: no torch here)

BATCH = {"cnn": 512, "transformer": 128, "mlp": 512}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="cnn", choices=sorted(BATCH))
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    batch = BATCH[args.model]
    run = f"profile-{args.model}"
    cmd = [sys.executable, "-m", "trainserve", "train", "--model", args.model, "--preset", args.preset,
           "--device", "cuda", "--precision", "bf16", "--batch-size", str(batch), "--steps", str(args.steps),
           "--samples", str(batch * 60), "--warmup-steps", "20", "--find-max-batch",
           "--run", run, "--runs-dir", str(out / "runs")]
    before = gpu_memory_used_bytes(0)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    time.sleep(1.0)  # the driver frees an exited process's memory asynchronously
    after_exit = gpu_memory_used_bytes(0)
    result: dict = {"command": " ".join(cmd[1:]), "returncode": proc.returncode, "seconds": round(seconds, 1),
                    "nvml_used_before_bytes": before, "nvml_used_after_exit_bytes": after_exit,
                    "held_after_exit_bytes": None if None in (before, after_exit) else after_exit - before}
    if proc.returncode != 0:
        result["stderr_tail"] = proc.stderr[-3000:]
    else:
        prof = json.loads((out / "runs" / run / "train" / "profile.json").read_text())
        m, sp, en = prof["memory"], prof["speed"], prof["energy"]
        parts = sum(m[k] or 0 for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes"))
        result |= {
            "throughput_samples_s": sp["throughput_samples_s"], "mfu": sp["mfu"], "achieved_tflops": sp["achieved_tflops"],
            "energy_per_sample_j": en["energy_per_sample_j"], "energy_source": en["source"],
            "max_batch": m["max_batch"], "peak_bytes": m["peak_bytes"], "parts_sum_bytes": parts,
            "breakdown_within_5_percent": bool(m["peak_bytes"]) and abs(parts - m["peak_bytes"]) <= 0.05 * m["peak_bytes"],
            "breakdown": {k: m[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                                            "cuda_reserved_peak_bytes")},
            "memory_breakdown_detail": prof["extra"].get("memory_breakdown"),
            "estimate": m.get("estimate"),
            "gpu_released": m["gpu_released"], "gpu_held_bytes": m["gpu_held_bytes"],
            "gpu_release": prof["extra"].get("gpu_release"),
            "data_placement": prof["settings"].get("data_placement"),
            "host_cpu_ms_per_step": prof["extra"].get("host_cpu_ms_per_step"),
            "telemetry": prof["extra"].get("telemetry"), "warnings": prof["validity"]["warnings"],
        }
        result["all_present"] = all(result.get(k) is not None for k in ("mfu", "energy_per_sample_j", "max_batch",
                                                                          "gpu_released", "gpu_held_bytes"))
    path = out / f"train_profile-{args.model}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result.get(k) for k in ("returncode", "seconds", "all_present", "breakdown_within_5_percent",
                                                 "gpu_released", "gpu_held_bytes", "held_after_exit_bytes", "max_batch",
                                                 "mfu")}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
