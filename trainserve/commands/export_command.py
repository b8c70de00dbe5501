"""`trainserve export`: ONNX export, fp16/int8 variants, verification, and the Triton model repository."""

from __future__ import annotations

import typer

from trainserve.commands._typer import Args, options_of
from trainserve.core.errors import UserError


@options_of("export")
def export(o: Args) -> None:
    """Export a trained run to ONNX (fp32, fp16, int8), verify each against PyTorch, and write a Triton model repository."""
    from trainserve.core.runs import existing_run_dir, run_dir
    from trainserve.publish import export_and_publish
    from trainserve.serve.repository import RepositoryConfig
    from trainserve.train.export import ExportConfig, resolve_sources

    try:
        sizes = tuple(int(s) for s in o.preferred_batch_sizes.split(",") if s.strip())
    except ValueError:
        raise UserError(f"--preferred-batch-sizes {o.preferred_batch_sizes!r} is invalid; give integers like "
                        "16,32,64") from None
    repo_cfg = RepositoryConfig(**o.of(RepositoryConfig, preferred_batch_sizes=sizes))
    if o.onnx is not None:
        from trainserve.publish import publish_onnx

        repo = publish_onnx(run_dir(o.run, o.runs_dir, writable=True), o.onnx, repo_cfg)
        typer.echo(f"repository: {repo}  (served as it is, fp32, on both devices: trained elsewhere)")
        return
    cfg = ExportConfig(opset=o.opset, eval_limit=o.eval_samples, seed=o.seed)
    folder = (existing_run_dir(o.run, o.runs_dir, writable=True) if o.checkpoint is None and o.card is None
              else run_dir(o.run, o.runs_dir, writable=True))
    ckpt_path, card_path = resolve_sources(folder, o.checkpoint, o.card)
    result = _with_progress(lambda step: export_and_publish(folder, ckpt_path, card_path, cfg, repo_cfg, progress=step))
    _summary(result)


def _with_progress(work):  # -> ExportResult
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("export", total=None)
        return work(lambda step: bar.update(task, description=step))


def _summary(result) -> None:  # result: train.export.ExportResult
    from rich.console import Console
    from rich.table import Table

    v = result.verify
    table = Table(title=f"{v['model']}: {result.export['exporter']} exporter, opset {result.export['opset']}",
                  caption=f"errors vs PyTorch fp32 (relative: max|Δ| / max|torch|); accuracy on "
                          f"{v['eval']['samples']} samples: {v['eval']['source']}")
    for col in ("variant", "KiB", "max abs", "max rel", "tol rel", "accuracy", "Δ acc", "provider"):
        table.add_column(col, justify="left" if col in ("variant", "provider") else "right")
    for name, r in v["variants"].items():
        table.add_row(name, f"{result.files[name] / 1024:.1f}", f"{r['max_abs']:.2e}", f"{r['max_rel']:.2e}",
                      f"{r['tolerance_rel']:g}", f"{r['accuracy']:.4f}", f"{r['accuracy_delta']:+.4f}",
                      r["provider"].removesuffix("ExecutionProvider"))
    console = Console()
    console.print(table)
    console.print(f"repository: {result.repository}  (verify.json, export.json in {result.export_dir})")
