"""`trainserve run`: the main job, every stage in one command."""

from __future__ import annotations

from pathlib import Path
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
from trainserve.commands._model_options import (
    InputDtypeOpt,
    InputShapeOpt,
    ModelOpt,
    NumClassesOpt,
    VocabOpt,
    model_fields,
)
from trainserve.commands.choices import Preset, RunDevice, RunsDirOpt
from trainserve.report.cost import DEFAULT_HEADROOM, DEFAULT_SLO_P99_MS


def run(
    model: ModelOpt = "cnn",
    preset: Annotated[Preset | None, typer.Option("--preset", "-p",
                                               help="Size preset (default: small on a GPU machine, tiny with --quick or "
                                                    "without a GPU).")] = None,
    device: Annotated[RunDevice, typer.Option(help="auto: the CPU, plus the GPU when there is one; cuda fails "
                                                   "without a GPU.")] = RunDevice("auto"),
    quick: Annotated[bool, typer.Option("--quick", help="A small job: under 3 minutes on a 2-core CPU.")] = False,
    run_name: Annotated[str, typer.Option("--run", help="Run name (default: run-DATE-TIME).")] = "",
    runs_dir: RunsDirOpt = None,
    sweep: Annotated[bool, typer.Option("--sweep/--no-sweep", help=(
        "Sweep training batch sizes and precisions on the CPU (and the GPU) for the training speedup at the same "
        "configuration and each device at its best; --no-sweep: one fixed-point CPU-vs-GPU compare."))] = True,
    sweep_budget_s: Annotated[float | None, typer.Option("--sweep-budget-s", help=(
        "Seconds the training sweep may take per device (default: 25 with --quick, else 60)."))] = None,
    dataset: Annotated[str, typer.Option(help=(
        "Training data: synthetic, digits (scikit-learn, bundled), or PATH.npz with arrays x, y."))] = "synthetic",
    target_accuracy: Annotated[float | None, typer.Option("--target-accuracy", help=(
        "Train until the held-out accuracy reaches A (0 < A <= 1) and report the time and energy it took on each "
        "device (with a GPU, a CPU-vs-GPU training stage is added for it)."))] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help=(
        "With --target-accuracy: trainings per device, time to accuracy as mean ± sd (default 3)."))] = None,
    input_shape: InputShapeOpt = None,
    input_dtype: InputDtypeOpt = "float32",
    vocab_size: VocabOpt = None,
    num_classes: NumClassesOpt = None,
    onnx: Annotated[Path | None, typer.Option("--onnx", help=(
        "Serve a model trained elsewhere: skip training; its inputs are read from the graph, whose batch "
        "dimension must be dynamic."))] = None,
    repeats: Annotated[int, typer.Option(help=(
        "Measure each served operating point N times; the report shows mean and 95% CI."))] = 1,
    resume: Annotated[bool, typer.Option("--resume", help=(
        "Finish a run that stopped (a failed stage, Ctrl-C, a time limit): the stages it completed are kept, "
        "the rest run. Give its --run and the options it was started with."))] = False,
    prices: PricesFile = None,
    price_cpu_core_hour: CpuCoreHour = None,
    price_gpu_hour: GpuHour = None,
    price_kwh: Kwh = None,
    slo_p99_ms: SloP99 = DEFAULT_SLO_P99_MS,
    qps: ReportQps = None,
    headroom: Headroom = DEFAULT_HEADROOM,
) -> None:
    """Train, export, serve on the CPU (and the GPU), load-test each server, and write the report.

    Every stage logs to RUNS_DIR/RUN/logs/; the report lands in RUNS_DIR/RUN/report/. Ctrl-C stops
    every process it started.
    """
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from trainserve.pipeline import Pipeline, RunConfig, StageEvent

    # prices and targets are checked before any stage runs, so a typo never costs a training run
    cost = cost_options(prices, price_cpu_core_hour, price_gpu_hour, price_kwh, slo_p99_ms, qps, headroom)
    fields = model_fields(model, input_shape, input_dtype, vocab_size, num_classes)
    user_model = {k: v for k, v in fields.items() if k != "model" and v not in (None, "float32")}
    cfg = RunConfig(model=fields["model"], user_model=user_model, onnx=onnx, preset=preset.value if preset else None,
                    device=device.value, quick=quick, run=run_name, runs_dir=runs_dir, sweep=sweep,
                    sweep_budget_s=sweep_budget_s, cost=cost, dataset=dataset, target_accuracy=target_accuracy,
                    seeds=seeds, repeats=repeats, resume=resume)
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

        html = _run(Pipeline(cfg, progress=line))
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

            html = _run(Pipeline(cfg, progress=show), stop=bar.stop)
    console.print(f"run [bold]{cfg.run}[/] done in {time.monotonic() - started:.0f} s")
    from trainserve.report import cost_lines_of

    for text in cost_lines_of(html):
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
