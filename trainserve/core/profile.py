"""The one profile record that training and inference both write (docs/architecture.md: artifacts).

A run's records live as JSON files (`runs/<run>/train/profile.json`, `runs/<run>/load/<target>.json`)
and the report lines them up field by field. Units are in the field names: `_ms`, `_bytes`, `_w`,
`_j`, `_percent`; a value that was not measured is null, never 0.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import platform
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainserve.core.errors import UserError
from trainserve.core.fsutil import write_json_atomic
from trainserve.core.percentiles import percentile
from trainserve.core.served import NESTED as _SERVED_NESTED
from trainserve.core.served import Served
from trainserve.core.version import version as trainserve_version

SCHEMA_VERSION = 1

Phase = Literal["train", "infer"]
Backend = Literal["torch", "onnxruntime", "triton"]


@dataclass
class LatencyStats:
    """Latency (inference) or step time (training), in milliseconds at 0.01 ms resolution."""

    count: int = 0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    min_ms: float | None = None

    @classmethod
    def from_samples_ms(cls, samples: list[float]) -> LatencyStats:
        """Exact percentiles (nearest-rank) of raw samples in ms."""
        if not samples:
            return cls()
        s = sorted(samples)
        return cls(
            count=len(s),
            mean_ms=_r(sum(s) / len(s)),
            p50_ms=_r(percentile(s, 50)),
            p90_ms=_r(percentile(s, 90)),
            p95_ms=_r(percentile(s, 95)),
            p99_ms=_r(percentile(s, 99)),
            p999_ms=_r(percentile(s, 99.9)),
            max_ms=_r(s[-1]),
            min_ms=_r(s[0]),
        )


def _r(x: float) -> float:
    return round(float(x), 4)


@dataclass
class Speed:
    throughput_samples_s: float | None = None  # samples (rows) per second
    requests_s: float | None = None  # inference only: requests per second
    latency: LatencyStats = field(default_factory=LatencyStats)  # per request, or per training step
    flops_per_sample: float | None = None  # forward (+backward for training) FLOPs of one sample
    achieved_tflops: float | None = None
    mfu: float | None = None  # achieved / peak for the device and precision, 0..1
    peak_tflops: float | None = None  # the peak MFU was computed against


@dataclass
class Memory:
    peak_bytes: int | None = None  # the headline: CUDA peak allocated, or CPU peak RSS growth
    weights_bytes: int | None = None
    gradients_bytes: int | None = None
    optimizer_bytes: int | None = None
    activations_bytes: int | None = None  # activations and temporaries: peak minus the rest
    cuda_allocated_peak_bytes: int | None = None
    cuda_reserved_peak_bytes: int | None = None
    rss_peak_bytes: int | None = None
    rss_growth_bytes: int | None = None
    estimate: dict[str, Any] = field(default_factory=dict)  # analytic bytes/parameter estimate
    max_batch: dict[str, Any] = field(default_factory=dict)  # {"train": N, "infer": M, "ratio": M/N}
    gpu_released: bool | None = None  # device memory back to its level before the run
    gpu_held_bytes: int | None = None  # bytes still held after the run (NVML)
    # what peak_bytes was read from (trainserve/core/meters.py), e.g. "process RSS (psutil)", and on which device
    peak_meter: str | None = None
    peak_device: str | None = None  # "cpu" or "cuda:N"


@dataclass
class Utilization:
    gpu_util_mean_percent: float | None = None
    gpu_util_max_percent: float | None = None
    gpu_mem_used_max_bytes: int | None = None
    cpu_process_mean_percent: float | None = None  # 100 = one core
    cpu_process_max_percent: float | None = None
    cpu_system_mean_percent: float | None = None  # 0..100 over all cores
    # the meter of the gpu_* fields, e.g. "NVML device 0"; None on a CPU record, which carries no GPU reading
    gpu_meter: str | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)  # [{"t_s":..., "gpu_util":...}, ...]


@dataclass
class Energy:
    mean_power_w: float | None = None
    energy_j: float | None = None
    energy_per_sample_j: float | None = None
    # "nvml", "nvml-power" (a GPU's), "rapl", "estimate" (a CPU's), or null when not measurable;
    # trainserve.core.meters.energy_status tells measured, estimated and not measured apart
    source: str | None = None
    meter: str | None = None  # the meter by name, e.g. "NVML device 0", "estimate: TDP 350 W × ..."
    device: str | None = None  # the device it measures: "cpu" or "cuda:N"


@dataclass
class Validity:
    warmup_excluded: int = 0  # steps or requests dropped before measuring
    window_s: float | None = None  # length of the measured window
    samples: int = 0  # samples (rows) inside the window
    warnings: list[str] = field(default_factory=list)
    # figures beyond a physical bound (trainserve.core.bounds): each names the broken assumption; the
    # figure itself is moved to extra["out_of_bounds"] and left null here, so it is never shown as a result
    errors: list[str] = field(default_factory=list)
    partial: bool = False  # the run stopped early; numbers cover what finished
    # the load generator, not the server, may have limited the figure (set by the client-CPU check); the
    # run's verdict (trainserve/report/verdict/verdict.py) is INVALID while any record says so
    client_saturated: bool = False
    # loadtest/windows.py: {"stable", "rule", "reason", "windows_used"}; None where no windows were kept
    stability: dict[str, Any] | None = None


@dataclass
class TimeToAccuracy:
    """Training toward a held-out accuracy target (`trainserve train --target-accuracy`); null when none was set."""

    target_accuracy: float  # the test-split accuracy asked for, 0 < A <= 1
    reached: bool = False  # false: the epoch (or step) budget ended first
    time_to_accuracy_s: float | None = None  # wall time from the first step to the end of the eval that reached it
    epochs_to_accuracy: int | None = None  # epochs trained when it was reached (counted from epoch 1)
    steps_to_accuracy: int | None = None  # optimizer steps trained when it was reached
    energy_to_accuracy_j: float | None = None  # over that same span: NVML (cuda) or RAPL (cpu); null when not measured
    energy_source: str | None = None  # "nvml" | "rapl" | null
    test_accuracy: float | None = None  # at the eval that reached it, else at the last eval
    epochs_run: int | None = None  # epochs trained in all (the budget, when not reached)


@dataclass
class ProfileRecord:
    """One measured phase of one model on one device and backend."""

    phase: Phase
    model: str  # zoo name or served model name, e.g. "cnn"
    backend: Backend
    device: Literal["cpu", "cuda"]
    device_name: str = ""
    precision: str = "fp32"
    batch_size: int = 1
    concurrency: int | None = None  # inference: users or in-flight requests
    preset: str | None = None
    target: str | None = None  # inference: the server and model measured, e.g. "embedded-cpu/cnn_cpu"
    speed: Speed = field(default_factory=Speed)
    memory: Memory = field(default_factory=Memory)
    utilization: Utilization = field(default_factory=Utilization)
    energy: Energy = field(default_factory=Energy)
    validity: Validity = field(default_factory=Validity)
    time_to_accuracy: TimeToAccuracy | None = None  # training with --target-accuracy only
    served: Served | None = None  # inference under load: client CPU, latency attribution, bound (core/served.py)
    settings: dict[str, Any] = field(default_factory=dict)  # threads, workers, compile, lr, ...
    extra: dict[str, Any] = field(default_factory=dict)  # stage-specific details
    versions: dict[str, str] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileRecord:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UserError(
                f"profile record has schema_version {version!r}, this trainserve reads {SCHEMA_VERSION}; "
                "re-run the stage that wrote it"
            )
        return _build(cls, data)

    @classmethod
    def load(cls, path: Path) -> ProfileRecord:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise UserError(f"no profile record at {path}; run the stage that writes it first") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{path} is not valid JSON ({e}); delete it and re-run the stage") from None
        return cls.from_dict(data)


def _build(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild nested dataclasses; unknown keys are kept out, missing ones take defaults."""
    kwargs = {}
    hints = {f.name: f for f in dataclasses.fields(cls)}
    for name, f in hints.items():
        if name not in data:
            continue
        value = data[name]
        sub = _NESTED.get((cls.__name__, name))
        kwargs[name] = _build(sub, value) if sub is not None and isinstance(value, dict) else value
    return cls(**kwargs)


_NESTED: dict[tuple[str, str], type] = {
    ("ProfileRecord", "speed"): Speed,
    ("ProfileRecord", "memory"): Memory,
    ("ProfileRecord", "utilization"): Utilization,
    ("ProfileRecord", "energy"): Energy,
    ("ProfileRecord", "validity"): Validity,
    ("ProfileRecord", "time_to_accuracy"): TimeToAccuracy,
    ("Speed", "latency"): LatencyStats,
    ("ProfileRecord", "served"): Served,
    **_SERVED_NESTED,
}


def host_info() -> dict[str, Any]:
    """Where a record was measured: enough to tell two machines apart in a report."""
    import psutil

    cpu_model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "physical_cpus": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
    }


def package_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named distributions (missing ones are left out)."""
    from importlib import metadata

    out = {"trainserve": trainserve_version()}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out

