"""`trainserve limits`: what onnxruntime does in process on one device, the bound for the served figures."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of
from trainserve.core.errors import UserError


@options_of("limits")
def limits(o: Args) -> None:
    """Measure onnxruntime in process (no server): batch-1 latency per intra-op thread count, samples/s per batch.

    Writes one profile record per point and a summary.json per model to runs/RUN/limits/DEVICE/MODEL/;
    the report sets every served figure beside these limits.
    """
    from trainserve.core.runs import existing_run_dir
    from trainserve.serve.model.inprocess_limits import LimitsConfig, measure_repository, save

    cfg = LimitsConfig(device=o.device, budget_s=o.budget_s, points=o.points, working_set_batch=o.working_set_batch)
    folder = existing_run_dir(o.run, o.runs_dir, writable=True)
    repo = folder / "model_repository"
    if not repo.is_dir():
        raise UserError(f"run {o.run!r} has no model repository at {repo}; run trainserve export --run {o.run} "
                        "first")

    def show(result, p) -> None:  # result: ModelLimits, p: Point
        spin = ", spinning" if p.spinning else ""
        spread = "" if p.spread is None else f" ±{p.spread:.0%}"
        steady = "" if p.stable else " (did not stabilise)"
        typer.echo(f"{result.model} {result.device} {p.sweep:<7} batch {p.batch:>4} · {p.threads} thread(s){spin} · "
                   f"p50 {p.p50_ms:.3f} ms · {p.throughput_samples_s:,.0f}{spread} samples/s · "
                   f"{len(p.latencies_ms)} runs{steady}")

    for result in measure_repository(repo, cfg, o.model, progress=show):
        out = save(result, folder / "limits")
        s = result.summary()
        typer.echo(f"{result.model} on {o.device}: batch 1 p50 {s['batch1_p50_ms']:.3f} ms at {s['batch1_threads']} "
                   f"thread(s); best {s['best_throughput_samples_s']:,.0f} samples/s at batch {s['best_batch']} "
                   f"({len(result.points)} points in {result.elapsed_s:.1f} s) -> {out}")
        for skipped in result.skipped:
            typer.echo(f"  skipped {skipped}")
        for w in result.warnings:
            typer.secho(f"warning: {w}", err=True, fg="yellow")
