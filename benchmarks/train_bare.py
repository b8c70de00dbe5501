"""Pipeline vs bare PyTorch loop: same model, batch, precision and optimizer, side by side in one process.

The bare loop trains on one synthetic batch already on the device (no DataLoader, no timing per
step, no telemetry): the fastest this model can train here. The pipeline is `train.loop.fit` as
`trainserve train` runs it (DataLoader, prefetch, per-step timing, telemetry sampler, eval and a
checkpoint each epoch); its throughput is over its measured steps. Runs bare, pipeline, bare and
compares the pipeline with the faster bare run. Results go to $OUT/train_bare-<suite>.json
(OUT defaults to ./bench-out); the file is rewritten after every case, so a cut-short run keeps its results.

  python benchmarks/train_bare.py --suite gpu       # H200: cnn small b512 bf16, transformer small b128 bf16 (eager, compiled)
  python benchmarks/train_bare.py --suite host-cpu  # the same cnn/transformer small runs on the host's CPU cores
  python benchmarks/train_bare.py --suite cpu       # no GPU: tiny presets on the CPU
  python benchmarks/train_bare.py --model cnn --preset small --batch 512 --precision bf16 --steps 1500
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass
class Case:
    model: str
    preset: str
    batch: int
    precision: str
    steps: int  # measured steps per run (warm-up comes on top)
    compile: bool = False
    device: str = "auto"
    warmup: int = 20
    bare_runs: int = 2  # bare before and after the pipeline (drift shows); 1 where a run is slow


SUITES = {
    # the GPU side: ~2-3 minutes on an H200
    "gpu": [Case("cnn", "small", 512, "bf16", 1500, device="cuda"),
            Case("transformer", "small", 128, "bf16", 500, device="cuda"),
            Case("transformer", "small", 128, "bf16", 500, compile=True, device="cuda", warmup=30)],
    # the same runs on the host's CPU cores (few steps: a CPU step takes seconds here)
    "host-cpu": [Case("cnn", "small", 512, "bf16", 8, device="cpu", warmup=2, bare_runs=1),
                 Case("transformer", "small", 128, "bf16", 6, device="cpu", warmup=2, bare_runs=1)],
    # a machine without a GPU: tiny presets, about two minutes on 2 busy cores
    "cpu": [Case("cnn", "tiny", 64, "fp32", 30, device="cpu", warmup=5),
            Case("transformer", "tiny", 64, "fp32", 30, device="cpu", warmup=5)],
}


def bare(case: Case, device: str, model_cfg) -> dict:
    """The fastest loop: fixed device tensors, AdamW (fused on CUDA), autocast, one sync at each end."""
    import torch

    from train.device import autocast, grad_scaler
    from train.models import build_model

    torch.manual_seed(0)
    model = build_model(model_cfg)
    cl = case.model == "cnn" and device == "cuda"
    torch.backends.cudnn.benchmark = cl  # as the pipeline does for CNNs on CUDA
    model = model.to(device, memory_format=torch.channels_last) if cl else model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    scaler = grad_scaler(device, case.precision)
    fwd = torch.compile(model) if case.compile else model
    if case.model == "transformer":
        x = torch.randint(0, model_cfg.vocab_size, (case.batch, model_cfg.seq_len), device=device)
    elif case.model == "cnn":
        x = torch.randn(case.batch, 3, model_cfg.image_size, model_cfg.image_size, device=device)
        x = x.contiguous(memory_format=torch.channels_last) if cl else x
    else:
        x = torch.randn(case.batch, model_cfg.in_features, device=device)
    y = torch.randint(0, model_cfg.num_classes, (case.batch,), device=device)

    def step() -> None:
        with autocast(device, case.precision):
            loss = torch.nn.functional.cross_entropy(fwd(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(case.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(case.steps):
        step()
    sync()
    dt = time.perf_counter() - t0
    del model, opt, fwd
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"samples_s": round(case.steps * case.batch / dt, 2), "step_mean_ms": round(dt / case.steps * 1e3, 4),
            "seconds": round(dt, 3)}


def pipeline(case: Case, device: str) -> dict:
    from train.config import TrainConfig
    from train.loop import fit

    samples = case.batch * min(128, case.steps + case.warmup)  # epochs of <= 128 steps: eval + checkpoint between
    cfg = TrainConfig(model=case.model, preset=case.preset, device=device, precision=case.precision,
                      batch_size=case.batch, steps=case.steps + case.warmup, lr=1e-4, samples=samples,
                      compile=case.compile, warmup_steps=case.warmup)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = fit(cfg, Path(tmp) / "train")
        wall = time.perf_counter() - t0
    rec = r.record
    tel = rec.extra.get("telemetry", {})
    return {"samples_s": rec.speed.throughput_samples_s, "step_p50_ms": rec.speed.latency.p50_ms,
            "step_p90_ms": rec.speed.latency.p90_ms, "step_p99_ms": rec.speed.latency.p99_ms,
            "measured_steps": rec.speed.latency.count, "data_wait_share": rec.extra.get("data_wait_share"),
            "workers": rec.settings.get("workers"), "timing": rec.settings.get("timing"),
            "telemetry_on": bool(tel), "telemetry_overhead_percent_of_core": tel.get("overhead_percent_of_core"),
            "gpu_util_mean_percent": rec.utilization.gpu_util_mean_percent, "mfu": rec.speed.mfu,
            "achieved_tflops": rec.speed.achieved_tflops, "flops_per_sample": rec.speed.flops_per_sample,
            "peak_memory_bytes": rec.memory.peak_bytes, "memory": {
                k: getattr(rec.memory, k) for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                                    "activations_bytes", "cuda_reserved_peak_bytes")},
            "energy_per_sample_j": rec.energy.energy_per_sample_j, "warnings": rec.validity.warnings,
            "wall_s_incl_setup_eval_checkpoints": round(wall, 2), "final_test_accuracy": r.history[-1].get("test_accuracy")}


def run_case(case: Case) -> dict:
    import torch

    from train.data import load_splits
    from train.device import device_name, resolve_device
    from train.models import preset_config

    device = resolve_device(case.device)
    model_cfg = load_splits(preset_config(case.model, case.preset), "synthetic", 16, 0).config
    out = {"case": case.__dict__ | {"device": device}, "device_name": device_name(device),
           "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    bares = [bare(case, device, model_cfg)]
    p = pipeline(case, device)
    if case.bare_runs > 1:
        bares.append(bare(case, device, model_cfg))
    best = max(b["samples_s"] for b in bares)
    out.update(bare=bares, pipeline=p, pipeline_over_bare=round(p["samples_s"] / best, 4) if p["samples_s"] else None)
    out["within_5_percent"] = out["pipeline_over_bare"] is not None and out["pipeline_over_bare"] >= 0.95
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES))
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    cases = SUITES[args.suite] if args.suite else [
        Case(args.model, args.preset, args.batch, args.precision, args.steps, args.compile, args.device, args.warmup)]
    out_dir = Path(os.environ.get("OUT", "bench-out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"train_bare-{args.suite or 'custom'}.json"
    from trainserve.profile import host_info

    results = {"benchmark": "train_bare", "suite": args.suite, "host": host_info(), "results": []}
    for case in cases:
        print(f"== {case}", flush=True)
        try:
            res = run_case(case)
        except Exception as e:  # keep what finished; report the failure in the JSON
            res = {"case": case.__dict__, "error": f"{type(e).__name__}: {e}"}
        results["results"].append(res)
        print(json.dumps({k: res.get(k) for k in ("pipeline_over_bare", "error")} |
                         {"bare": [b["samples_s"] for b in res.get("bare", [])],
                          "pipeline": res.get("pipeline", {}).get("samples_s")}), flush=True)
        out_file.write_text(json.dumps(results, indent=2))
    print(f"wrote {out_file}")


if __name__ == "__main__":
    main()
