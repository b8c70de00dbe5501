"""What the measurements cost: USD and energy per million training samples and per million inferences.

Pure arithmetic over the summary that analysis.py built (no record is re-read), so the report adds no
measurable time; the results are the typed sections of report/common/cost_sections.py. Two parts per unit of work:

- hardware: the resources the measurement held × their price per hour ÷ the throughput. A CPU
  measurement holds its threads' cores (training: torch's threads; a server: every logical CPU of its
  host, since it was not pinned); a GPU one holds its GPUs (the GPU price includes the host's share).
- energy: the energy per sample × the price of a kWh, only where it is the device's own
  (trainserve.core.meters.energy_status: NVML for a GPU, RAPL for a CPU, or the CPU's labelled TDP ×
  utilisation estimate, shown "≈ … (estimated)" here as in the report's other tables) and only for a
  measurement whose energy covers exactly that load (not one step of a ramp); elsewhere "not measured".

Cloud prices already include power, so the energy part is what electricity adds on owned hardware; it
is shown beside the hardware part, and the total is their sum.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from trainserve.core.errors import UserError
from trainserve.core.meters import energy_note, energy_status
from trainserve.core.options.cost import CostFlags, SloOptions
from trainserve.core.speedup import DEVICE_LABEL
from trainserve.report.common import units as u
from trainserve.report.common.cost_sections import (
    SERVER,
    BreakEven,
    Costs,
    DeviceServing,
    InferCost,
    ModelCosts,
    RunCost,
    RunNotKnown,
    TrainCost,
)
from trainserve.report.common.price_table import GpuPrice, gpu_pricing
from trainserve.report.common.prices import Prices, resolve_prices
from trainserve.report.common.sections import Column, ModelSection, OperatingPoint, Report
from trainserve.report.cost.breakeven import gpu_price_break_even, servers_needed

DEFAULT_SLO_P99_MS = SloOptions.slo_p99_ms  # trainserve/core/options/cost.py says why and what
J_PER_KWH = 3.6e6
MILLION = 1e6



@dataclass(frozen=True)
class CostOptions:
    """The prices and targets the cost section and the capacity plan use."""

    prices: Prices = field(default_factory=Prices)
    slo_p99_ms: float | None = None  # None: the Server search's own SLO, else DEFAULT_SLO_P99_MS (with_searched_slo)
    qps: float | None = CostFlags.qps
    headroom: float = CostFlags.headroom

    @classmethod
    def of(cls, flags: Any) -> CostOptions:
        """From a command's CostFlags values (an object with those attributes), prices resolved; a UserError
        names a bad one."""
        prices = resolve_prices(flags.prices, flags.price_cpu_core_hour, flags.price_gpu_hour, flags.price_kwh)
        return cls(prices=prices, slo_p99_ms=flags.slo_p99_ms, qps=flags.qps, headroom=flags.headroom)

    def with_searched_slo(self, report: Any) -> CostOptions:
        """These options with an SLO the run's capacities can answer for. A capacity is the highest rate within the
        SLO it was searched under: it is a lower bound for any looser SLO, and says nothing of a tighter one. So
        the default is the loosest searched SLO, and a given SLO tighter than a search's is refused, naming both."""
        searched = searched_slos(report)
        if self.slo_p99_ms is None:
            return dataclasses.replace(self, slo_p99_ms=max(searched) if searched else DEFAULT_SLO_P99_MS)
        looser = sorted(s for s in searched if s > self.slo_p99_ms + 1e-9)
        if looser:
            raise UserError(f"--slo-p99-ms {self.slo_p99_ms:g} is tighter than the p99 ≤ {looser[-1]:g} ms the run's "
                            f"Server scenario was searched under, and a capacity says nothing of a tighter SLO; pass "
                            f"--slo-p99-ms {looser[-1]:g} or more, or search again with trainserve load --search "
                            f"--slo-p99-ms {self.slo_p99_ms:g}")
        return self

    def __post_init__(self) -> None:
        if self.slo_p99_ms is not None and not _positive(self.slo_p99_ms):
            raise UserError(f"--slo-p99-ms {_shown(self.slo_p99_ms)} is invalid; give the p99 latency budget in ms, "
                            "a number > 0")
        if self.qps is not None and not _positive(self.qps):
            raise UserError(f"--qps {_shown(self.qps)} is invalid; give the target load in requests/s, a number > 0")
        if not (isinstance(self.headroom, (int, float)) and math.isfinite(self.headroom)
                and 0 <= self.headroom <= 10):
            raise UserError(f"--headroom {_shown(self.headroom)} is invalid; give the spare capacity as a fraction "
                            "from 0 to 10 (0.2 = 20%)")


