"""The report's typed sections: what analysis.py lines up from a run's records, field by field.

The renderers (render.py, rows.py, model_plots.py), the sentences (sentences.py) and summary.json's writer
read these attributes; `to_json` (report/common/typed.py) writes them as summary.json has them
(docs/summary.schema.json), in field order. A field that is None is written as null ("not measured"),
except the few marked `OPTIONAL`, which summary.json leaves out when they do not apply. The cost and
plan sections are in report/common/cost_sections.py.

Figures that come straight from a record and vary by record (a latency's percentiles, a ramp's
points, the errors by field name) stay mappings; everything the report computes is a field here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainserve.core.servedparts import RampStep
from trainserve.report.common.cost_sections import Costs, Plan
from trainserve.report.common.frontier_sections import DeviceFrontier
from trainserve.report.common.typed import OPTIONAL


# --- one column of a model's table: a record, or one point of its load ramp ------------------------

@dataclass
class ColumnMemory:
    peak_bytes: int | None
    weights_bytes: int | None
    gradients_bytes: int | None
    optimizer_bytes: int | None
    activations_bytes: int | None
    cuda_reserved_peak_bytes: int | None
    rss_peak_bytes: int | None
    gpu_mem_used_max_bytes: int | None
    # a CUDA training record: NVML's used bytes of the device before training and once training freed its
    # memory (what the process still holds), and whether that counts as given back (train/release.py)
    gpu_used_before_bytes: int | None = field(default=None, metadata=OPTIONAL)
    gpu_held_after_bytes: int | None = field(default=None, metadata=OPTIONAL)
    gpu_released: bool | None = field(default=None, metadata=OPTIONAL)
    gpu_used_after_exit_bytes: int | None = field(default=None, metadata=OPTIONAL)  # once the process exited


@dataclass
class Batch1Limit:
    """The in-process limit beside a served batch-1 column (report/serving/limits_section.py)."""
    p50_ms: float | None
    threads: int | None
    overhead_ms: float | None  # served p50 minus the in-process one


@dataclass
class SaturatedLimit:
    """The in-process limit beside a served saturated column (report/serving/limits_section.py)."""
    throughput_samples_s: float | None
    batch: int | None
    efficiency: float | None  # served samples/s over the best in-process samples/s


@dataclass
class Column:
    """A record (or one step of its load ramp) seen through the report."""
    source: str
    scenario: str  # "train", "batch1" or "saturated"
    phase: str
    device: str
    device_name: str | None
    backend: str
    target: str | None
    precision: str
    math_mode: str | None  # the math MFU's peak is for (train records)
    batch_size: int
    concurrency: int | None
    ramp_point: bool
    throughput_samples_s: float | None
    requests_s: float | None
    latency: dict[str, float | None]  # p50_ms, p90_ms, ...: the record's percentiles, or the ramp step's
    memory: ColumnMemory
    gpu_util_mean_percent: float | None
    cpu_process_mean_percent: float | None
    cpu_system_mean_percent: float | None
    mean_power_w: float | None
    energy_j: float | None
    energy_per_sample_j: float | None
    energy_source: str | None  # "nvml" (the GPU's), "rapl" (the CPU packages'), "estimate" (the CPU's), or None
    # what the measurement held, for the cost section (report/cost/cost_per_million.py): cores, threads, GPUs, epochs
    host_logical_cpus: int | None
    torch_threads: int | None
    world_size: int | None
    epochs: int | None
    flops_per_sample: float | None
    achieved_tflops: float | None
    mfu: float | None
    peak_tflops: float | None
    partial: bool
    errors: dict[str, dict[str, str]]  # {field: {"short", "error"}}: figures withheld, null above
    warnings: list[str]
    bound: dict[str, str] | None  # what limited this figure (core/served.py), None before attribution
    limit: Batch1Limit | SaturatedLimit | None = field(default=None, metadata=OPTIONAL)
    # trainserve.core.meters.energy_status: "measured", "estimated" or "not measured" (the energy figures are
    # then null, whatever the record carries: another device's reading is not this one's); None only in a
    # summary.json written before it was stated
    energy_status: str | None = field(default=None, metadata=OPTIONAL)
    energy_meter: str | None = field(default=None, metadata=OPTIONAL)  # e.g. "NVML device 0 (cuda:0)"

    @property
    def p50_ms(self) -> float | None:
        return self.latency.get("p50_ms")


@dataclass
class Served:
    """One backend on one device: batch 1 (one request in flight) and saturated (the most samples/s seen)."""
    batch1: Column | None
    saturated: Column | None


# --- speedups ------------------------------------------------------------------------------------

@dataclass
class TrainConfig:
    """The configuration a training speedup compares (trainserve.core.speedup)."""
    batch_size: int | None
    precision: str | None
    throughput_samples_s: float | None
    p50_ms: float | None
    peak_bytes: int | None
    source: str | None


@dataclass
class TrainSpeedup:
    basis: str  # "same_config" or "best_vs_best"
    value: float | None
    cpu: float | None
    gpu: float | None
    metric: str
    note: str | None  # why value is None
    cpu_point: TrainConfig | None
    gpu_point: TrainConfig | None

    @property
    def error(self) -> None:
        """Training speedups are not withheld as a whole (their sides are screened records): never an error."""
        return None

    @classmethod
    def of(cls, d: dict[str, Any]) -> TrainSpeedup:
        point = (lambda p: None if p is None else TrainConfig(**p))
        return cls(**{**d, "cpu_point": point(d["cpu_point"]), "gpu_point": point(d["gpu_point"])})


@dataclass
class InferSpeedup:
    """GPU over CPU; for latency the CPU's time over the GPU's (how many times faster it answers)."""
    value: float | None
    cpu: float | None
    gpu: float | None
    metric: str
    note: str | None
    error: str | None  # the bound check that withheld a side


@dataclass
class Speedups:
    train: TrainSpeedup
    infer_batch1: InferSpeedup
    infer_saturated: InferSpeedup
    infer_backend: str | None
    train_best: TrainSpeedup


@dataclass
class OperatingPoint:
    """One point of a training sweep (trainserve.core.speedup.train_point)."""
    batch_size: int
    precision: str
    throughput_samples_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    peak_bytes: int | None
    gpu_util_mean_percent: float | None
    partial: bool
    energy_per_sample_j: float | None
    energy_source: str | None
    host_logical_cpus: int | None
    torch_threads: int | None
    source: str


@dataclass
class Sweep:
    train: list[OperatingPoint]
    train_best: OperatingPoint | None


# --- per device comparisons ----------------------------------------------------------------------

@dataclass
class TrainVsInfer:
    train_throughput_samples_s: float | None
    infer_throughput_samples_s: float | None
    throughput_ratio: float | None  # inference over training
    # memory: training beside inference is in memory_compare (a ratio only between figures of one kind)
    train_energy_per_sample_j: float | None
    infer_energy_per_sample_j: float | None
    energy_ratio: float | None  # training over inference
    # either side's energy from the CPU estimate (TDP x utilisation), not a meter: the sentence says so
    energy_estimated: bool = field(default=False, metadata=OPTIONAL)


@dataclass
class MaxBatch:
    train: int | None
    infer: int | None
    ratio: float | None
    precision: str
    source: str


@dataclass
class TimeToAccuracyRow:
    """A training run made with --target-accuracy beside the served model on the same device."""
    target_accuracy: float
    reached: bool
    time_to_accuracy_s: float | None
    epochs_to_accuracy: int | None
    steps_to_accuracy: int | None
    energy_to_accuracy_j: float | None
    energy_source: str | None
    test_accuracy: float | None
    epochs_run: int | None
    source: str
    batch_size: int
    precision: str
    infer_backend: str | None
    infer_batch1_p50_ms: float | None
    infer_energy_per_sample_j: float | None
    seeds: dict[str, Any] | None  # train/seeds.py: {n, reached, mean_seconds, sd_seconds}


@dataclass
class Ramp:
    label: str
    device: str
    backend: str
    batch_size: int
    source: str
    points: list[RampStep]  # the record's ramp steps with a throughput, their withheld figures None


# --- memory of training beside inference (report/memory/memory_compare.py) ------------------------------

@dataclass
class MemoryFigure:
    bytes: int
    kind: str  # "working_set" or "process_total"
    how: str
    batch_size: int | None
    source: str | None
    parts: dict[str, int | None] | None = field(default=None, metadata=OPTIONAL)  # training's working set by part


@dataclass
class MemorySide:
    working_set: MemoryFigure | None
    process_total: MemoryFigure | None


@dataclass
class MemoryRatios:
    working_set: float | None
    process_total: float | None


@dataclass
class MemoryCompare:
    train: MemorySide
    infer: MemorySide
    ratios: MemoryRatios  # training over inference, each only between two figures of its own kind
    notes: list[str]


# --- in-process limits (report/serving/limits_section.py) --------------------------------------------------------

@dataclass
class DeviceLimit:
    batch1_p50_ms: float | None
    batch1_threads: int | None
    best_batch: int | None
    best_throughput_samples_s: float | None


@dataclass
class ServerVsLimit:
    batch1_overhead_ms: float | None
    saturated_efficiency: float | None


@dataclass
class LimitPoint:
    source: str
    sweep: str | None
    batch_size: int
    threads: int | None
    spinning: bool
    p50_ms: float | None
    p99_ms: float | None
    throughput_samples_s: float | None
    runs: int | None


@dataclass
class LimitSpeedups:
    infer_batch1: float | None
    infer_saturated: float | None


@dataclass
class Limits:
    """What limits.limits_section adds to a model's section."""
    limits: dict[str, DeviceLimit]
    server_vs_limit: dict[str, ServerVsLimit]
    limit_points: dict[str, list[LimitPoint]]
    limit_speedups: LimitSpeedups


