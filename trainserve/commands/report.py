"""`trainserve report`: the side-by-side report of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainserve.core.errors import cli_errors
from trainserve.core.runs import DEFAULT_RUNS_DIR


@cli_errors
def report(
    run: Annotated[str, typer.Option("--run", help="Run whose profile records to report.")],
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="Folder that holds the runs.")] = DEFAULT_RUNS_DIR,
) -> None:
    """Write runs/RUN/report/: report.html (self-contained), report.md, summary.json and plots.

    Reads every profile record of the run (train/, compare/, load/) and sets training beside
    inference, CPU beside GPU: throughput, latency percentiles, memory, utilization, energy,
    speedups, and conclusions drawn from the numbers.
    """
    from trainserve.report import build_report
    from trainserve.core.runs import existing_run_dir

    html = build_report(existing_run_dir(run, runs_dir))
    typer.echo(f"report: {html}")