def searched_slos(report: Any) -> set[float]:
    """The SLOs the report's Server scenario capacities were searched under."""
    return {row.slo_p99_ms for section in report.models.values() for per in section.scenarios.values()
            for name, row in per.items() if name == "Server" and row is not None and row.capacity_req_s is not None
            and row.slo_p99_ms is not None}


def _shown(x: object) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else repr(x)


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# --- resources held and their price ----------------------------------------------------------

@dataclass
class Held:
    """What one measurement held (its GPUs or logical CPUs) and what they cost per hour."""
    units: int | None  # None: the record names no thread count and no host CPU count
    unit: str  # "GPU" or "logical CPU"
    usd_per_hour: float | None  # all units together; None: no price
    held: str  # the same in words: how many, why, at what price


def held(device: str, point: Column | OperatingPoint | None, prices: Prices, phase: str) -> Held:
    """What one measurement held, and its price per hour. A sweep's point names no world size (one GPU);
    None: nothing known beyond the prices."""
    if device == "cuda":
        n = int(getattr(point, "world_size", None) or 1)
        gpus = f"{n} GPU{'s' if n > 1 else ''}"
        if prices.gpu_hour_usd is None:  # a GPU the price table does not know, and no --price-gpu-hour
            return Held(n, "GPU", None, f"{gpus}, no price")
        return Held(n, "GPU", n * prices.gpu_hour_usd, f"{gpus} × {u.price(prices.gpu_hour_usd)}/GPU-hour")
    threads, cpus = getattr(point, "torch_threads", None), getattr(point, "host_logical_cpus", None)
    if phase == "train" and threads:
        n, why = int(threads), "torch threads"
    elif cpus:
        n, why = int(cpus), "every logical CPU of the host (the process was not pinned)"
    else:
        return Held(None, "logical CPU", None, "not known: the record names no thread count and no host CPU count")
    return Held(n, "logical CPU", n * prices.cpu_core_hour_usd,
                f"{n} logical CPUs ({why}) × {u.price(prices.cpu_core_hour_usd)}/core-hour")


def own_energy(device: str, source: str | None) -> bool:
    """The energy figure is this device's: its own meter's or the CPU estimate (trainserve.core.meters.energy_status,
    which the report's other tables read too); a CPU server's older record on a GPU host carries the idle GPU's
    NVML energy, which is not the CPU's."""
    return energy_status(device, source) != "not measured"


@dataclass
class PerMillion:
    """Hardware and energy cost of one million samples or inferences at one throughput."""
    hardware_usd: float | None  # None: no price
    kwh: float | None  # None: the device's own energy was not measured
    energy_usd: float | None
    usd: float | None  # hardware + energy (energy 0 where not measured); None: no price


def hardware_usd_per_million(usd_per_hour: float, throughput_s: float) -> float:
    """What one million samples or inferences cost in hardware time at `throughput_s` per second."""
    return usd_per_hour / (throughput_s * 3600.0) * MILLION