# --- latency attribution (report/serving/attribution_section.py) -------------------------------------------------

@dataclass
class Split:
    """A served point's mean latency split: the client's own time, network, front end, queue, compute."""
    client: float | None
    network: float | None
    frontend: float | None
    queue: float | None
    compute: float | None
    latency_ms: float | None
    server_ms: float | None
    consistent: bool
    note: str
    mean_batch: float | None


@dataclass
class AttributionPoint:
    source: str
    device: str
    backend: str
    batch_size: int
    label: str
    requests_s: float | None
    p99_ms: float | None
    attribution: Split | None
    bound: dict[str, str] | None
    client_saturated: bool


@dataclass
class CapacityBound:
    source: str
    device: str
    backend: str
    batch_size: int
    requests_s: float | None
    users: int | None
    slo_p99_ms: float | None
    bound: dict[str, str] | None


# --- MLPerf's scenarios (report/serving/scenarios.py) ----------------------------------------------------

@dataclass
class ScenarioRow:
    """One served record under its scenario's name (SingleStream, Server, Offline)."""
    source: str
    scenario: str
    device: str
    backend: str
    batch_size: int
    users: int | None
    requests_s: float | None
    throughput_samples_s: float | None
    capacity_req_s: float | None  # Server: the highest rate within the SLO
    lower_bound: bool  # Server: the heaviest load offered still met the SLO
    stop_reason: str | None
    slo_p99_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    count: int
    warmup_excluded: int | None
    percentiles_short: list[str]  # percentiles with too few requests behind them
    stable: bool | None
    stability_reason: str | None
    valid: bool
    reasons: list[str]
    repeats: int
    ci95: dict[str, dict[str, float]]  # per figure with repeats: {n, mean, sd, half_width, low, high}
    # null unless energy_status is "measured" or "estimated"; all three None in an older summary.json
    energy_per_sample_j: float | None = field(default=None, metadata=OPTIONAL)
    energy_source: str | None = field(default=None, metadata=OPTIONAL)
    energy_status: str | None = field(default=None, metadata=OPTIONAL)  # trainserve.core.meters.energy_status


