"""The cost and plan sections: what cost_per_million.py, breakeven.py and capacity_plan.py compute, field by field.

summary.json's "costs" is `to_json` (report/common/typed.py) of a `Costs` and its "plan" of a `Plan`, keys in field
order (docs/summary.schema.json); cost_render.py, cost_plot.py and the sentences read these attributes.
Money is USD, loads are one-row requests/s, latencies ms. None is "not measured" or "no price", as each
field says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainserve.report.common.price_table import GpuPrice
from trainserve.report.common.prices import Prices
from trainserve.report.common.typed import OPTIONAL

SERVER = "Server scenario"  # a frontier point's kind: the open-loop capacity search's figure

# What each cost row's "basis" stands for, in the tables and the sentences
BASIS = {"batch1": "batch 1, one user", "saturated": "saturation (most samples/s)", "slo": "highest load within SLO",
         "best": "best operating point", "as_trained": "as trained (the run's record)"}


# --- training -----------------------------------------------------------------------------------


@dataclass
class RunCost:
    """The whole training run (its epochs × rows per epoch) at one point's speed."""
    samples: int
    wall_hours: float
    hardware_hours: float | None  # GPU-hours or core-hours; None: units held not known
    hardware_usd: float | None
    kwh: float | None
    energy_usd: float | None
    usd: float | None


@dataclass
class RunNotKnown:
    """The run's size is not known (the model card gives no rows per epoch)."""
    samples: None
    note: str


@dataclass
class TrainCost:
    """One training operating point's cost per million samples, and of the whole run at its speed."""
    basis: str  # a key of BASIS: "best", "batch1" or "as_trained"
    device: str
    batch_size: int
    precision: str
    throughput_samples_s: float
    source: str
    units: int | None
    unit: str
    usd_per_hour: float | None
    held: str
    hardware_usd_per_million_samples: float | None
    kwh_per_million_samples: float | None
    energy_usd_per_million_samples: float | None
    usd_per_million_samples: float | None
    energy_note: str | None  # why there is no energy figure; None: there is one
    run: RunCost | RunNotKnown
    # trainserve.core.meters.energy_status, as the report's other tables say it (None: an older summary.json)
    energy_status: str | None = field(default=None, metadata=OPTIONAL)


# --- serving ------------------------------------------------------------------------------------

@dataclass
class InferCost:
    """One served load point's cost per million inferences."""
    basis: str  # a key of BASIS: "batch1", "saturated" or "slo"
    device: str
    kind: str  # the load point's kind: "ramp step", SERVER, "batch1" or "saturated"
    source: str
    batch_size: int
    users: int | None  # None: open-loop arrivals (the Server scenario)
    throughput_samples_s: float
    requests_s: float | None
    p99_ms: float | None
    hardware_usd_per_million_inferences: float | None
    kwh_per_million_inferences: float | None
    energy_usd_per_million_inferences: float | None
    usd_per_million_inferences: float | None
    energy_note: str | None  # why there is no energy figure; None: there is one
    # trainserve.core.meters.energy_status, as the report's other tables say it (None: an older summary.json)
    energy_status: str | None = field(default=None, metadata=OPTIONAL)


@dataclass
class DeviceServing:
    """One device's server: what it held, its cost rows, and the SLO's reach."""
    units: int | None
    unit: str
    usd_per_hour: float | None
    held: str
    rows: list[InferCost]
    min_p99_ms: float | None  # the lowest p99 among its one-row load points
    slo_note: str | None  # why no row meets the SLO; None: one does
    cores_busy_mean: float | None  # a CPU server's mean busy cores at saturation (context for those charged)


@dataclass
class BreakEven:
    """The load from which GPUs cost less per hour than CPU servers (report/cost/cost_per_million.py `break_even`)."""
    first_gpu_cheaper_req_s: float | None
    break_even_req_s: float | None  # from here up to max_load_req_s the GPU stays cheaper; None: never
    max_load_req_s: float  # how far the scan went
    cheaper_at_scale: str | None = field(default=None, metadata=OPTIONAL)  # "the GPU" or "the CPU"
    note: str | None = None  # why there is no break-even


@dataclass
class GpuPriceBreakEven:
    """The GPU price below which GPUs serve one load for less than CPU servers (report/cost/breakeven.py)."""
    load_req_s: float | None
    load_basis: str | None  # "plan" or "one GPU's capacity"
    cpu_servers: int | None
    cpu_usd_per_hour: float | None  # all those CPU servers
    gpus: int | None
    break_even_usd_per_gpu_hour: float | None
    gpu_usd_per_gpu_hour: float | None  # the GPU's own price; None: no price
    gpu_cheaper: bool | None
    note: str | None  # why it was not computed


@dataclass
class ModelCosts:
    """One model's costs: training per device, serving per device, and where the GPU becomes cheaper."""
    train: dict[str, list[TrainCost]]  # by device
    run_samples: int | None  # the run's epochs × rows per epoch
    infer: dict[str, DeviceServing]  # by device
    gpu_price: GpuPrice | None  # None: no GPU was measured
    capacity_at_slo_req_s: dict[str, float]  # by device: the most one-row requests/s within the SLO
    break_even: BreakEven
    gpu_price_break_even: GpuPriceBreakEven


@dataclass
class Costs:
    """summary.json's "costs": the prices and SLO used, then each model's costs."""
    prices: Prices
    slo_p99_ms: float
    headroom: float
    models: dict[str, ModelCosts]


# --- the capacity plan ----------------------------------------------------------------------------

@dataclass
class CapacityPoint:
    """The load point a server's capacity is read from."""
    kind: str
    source: str
    users: int | None
    p99_ms: float | None
    throughput_samples_s: float


@dataclass
class ClientBatched:
    """The same server when clients put many rows in one request: inferences/s, not requests/s."""
    batch_size: int
    users: int | None
    p99_ms: float | None
    capacity_inferences_s: float
    servers: int
    usd_per_hour: float | None
    extrapolated: bool
    source: str


@dataclass
class DevicePlan:
    """How many servers of one device carry the target load within the SLO, and what they cost."""
    unit: str
    units_per_server: int | None
    usd_per_server_hour: float | None
    held: str
    min_p99_ms: float | None
    measured_max_req_s: float | None
    capacity_req_s: float | None  # None: no measured load met the SLO
    capacity_point: CapacityPoint | None
    servers: int | None
    units: int | None  # GPUs or logical CPUs of all the servers
    usd_per_hour: float | None
    extrapolation_factor: float | None  # target ÷ capacity
    extrapolated: bool  # more servers than the one measured (linear scaling assumed)
    capacity_lower_bound: bool
    meets_slo: bool
    client_batched: ClientBatched | None = field(default=None, metadata=OPTIONAL)
    capacity_valid: bool | None = field(default=None, metadata=OPTIONAL)  # set with a capacity
    capacity_reasons: list[str] | None = field(default=None, metadata=OPTIONAL)


@dataclass
class ModelPlan:
    devices: dict[str, DevicePlan]
    cheaper: str | None  # the device whose servers cost less per hour; None: none meets the SLO with a price
    lines: list[str]  # the plan in sentences (sentences.plan_lines)


@dataclass
class Plan:
    """summary.json's "plan" (with --qps): per model and device, servers, cost, and lines to show."""
    qps: float
    slo_p99_ms: float
    headroom: float
    target_req_s: float  # qps × (1 + headroom)
    models: dict[str, ModelPlan]
