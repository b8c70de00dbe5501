"""`trainserve export`: ONNX export, fp16/int8 variants, verification, and the Triton model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainserve.commands.choices import CpuVariant, GpuVariant, RunsDirOpt
from trainserve.core.errors import UserError


def export(
    run: Annotated[str, typer.Option("--run", help="Run name: reads runs/RUN/train/, writes runs/RUN/export/ and "
                                                   "runs/RUN/model_repository/.")],
    runs_dir: RunsDirOpt = None,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="Export this checkpoint.pt instead of the run's.")] = None,
    card: Annotated[Path | None, typer.Option("--card", help="Model card (model.json) of --checkpoint.")] = None,
    opset: Annotated[int | None, typer.Option("--opset", help="ONNX opset (default: the exporter's).")] = None,
    cpu_variant: Annotated[CpuVariant, typer.Option("--cpu-variant", help="Model served by <model>_cpu.")] = CpuVariant("fp32"),
    gpu_variant: Annotated[GpuVariant, typer.Option("--gpu-variant", help="Model served by <model>_gpu.")] = GpuVariant("fp16"),
    max_batch_size: Annotated[int, typer.Option("--max-batch-size", help="Triton max_batch_size.")] = 64,
    preferred_batch_sizes: Annotated[str, typer.Option("--preferred-batch-sizes",
                                                       help="Comma-separated, e.g. 16,32,64 (default: max/4, max/2, max).")] = "",
    max_queue_delay_us: Annotated[int, typer.Option("--max-queue-delay-us",
                                                    help="Dynamic batcher's max queue delay, microseconds.")] = 1000,
    cpu_instances: Annotated[int, typer.Option("--cpu-instances", help="Instances of the CPU model.")] = 1,
    gpu_instances: Annotated[int, typer.Option("--gpu-instances", help="Instances of the GPU model per GPU (two overlap copies with compute).")] = 2,
    cpu_threads: Annotated[int, typer.Option("--cpu-threads",
                                             help="onnxruntime intra-op threads per CPU instance (0: left to the serving machine, cores / instances).")] = 0,
    tensorrt: Annotated[bool, typer.Option("--tensorrt", help="Add the TensorRT FP16 accelerator to the GPU model.")] = False,
    eval_samples: Annotated[int, typer.Option("--eval-samples", help="Evaluation samples for the accuracy of each variant.")] = 1024,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the random verification inputs (default: fresh).")] = None,
    onnx: Annotated[Path | None, typer.Option("--onnx", help=(
        "A model trained elsewhere: serve this ONNX file (fp32, batch dimension dynamic) instead of exporting "
        "the run's checkpoint; its card is read from the graph."))] = None,
) -> None:
    """Export a trained run to ONNX (fp32, fp16, int8), verify each against PyTorch, and write a Triton model repository."""
    from trainserve.core.runs import existing_run_dir, run_dir
    from trainserve.publish import export_and_publish
    from trainserve.serve.repository import RepositoryConfig
    from trainserve.train.export import ExportConfig, resolve_sources

    try:
        sizes = tuple(int(s) for s in preferred_batch_sizes.split(",") if s.strip())
    except ValueError:
        raise UserError(f"--preferred-batch-sizes {preferred_batch_sizes!r} is invalid; give integers like 16,32,64") from None
    repo_cfg = RepositoryConfig(max_batch_size=max_batch_size, preferred_batch_sizes=sizes,
                                max_queue_delay_us=max_queue_delay_us, cpu_instances=cpu_instances,
                                gpu_instances=gpu_instances, cpu_threads=cpu_threads, tensorrt=tensorrt,
                                cpu_variant=cpu_variant.value, gpu_variant=gpu_variant.value)  # type: ignore[arg-type]
    if onnx is not None:
        from trainserve.publish import publish_onnx

        repo = publish_onnx(run_dir(run, runs_dir, writable=True), onnx, repo_cfg)
        typer.echo(f"repository: {repo}  (served as it is, fp32, on both devices: trained elsewhere)")
        return
    cfg = ExportConfig(opset=opset, eval_limit=eval_samples, seed=seed)
    folder = (existing_run_dir(run, runs_dir, writable=True) if checkpoint is None and card is None
              else run_dir(run, runs_dir, writable=True))
    ckpt_path, card_path = resolve_sources(folder, checkpoint, card)
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
