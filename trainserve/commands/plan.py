"""`trainserve plan`: CPU servers or GPUs for a target load within a p99 SLO, from a run's measurements."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from trainserve.commands._cost_options import (
    CpuCoreHour,
    GpuHour,
    Headroom,
    Kwh,
    PricesFile,
    cost_options,
)
from trainserve.commands.choices import RunsDirOpt
from trainserve.report.cost import DEFAULT_HEADROOM


def plan(
    run: Annotated[str, typer.Option("--run", help="Run whose served load measurements to plan from.")],
    qps: Annotated[float, typer.Option("--qps", help="Target load, requests/s (one row per request).")],
    slo_p99_ms: Annotated[float, typer.Option("--slo-p99-ms", help="p99 latency budget, ms.")],
    headroom: Headroom = DEFAULT_HEADROOM,
    runs_dir: RunsDirOpt = None,
    prices: PricesFile = None,
    price_cpu_core_hour: CpuCoreHour = None,
    price_gpu_hour: GpuHour = None,
    price_kwh: Kwh = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON (summary.json's \"plan\").")] = False,
) -> None:
    """How many CPU servers or GPUs serve QPS requests/s with p99 <= SLO, and which costs less.

    Each server's capacity is the most requests/s it was measured to sustain within the SLO (its load
    ramp and plain measurements); servers = ceil(QPS x (1 + headroom) / capacity). More servers than the
    one measured assume linear scaling, and the plan says so.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.report.analysis import analyse
    from trainserve.report.collect import collect
    from trainserve.report.plan import capacity_plan, require_feasible
    from trainserve.report.typed import to_json

    opts = cost_options(prices, price_cpu_core_hour, price_gpu_hour, price_kwh, slo_p99_ms, qps, headroom)
    summary = analyse(collect(existing_run_dir(run, runs_dir)))
    result = capacity_plan(summary, opts)
    require_feasible(result)
    if as_json:
        typer.echo(json.dumps(to_json(result), indent=1))
        return
    p = opts.prices
    gpu = f"${p.gpu_hour_usd:g}/GPU-hour ({p.gpu_offer})" if p.gpu_hour_usd is not None else \
        "GPU: the price table's entry for the measured GPU, else no price"
    typer.echo(f"prices: ${p.cpu_core_hour_usd:g}/logical-CPU-hour ({p.cpu_offer}); {gpu}")
    for name, m in result.models.items():
        for line in m.lines:
            typer.echo(f"{name}: {line}")
