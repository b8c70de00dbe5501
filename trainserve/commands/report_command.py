"""`trainserve report`: the side-by-side report of a run."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of


@options_of("report")
def report(o: Args) -> None:
    """Write runs/RUN/report/: report.html (self-contained), report.md, summary.json and plots.

    Reads every profile record of the run (train/, compare/, load/) and sets training beside
    inference, CPU beside GPU: throughput, latency percentiles, memory, utilization, energy,
    speedups, what it costs at the given prices, and conclusions drawn from the numbers.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.report import write_report

    from trainserve.report.cost.cost_per_million import CostOptions

    opts = CostOptions.of(o)
    html, lines = write_report(existing_run_dir(o.run, o.runs_dir), opts, baseline=o.baseline, runs_dir=o.runs_dir)
    for line in lines:
        typer.echo(line)
    typer.echo(f"report: {html}")
