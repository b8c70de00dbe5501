"""`trainserve limits`: what onnxruntime does in process on one device, the bound for the served figures."""

from __future__ import annotations

from typing import Annotated

import typer

from trainserve.commands.choices import RunsDirOpt, ServeDevice
from trainserve.core.errors import UserError


def limits(
    run: Annotated[str, typer.Option("--run", help="Run name: reads runs/RUN/model_repository/, writes runs/RUN/limits/.")],
    device: Annotated[ServeDevice, typer.Option("--device", help=(
        "cpu: the <model>_cpu models; cuda: the <model>_gpu models (fails without onnxruntime's CUDA "
        "provider)."))] = ServeDevice("cpu"),
    budget_s: Annotated[float, typer.Option("--budget-s", help="Seconds for the whole device, session builds "
                                                               "included; points are cut short to fit.")] = 10.0,
    model: Annotated[str | None, typer.Option("--model", help="Served model name (default: every model of the "
                                                              "device), e.g. cnn_cpu.")] = None,
    runs_dir: RunsDirOpt = None,
) -> None:
    """Measure onnxruntime in process (no server): batch-1 latency per intra-op thread count, samples/s per batch.

    Writes one profile record per point and a summary.json per model to runs/RUN/limits/DEVICE/MODEL/;
    the report sets every served figure beside these limits.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.serve.limits import LimitsConfig, measure_repository, save

    cfg = LimitsConfig(device=device.value, budget_s=budget_s)
    folder = existing_run_dir(run, runs_dir, writable=True)
    repo = folder / "model_repository"
    if not repo.is_dir():
        raise UserError(f"run {run!r} has no model repository at {repo}; run trainserve export --run {run} first")

    def show(result, p) -> None:  # result: ModelLimits, p: Point
        spin = ", spinning" if p.spinning else ""
        typer.echo(f"{result.model} {result.device} {p.sweep:<7} batch {p.batch:>4} · {p.threads} thread(s){spin} · "
                   f"p50 {p.p50_ms:.3f} ms · {p.throughput_samples_s:,.0f} samples/s · {len(p.latencies_ms)} runs")

    for result in measure_repository(repo, cfg, model, progress=show):
        out = save(result, folder / "limits")
        s = result.summary()
        typer.echo(f"{result.model} on {device.value}: batch 1 p50 {s['batch1_p50_ms']:.3f} ms at {s['batch1_threads']} "
                   f"thread(s); best {s['best_throughput_samples_s']:,.0f} samples/s at batch {s['best_batch']} "
                   f"({len(result.points)} points in {result.elapsed_s:.1f} s) -> {out}")
        for w in result.warnings:
            typer.secho(f"warning: {w}", err=True, fg="yellow")