def per_million(usd_per_hour: float | None, throughput_s: float | None, energy_per_sample_j: float | None,
                prices: Prices) -> PerMillion:
    """Hardware and energy cost of one million samples or inferences at `throughput_s` per second."""
    hardware = (hardware_usd_per_million(usd_per_hour, throughput_s)
                if usd_per_hour is not None and throughput_s else None)
    kwh = energy_per_sample_j * MILLION / J_PER_KWH if energy_per_sample_j is not None else None
    energy_usd = kwh * prices.kwh_usd if kwh is not None else None
    total = None if hardware is None else hardware + (energy_usd or 0.0)
    return PerMillion(hardware, kwh, energy_usd, total)


# --- training ----------------------------------------------------------------------------------

def training_costs(section: ModelSection, run_samples: int | None, prices: Prices) -> dict[str, list[TrainCost]]:
    """Per device: the sweep's best point, batch 1 when swept, and the run's own training record."""
    out: dict[str, list[TrainCost]] = {}
    for d in ("cpu", "cuda"):
        rows = []
        op = section.operating_points.get(d)
        if op and op.train_best:
            rows.append(_train_row("best", d, op.train_best, run_samples, prices))
        b1 = [p for p in (op.train if op else []) if p.batch_size == 1 and p.throughput_samples_s]
        if b1:
            rows.append(_train_row("batch1", d, max(b1, key=lambda p: p.throughput_samples_s), run_samples, prices))
        t = section.train.get(d)
        if t and t.throughput_samples_s and t.source not in {r.source for r in rows}:
            rows.append(_train_row("as_trained", d, t, run_samples, prices))
        if rows:
            out[d] = rows
    return out


def _train_row(basis: str, device: str, p: OperatingPoint | Column, run_samples: int | None,
               prices: Prices) -> TrainCost:
    res = held(device, p, prices, "train")
    energy = p.energy_per_sample_j if own_energy(device, p.energy_source) else None
    assert p.throughput_samples_s is not None  # training_costs picks only points with a throughput
    m = per_million(res.usd_per_hour, p.throughput_samples_s, energy, prices)
    return TrainCost(basis=basis, device=device, batch_size=p.batch_size, precision=p.precision,
                     throughput_samples_s=p.throughput_samples_s, source=p.source, units=res.units, unit=res.unit,
                     usd_per_hour=res.usd_per_hour, held=res.held, hardware_usd_per_million_samples=m.hardware_usd,
                     kwh_per_million_samples=m.kwh, energy_usd_per_million_samples=m.energy_usd,
                     usd_per_million_samples=m.usd,
                     energy_note=None if energy is not None else _energy_note(device, p.energy_source),
                     energy_status=energy_status(device, p.energy_source) if energy is not None else "not measured",
                     run=_per_run(run_samples, p.throughput_samples_s, res, energy, prices))


def _per_run(samples: int | None, throughput: float, res: Held, energy_j: float | None,
             prices: Prices) -> RunCost | RunNotKnown:
    """The whole run (its own epochs × rows per epoch) at this point's speed."""
    if not samples:
        return RunNotKnown(samples=None, note="not known: the model card gives no rows per epoch")
    wall_h = samples / throughput / 3600.0
    hw_usd = wall_h * res.usd_per_hour if res.usd_per_hour is not None else None
    kwh = samples * energy_j / J_PER_KWH if energy_j is not None else None
    energy_usd = kwh * prices.kwh_usd if kwh is not None else None
    return RunCost(samples=samples, wall_hours=wall_h,
                   hardware_hours=wall_h * res.units if res.units else None,  # GPU-hours or core-hours
                   hardware_usd=hw_usd, kwh=kwh, energy_usd=energy_usd,
                   usd=None if hw_usd is None else hw_usd + (energy_usd or 0.0))


def run_samples(report: Report, section: ModelSection) -> int | None:
    """Rows the run trained on: its epochs × the card's rows per epoch."""
    rows = (report.card or {}).get("train_samples")
    epochs = [t.epochs for t in section.train.values() if t and t.epochs]
    return int(rows * max(epochs)) if rows and epochs else None