@dataclass
class NoiseRow:
    """CPU vs GPU for one scenario where repeats give a side a CI: is the difference above the noise?"""
    model: str
    scenario: str
    metric: str
    label: str
    cpu: float
    cpu_half_width: float
    gpu: float
    gpu_half_width: float
    difference: float
    noise: float
    within_noise: bool
    one_side_only: bool


PerScenario = dict[str, ScenarioRow | None]  # by scenario name; None: not measured


@dataclass
class Scenarios:
    models: dict[str, dict[str, PerScenario]]  # per model, per device
    noise: list[NoiseRow]


# --- what the README promises beyond the table (report/answers/answers.py reads these) ------------------

@dataclass
class BatchingSide:
    """One Server-scenario search (the highest Poisson rate within the SLO) of one served model."""
    source: str
    model: str  # the served name: `<m>_cpu` as exported, `<m>_cpu_nobatch` with batching off
    capacity_req_s: float | None
    p99_ms: float | None  # at that capacity
    mean_batch: float | None  # rows per batch the server formed there
    lower_bound: bool  # the heaviest load offered still met the SLO


@dataclass
class SharedRate:
    """Batching on and off offered one open-loop rate (a share of the lower capacity): latency side by side."""
    rate_req_s: float
    basis: str  # how the rate was chosen
    on_source: str
    off_source: str
    on_p50_ms: float | None
    on_p99_ms: float | None
    off_p50_ms: float | None
    off_p99_ms: float | None
    duration_s: float | None  # of each load


