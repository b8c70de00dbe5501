"""`trainserve plan`: CPU servers or GPUs for a target load within a p99 SLO, from a run's measurements."""

from __future__ import annotations

import json
import typer

from trainserve.commands._typer import Args, options_of


@options_of("plan")
def plan(o: Args) -> None:
    """How many CPU servers or GPUs serve QPS requests/s with p99 <= SLO, and which costs less.

    Each server's capacity is the most requests/s it was measured to sustain within the SLO (its load
    ramp and plain measurements); servers = ceil(QPS x (1 + headroom) / capacity). More servers than the
    one measured assume linear scaling, and the plan says so.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.report.page.analysis import analyse
    from trainserve.report.common.collect import collect
    from trainserve.report.cost.cost_per_million import CostOptions
    from trainserve.report.cost.capacity_plan import capacity_plan, require_feasible
    from trainserve.report.common.typed import to_json

    summary = analyse(collect(existing_run_dir(o.run, o.runs_dir)))
    opts = CostOptions.of(o).with_searched_slo(summary)
    result = capacity_plan(summary, opts)
    require_feasible(result)
    if o.as_json:
        typer.echo(json.dumps(to_json(result), indent=1))
        return
    p = opts.prices
    gpu = f"${p.gpu_hour_usd:g}/GPU-hour ({p.gpu_offer})" if p.gpu_hour_usd is not None else \
        "GPU: the price table's entry for the measured GPU, else no price"
    typer.echo(f"prices: ${p.cpu_core_hour_usd:g}/logical-CPU-hour ({p.cpu_offer}); {gpu}")
    for name, m in result.models.items():
        for line in m.lines:
            typer.echo(f"{name}: {line}")
