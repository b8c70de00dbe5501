"""Prometheus metrics on the metrics port (GET /metrics), with Triton's names, types and labels.

Per-model counters come from the core's statistics, in the shape of Triton's statistics extension
(one dict per model version: name, version, inference_count, execution_count, inference_stats with
success / fail / queue / compute_input / compute_infer / compute_output as {"count", "ns"}), so the
HTTP stats endpoint, the gRPC ModelStatistics RPC and this page cannot disagree. Resource gauges
(CPU, RAM, and per GPU with a `gpu_uuid` label) come from the shared telemetry sampler, and from
psutil and NVML (through telemetry's wrapper) read at scrape time for what the sampler does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from trainserve.core.telemetry import Nvml, Sampler
from trainserve.serve.protocol import refusals

log = logging.getLogger(__name__)

StatsSource = Callable[[], Iterable[Mapping[str, Any]]]

# (name, type, help) for the per-model request metrics, in Triton's order and wording.
_MODEL_METRICS = [
    ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes"),
    ("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes"),
    ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)"),
    ("nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)"),
    ("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds"),
    ("nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds"),
    ("nv_inference_compute_input_duration_us", "counter", "Cumulative compute input duration in microseconds"),
    ("nv_inference_compute_infer_duration_us", "counter", "Cumulative compute inference duration in microseconds"),
    ("nv_inference_compute_output_duration_us", "counter", "Cumulative inference compute output duration in microseconds"),
]
# statistics-extension key whose "ns" feeds each *_duration_us metric
_DURATION_KEYS = {
    "nv_inference_request_duration_us": "success",
    "nv_inference_queue_duration_us": "queue",
    "nv_inference_compute_input_duration_us": "compute_input",
    "nv_inference_compute_infer_duration_us": "compute_infer",
    "nv_inference_compute_output_duration_us": "compute_output",
}
_GPU_METRICS = [
    ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", "gauge", "GPU total memory, in bytes", "memory_total_bytes"),
    ("nv_gpu_memory_used_bytes", "gauge", "GPU used memory, in bytes", "memory_used_bytes"),
    ("nv_gpu_power_usage", "gauge", "GPU power usage in watts", "power_w"),
    ("nv_gpu_power_limit", "gauge", "GPU power management limit in watts", "power_limit_w"),
    ("nv_energy_consumption", "counter", "GPU energy consumption in joules since the server started", "energy_j"),
]
_CPU_METRICS = [
    ("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]", "cpu_utilization"),
    ("nv_cpu_memory_total_bytes", "gauge", "CPU total memory (RAM), in bytes", "cpu_memory_total_bytes"),
    ("nv_cpu_memory_used_bytes", "gauge", "CPU used memory (RAM), in bytes", "cpu_memory_used_bytes"),
]
METRIC_NAMES = [m[0] for m in _MODEL_METRICS + _GPU_METRICS + _CPU_METRICS]


@dataclass
class GpuGauges:
    uuid: str
    utilization: float  # 0..1, as Triton reports it (NVML gives percent)
    memory_total_bytes: int
    memory_used_bytes: int
    power_w: float
    power_limit_w: float
    energy_j: float  # since the server started


@dataclass
class Resources:
    cpu_utilization: float  # whole machine, 0..1
    cpu_memory_total_bytes: int
    cpu_memory_used_bytes: int
    gpus: list[GpuGauges] = field(default_factory=list)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(model_stats: Iterable[Mapping[str, Any]], resources: Resources | None, extra: Iterable[str] = ()) -> str:
    """The Prometheus text exposition (format 0.0.4) of the model counters and resource gauges."""
    stats = list(model_stats)
    lines: list[str] = []
    for name, kind, help_text in _MODEL_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for s in stats:
            infer = s.get("inference_stats", {})
            labels = {"model": s["name"], "version": s.get("version", "")}
            if name == "nv_inference_request_success":
                value = infer.get("success", {}).get("count", 0)
            elif name == "nv_inference_request_failure":
                value = infer.get("fail", {}).get("count", 0)
            elif name == "nv_inference_count":
                value = s.get("inference_count", 0)
            elif name == "nv_inference_exec_count":
                value = s.get("execution_count", 0)
            else:
                value = int(infer.get(_DURATION_KEYS[name], {}).get("ns", 0)) // 1000
            lines.append(f"{name}{_labels(**labels)} {_number(value)}")
    if resources is not None:
        for name, kind, help_text, attr in _GPU_METRICS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for gpu in resources.gpus:
                lines.append(f"{name}{_labels(gpu_uuid=gpu.uuid)} {_number(getattr(gpu, attr))}")
        for name, kind, help_text, attr in _CPU_METRICS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
                      f"{name} {_number(getattr(resources, attr))}"]
    lines += extra  # the server's own counters (trainserve_refused_total)
    return "\n".join(lines) + "\n"


class ResourceReader:
    """Reads the resource gauges: the telemetry sampler's latest sample, else psutil + NVML at each call.

    NVML is optional: without it (or without a GPU) there are simply no GPU series.
    """

    def __init__(self, gpu_index: int = 0, interval_s: float = 1.0) -> None:
        # only machine-wide and GPU readings are served: skip the sampler's walk over child processes,
        # which costs CPU on every tick while the server is busy
        self._sampler: Sampler | None = Sampler(interval_s=interval_s, gpu_index=gpu_index, include_children=False)
        self._sampler.start()
        nvml = Nvml(gpu_index)
        self._nvml = nvml if nvml.ok else None
        self._energy_start_j = (nvml.energy_j() or 0.0) if nvml.ok else None
        self._uuid = nvml.uuid() if nvml.ok else None
        self._power_limit_w = nvml.power_limit_w() if nvml.ok else None

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def read(self) -> Resources:
        import psutil

        memory = psutil.virtual_memory()
        sample = self._sampler.latest() if self._sampler is not None else None
        if sample is not None and sample.cpu_system_percent is not None:
            cpu_percent = sample.cpu_system_percent
        else:
            cpu_percent = psutil.cpu_percent(None)
        resources = Resources(cpu_utilization=cpu_percent / 100.0, cpu_memory_total_bytes=memory.total,
                              cpu_memory_used_bytes=memory.total - memory.available)
        if self._nvml is not None:
            resources.gpus.append(self._gpu_gauges(sample))
        return resources

    def _gpu_gauges(self, sample: Any) -> GpuGauges:
        nvml = self._nvml
        total, used = nvml.memory_bytes()
        if sample is not None and sample.gpu_util_percent is not None:
            util, used, power = sample.gpu_util_percent, sample.gpu_mem_used_bytes, sample.gpu_power_w
        else:
            util, _, power, _ = nvml.read(energy_due=False)
        energy = (nvml.energy_j() or 0.0) - (self._energy_start_j or 0.0)
        return GpuGauges(uuid=self._uuid or "", utilization=(util or 0.0) / 100.0,
                         memory_total_bytes=total or 0, memory_used_bytes=used or 0, power_w=power or 0.0,
                         power_limit_w=self._power_limit_w or 0.0, energy_j=max(energy, 0.0))


class MetricsServer:
    """GET /metrics on its own port, in the caller's event loop (aiohttp)."""

    name = "metrics"

    def __init__(self, stats: StatsSource, host: str = "127.0.0.1", port: int = 8002,
                 resources: ResourceReader | None = None, extra: Callable[[], list[str]] = list) -> None:
        self._stats, self._host, self._port = stats, host, port
        self._extra = extra  # more exposition lines, read at each scrape
        self._resources = resources
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # bound port, known after start()

    async def _handle(self, request: web.Request) -> web.Response:
        resources = self._resources.read() if self._resources is not None else None
        return web.Response(text=render(self._stats(), resources, self._extra()), content_type="text/plain",
                            charset="utf-8", headers={"X-Metrics-Format": "0.0.4"})

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the OS's choice for port 0)."""
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        try:
            await site.start()
        except OSError:  # port taken: free the runner, let the caller report it
            await self.stop()
            raise
        self.port = site._server.sockets[0].getsockname()[1]  # port 0 -> the one the OS chose
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)
        return self.port

    async def stop(self, grace_s: float = 0.0) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._resources is not None:
            self._resources.close()


def create_frontend(core: Any, host: str, port: int, options: Any) -> MetricsServer:
    """The hook serve/engine/server.py calls: /metrics over the core's statistics and this machine's resources."""
    gpu_index = 0  # the device the core's sessions use (onnxruntime's default CUDA device)
    return MetricsServer(lambda: [s.to_dict() for s in core.statistics()], host, port,
                         resources=ResourceReader(gpu_index=gpu_index), extra=refusals.of(core).exposition)