@dataclass
class BatchingCompare:
    """On one device, the Server scenario with the model's dynamic batching as exported beside batching off."""
    device: str
    on: BatchingSide | None
    off: BatchingSide | None
    capacity_ratio: float | None  # on over off
    p99_delta_ms: float | None  # on minus off, each at its own capacity
    shared_rate: SharedRate | None = field(default=None, metadata=OPTIONAL)  # both at one rate (pipeline.py)


@dataclass
class DataPathPoint:
    """A training record's input path: where its batches lived and how long steps waited for them."""
    source: str
    device: str
    placement: str  # "host" (DataLoader, pinned memory, async copies) or "device" (resident on the device)
    batch_size: int
    precision: str
    throughput_samples_s: float | None
    data_wait_share: float | None  # of step time, 0..1
    host_data_ms: float | None = field(default=None, metadata=OPTIONAL)  # mean host time per step getting the batch
    compared: bool = False  # one side of the sweep's host-vs-device comparison at its best point (train/datapath.py)
    workers: int | None = field(default=None, metadata=OPTIONAL)  # DataLoader workers (host placement)


@dataclass
class DataPath:
    """Per device, the training records' input paths; host beside device placement where both ran."""
    points: list[DataPathPoint]
    host_over_device: float | None  # samples/s with host placement over device placement, same batch
    skipped: str | None = field(default=None, metadata=OPTIONAL)  # why the sweep's comparison did not run


# --- a model -------------------------------------------------------------------------------------

@dataclass
class ModelSection:
    model: str
    train: dict[str, Column | None]  # per device: the training record that stands for it
    infer: dict[str, dict[str, Served | None]]  # per backend, per device
    speedups: Speedups
    operating_points: dict[str, Sweep]
    train_vs_infer: dict[str, TrainVsInfer]
    max_batch: dict[str, MaxBatch]
    time_to_accuracy: dict[str, TimeToAccuracyRow]
    ramps: list[Ramp]
    memory_compare: dict[str, MemoryCompare]
    devices_measured: list[str]
    limits: dict[str, DeviceLimit] = field(default_factory=dict)
    server_vs_limit: dict[str, ServerVsLimit] = field(default_factory=dict)
    limit_points: dict[str, list[LimitPoint]] = field(default_factory=dict)
    limit_speedups: LimitSpeedups = field(default_factory=lambda: LimitSpeedups(None, None))
    attribution: list[AttributionPoint] = field(default_factory=list)
    capacity_bounds: list[CapacityBound] = field(default_factory=list)
    conclusions: list[str] = field(default_factory=list)
    trained_here: bool = True  # False: an ONNX file trained elsewhere (trainserve run --onnx)
    scenarios: dict[str, PerScenario] = field(default_factory=dict)  # per device (report/serving/scenarios.py)
    batching: dict[str, BatchingCompare] = field(default_factory=dict, metadata=OPTIONAL)  # per device (report/serving/batching.py)
    data_path: dict[str, DataPath] = field(default_factory=dict, metadata=OPTIONAL)  # per device (report/serving/batching.py)

    def served(self, device: str) -> Served | None:
        """The first backend's (analysis.BACKEND_PREFERENCE order) figures on `device`."""
        return next((per[device] for per in self.infer.values() if per.get(device)), None)

    def server_column(self, device: str) -> Column | None:
        """The served column that stands for the server on `device`: the first backend's saturated figure, else
        its batch-1 one (what cost, plan and memory set against training)."""
        for per in self.infer.values():
            v = per.get(device)
            if v and (v.saturated or v.batch1):
                return v.saturated or v.batch1
        return None