# --- inference ----------------------------------------------------------------------------------

@dataclass
class LoadPoint:
    """One served load point of a device: a ramp step, the Server scenario's capacity, or a plain measurement."""
    kind: str  # "ramp step", SERVER, "batch1" or "saturated"
    source: str
    batch_size: int
    users: int | None  # None: open-loop arrivals
    throughput_samples_s: float  # samples (rows) per second
    requests_s: float | None
    p99_ms: float | None
    failures: int
    energy_per_sample_j: float | None  # the device's own energy only; None elsewhere
    energy_source: str | None = None  # a plain measurement's energy source, for the note on why there is none
    lower_bound: bool = False  # the Server search never found the rate where the SLO breaks
    valid: bool = True  # the verdict's judgement of the Server figure
    reasons: list[str] = field(default_factory=list)  # why it is not valid

    def meets(self, slo_p99_ms: float) -> bool:
        """Within the SLO: a p99 at or under it, and no failed request."""
        return self.p99_ms is not None and self.p99_ms <= slo_p99_ms and not self.failures


def frontier(section: ModelSection, device: str) -> list[LoadPoint]:
    """Every served load point of a device (its preferred backend): ramp steps and plain measurements."""
    backend = next((b for b, per in section.infer.items() if per.get(device)), None)
    if backend is None:
        return []
    per = section.infer[backend][device]
    assert per is not None
    points = []
    for r in section.ramps:
        if r.device != device or r.backend != backend:
            continue
        for p in r.points:
            points.append(LoadPoint("ramp step", r.source, r.batch_size, p.users, p.throughput_samples_s,
                                    p.requests_s, p.p99_ms, p.failures or 0, None))
    server = (section.scenarios.get(device) or {}).get("Server")
    if server and server.capacity_req_s:  # the open-loop capacity search (report/serving/scenarios.py)
        points.append(LoadPoint(SERVER, server.source, server.batch_size, None,
                                server.capacity_req_s * server.batch_size, server.capacity_req_s, server.p99_ms, 0,
                                server.energy_per_sample_j if own_energy(device, server.energy_source) else None,
                                energy_source=server.energy_source, lower_bound=server.lower_bound,
                                valid=server.valid, reasons=server.reasons))
    for kind, v in (("batch1", per.batch1), ("saturated", per.saturated)):
        if v and not v.ramp_point:
            energy = v.energy_per_sample_j if own_energy(device, v.energy_source) else None
            points.append(LoadPoint(kind, v.source, v.batch_size, v.concurrency, v.throughput_samples_s, v.requests_s,
                                    v.latency.get("p99_ms"), 0, energy, energy_source=v.energy_source))
    return [p for p in points if p.throughput_samples_s]


def best_within_slo(points: list[LoadPoint], slo_p99_ms: float) -> LoadPoint | None:
    """The most inferences/s among one-row requests whose p99 met the SLO without a failed request.

    Where the Server scenario was measured, its figure alone: a closed loop slows its sending when the
    server slows, so its p99 hides queueing. Client-batched points are left out: their requests carry many
    rows, so their requests/s is not the load a plan in requests/s asks about."""
    if any(p.kind == SERVER for p in points):
        points = [p for p in points if p.kind == SERVER]
    ok = [p for p in points if p.batch_size == 1 and p.meets(slo_p99_ms)]
    return max(ok, key=lambda p: p.throughput_samples_s) if ok else None


def min_p99(points: list[LoadPoint]) -> float | None:
    values = [p.p99_ms for p in points if p.batch_size == 1 and p.p99_ms is not None]
    return min(values) if values else None


