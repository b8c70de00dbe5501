"""The rows of a model's side-by-side table, shared by the HTML and Markdown renderers."""

from __future__ import annotations

from collections.abc import Callable

from trainserve.core.telemetry import NOT_SAMPLED
from trainserve.report.common import units as u
from trainserve.report.common.energy import marked
from trainserve.report.common.sections import Column, InferSpeedup, TrainSpeedup
from trainserve.report.serving.limits_section import row_limit, row_vs_limit
from trainserve.report.verdict.withheld import guard

Row = tuple[str, Callable[[Column], str]]


def _lat(key: str) -> Callable[[Column], str]:
    return guard(key, lambda v: u.ms(v.latency.get(key)))


def _mem(key: str, train_only: bool = False) -> Callable[[Column], str]:
    def cell(v: Column) -> str:
        if train_only and v.phase != "train":
            return ""
        return u.nbytes(getattr(v.memory, key))
    return cell


def _users(v: Column) -> str:
    if v.phase == "train":
        return ""
    c = v.concurrency
    return u.MISSING if c is None else f"{c}" + (" (ramp step)" if v.ramp_point else "")


def _released(v: Column) -> str:
    """A CUDA training column: NVML's used bytes before training, and how much more it held once training freed
    its memory (train/release.py)."""
    m = v.memory
    if v.phase != "train" or v.device != "cuda":
        return ""
    if m.gpu_released is None:
        return u.MISSING
    return (f"{'released' if m.gpu_released else 'NOT released'}: {u.nbytes(m.gpu_held_after_bytes)} held "
            f"(before {u.nbytes(m.gpu_used_before_bytes)}, peak {u.nbytes(m.gpu_mem_used_max_bytes)}"
            + (f", after exit {u.nbytes(m.gpu_used_after_exit_bytes)})" if m.gpu_used_after_exit_bytes is not None else ")"))


GROUPS: list[tuple[str, list[Row]]] = [
    ("Setup", [
        ("device", lambda v: v.device_name or v.device),
        ("backend", lambda v: v.backend),
        ("precision", lambda v: v.precision),
        ("math mode (MFU's peak)", lambda v: v.math_mode or ("" if v.phase == "infer" else u.MISSING)),
        ("batch size", lambda v: f"{v.batch_size}"),
        ("users in flight", _users),
    ]),
    ("Speed", [
        ("throughput, samples/s", guard("throughput_samples_s", lambda v: u.num(v.throughput_samples_s))),
        ("requests/s", guard("requests_s", lambda v: "" if v.phase == "train" else u.num(v.requests_s))),
        ("p50 (step / request)", _lat("p50_ms")),
        ("p90", _lat("p90_ms")),
        ("p95", _lat("p95_ms")),
        ("p99", _lat("p99_ms")),
        ("p99.9", _lat("p999_ms")),
        ("max", _lat("max_ms")),
        ("bounded by", lambda v: "" if v.phase == "train" else (v.bound or {}).get("kind", u.MISSING)),
    ]),
    ("Limit: onnxruntime in process, no server", [
        ("in-process limit (batch-1 p50 / best samples/s)", row_limit),
        ("server vs limit (overhead / efficiency)", row_vs_limit),
    ]),
    ("Memory", [
        ("peak", _mem("peak_bytes")),
        ("· weights", _mem("weights_bytes", True)),
        ("· gradients", _mem("gradients_bytes", True)),
        ("· optimizer state", _mem("optimizer_bytes", True)),
        ("· activations, temporaries", _mem("activations_bytes", True)),
        ("GPU memory used (NVML max)", lambda v: "" if v.device == "cpu" else u.nbytes(v.memory.gpu_mem_used_max_bytes)),
        ("GPU memory after training (NVML)", _released),
    ]),
    ("Utilization and energy", [
        ("GPU utilization, mean", lambda v: NOT_SAMPLED if v.gpu_util_mean_percent is None and v.device == "cuda"
         else u.percent(v.gpu_util_mean_percent)),
        ("CPU, process mean (100% = 1 core)", lambda v: u.percent(v.cpu_process_mean_percent)),
        ("mean power", lambda v: marked(u.watts(v.mean_power_w), v.energy_status)),
        ("energy per sample", lambda v: marked(u.joules(v.energy_per_sample_j), v.energy_status)),
        ("energy meter (device)", lambda v: v.energy_meter or u.MISSING),
    ]),
    ("Compute", [
        ("FLOPs per sample", lambda v: u.flops(v.flops_per_sample)),
        ("achieved", lambda v: u.tflops(v.achieved_tflops)),
        ("peak for MFU", lambda v: "" if v.phase == "infer" else u.tflops(v.peak_tflops)),
        ("MFU", guard("mfu", lambda v: u.fraction(v.mfu))),
    ]),
]

SPEEDUPS = (("train", "Training, same configuration", "throughput, GPU ÷ CPU"),
            ("train_best", "Training, each at its best", "throughput, GPU ÷ CPU"),
            ("infer_batch1", "Inference, batch 1", "p50 latency, CPU ÷ GPU"),
            ("infer_saturated", "Inference, saturated", "peak throughput, GPU ÷ CPU"))


def speedup_detail(s: TrainSpeedup | InferSpeedup) -> str:
    if s.value is None:
        return s.note or "not measured"
    if isinstance(s, InferSpeedup):
        if s.metric == "p50_ms":
            return f"p50 {u.ms(s.gpu)} on the GPU vs {u.ms(s.cpu)} on the CPU"
        return f"{u.num(s.gpu)} vs {u.num(s.cpu)} samples/s"
    text = f"{u.num(s.gpu)} vs {u.num(s.cpu)} samples/s"
    c, g = s.cpu_point, s.gpu_point
    if c and g and c.batch_size is not None:
        text += (f", batch {c.batch_size} {c.precision} on both" if s.basis == "same_config"
                 else f", GPU batch {g.batch_size} {g.precision} vs CPU batch {c.batch_size} {c.precision}")
    return text
