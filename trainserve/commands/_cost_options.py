"""The price, SLO and target-load options shared by `trainserve run`, `report` and `plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainserve.report.cost import DEFAULT_HEADROOM, DEFAULT_SLO_P99_MS, CostOptions
from trainserve.report.prices import resolve_prices

PricesFile = Annotated[Path | None, typer.Option(
    "--prices", help="JSON file with any of cpu_core_hour_usd, gpu_hour_usd, kwh_usd (and cpu_offer, gpu_offer, "
                     "kwh_offer, source, date); the options below override it.")]
CpuCoreHour = Annotated[float | None, typer.Option(
    "--price-cpu-core-hour", help="USD per logical CPU per hour (default: AWS c5.2xlarge on-demand ÷ 8 vCPUs).")]
GpuHour = Annotated[float | None, typer.Option(
    "--price-gpu-hour", help="USD per GPU per hour (default: the price table's list price for the measured GPU — H100, H200, "
                           "A100 — else no price).")]
Kwh = Annotated[float | None, typer.Option(
    "--price-kwh", help="USD per kWh of measured energy (default: U.S. average commercial price, EIA 2022).")]
SloP99 = Annotated[float, typer.Option(
    "--slo-p99-ms", help="p99 latency budget of a served load point, ms (cost at the SLO, break-even, plan).")]
ReportQps = Annotated[float | None, typer.Option(
    "--qps", help="Target load, requests/s: the report adds a capacity plan (CPU servers vs GPUs within --slo-p99-ms).")]
Headroom = Annotated[float, typer.Option(
    "--headroom", help="Spare capacity the plan keeps above --qps, as a fraction (0.2 = 20%).")]


def cost_options(prices: Path | None, cpu_core_hour: float | None, gpu_hour: float | None, kwh: float | None,
                 slo_p99_ms: float = DEFAULT_SLO_P99_MS, qps: float | None = None,
                 headroom: float = DEFAULT_HEADROOM) -> CostOptions:
    """Validated options (a UserError names the bad one)."""

    return CostOptions(prices=resolve_prices(prices, cpu_core_hour, gpu_hour, kwh), slo_p99_ms=slo_p99_ms, qps=qps,
                       headroom=headroom)
