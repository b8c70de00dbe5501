"""Prometheus metrics on the metrics port (GET /metrics), with Triton's names, labels and help texts.

Per-model counters come from the core's statistics, in the shape of Triton's statistics extension
(one dict per model version: name, version, inference_count, execution_count, inference_stats with
success / fail / queue / compute_input / compute_infer / compute_output as {"count", "ns"}), so the
HTTP stats endpoint, the gRPC ModelStatistics RPC and this page cannot disagree. Resource gauges
(CPU, RAM, and per GPU with a `gpu_uuid` label) come from the shared telemetry sampler, and from
psutil and NVML (through telemetry's wrapper) read at scrape time for what the sampler does not hold.

The page is prometheus_client's: a TritonCollector builds the metric families from those sources at
each scrape, a per-server CollectorRegistry holds it (and refusals.Refusals, another collector), and
`generate_latest` writes the text format 0.0.4. One choice follows from the library: it exposes a
counter family's samples as `<name>_total` (OpenMetrics naming), so CounterMetricFamily would rename
Triton's counters (`nv_inference_request_success` -> `nv_inference_request_success_total`) and break
every Triton dashboard and query. Triton's counters that carry no `_total` (the nv_inference_* ones and
nv_energy_consumption) are therefore UnknownMetricFamily, whose samples keep their exact names and whose
TYPE line reads `untyped` where Triton's reads `counter`: PromQL's rate() and increase() work on either,
only the type metadata differs. A counter whose name ends in `_total` (trainserve_refused_total) stays a
counter, name unchanged. Values are written as the library writes floats (`3.0`, `8.589934592e+10`).

No hand-written text remains, though the library costs more: one scrape of 4 models, 1 GPU and the
refusals (57 series) renders in 275 us against the hand-written writer's 59 us (medians, 2-CPU VM,
benchmarks/results/2026-12-07T0902-vm-metrics/metrics_exposition.json). Scrapes come about once a
second (the load test's scraper) or every 15 s (Prometheus's default), so the extra 0.22 ms is 0.02% of
one core, and the event loop that serves /metrics (the model process's) is held that much longer once
per scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from trainserve.core.telemetry import Nvml, Sampler
from trainserve.serve.protocol import refusals

log = logging.getLogger(__name__)

StatsSource = Callable[[], Iterable[Mapping[str, Any]]]
Stats = Mapping[str, Any]


def _count(key: str) -> Callable[[Stats], float]:
    """A statistics-extension duration's request count."""
    return lambda s: s.get("inference_stats", {}).get(key, {}).get("count", 0)


def _us(key: str) -> Callable[[Stats], float]:
    """A statistics-extension duration's total, ns -> whole us as Triton reports it."""
    return lambda s: int(s.get("inference_stats", {}).get(key, {}).get("ns", 0)) // 1000


# (name, help, value from one model version's statistics), in Triton's order and wording; Triton's type
# for all of them is counter (exposed as untyped: the module's docstring says why)
_MODEL_METRICS: list[tuple[str, str, Callable[[Stats], float]]] = [
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes", _count("success")),
    ("nv_inference_request_failure", "Number of failed inference requests, all batch sizes", _count("fail")),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)",
     lambda s: s.get("inference_count", 0)),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)",
     lambda s: s.get("execution_count", 0)),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds", _us("success")),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds", _us("queue")),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds",
     _us("compute_input")),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds",
     _us("compute_infer")),
    ("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds",
     _us("compute_output")),
]
# (name, family, help, GpuGauges attribute); nv_energy_consumption is Triton's counter, exposed untyped
_GPU_METRICS = [
    ("nv_gpu_utilization", GaugeMetricFamily, "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", GaugeMetricFamily, "GPU total memory, in bytes", "memory_total_bytes"),
    ("nv_gpu_memory_used_bytes", GaugeMetricFamily, "GPU used memory, in bytes", "memory_used_bytes"),
    ("nv_gpu_power_usage", GaugeMetricFamily, "GPU power usage in watts", "power_w"),
    ("nv_gpu_power_limit", GaugeMetricFamily, "GPU power management limit in watts", "power_limit_w"),
    ("nv_energy_consumption", UnknownMetricFamily, "GPU energy consumption in joules since the server started",
     "energy_j"),
]
_CPU_METRICS = [
    ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "cpu_utilization"),
    ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "cpu_memory_total_bytes"),
    ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "cpu_memory_used_bytes"),
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


def model_families(model_stats: Iterable[Stats]) -> Iterator[Metric]:
    """Triton's per-model request metrics, one sample per model version, labels model and version."""
    stats = list(model_stats)
    for name, help_text, value in _MODEL_METRICS:
        family = UnknownMetricFamily(name, help_text, labels=("model", "version"))
        for s in stats:
            family.add_metric((str(s["name"]), str(s.get("version", ""))), value(s))
        yield family


def resource_families(resources: Resources) -> Iterator[Metric]:
    """Triton's GPU metrics (one sample per GPU, label gpu_uuid) and CPU gauges (no labels)."""
    for name, kind, help_text, attr in _GPU_METRICS:
        family = kind(name, help_text, labels=("gpu_uuid",))
        for gpu in resources.gpus:
            family.add_metric((gpu.uuid,), getattr(gpu, attr))
        yield family
    for name, help_text, attr in _CPU_METRICS:
        yield GaugeMetricFamily(name, help_text, value=getattr(resources, attr))


class TritonCollector(Collector):
    """Triton's metric families, built at each scrape from the core's statistics and the resource gauges.

    `resources` returns None when there is no reader: the page then has no resource metrics at all.
    """

    def __init__(self, stats: StatsSource, resources: Callable[[], Resources | None]) -> None:
        self._stats, self._resources = stats, resources

    def collect(self) -> Iterator[Metric]:
        yield from model_families(self._stats())
        resources = self._resources()
        if resources is not None:
            yield from resource_families(resources)


def registry_of(*collectors: Collector) -> CollectorRegistry:
    """A registry of its own: the process-wide default holds the library's process and GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


def render(model_stats: Iterable[Stats], resources: Resources | None, *more: Collector) -> str:
    """The Prometheus text exposition (format 0.0.4) of the model metrics, resource gauges and `more`."""
    stats = list(model_stats)
    triton = TritonCollector(lambda: stats, lambda: resources)
    return generate_latest(registry_of(triton, *more)).decode()


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
                 resources: ResourceReader | None = None, extra: Iterable[Collector] = ()) -> None:
        self._host, self._port = host, port
        self._resources = resources
        read = resources.read if resources is not None else lambda: None
        # the page's families after Triton's: the server's own counters (refusals.Refusals)
        self.registry = registry_of(TritonCollector(stats, read), *extra)
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # bound port, known after start()

    async def _handle(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

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
                         resources=ResourceReader(gpu_index=gpu_index), extra=[refusals.of(core)])
