"""`trainserve report`: the side-by-side report of a run."""

from __future__ import annotations

from typing import Annotated

import typer

from trainserve.commands._cost_options import (
    CpuCoreHour,
    GpuHour,
    Headroom,
    Kwh,
    PricesFile,
    ReportQps,
    SloP99,
    cost_options,
)
from trainserve.commands.choices import RunsDirOpt
from trainserve.report.cost import DEFAULT_HEADROOM, DEFAULT_SLO_P99_MS


def report(
    run: Annotated[str, typer.Option("--run", help="Run whose profile records to report.")],
    runs_dir: RunsDirOpt = None,
    prices: PricesFile = None,
    price_cpu_core_hour: CpuCoreHour = None,
    price_gpu_hour: GpuHour = None,
    price_kwh: Kwh = None,
    slo_p99_ms: SloP99 = DEFAULT_SLO_P99_MS,
    qps: ReportQps = None,
    headroom: Headroom = DEFAULT_HEADROOM,
) -> None:
    """Write runs/RUN/report/: report.html (self-contained), report.md, summary.json and plots.

    Reads every profile record of the run (train/, compare/, load/) and sets training beside
    inference, CPU beside GPU: throughput, latency percentiles, memory, utilization, energy,
    speedups, what it costs at the given prices, and conclusions drawn from the numbers.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.report import build_report, cost_lines_of

    opts = cost_options(prices, price_cpu_core_hour, price_gpu_hour, price_kwh, slo_p99_ms, qps, headroom)
    html = build_report(existing_run_dir(run, runs_dir), opts)
    for line in cost_lines_of(html):
        typer.echo(line)
    typer.echo(f"report: {html}")