def inference_costs(section: ModelSection, opts: CostOptions) -> dict[str, DeviceServing]:
    """Per device: cost per million inferences at batch 1, at saturation and at the SLO's highest load."""
    out: dict[str, DeviceServing] = {}
    for d in ("cpu", "cuda"):
        points = frontier(section, d)
        if not points:
            continue
        res = held(d, server_view(section, d), opts.prices, "infer")
        rows = []
        b1 = next((p for p in points if p.kind == "batch1"), None) or next(
            (p for p in points if p.kind == "ramp step" and p.users == 1 and p.batch_size == 1), None)
        if b1:
            rows.append(_infer_row("batch1", d, b1, res, opts.prices))
        rows.append(_infer_row("saturated", d, max(points, key=lambda p: p.throughput_samples_s), res, opts.prices))
        slo = best_within_slo(points, opts.slo_p99_ms)
        if slo:
            rows.append(_infer_row("slo", d, slo, res, opts.prices))
        floor = min_p99(points)
        out[d] = DeviceServing(units=res.units, unit=res.unit, usd_per_hour=res.usd_per_hour, held=res.held,
                               rows=rows, min_p99_ms=floor,
                               slo_note=None if slo else _slo_note(d, opts.slo_p99_ms, floor),
                               cores_busy_mean=_busy(section, d))
    return out


def server_view(section: ModelSection, device: str) -> Column | None:
    return section.server_column(device)


def _busy(section: ModelSection, device: str) -> float | None:
    """Mean cores the CPU server kept busy at saturation (context for the cores it was charged)."""
    v = server_view(section, device)
    pct = v and v.cpu_process_mean_percent
    return pct / 100.0 if device == "cpu" and pct else None


def _infer_row(basis: str, device: str, p: LoadPoint, res: Held, prices: Prices) -> InferCost:
    m = per_million(res.usd_per_hour, p.throughput_samples_s, p.energy_per_sample_j, prices)
    note = None
    if p.energy_per_sample_j is None:
        note = ("not measured at one ramp step (the ramp's energy covers all its steps)" if p.kind == "ramp step"
                else _energy_note(device, p.energy_source))
    return InferCost(basis=basis, device=device, kind=p.kind, source=p.source, batch_size=p.batch_size,
                     users=p.users, throughput_samples_s=p.throughput_samples_s, requests_s=p.requests_s,
                     p99_ms=p.p99_ms, hardware_usd_per_million_inferences=m.hardware_usd,
                     kwh_per_million_inferences=m.kwh, energy_usd_per_million_inferences=m.energy_usd,
                     usd_per_million_inferences=m.usd, energy_note=note,
                     energy_status=energy_status(device, p.energy_source) if note is None else "not measured")


def _energy_note(device: str, source: str | None) -> str:
    return energy_note(device, source)


def _slo_note(device: str, slo: float, floor: float | None) -> str:
    if floor is None:
        return f"SLO not checked: the {DEVICE_LABEL[device]} server has no one-row load point with a p99"
    return (f"no measured load meets p99 ≤ {slo:g} ms on the {DEVICE_LABEL[device]}: its lowest measured p99 is "
            f"{floor:g} ms")


# --- break-even: the load from which GPUs cost less than CPU servers ----------------------------

def break_even(cpu: tuple[float, float] | None, gpu: tuple[float, float] | None, max_load: float,
               why_not: str | None = None) -> BreakEven:
    """Scan (0, max_load] for where the GPU side costs less per hour than the CPU side.

    `cpu` and `gpu` are (capacity per server in requests/s within the SLO, USD per server-hour). Both
    sides buy whole servers, so cost is a step function of load; on each interval between two steps the
    counts are constant. Returns the first load above which the GPU is cheaper and the load from which it
    stays cheaper up to max_load (None: never, within the scan)."""
    if not cpu or not gpu:
        return BreakEven(None, None, max_load, note=why_not or "not computed: a side has no capacity within the SLO")
    (cc, cp), (gc, gp) = cpu, gpu
    if gp / gc < cp / cc:  # the GPU is cheaper per request at scale: scan far enough to see where
        max_load = max(max_load, 2 * gp / (cp / cc - gp / gc))
    edges = {max_load}
    for cap in (cc, gc):
        k = 1
        while k * cap < max_load and k < 200_000:
            edges.add(k * cap)
            k += 1
    first = steady = None
    lo = 0.0
    for hi in sorted(edges):
        cheaper = servers_needed(hi, gc) * gp < servers_needed(hi, cc) * cp
        if cheaper and first is None:
            first = lo
        if cheaper and steady is None:
            steady = lo
        elif not cheaper:
            steady = None
        lo = hi
    asymptote = "the GPU" if gp / gc < cp / cc else "the CPU"
    return BreakEven(first, steady, max_load, cheaper_at_scale=asymptote,
                     note=None if steady is not None else f"the GPU never becomes cheaper up to {max_load:,.0f} req/s")


