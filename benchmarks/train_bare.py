"""Pipeline vs bare PyTorch loop: same model, batch, precision and optimizer, side by side in one process.

The bare loop trains on one synthetic batch already on the device (no DataLoader, no timing per
step, no telemetry): the fastest this model can train here. The pipeline is `train.loop.fit` as
`trainserve train` runs it (data on the device or a DataLoader, per-step timing, telemetry sampler,
eval and a checkpoint each epoch); its throughput is over its measured steps.

A virtualised GPU machine drifts by 10-20% between runs a minute apart (clocks, power, neighbours),
more than the 5% being measured. So each case runs `rounds` pairs, alternating which of the two
goes first (bare-pipeline, pipeline-bare, ...), and compares medians; the per-round ratios show the
spread. Results go to $OUT/train_bare-<suite>.json (OUT defaults to ./bench-out); the file is
rewritten after every case, so a cut-short run keeps its results.

  python benchmarks/train_bare.py --suite gpu --quick   # H200: 5 rounds cnn, 3 transformer, 2 compiled (~4 min before the sampler variants)
  python benchmarks/train_bare.py --suite overhead  # no GPU: host overhead per step of a sub-millisecond step
  python benchmarks/train_bare.py --suite gpu       # H200: cnn small b512 bf16, transformer small b128 bf16 (eager, compiled)
  python benchmarks/train_bare.py --suite host-cpu  # the same cnn/transformer small runs on the host's CPU cores
  python benchmarks/train_bare.py --suite cpu       # no GPU: tiny presets on the CPU
  python benchmarks/train_bare.py --model cnn --preset small --batch 512 --precision bf16 --steps 1500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    rounds: int = 3  # bare/pipeline pairs, alternating order; 1 where a run is slow
    components: bool = True  # also run the pipeline variants of COMPONENTS
    component_rounds: int = 1  # runs of each variant (median), after the rounds' pairs


# Pipeline variants that explain a gap: each changes one thing against the default pipeline
# (TrainConfig overrides, and the sampler the loop starts: None = the loop's own).
def _sampler(interval_s: float, gpu: bool):
    def start(device: str):
        from trainserve.core.telemetry import Sampler

        # gpu_index 999 matches no device: NVML is never read, psutil and RAPL still are
        return Sampler(interval_s=interval_s, gpu_index=0 if gpu else 999).start()
    return start


COMPONENTS = {"telemetry_off": ({"telemetry": False}, None),
              "sampler_1hz": ({}, _sampler(1.0, gpu=True)),  # the same readings, a tenth as often
              "sampler_no_nvml": ({}, _sampler(0.1, gpu=False)),  # 10 Hz, CPU readings only
              "host_loader": ({"data_placement": "host"}, None)}


SUITES = {
    # the GPU side: ~2-3 minutes on an H200
    "gpu": [Case("cnn", "small", 512, "bf16", 1500, device="cuda"),
            Case("transformer", "small", 128, "bf16", 500, device="cuda"),
            Case("transformer", "small", 128, "bf16", 500, compile=True, device="cuda", warmup=30)],
    # the same runs on the host's CPU cores (few steps: a CPU step takes seconds here)
    "host-cpu": [Case("cnn", "small", 512, "bf16", 8, device="cpu", warmup=2, rounds=1, components=False),
                 Case("transformer", "small", 128, "bf16", 6, device="cpu", warmup=2, rounds=1, components=False)],
    # a machine without a GPU: tiny presets, about two minutes on 2 busy cores
    "cpu": [Case("cnn", "tiny", 64, "fp32", 30, device="cpu", warmup=5),
            Case("transformer", "tiny", 64, "fp32", 30, device="cpu", warmup=5)],
    # host overhead per step, magnified: a model whose step takes well under a millisecond
    "overhead": [Case("mlp", "tiny", 32, "fp32", 400, device="cpu", warmup=20)],
}
# --quick: the GPU suite with fewer steps on an H200 (the compiled case in 2 rounds without components)
QUICK = {"gpu": [Case("cnn", "small", 512, "bf16", 500, device="cuda", rounds=5),
                 Case("transformer", "small", 128, "bf16", 250, device="cuda"),
                 Case("transformer", "small", 128, "bf16", 250, compile=True, device="cuda", warmup=30,
                      rounds=2, components=False)]}


class ClockWatch:
    """NVML SM clock and clock-event reasons (power cap, thermal, ...) every 0.5 s during one run, so
    a slow run can be told apart from a slowed-down GPU. About 2 us a read; the same on both sides."""

    def __init__(self, device: str) -> None:
        import threading

        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = None
        if device != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            return
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.samples.append((self._nv.nvmlDeviceGetClockInfo(self._h, self._nv.NVML_CLOCK_SM),
                                     self._nv.nvmlDeviceGetCurrentClocksEventReasons(self._h)))
            except Exception:
                return

    def __enter__(self) -> ClockWatch:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> dict | None:
        if not self.samples:
            return None
        mhz = [m for m, _ in self.samples]
        reasons = 0
        for _, r in self.samples:
            reasons |= r
        return {"sm_mhz_mean": round(sum(mhz) / len(mhz)), "sm_mhz_min": min(mhz), "sm_mhz_max": max(mhz),
                "event_reasons_seen": hex(reasons), "reads": len(mhz)}


def bare(case: Case, device: str, model_cfg) -> dict:
    """The fastest loop: fixed device tensors, AdamW (fused on CUDA), autocast, one sync at each end."""
    import torch

    from trainserve.train.device import autocast, grad_scaler
    from trainserve.train.models import build_model

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
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(case.steps):
        step()
    host_s = time.thread_time() - c0  # before the final sync: launching only
    sync()
    dt = time.perf_counter() - t0
    del model, opt, fwd
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"samples_s": round(case.steps * case.batch / dt, 2), "step_mean_ms": round(dt / case.steps * 1e3, 4),
            "seconds": round(dt, 3), "host_cpu_ms_per_step": round(host_s / case.steps * 1e3, 4)}


def pipeline(case: Case, device: str, sampler=None, **overrides) -> dict:
    import trainserve.train.loop
    from trainserve.train.config import TrainConfig
    from trainserve.train.loop import fit

    samples = case.batch * min(128, case.steps + case.warmup)  # epochs of <= 128 steps: eval + checkpoint between
    cfg = TrainConfig(model=case.model, preset=case.preset, device=device, precision=case.precision,
                      batch_size=case.batch, steps=case.steps + case.warmup, lr=1e-4, samples=samples,
                      compile=case.compile, warmup_steps=case.warmup, **overrides)
    own = train.loop._telemetry_sampler
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        try:
            if sampler is not None:
                train.loop._telemetry_sampler = sampler
            r = fit(cfg, Path(tmp) / "train")
        finally:
            train.loop._telemetry_sampler = own
        wall = time.perf_counter() - t0
    rec = r.record
    tel = rec.extra.get("telemetry", {})
    return {"samples_s": rec.speed.throughput_samples_s, "step_p50_ms": rec.speed.latency.p50_ms,
            "step_p90_ms": rec.speed.latency.p90_ms, "step_p99_ms": rec.speed.latency.p99_ms,
            "measured_steps": rec.speed.latency.count, "data_wait_share": rec.extra.get("data_wait_share"),
            "workers": rec.settings.get("workers"), "timing": rec.settings.get("timing"),
            "data_placement": rec.settings.get("data_placement"), "gpu_released": rec.memory.gpu_released,
            "gpu_held_bytes": rec.memory.gpu_held_bytes, "gpu_release": rec.extra.get("gpu_release"),
            "telemetry_tick_ms": tel.get("overhead_tick_ms"),
            "telemetry_percent_of_step": tel.get("overhead_percent_of_step"),
            "host_cpu_ms_per_step": rec.extra.get("host_cpu_ms_per_step"),
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

    from trainserve.train.data import load_splits
    from trainserve.train.device import device_name, resolve_device
    from trainserve.train.models import preset_config

    device = resolve_device(case.device)
    model_cfg = load_splits(preset_config(case.model, case.preset), "synthetic", 16, 0).config
    out = {"case": case.__dict__ | {"device": device}, "device_name": device_name(device),
           "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    bares, pipes = [], []
    for r in range(case.rounds):  # alternate the order, so drift during the case hits both sides alike
        for side in (("bare", "pipeline") if r % 2 == 0 else ("pipeline", "bare")):
            with ClockWatch(device) as clocks:
                result = bare(case, device, model_cfg) if side == "bare" else pipeline(case, device)
            result["gpu_clocks"] = clocks.summary()
            (bares if side == "bare" else pipes).append(result)
    b_med = statistics.median(b["samples_s"] for b in bares)
    p_speeds = [p["samples_s"] for p in pipes if p["samples_s"]]
    p_med = statistics.median(p_speeds) if p_speeds else None
    out.update(bare=bares, pipelines=pipes, bare_median=b_med, pipeline_median=p_med,
               pipeline_over_bare=round(p_med / b_med, 4) if p_med and b_med else None,
               round_ratios=[round(p["samples_s"] / b["samples_s"], 4) for b, p in zip(bares, pipes)
                             if p["samples_s"]])
    if case.components:
        out["components"] = {}
        for name, (overrides, sampler) in COMPONENTS.items():
            runs = [pipeline(case, device, sampler, **overrides) for _ in range(case.component_rounds)]
            speeds = [c["samples_s"] for c in runs if c["samples_s"]]
            med = statistics.median(speeds) if speeds else None
            c = runs[0]
            out["components"][name] = {"samples_s": med, "runs_samples_s": speeds, "step_p50_ms": c["step_p50_ms"],
                                       "host_cpu_ms_per_step": [r["host_cpu_ms_per_step"] for r in runs],
                                       "data_placement": c["data_placement"], "telemetry_on": c["telemetry_on"],
                                       "over_bare": round(med / b_med, 4) if med else None,
                                       "over_pipeline": round(med / p_med, 4) if med and p_med else None}
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
    ap.add_argument("--rounds", type=int, default=3, help="bare/pipeline pairs (alternating order)")
    ap.add_argument("--component-rounds", type=int, default=1, help="runs of each pipeline variant (median)")
    ap.add_argument("--no-components", action="store_true", help="skip the pipeline variants")
    ap.add_argument("--quick", action="store_true", help="fewer steps (the gpu suite in about 2 minutes)")
    args = ap.parse_args()
    suites = QUICK | {k: v for k, v in SUITES.items() if k not in QUICK} if args.quick else SUITES
    cases = suites[args.suite] if args.suite else [
        Case(args.model, args.preset, args.batch, args.precision, args.steps, args.compile, args.device, args.warmup,
             rounds=args.rounds, components=not args.no_components, component_rounds=args.component_rounds)]
    out_dir = Path(os.environ.get("OUT", "bench-out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"train_bare-{args.suite or 'custom'}.json"
    from trainserve.core.profile import host_info

    results = {"benchmark": "train_bare", "suite": args.suite, "quick": args.quick, "host": host_info(),
               "results": []}
    t_suite = time.perf_counter()
    for case in cases:
        print(f"== {case}", flush=True)
        try:
            res = run_case(case)
        except Exception as e:  # keep what finished; report the failure in the JSON
            res = {"case": case.__dict__, "error": f"{type(e).__name__}: {e}"}
        results["results"].append(res)
        print(json.dumps({k: res.get(k) for k in ("pipeline_over_bare", "round_ratios", "error")} |
                         {"bare": [b["samples_s"] for b in res.get("bare", [])],
                          "pipeline": [p["samples_s"] for p in res.get("pipelines", [])],
                          "components": {k: v["over_bare"] for k, v in res.get("components", {}).items()}}),
              flush=True)
        results["suite_seconds"] = round(time.perf_counter() - t_suite, 1)
        out_file.write_text(json.dumps(results, indent=2))
    print(f"wrote {out_file}")


if __name__ == "__main__":
    main()