# --- run-wide ------------------------------------------------------------------------------------

@dataclass
class Answer:
    """One of the README's questions (report/answers/answers.py), answered from the sections, or why not."""
    id: str
    question: str  # the README's wording
    measured: bool
    text: str  # the answer with its figure, or "not measured in this run: <why>"
    link: str | None  # the report's anchor the figure comes from
    command: str | None  # what measures it, when not measured


@dataclass
class Machine:
    hostname: str
    cpu_model: str | None
    logical_cpus: int | None
    memory_bytes: int | None
    platform: str | None
    python: str | None
    gpus: list[str]


@dataclass
class Notice:
    """A warning or an error of one record (or of an unreadable file: model, device and phase None)."""
    source: str
    model: str | None
    device: str | None
    phase: str | None
    message: str


@dataclass
class RecordRow:
    source: str
    phase: str
    model: str
    device: str
    backend: str
    precision: str
    batch_size: int
    concurrency: int | None
    throughput_samples_s: float | None
    p50_ms: float | None
    p99_ms: float | None
    peak_bytes: int | None
    partial: bool
    created: str
    errors: dict[str, dict[str, str]]


@dataclass
class HeadlineSpeedup:
    """A model's training speedup on one basis (always both bases; value None when not measured)."""
    model: str
    kind: str  # "train_speedup"
    basis: str
    value: float | None
    cpu: TrainConfig | None
    gpu: TrainConfig | None
    note: str | None
    text: str
    withheld_by_verdict: list[str] | None = field(default=None, metadata=OPTIONAL)


@dataclass
class HeadlineConclusion:
    """A model's first conclusion."""
    model: str
    kind: str  # "conclusion"
    basis: None
    value: None
    text: str
    withheld_by_verdict: list[str] | None = field(default=None, metadata=OPTIONAL)


@dataclass
class Verdict:
    result: str  # "VALID" or "INVALID"
    reasons: list[dict[str, Any]]  # {"kind", "source", "message"}
    checked: int
    invalid_sources: list[str]


@dataclass
class Report:
    """The whole summary: summary.json is `to_json` of it."""
    schema_version: int
    run: str
    generated: str
    machines: list[Machine]
    versions: dict[str, str]
    card: dict[str, Any] | None
    models: dict[str, ModelSection]
    conclusions: list[str]
    headline: list[HeadlineSpeedup | HeadlineConclusion]
    errors: list[Notice]
    warnings: list[Notice]
    records: list[RecordRow]
    verdict: Verdict
    scenarios: Scenarios
    costs: Costs | None = None  # report/cost/cost_per_million.py, set by build_report
    plan: Plan | None = None  # report/cost/capacity_plan.py, with --qps
    # the README's questions (report/answers/answers.py); OPTIONAL: a summary.json written before them still reads
    answers: list[Answer] = field(default_factory=list, metadata=OPTIONAL)
    frontier: list[DeviceFrontier] = field(default_factory=list, metadata=OPTIONAL)  # report/memory/memory_frontier.py
