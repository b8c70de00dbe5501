"""`trainserve run`: the main job, every stage in one command."""

from __future__ import annotations

from pathlib import Path

import typer

from trainserve.commands._model_options import model_fields
from trainserve.commands._typer import Args, options_of


@options_of("run")
def run(o: Args) -> None:
    """Train, export, serve on the CPU (and the GPU), load-test each server, and write the report.

    Every stage logs to RUNS_DIR/RUN/logs/; the report lands in RUNS_DIR/RUN/report/. Ctrl-C stops
    every process it started.
    """
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from trainserve.pipeline import Pipeline, RunConfig, StageEvent

    from trainserve.report.cost.cost_per_million import CostOptions

    # prices and targets are checked before any stage runs, so a typo never costs a training run
    cost = CostOptions.of(o)
    fields = model_fields(o)
    user_model = {k: v for k, v in fields.items() if k != "model" and v not in (None, "float32")}
    cfg = RunConfig(**o.of(RunConfig, model=fields["model"], user_model=user_model, cost=cost))
    console = Console()
    started = time.monotonic()
    if not console.is_terminal:  # a log file or a pipe: one plain line per event, no live display
        def line(event: StageEvent) -> None:
            if event.status == "start":
                typer.echo(f"… {event.stage}: {event.detail}")
            elif event.status == "line":
                typer.echo(f"  {event.stage}: {event.detail}")
            else:
                typer.echo(f"✓ {event.stage}: {event.detail} ({event.seconds:.1f} s)")

        pipeline = Pipeline(cfg, progress=line)
        html = _run(pipeline)
    else:
        with Progress(SpinnerColumn(finished_text="[green]✓"), TextColumn("[bold]{task.fields[stage]:<22}"),
                      TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
            tasks: dict[str, int] = {}

            def show(event: StageEvent) -> None:
                if event.status == "start":
                    tasks[event.stage] = bar.add_task(event.detail, total=1, stage=event.stage)
                elif event.status == "line":
                    bar.console.print(f"  [dim]{event.stage}:[/] {escape(event.detail)}")
                else:
                    bar.update(tasks[event.stage], completed=1,
                               description=f"{event.detail} [dim]({event.seconds:.1f} s)")

            pipeline = Pipeline(cfg, progress=show)
            html = _run(pipeline, stop=bar.stop)
    console.print(f"run [bold]{cfg.run}[/] done in {time.monotonic() - started:.0f} s")
    for text in pipeline.cost_lines:
        typer.echo(text)
    typer.echo(f"report: {html}")  # one unwrapped line, for people and scripts alike


def _run(pipeline, stop=lambda: None) -> Path:  # pipeline: trainserve.pipeline.Pipeline
    try:
        return pipeline.run()
    except KeyboardInterrupt:
        stop()
        typer.secho(f"interrupted; every process this run started was stopped (logs in {pipeline.logs}); "
                    f"--run {pipeline.cfg.run} --resume with the same options finishes it", err=True, fg="yellow")
        raise typer.Exit(code=130) from None
