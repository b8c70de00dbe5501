"""The capacity plan: how many CPU servers or GPUs serve N requests/s within a p99 SLO, and which costs less.

From each server's measured latency-throughput frontier (report/cost/cost_per_million.py `frontier`): the most one-row
requests/s one server sustained with p99 <= the SLO and no failed request is its capacity; the servers
needed are ceil(N × (1 + headroom) / capacity). One server was measured; more than one assumes the load
spreads evenly and capacity adds up (linear scaling) — the plan says so, and by how much it extrapolates.
"""

from __future__ import annotations

import dataclasses

from trainserve.core.errors import UserError
from trainserve.report.common import units as u
from trainserve.report.common.cost_sections import SERVER, CapacityPoint, ClientBatched, DevicePlan, ModelPlan, Plan
from trainserve.report.common.sections import ModelSection, Report
from trainserve.report.common.sentences import plan_lines
from trainserve.report.cost.breakeven import servers_needed
from trainserve.report.cost.cost_per_million import (
    CostOptions,
    LoadPoint,
    best_within_slo,
    frontier,
    held,
    min_p99,
    model_prices,
    server_view,
)


def capacity_plan(report: Report, opts: CostOptions) -> Plan:
    """summary.json's "plan" (opts.qps must be set): per model and device, servers, cost, and lines to show."""
    if opts.qps is None:
        raise ValueError("capacity_plan needs opts.qps")
    opts = opts.with_searched_slo(report)
    target = opts.qps * (1 + opts.headroom)
    models = {}
    for name, section in report.models.items():
        devices: dict[str, DevicePlan] = {}
        mopts = dataclasses.replace(opts, prices=model_prices(section, opts.prices)[0])  # the GPU's own price
        for d in ("cpu", "cuda"):
            points = frontier(section, d)
            if points:
                devices[d] = _device_plan(section, d, points, target, mopts)
        feasible = {d: p.usd_per_hour for d, p in devices.items()
                    if p.servers is not None and p.usd_per_hour is not None}
        cheaper = min(feasible, key=lambda d: feasible[d]) if feasible else None
        lines = plan_lines(devices, cheaper, opts.qps, opts.headroom, opts.slo_p99_ms, target)
        models[name] = ModelPlan(devices=devices, cheaper=cheaper, lines=lines)
    return Plan(qps=opts.qps, slo_p99_ms=opts.slo_p99_ms, headroom=opts.headroom, target_req_s=target,
                models=models)


def _device_plan(section: ModelSection, device: str, points: list[LoadPoint], target: float,
                 opts: CostOptions) -> DevicePlan:
    res = held(device, server_view(section, device), opts.prices, "infer")
    best = best_within_slo(points, opts.slo_p99_ms)
    out = DevicePlan(unit=res.unit, units_per_server=res.units, usd_per_server_hour=res.usd_per_hour, held=res.held,
                     min_p99_ms=min_p99(points),
                     measured_max_req_s=max((p.throughput_samples_s for p in points if p.batch_size == 1),
                                            default=None),
                     capacity_req_s=None, capacity_point=None, servers=None, units=None, usd_per_hour=None,
                     extrapolation_factor=None, extrapolated=False, capacity_lower_bound=False,
                     meets_slo=best is not None)
    batched = [p for p in points if p.batch_size > 1 and p.meets(opts.slo_p99_ms)]
    if batched:  # the same server when clients put many rows in one request: inferences/s, not requests/s
        b = max(batched, key=lambda p: p.throughput_samples_s)
        nb = servers_needed(target, b.throughput_samples_s)
        out.client_batched = ClientBatched(batch_size=b.batch_size, users=b.users, p99_ms=b.p99_ms,
                                           capacity_inferences_s=b.throughput_samples_s, servers=nb,
                                           usd_per_hour=nb * res.usd_per_hour if res.usd_per_hour else None,
                                           extrapolated=target > b.throughput_samples_s, source=b.source)
    if best is None:
        return out
    cap = best.throughput_samples_s
    n = servers_needed(target, cap)
    return dataclasses.replace(
        out, capacity_req_s=cap, servers=n,
        capacity_point=CapacityPoint(kind=best.kind, source=best.source, users=best.users, p99_ms=best.p99_ms,
                                     throughput_samples_s=best.throughput_samples_s),
        units=n * res.units if res.units else None,
        usd_per_hour=n * res.usd_per_hour if res.usd_per_hour is not None else None,
        extrapolation_factor=target / cap, extrapolated=target > cap,
        capacity_lower_bound=(best.lower_bound if best.kind == SERVER
                              else _unsaturated(points, cap, opts.slo_p99_ms)),
        capacity_valid=best.valid, capacity_reasons=best.reasons)


def _unsaturated(points: list[LoadPoint], capacity: float, slo_p99_ms: float) -> bool:
    """True when the heaviest one-row load offered (the most users) met the SLO, is itself the capacity, and
    gained at least 5% over the next lighter load: where this server misses the SLO or stops gaining was not
    reached, so the capacity is a lower bound. A heavier load that missed the SLO, or a plateau, is the limit."""
    one_row = sorted((p for p in points if p.batch_size == 1 and p.users is not None),
                     key=lambda p: (p.users, p.throughput_samples_s))
    if len(one_row) < 2:
        return False
    heaviest, lighter = one_row[-1], one_row[-2]
    return (heaviest.meets(slo_p99_ms) and heaviest.throughput_samples_s >= capacity
            and heaviest.throughput_samples_s >= 1.05 * lighter.throughput_samples_s)


def require_feasible(plan: Plan) -> None:
    """For `trainserve plan`: a UserError unless some server of some model meets the SLO."""
    devices = [p for m in plan.models.values() for p in m.devices.values()]
    if not devices:
        raise UserError("this run has no served load measurements (load/*.json); run `trainserve load` or "
                        "`trainserve run` for it first")
    if not any(p.meets_slo for p in devices):
        floor = min((p.min_p99_ms for p in devices if p.min_p99_ms is not None), default=None)
        raise UserError(f"--slo-p99-ms {plan.slo_p99_ms:g} is below every measured p99 (the lowest is "
                        f"{u.ms(floor)}), so no measured load meets it; raise the SLO or measure a faster "
                        "configuration")