def _why_no_break_even(infer: dict[str, DeviceServing], slo_caps: dict[str, float],
                       caps: dict[str, tuple[float, float]]) -> str | None:
    for d in ("cpu", "cuda"):
        if d not in infer:
            return f"not computed: no {DEVICE_LABEL[d]} server was measured in this run"
        if d not in slo_caps:
            return f"not computed: the {DEVICE_LABEL[d]} server has no measured load within the SLO"
        if d not in caps:
            return f"not computed: the {DEVICE_LABEL[d]} has no price"
    return None


def model_gpu_name(section: ModelSection) -> str | None:
    """The GPU a model's measurements ran on (its first CUDA column's device name), for the price table."""
    columns = [section.train.get("cuda")] + [v for per in section.infer.values() if per.get("cuda")
                                             for v in (per["cuda"].batch1, per["cuda"].saturated)]
    return next((v.device_name for v in columns if v and v.device_name), None)


def model_prices(section: ModelSection, prices: Prices) -> tuple[Prices, GpuPrice]:
    """The prices one model's GPU is charged: the user's GPU price, else the table's entry for its GPU, else
    none (the GPU's costs then say "no price"); and the GpuPrice that says which."""
    gp = gpu_pricing(model_gpu_name(section), prices.gpu_hour_usd, prices.gpu_offer)
    return dataclasses.replace(prices, gpu_hour_usd=gp.usd_per_gpu_hour, gpu_offer=gp.offer or "no price"), gp


def cost_section(report: Report, opts: CostOptions) -> Costs:
    """summary.json's "costs": the prices and SLO used, then per model training, inference, break-even."""
    opts = opts.with_searched_slo(report)
    models = {}
    for name, section in report.models.items():
        prices, gpu_price = model_prices(section, opts.prices)
        mopts = dataclasses.replace(opts, prices=prices)
        infer = inference_costs(section, mopts)
        caps, slo_caps = {}, {}
        for d, c in infer.items():
            slo = next((r for r in c.rows if r.basis == "slo"), None)
            if slo:
                slo_caps[d] = slo.throughput_samples_s
            if slo and c.usd_per_hour:
                caps[d] = (slo.throughput_samples_s, c.usd_per_hour)
        planned = opts.qps * (1 + opts.headroom) if opts.qps else None
        top = max([c[0] for c in caps.values()] + [planned or 0.0] + [1.0])
        samples = run_samples(report, section)
        cpu = infer.get("cpu")
        models[name] = ModelCosts(
            train=training_costs(section, samples, prices), run_samples=samples, infer=infer,
            gpu_price=gpu_price if "cuda" in section.devices_measured else None,
            capacity_at_slo_req_s=slo_caps,
            break_even=break_even(caps.get("cpu"), caps.get("cuda"), 2 * top,
                                  _why_no_break_even(infer, slo_caps, caps)),
            gpu_price_break_even=gpu_price_break_even(slo_caps.get("cpu"), cpu.usd_per_hour if cpu else None,
                                                      slo_caps.get("cuda"), gpu_price.usd_per_gpu_hour, planned))
    return Costs(prices=opts.prices, slo_p99_ms=opts.slo_p99_ms, headroom=opts.headroom, models=models)
